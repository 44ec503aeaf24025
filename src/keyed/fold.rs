//! Folding one batch of changes: per key the highest version wins, on equal versions the
//! later arrival (later part, then later row); without a version column the later arrival
//! always wins. Values are checked first: a null version or a delete flag that is not
//! 0/1/boolean is refused, naming the source, row and column. Pure.

use std::collections::HashMap;

use arrow::row::{RowConverter, Rows, SortField};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array,
};
use arrow_schema::{DataType, FieldRef, SchemaRef};

use iceberg::expr::{Predicate, Reference};

use crate::error::{Error, Result};
use crate::spec::keyed::KeyedSpec;
use crate::spec::Datum;

/// Key sets up to this size prune files by membership, larger ones by their range.
const IN_LIST_LIMIT: usize = 200;

/// A hash map keyed by table keys (integers or encoded rows): a fast non-cryptographic
/// hash, seeded per map (keys come from the caller's data, not from an attacker's choice).
pub(crate) type KeyMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Rows of one input (a file or a caller's batch), conformed to the table's schema.
pub(crate) struct Part {
    /// Where the rows come from, for messages (`'batch-1.parquet'`).
    pub source: String,
    /// The number of the part's first row in its source, counted from 1.
    pub first_row: u64,
    /// The rows.
    pub batch: RecordBatch,
}

/// The winning change per key, in arrival order.
#[derive(Debug, Clone)]
pub(crate) struct Folded {
    /// The winning rows (the table's schema).
    pub rows: RecordBatch,
    /// Their versions (`None`: no version column).
    pub versions: Option<Int64Array>,
    /// Whether each deletes its key.
    pub deleted: BooleanArray,
}

/// The key columns' positions in `schema`, the version's and the delete flag's.
pub(crate) struct Columns {
    /// The key columns.
    pub key: Vec<usize>,
    /// The version column.
    pub version: Option<usize>,
    /// The delete flag column.
    pub delete: Option<usize>,
}

impl Columns {
    /// The columns `spec` names, found in `schema`.
    pub(super) fn of(spec: &KeyedSpec, schema: &SchemaRef) -> Result<Self> {
        let find = |n: &String| {
            schema
                .index_of(n)
                .map_err(|_| Error::invalid(format!("column '{n}' is not in the table schema")))
        };
        Ok(Self {
            key: spec.key.iter().map(find).collect::<Result<_>>()?,
            version: spec.version.as_ref().map(find).transpose()?,
            delete: spec.delete.as_ref().map(find).transpose()?,
        })
    }
}

/// The Arrow fields of the key columns.
pub(crate) fn key_fields(schema: &SchemaRef, cols: &Columns) -> Vec<FieldRef> {
    cols.key
        .iter()
        .map(|&i| schema.fields()[i].clone())
        .collect()
}

/// A converter of `schema`'s key columns into comparable rows.
pub(crate) fn key_converter(schema: &SchemaRef, key: &[usize]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        key.iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )?)
}

/// The key columns of `batch` as comparable rows.
pub(crate) fn key_rows(conv: &RowConverter, batch: &RecordBatch, key: &[usize]) -> Result<Rows> {
    let cols: Vec<ArrayRef> = key.iter().map(|&i| batch.column(i).clone()).collect();
    Ok(conv.convert_columns(&cols)?)
}

/// A version column as i64 (ints, dates and timestamps keep their order).
pub(crate) fn versions_of(col: &ArrayRef) -> Result<Int64Array> {
    let c = match col.data_type() {
        DataType::Timestamp(_, _) | DataType::Date32 => {
            let plain = match col.data_type() {
                DataType::Date32 => DataType::Int32,
                _ => DataType::Int64,
            };
            arrow_cast::cast(&arrow_cast::cast(col, &plain)?, &DataType::Int64)?
        }
        _ => arrow_cast::cast(col, &DataType::Int64)?,
    };
    c.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::invalid("the version column did not cast to a 64-bit integer"))
}

/// A delete flag column as booleans: 0/1 or false/true; anything else (a null too) is an
/// error naming the row.
fn delete_flags(col: &ArrayRef, name: &str, part: &Part) -> Result<BooleanArray> {
    let bad = |r: usize, v: String| {
        Error::invalid(format!(
            "row {} of {}: delete flag column '{name}' is {v}; it must be 0 or 1 (or false/true)",
            part.first_row + r as u64,
            part.source
        ))
    };
    if let Some(b) = col.as_any().downcast_ref::<BooleanArray>() {
        if let Some(r) = (0..b.len()).find(|&r| b.is_null(r)) {
            return Err(bad(r, "null".into()));
        }
        return Ok(b.clone());
    }
    let v = arrow_cast::cast(col, &DataType::Int64)?;
    let v = v
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| Error::invalid(format!("delete flag column '{name}' is not an integer")))?;
    let mut out = Vec::with_capacity(v.len());
    for r in 0..v.len() {
        if v.is_null(r) {
            return Err(bad(r, "null".into()));
        }
        match v.value(r) {
            0 => out.push(false),
            1 => out.push(true),
            x => return Err(bad(r, x.to_string())),
        }
    }
    Ok(BooleanArray::from(out))
}

