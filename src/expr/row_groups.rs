//! A Parquet row group's column statistics as Iceberg column metrics (bounds as Iceberg
//! values, null counts), for pruning row groups the way manifests' metrics prune files.
//! Only top-level primitive columns whose statistics are unambiguous are used: a column the
//! conversion does not know (or whose byte order is not the type's) has no bounds, so it never
//! prunes.

use std::collections::HashMap;

use iceberg::expr::{BoundPredicate, PredicateOperator};
use iceberg::spec::{Datum, PrimitiveType, Schema, Type};
use parquet::basic::{ColumnOrder, LogicalType, SortOrder, TimeUnit};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::Statistics;

use super::prune::ColumnMetrics;

/// One column's statistics in a row group.
#[derive(Debug, Clone, Default)]
struct ColumnStats {
    lower: Option<Datum>,
    upper: Option<Datum>,
    nulls: Option<u64>,
    /// Values (nulls included) the statistics cover, when not the whole row group's rows
    /// (a page's).
    values: Option<u64>,
}

/// The column metrics of one row group, by field id.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowGroupMetrics {
    rows: u64,
    columns: HashMap<i32, ColumnStats>,
    /// Fields whose file holds no NaN (its manifest entry says so): none in any row group.
    nan_free: std::sync::Arc<[i32]>,
}

impl ColumnMetrics for RowGroupMetrics {
    fn record_count(&self) -> u64 {
        self.rows
    }
    fn value_count(&self, id: i32) -> Option<u64> {
        self.columns.get(&id).map(|c| c.values.unwrap_or(self.rows))
    }
    fn null_count(&self, id: i32) -> Option<u64> {
        self.columns.get(&id).and_then(|c| c.nulls)
    }
    fn nan_count(&self, id: i32) -> Option<u64> {
        self.nan_free.contains(&id).then_some(0)
    }
    fn lower_bound(&self, id: i32) -> Option<Datum> {
        self.columns.get(&id).and_then(|c| c.lower.clone())
    }
    fn upper_bound(&self, id: i32) -> Option<Datum> {
        self.columns.get(&id).and_then(|c| c.upper.clone())
    }
}

/// A leaf column the statistics of which are read: its index, field id and Iceberg type.
#[derive(Debug, Clone)]
struct Leaf {
    index: usize,
    field_id: i32,
    ty: PrimitiveType,
    logical: Option<LogicalType>,
    unsigned_order: bool,
}

/// The top-level primitive columns of the file that are fields of `schema` (by field id).
fn leaves(meta: &ParquetMetaData, schema: &Schema) -> Vec<Leaf> {
    let descr = meta.file_metadata().schema_descr();
    (0..descr.num_columns())
        .filter_map(|i| {
            let col = descr.column(i);
            if col.path().parts().len() != 1 || col.max_rep_level() > 0 {
                return None;
            }
            let info = col.self_type().get_basic_info();
            let field_id = info.has_id().then(|| info.id())?;
            let field = schema.field_by_id(field_id)?;
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                return None;
            };
            let unsigned_order = matches!(
                meta.file_metadata().column_order(i),
                ColumnOrder::TYPE_DEFINED_ORDER(SortOrder::UNSIGNED)
            );
            Some(Leaf {
                index: i,
                field_id,
                ty: ty.clone(),
                logical: col.logical_type_ref().cloned(),
                unsigned_order,
            })
        })
        .collect()
}

/// The metrics of every row group of a file, for the top-level primitive columns of `schema`
/// (matched by field id).
pub(crate) fn row_group_metrics(
    meta: &ParquetMetaData,
    schema: &Schema,
    nan_free: &std::sync::Arc<[i32]>,
) -> Vec<RowGroupMetrics> {
    let leaves = leaves(meta, schema);
    meta.row_groups()
        .iter()
        .map(|rg| metrics_of(rg, &leaves, nan_free))
        .collect()
}

