//! Spark's changelog view rules on raw change rows (`create_changelog_view`): carry-overs
//! cancel, update images, net changes. Pure: rows in, rows out.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::row::{RowConverter, Rows, SortField};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};

/// The kind of a change row (`_change_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeType {
    /// A row that was removed (`DELETE`).
    Delete,
    /// A row that was added (`INSERT`).
    Insert,
    /// A row's values before an update (`UPDATE_BEFORE`): a delete and an insert of the same
    /// identifier in one snapshot.
    UpdateBefore,
    /// A row's values after an update (`UPDATE_AFTER`).
    UpdateAfter,
}

impl ChangeType {
    /// Spark's name of the change type.
    pub fn as_str(&self) -> &'static str {
        match self {
            ChangeType::Delete => "DELETE",
            ChangeType::Insert => "INSERT",
            ChangeType::UpdateBefore => "UPDATE_BEFORE",
            ChangeType::UpdateAfter => "UPDATE_AFTER",
        }
    }
}

/// The change rows of one snapshot before they are reduced.
pub(super) struct RawChanges {
    pub batches: Vec<RecordBatch>,
    pub kinds: Vec<ChangeType>,
    pub ordinals: Vec<i32>,
    pub snapshots: Vec<i64>,
}

/// Rows `rows` grouped by snapshot and by their encoding in `by`: each group's deletes and
/// inserts, in row order.
fn per_snapshot(
    rows: impl Iterator<Item = usize>,
    by: &Rows,
    raw: &RawChanges,
) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut groups: HashMap<(i32, &[u8]), usize> = HashMap::new();
    let mut out: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    for i in rows {
        let g = *groups
            .entry((raw.ordinals[i], by.row(i).data()))
            .or_insert_with(|| {
                out.push(Default::default());
                out.len() - 1
            });
        match raw.kinds[i] {
            ChangeType::Delete => out[g].0.push(i),
            _ => out[g].1.push(i),
        }
    }
    out
}

/// `data`'s fields followed by the change columns.
pub(super) fn with_change_columns(data: &Schema) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = data.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("_change_type", DataType::Utf8, false)));
    fields.push(Arc::new(Field::new(
        "_change_ordinal",
        DataType::Int32,
        false,
    )));
    fields.push(Arc::new(Field::new(
        "_commit_snapshot_id",
        DataType::Int64,
        false,
    )));
    Arc::new(Schema::new(fields))
}