/// The rows that win per key (ascending): the highest version, the later row on equal
/// versions; without versions the later row. `keys` are the rows' encoded keys.
pub(crate) fn latest_rows(keys: &Rows, versions: Option<&Int64Array>) -> UInt32Array {
    let mut best: KeyMap<&[u8], u32> =
        KeyMap::with_capacity_and_hasher(keys.num_rows(), Default::default());
    for r in 0..keys.num_rows() {
        let k = keys.row(r).data();
        match best.get_mut(k) {
            // `>=`: on equal versions the later row wins; without versions it always does.
            Some(w) => {
                if versions.is_none_or(|v| v.value(r) >= v.value(*w as usize)) {
                    *w = r as u32;
                }
            }
            None => {
                best.insert(k, r as u32);
            }
        }
    }
    let mut idx: Vec<u32> = best.into_values().collect();
    idx.sort_unstable();
    UInt32Array::from(idx)
}

/// Folds `parts` (in arrival order) by the merge rule. Columns `required` (by index) must
/// have values in every upsert (deletes need only their key).
pub(crate) fn fold(
    spec: &KeyedSpec,
    schema: &SchemaRef,
    required: &[usize],
    parts: &[Part],
) -> Result<Folded> {
    let cols = Columns::of(spec, schema)?;
    let mut versions: Vec<Int64Array> = Vec::new();
    let mut deleted: Vec<BooleanArray> = Vec::new();
    for p in parts {
        for (&k, name) in cols.key.iter().zip(&spec.key) {
            let c = p.batch.column(k);
            if let Some(r) = (0..c.len()).find(|&r| c.is_null(r)) {
                return Err(Error::invalid(format!(
                    "row {} of {}: key column '{name}' is null; every change needs its key",
                    p.first_row + r as u64,
                    p.source
                )));
            }
        }
        if let (Some(v), Some(name)) = (cols.version, &spec.version) {
            let c = p.batch.column(v);
            if let Some(r) = (0..c.len()).find(|&r| c.is_null(r)) {
                return Err(Error::invalid(format!(
                    "row {} of {}: version column '{name}' is null; every change needs a version",
                    p.first_row + r as u64,
                    p.source
                )));
            }
            versions.push(versions_of(c)?);
        }
        let flags = match (cols.delete, &spec.delete) {
            (Some(d), Some(name)) => delete_flags(p.batch.column(d), name, p)?,
            _ => BooleanArray::from(vec![false; p.batch.num_rows()]),
        };
        for &i in required {
            let c = p.batch.column(i);
            if let Some(r) = (0..c.len()).find(|&r| c.is_null(r) && !flags.value(r)) {
                return Err(Error::invalid(format!(
                    "row {} of {}: required column '{}' is null in an upsert",
                    p.first_row + r as u64,
                    p.source,
                    schema.field(i).name()
                )));
            }
        }
        deleted.push(flags);
    }
    let all = match parts {
        [one] => one.batch.clone(),
        _ => arrow_select::concat::concat_batches(schema, parts.iter().map(|p| &p.batch))?,
    };
    let concat_bool = |v: &[BooleanArray]| -> Result<BooleanArray> {
        let refs: Vec<&dyn Array> = v.iter().map(|a| a as &dyn Array).collect();
        let a = arrow_select::concat::concat(&refs)?;
        Ok(a.as_boolean().clone())
    };
    let all_versions = if cols.version.is_some() {
        let refs: Vec<&dyn Array> = versions.iter().map(|a| a as &dyn Array).collect();
        let a = arrow_select::concat::concat(&refs)?;
        a.as_any().downcast_ref::<Int64Array>().cloned()
    } else {
        None
    };
    let all_deleted = concat_bool(&deleted)?;
    let conv = key_converter(schema, &cols.key)?;
    let keys = key_rows(&conv, &all, &cols.key)?;
    let idx = latest_rows(&keys, all_versions.as_ref());
    if idx.len() == all.num_rows() {
        // Every key once: the rows, in order (the indexes are sorted and distinct).
        return Ok(Folded {
            rows: all,
            versions: all_versions,
            deleted: all_deleted,
        });
    }
    let take = |a: &dyn Array| arrow_select::take::take(a, &idx, None);
    let rows = arrow_select::take::take_record_batch(&all, &idx)?;
    let versions = match &all_versions {
        Some(v) => take(v)?.as_any().downcast_ref::<Int64Array>().cloned(),
        None => None,
    };
    let deleted = take(&all_deleted)?.as_boolean().clone();
    Ok(Folded {
        rows,
        versions,
        deleted,
    })
}