/// The pages of one row group a predicate may need, judged by the column index (page
/// statistics) of the columns it reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PageChoice {
    /// Row ranges `[start, end)` within the row group that may hold matching rows.
    pub keep: Vec<(u64, u64)>,
    /// Pages of the predicate's columns in the row group.
    pub pages: usize,
    /// Those of them with no row in `keep`.
    pub pruned_pages: usize,
}

/// A column's pages: the first row of each, and their statistics.
struct PageColumn<'a> {
    leaf: &'a Leaf,
    starts: Vec<u64>,
    index: &'a parquet::file::page_index::column_index::ColumnIndexMetaData,
}

/// Which rows of row group `rg` may match `p`, judged page by page (`None`: no column `p`
/// reads has a page index). The page boundaries of all those columns cut the row group into
/// segments; a segment's metrics are, for each column, those of the page holding it (bounds
/// of a superset of its rows, so the inclusive evaluation stays sound).
pub(crate) fn page_choice(
    meta: &ParquetMetaData,
    rg: usize,
    schema: &Schema,
    p: &BoundPredicate,
    nan_free: &std::sync::Arc<[i32]>,
) -> Option<PageChoice> {
    use parquet::file::page_index::column_index::ColumnIndexMetaData as C;
    let (columns, offsets) = (meta.column_index()?.get(rg)?, meta.offset_index()?.get(rg)?);
    let rows = meta.row_group(rg).num_rows().max(0) as u64;
    let mut ids = Vec::new();
    super::prune::field_ids(p, &mut ids);
    let leaves = leaves(meta, schema);
    let cols: Vec<PageColumn> = leaves
        .iter()
        .filter(|l| ids.contains(&l.field_id))
        .filter_map(|leaf| {
            let index = columns.get(leaf.index)?;
            if matches!(index, C::NONE) {
                return None;
            }
            let starts: Vec<u64> = offsets
                .get(leaf.index)?
                .page_locations()
                .iter()
                .map(|l| l.first_row_index.max(0) as u64)
                .collect();
            (starts.first() == Some(&0) && starts.len() as u64 == index.num_pages()).then_some(
                PageColumn {
                    leaf,
                    starts,
                    index,
                },
            )
        })
        .collect();
    if cols.is_empty() || rows == 0 {
        return None;
    }
    let mut cuts: Vec<u64> = cols.iter().flat_map(|c| c.starts.iter().copied()).collect();
    cuts.push(rows);
    cuts.sort_unstable();
    cuts.dedup();
    let mut keep: Vec<(u64, u64)> = Vec::new();
    for w in cuts.windows(2) {
        let (start, end) = (w[0], w[1]);
        let mut m = RowGroupMetrics {
            rows: end - start,
            columns: HashMap::new(),
            nan_free: nan_free.clone(),
        };
        for c in &cols {
            let page = c.starts.partition_point(|s| *s <= start) - 1;
            let page_end = c.starts.get(page + 1).copied().unwrap_or(rows);
            if let Some(stats) = page_stats(c, page, page_end - c.starts[page]) {
                m.columns.insert(c.leaf.field_id, stats);
            }
        }
        if super::may_match(p, &m) {
            match keep.last_mut() {
                Some(k) if k.1 == start => k.1 = end,
                _ => keep.push((start, end)),
            }
        }
    }
    let pages = cols.iter().map(|c| c.starts.len()).sum();
    let pruned_pages = cols
        .iter()
        .map(|c| {
            (0..c.starts.len())
                .filter(|&i| {
                    let (s, e) = (c.starts[i], c.starts.get(i + 1).copied().unwrap_or(rows));
                    !keep.iter().any(|k| k.0 < e && s < k.1)
                })
                .count()
        })
        .sum();
    Some(PageChoice {
        keep,
        pages,
        pruned_pages,
    })
}