/// Reduces the raw change rows as Spark's `create_changelog_view` does:
/// * by default, a delete and an insert of an identical row in one snapshot (a row a
///   copy-on-write rewrite carried over) cancel;
/// * with update images (`identifiers`), that first, then a delete and an insert of the same
///   identifier in one snapshot become `UPDATE_BEFORE` / `UPDATE_AFTER` (two deletes of one
///   identifier in a snapshot are an error, as in Spark);
/// * with net changes, identical rows cancel across the whole range: in snapshot order, a
///   change opposite to the first of a run cancels one of it.
pub(super) fn reduce(
    table: &str,
    raw: RawChanges,
    identifiers: Option<&[String]>,
    net: bool,
) -> Result<Vec<RecordBatch>> {
    let Some(first) = raw.batches.first() else {
        return Ok(vec![]);
    };
    let data_schema = first.schema();
    let schema = with_change_columns(&data_schema);
    let data = arrow_select::concat::concat_batches(&data_schema, &raw.batches)?;
    let n = data.num_rows();
    if n == 0 {
        return Ok(vec![]);
    }
    let encode = |cols: &[ArrayRef], what: &str| -> Result<Rows> {
        let conv = RowConverter::new(
            cols.iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect(),
        )
        .map_err(|e| {
            Error::unsupported(format!(
                "table {table}: the changelog cannot compare {what} ({e}); give identifier columns \
                 that can be compared"
            ))
        })?;
        Ok(conv.convert_columns(cols)?)
    };
    let full = encode(data.columns(), "rows with these column types")?;
    // (row index, change type it is returned as), in output order.
    let mut keep: Vec<(usize, ChangeType)> = Vec::new();
    let order_key = |i: &usize| (raw.ordinals[*i], raw.kinds[*i], *i);
    if net {
        let mut groups: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for i in 0..n {
            groups.entry(full.row(i).data()).or_default().push(i);
        }
        for (_, mut rows) in groups {
            rows.sort_by_key(order_key);
            let mut it = rows.into_iter();
            while let Some(first) = it.next() {
                let mut count = 1i64;
                for next in it.by_ref() {
                    if raw.kinds[next] == raw.kinds[first] {
                        count += 1;
                    } else {
                        count -= 1;
                        if count == 0 {
                            break;
                        }
                    }
                }
                for _ in 0..count.max(0) {
                    keep.push((first, raw.kinds[first]));
                }
            }
        }
    } else {
        // Carry-overs: identical rows deleted and inserted in one snapshot cancel.
        let mut survivors: Vec<usize> = Vec::with_capacity(n);
        for (d, ins) in per_snapshot(0..n, &full, &raw) {
            let cancel = d.len().min(ins.len());
            survivors.extend(&d[cancel..]);
            survivors.extend(&ins[cancel..]);
        }
        match identifiers {
            None => keep.extend(survivors.into_iter().map(|i| (i, raw.kinds[i]))),
            Some(cols) => {
                let idx = |c: &String| {
                    data_schema.index_of(c).map_err(|_| {
                        Error::invalid(format!(
                            "table {table} has no column '{c}' to identify rows by"
                        ))
                    })
                };
                let id_cols: Vec<ArrayRef> = cols
                    .iter()
                    .map(|c| idx(c).map(|i| data.column(i).clone()))
                    .collect::<Result<_>>()?;
                let ids = encode(&id_cols, "the identifier columns")?;
                survivors.sort_unstable();
                for (d, ins) in per_snapshot(survivors.into_iter(), &ids, &raw) {
                    match (d.as_slice(), ins.as_slice()) {
                        ([_, _, ..], _) => {
                            return Err(Error::invalid(format!(
                                "cannot compute updates of table {table}: a snapshot deletes more \
                                 than one row with the same identifier ({}); make sure the \
                                 identifier columns identify one row",
                                cols.join(", ")
                            )))
                        }
                        ([before], [after, rest @ ..]) => {
                            keep.push((*before, ChangeType::UpdateBefore));
                            keep.push((*after, ChangeType::UpdateAfter));
                            keep.extend(rest.iter().map(|&i| (i, ChangeType::Insert)));
                        }
                        _ => keep.extend(d.iter().chain(&ins).map(|&i| (i, raw.kinds[i]))),
                    }
                }
            }
        }
    }
    keep.sort_by_key(|(i, k)| (raw.ordinals[*i], *k, *i));
    let take = UInt32Array::from_iter_values(keep.iter().map(|(i, _)| *i as u32));
    let mut columns: Vec<ArrayRef> = data
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c, &take, None))
        .collect::<std::result::Result<_, _>>()?;
    columns.push(Arc::new(StringArray::from_iter_values(
        keep.iter().map(|(_, k)| k.as_str()),
    )));
    columns.push(Arc::new(Int32Array::from_iter_values(
        keep.iter().map(|(i, _)| raw.ordinals[*i]),
    )));
    columns.push(Arc::new(Int64Array::from_iter_values(
        keep.iter().map(|(i, _)| raw.snapshots[*i]),
    )));
    if keep.is_empty() {
        return Ok(vec![]);
    }
    Ok(vec![RecordBatch::try_new(schema, columns)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    use ChangeType::{Delete as D, Insert as I};

    /// Rows (k, v) with their change type and ordinal, reduced; the result as
    /// (k, v, type, ordinal).
    fn run(
        rows: &[(i64, &str, ChangeType, i32)],
        ids: Option<&[String]>,
        net: bool,
    ) -> Result<Vec<(i64, String, &'static str, i32)>> {
        let b = RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            ),
            (
                "v",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))) as _,
            ),
        ])?;
        let raw = RawChanges {
            batches: vec![b],
            kinds: rows.iter().map(|r| r.2).collect(),
            ordinals: rows.iter().map(|r| r.3).collect(),
            snapshots: rows.iter().map(|r| 100 + i64::from(r.3)).collect(),
        };
        let out = reduce("db.t", raw, ids, net)?;
        let mut v = Vec::new();
        for b in &out {
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let s = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            let t = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
            let o = b.column(3).as_any().downcast_ref::<Int32Array>().unwrap();
            let sid = b.column(4).as_any().downcast_ref::<Int64Array>().unwrap();
            for r in 0..b.num_rows() {
                assert_eq!(sid.value(r), 100 + i64::from(o.value(r)));
                let name = [D, I, ChangeType::UpdateBefore, ChangeType::UpdateAfter]
                    .into_iter()
                    .find(|c| c.as_str() == t.value(r))
                    .unwrap()
                    .as_str();
                v.push((k.value(r), s.value(r).to_string(), name, o.value(r)));
            }
        }
        Ok(v)
    }

    #[test]
    fn carried_over_rows_cancel_within_a_snapshot_by_count() {
        let r = run(
            &[(1, "a", D, 0), (1, "a", I, 0), (2, "b", D, 0)],
            None,
            false,
        )
        .unwrap();
        assert_eq!(r, [(2, "b".into(), "DELETE", 0)]);
        // Two identical deletes and one insert: one delete is left. Across snapshots nothing
        // cancels.
        let r = run(
            &[
                (1, "a", D, 0),
                (1, "a", D, 0),
                (1, "a", I, 0),
                (1, "a", I, 1),
            ],
            None,
            false,
        )
        .unwrap();
        assert_eq!(
            r,
            [(1, "a".into(), "DELETE", 0), (1, "a".into(), "INSERT", 1)]
        );
    }

    #[test]
    fn update_images_pair_a_delete_and_an_insert_of_one_identifier() {
        let ids = ["k".to_string()];
        let r = run(
            &[
                (1, "a", D, 0),
                (1, "b", I, 0),
                (2, "c", I, 0),
                (3, "d", D, 1),
                (1, "a", D, 1),
            ],
            Some(&ids),
            false,
        )
        .unwrap();
        let want: Vec<(i64, String, &str, i32)> = vec![
            (2, "c".into(), "INSERT", 0),
            (1, "a".into(), "UPDATE_BEFORE", 0),
            (1, "b".into(), "UPDATE_AFTER", 0),
            (3, "d".into(), "DELETE", 1),
            (1, "a".into(), "DELETE", 1),
        ];
        assert_eq!(r, want);
        // A carried-over row is not an update; two deletes of one identifier are an error.
        let r = run(&[(1, "a", D, 0), (1, "a", I, 0)], Some(&ids), false).unwrap();
        assert!(r.is_empty());
        let e = run(
            &[(1, "a", D, 0), (1, "b", D, 0), (1, "c", I, 0)],
            Some(&ids),
            false,
        );
        assert!(e.unwrap_err().to_string().contains("more than one row"));
    }

    #[test]
    fn net_changes_follow_sparks_runs() {
        // Inserted, deleted, inserted again: the last insert is what is left.
        let r = run(
            &[(1, "a", I, 0), (1, "a", D, 1), (1, "a", I, 2)],
            None,
            true,
        )
        .unwrap();
        assert_eq!(r, [(1, "a".into(), "INSERT", 2)]);
        // Deleted then inserted again unchanged: nothing.
        assert!(run(&[(1, "a", D, 0), (1, "a", I, 3)], None, true)
            .unwrap()
            .is_empty());
        // Two inserts of a duplicate row and one delete: one insert, the first.
        let r = run(
            &[(1, "a", I, 0), (1, "a", I, 1), (1, "a", D, 2)],
            None,
            true,
        )
        .unwrap();
        assert_eq!(r, [(1, "a".into(), "INSERT", 0)]);
    }

    #[test]
    fn change_type_names_are_sparks() {
        let names: Vec<&str> = [
            ChangeType::Delete,
            ChangeType::Insert,
            ChangeType::UpdateBefore,
            ChangeType::UpdateAfter,
        ]
        .iter()
        .map(|c| c.as_str())
        .collect();
        assert_eq!(names, ["DELETE", "INSERT", "UPDATE_BEFORE", "UPDATE_AFTER"]);
    }
}