/// A filter every row of the batch's keys passes: the first key column in the batch's key
/// set (small batches) or between its smallest and largest value (integer and string keys).
pub(crate) fn key_filter(column: &str, values: &ArrayRef) -> Option<Predicate> {
    let r = || Reference::new(column.to_string());
    let datums: Vec<Datum> = if let Some(a) = values.as_any().downcast_ref::<Int64Array>() {
        a.iter().flatten().map(Datum::long).collect()
    } else if let Some(a) = values.as_any().downcast_ref::<Int32Array>() {
        a.iter().flatten().map(Datum::int).collect()
    } else if let Some(a) = values.as_any().downcast_ref::<StringArray>() {
        a.iter().flatten().map(Datum::string).collect()
    } else {
        return None;
    };
    if datums.is_empty() {
        return None;
    }
    if datums.len() <= IN_LIST_LIMIT {
        return Some(r().is_in(datums));
    }
    let lo = datums
        .iter()
        .min_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))?;
    let hi = datums
        .iter()
        .max_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))?;
    Some(
        r().greater_than_or_equal_to(lo.clone())
            .and(r().less_than_or_equal_to(hi.clone())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::keyed::MergeEngine;
    use arrow_array::{Int32Array, StringArray};
    use std::sync::Arc;

    fn spec(version: bool) -> KeyedSpec {
        KeyedSpec {
            key: vec!["k".into()],
            version: version.then(|| "ver".into()),
            delete: Some("del".into()),
            engine: MergeEngine::Replace,
            aggregates: vec![],
            drop_zero_rows: true,
        }
    }

    fn part(k: Vec<i64>, v: Vec<&str>, ver: Vec<Option<i64>>, del: Vec<i32>) -> Part {
        let batch = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
            ("v", Arc::new(StringArray::from(v)) as _),
            ("ver", Arc::new(Int64Array::from(ver)) as _),
            ("del", Arc::new(Int32Array::from(del)) as _),
        ])
        .unwrap();
        Part {
            source: "'b.parquet'".into(),
            first_row: 1,
            batch,
        }
    }

    fn values(f: &Folded) -> Vec<(i64, String, bool)> {
        let k = f
            .rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let v = f
            .rows
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        (0..k.len())
            .map(|r| (k.value(r), v.value(r).to_string(), f.deleted.value(r)))
            .collect()
    }

    #[test]
    fn highest_version_then_later_arrival_across_parts() {
        let a = part(
            vec![1, 1, 2],
            vec!["a", "b", "c"],
            vec![Some(5), Some(7), Some(1)],
            vec![0, 0, 0],
        );
        let b = part(
            vec![1, 2, 3],
            vec!["d", "e", "f"],
            vec![Some(6), Some(1), Some(2)],
            vec![0, 1, 0],
        );
        let schema = a.batch.schema();
        let f = fold(&spec(true), &schema, &[], &[a, b]).unwrap();
        // key 1: version 7 beats the later 6; key 2: equal versions, the later delete wins.
        assert_eq!(
            values(&f),
            vec![
                (1, "b".into(), false),
                (2, "e".into(), true),
                (3, "f".into(), false)
            ]
        );
    }

    #[test]
    fn without_a_version_the_later_arrival_wins() {
        let a = part(
            vec![1, 1],
            vec!["a", "b"],
            vec![Some(9), Some(1)],
            vec![0, 0],
        );
        let schema = a.batch.schema();
        let f = fold(&spec(false), &schema, &[], &[a]).unwrap();
        assert_eq!(values(&f), vec![(1, "b".into(), false)]);
        assert!(f.versions.is_none());
    }

    #[test]
    fn bad_values_name_source_row_and_column() {
        let a = part(vec![1, 2], vec!["a", "b"], vec![Some(1), None], vec![0, 0]);
        let schema = a.batch.schema();
        let e = fold(&spec(true), &schema, &[], &[a])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 2 of 'b.parquet'") && e.contains("'ver'"),
            "{e}"
        );
        let a = part(
            vec![1, 2],
            vec!["a", "b"],
            vec![Some(1), Some(2)],
            vec![0, 2],
        );
        let e = fold(&spec(true), &schema, &[], &[a])
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 2 of") && e.contains("'del' is 2"), "{e}");
    }
}