/// Page `i` of a column as metrics (through the same conversion as row-group statistics).
fn page_stats(c: &PageColumn, i: usize, values: u64) -> Option<ColumnStats> {
    use parquet::data_type::{ByteArray, FixedLenByteArray};
    use parquet::file::page_index::column_index::ColumnIndexMetaData as C;
    let nulls = c.index.null_count(i).map(|n| n.max(0) as u64);
    let stats = match c.index {
        C::BOOLEAN(x) => Statistics::boolean(
            x.min_value(i).copied(),
            x.max_value(i).copied(),
            None,
            nulls,
            false,
        ),
        C::INT32(x) => Statistics::int32(
            x.min_value(i).copied(),
            x.max_value(i).copied(),
            None,
            nulls,
            false,
        ),
        C::INT64(x) => Statistics::int64(
            x.min_value(i).copied(),
            x.max_value(i).copied(),
            None,
            nulls,
            false,
        ),
        C::FLOAT(x) => Statistics::float(
            x.min_value(i).copied(),
            x.max_value(i).copied(),
            None,
            nulls,
            false,
        ),
        C::DOUBLE(x) => Statistics::double(
            x.min_value(i).copied(),
            x.max_value(i).copied(),
            None,
            nulls,
            false,
        ),
        C::BYTE_ARRAY(x) => Statistics::byte_array(
            x.min_value(i).map(|b| ByteArray::from(b.to_vec())),
            x.max_value(i).map(|b| ByteArray::from(b.to_vec())),
            None,
            nulls,
            false,
        ),
        C::FIXED_LEN_BYTE_ARRAY(x) => Statistics::fixed_len_byte_array(
            x.min_value(i).map(|b| FixedLenByteArray::from(b.to_vec())),
            x.max_value(i).map(|b| FixedLenByteArray::from(b.to_vec())),
            None,
            nulls,
            false,
        ),
        _ => return None,
    };
    let (lower, upper) = if c.index.is_null_page(i) {
        (None, None)
    } else {
        bounds(&stats, c.leaf).unwrap_or((None, None))
    };
    Some(ColumnStats {
        lower,
        upper,
        nulls,
        values: Some(values),
    })
}

fn metrics_of(
    rg: &RowGroupMetaData,
    leaves: &[Leaf],
    nan_free: &std::sync::Arc<[i32]>,
) -> RowGroupMetrics {
    let mut out = RowGroupMetrics {
        rows: rg.num_rows().max(0) as u64,
        columns: HashMap::new(),
        nan_free: nan_free.clone(),
    };
    for leaf in leaves {
        let Some(stats) = rg.column(leaf.index).statistics() else {
            continue;
        };
        let nulls = stats.null_count_opt();
        let (lower, upper) = bounds(stats, leaf).unwrap_or((None, None));
        out.columns.insert(
            leaf.field_id,
            ColumnStats {
                lower,
                upper,
                nulls,
                values: None,
            },
        );
    }
    out
}

/// A lower and an upper bound.
type Bounds = (Option<Datum>, Option<Datum>);

/// The statistics' min and max as Iceberg values of the leaf's type (`None`: not usable).
fn bounds(stats: &Statistics, leaf: &Leaf) -> Option<Bounds> {
    use PrimitiveType as P;
    let ts_unit = match &leaf.logical {
        Some(LogicalType::Timestamp { unit, .. }) => Some(*unit),
        _ => None,
    };
    let both = |lo: Option<Datum>, hi: Option<Datum>| Some((lo, hi));
    match (&leaf.ty, stats) {
        (P::Boolean, Statistics::Boolean(s)) => both(
            s.min_opt().map(|v| Datum::bool(*v)),
            s.max_opt().map(|v| Datum::bool(*v)),
        ),
        (P::Int, Statistics::Int32(s)) => both(
            s.min_opt().map(|v| Datum::int(*v)),
            s.max_opt().map(|v| Datum::int(*v)),
        ),
        (P::Long, Statistics::Int32(s)) => both(
            s.min_opt().map(|v| Datum::long(*v)),
            s.max_opt().map(|v| Datum::long(*v)),
        ),
        (P::Long, Statistics::Int64(s)) => both(
            s.min_opt().map(|v| Datum::long(*v)),
            s.max_opt().map(|v| Datum::long(*v)),
        ),
        (P::Float, Statistics::Float(s)) => both(
            s.min_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::float(*v)),
            s.max_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::float(*v)),
        ),
        (P::Double, Statistics::Float(s)) => both(
            s.min_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::double(f64::from(*v))),
            s.max_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::double(f64::from(*v))),
        ),
        (P::Double, Statistics::Double(s)) => both(
            s.min_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::double(*v)),
            s.max_opt()
                .filter(|v| !v.is_nan())
                .map(|v| Datum::double(*v)),
        ),
        (P::Date, Statistics::Int32(s)) if matches!(leaf.logical, Some(LogicalType::Date)) => both(
            s.min_opt().map(|v| Datum::date(*v)),
            s.max_opt().map(|v| Datum::date(*v)),
        ),
        (P::Timestamp | P::Timestamptz, Statistics::Int64(s))
            if matches!(ts_unit, Some(TimeUnit::MICROS)) =>
        {
            let tz = matches!(leaf.ty, P::Timestamptz);
            let mk = |v: &i64| {
                if tz {
                    Datum::timestamptz_micros(*v)
                } else {
                    Datum::timestamp_micros(*v)
                }
            };
            both(s.min_opt().map(mk), s.max_opt().map(mk))
        }
        (P::TimestampNs | P::TimestamptzNs, Statistics::Int64(s))
            if matches!(ts_unit, Some(TimeUnit::NANOS)) =>
        {
            let tz = matches!(leaf.ty, P::TimestamptzNs);
            let mk = |v: &i64| {
                if tz {
                    Datum::timestamptz_nanos(*v)
                } else {
                    Datum::timestamp_nanos(*v)
                }
            };
            both(s.min_opt().map(mk), s.max_opt().map(mk))
        }
        (P::String, Statistics::ByteArray(s))
            if leaf.unsigned_order && matches!(leaf.logical, Some(LogicalType::String)) =>
        {
            let text = |b: &parquet::data_type::ByteArray| {
                std::str::from_utf8(b.data()).ok().map(Datum::string)
            };
            // A bound that is not valid UTF-8 (a cut in the middle of a character) is dropped.
            both(s.min_opt().and_then(text), s.max_opt().and_then(text))
        }
        (P::Decimal { .. }, Statistics::Int32(s))
            if matches!(leaf.logical, Some(LogicalType::Decimal { .. })) =>
        {
            let mk = |v: &i32| decimal(i128::from(*v), &leaf.ty);
            both(s.min_opt().and_then(mk), s.max_opt().and_then(mk))
        }
        (P::Decimal { .. }, Statistics::Int64(s))
            if matches!(leaf.logical, Some(LogicalType::Decimal { .. })) =>
        {
            let mk = |v: &i64| decimal(i128::from(*v), &leaf.ty);
            both(s.min_opt().and_then(mk), s.max_opt().and_then(mk))
        }
        (P::Decimal { .. }, Statistics::FixedLenByteArray(s))
            if matches!(leaf.logical, Some(LogicalType::Decimal { .. })) =>
        {
            let mk = |b: &parquet::data_type::FixedLenByteArray| {
                Datum::try_from_bytes(b.data(), leaf.ty.clone()).ok()
            };
            both(s.min_opt().and_then(mk), s.max_opt().and_then(mk))
        }
        _ => None,
    }
}

/// May rows matching `p` be in a row group, judging by its bloom filters? `absent(id, v)` is
/// `Some(true)` when the bloom filter of field `id` proves `v` is not in the row group, and
/// `None` when there is no filter to ask. Only `=` and `IN` consult it; every other leaf may
/// match.
pub(crate) fn bloom_may_match(
    p: &BoundPredicate,
    absent: &mut dyn FnMut(i32, &Datum) -> Option<bool>,
) -> bool {
    match p {
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(e) => {
            let [a, b] = e.inputs();
            bloom_may_match(a, absent) && bloom_may_match(b, absent)
        }
        BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            bloom_may_match(a, absent) || bloom_may_match(b, absent)
        }
        BoundPredicate::Binary(b) if b.op() == PredicateOperator::Eq => {
            absent(b.term().field().id, b.literal()) != Some(true)
        }
        BoundPredicate::Set(s) if s.op() == PredicateOperator::In => s
            .literals()
            .iter()
            .any(|d| absent(s.term().field().id, d) != Some(true)),
        _ => true,
    }
}

/// Whether a bloom filter of a column of physical type `physical` proves `v` absent (`None`:
/// the value's type is not one whose hashed bytes are known for that column).
pub(crate) fn bloom_proves_absent(
    filter: &parquet::bloom_filter::Sbbf,
    physical: parquet::basic::Type,
    v: &Datum,
) -> Option<bool> {
    use iceberg::spec::PrimitiveLiteral as L;
    use parquet::basic::Type as T;
    let found = match (physical, v.literal()) {
        (T::INT32, L::Int(i)) => filter.check(i),
        (T::INT32, L::Long(l)) => filter.check(&i32::try_from(*l).ok()?),
        (T::INT64, L::Long(l)) => filter.check(l),
        (T::INT64, L::Int(i)) => filter.check(&i64::from(*i)),
        (T::BYTE_ARRAY, L::String(s)) => filter.check(s.as_bytes()),
        _ => return None,
    };
    Some(!found)
}

/// An unscaled decimal as a value of decimal type `ty`.
fn decimal(unscaled: i128, ty: &PrimitiveType) -> Option<Datum> {
    Datum::try_from_bytes(&unscaled.to_be_bytes(), ty.clone()).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::NestedField;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::expr::may_match;

    /// Three row groups of ids 0..10, 10..20, 20..30 (names "n0".."n29"): equality and range
    /// predicates keep exactly the row groups that hold matches.
    #[test]
    fn row_groups_are_kept_by_their_bounds() {
        let ids: Vec<i64> = (0..30).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("n{i:02}")).collect();
        let with_id = |name: &str, ty, id: i32| {
            arrow_schema::Field::new(name, ty, true).with_metadata(
                [(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    id.to_string(),
                )]
                .into(),
            )
        };
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            with_id("id", arrow_schema::DataType::Int64, 1),
            with_id("name", arrow_schema::DataType::Utf8, 2),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(10))
            .build();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let meta = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(buf))
            .unwrap();
        let ice = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
                ])
                .build()
                .unwrap(),
        );
        let groups = row_group_metrics(&meta, &ice, &Default::default());
        assert_eq!(groups.len(), 3);
        let kept = |p: iceberg::expr::Predicate| -> Vec<usize> {
            let b = p.bind(ice.clone(), true).unwrap();
            (0..3).filter(|&i| may_match(&b, &groups[i])).collect()
        };
        assert_eq!(kept(Reference::new("id").equal_to(Datum::long(15))), [1]);
        assert_eq!(kept(Reference::new("id").less_than(Datum::long(10))), [0]);
        assert_eq!(
            kept(Reference::new("id").greater_than(Datum::long(100))),
            Vec::<usize>::new()
        );
        assert_eq!(
            kept(Reference::new("name").equal_to(Datum::string("n25"))),
            [2]
        );
        assert_eq!(kept(Reference::new("name").is_null()), Vec::<usize>::new());
        assert_eq!(kept(Reference::new("id").is_not_null()), [0, 1, 2]);
    }
}
