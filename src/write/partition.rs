//! Splits a batch by partition: transform values computed once per batch, rows grouped by a
//! sort on those values, and a partition tuple built once per group.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow_ord::partition::partition;
use arrow_ord::sort::{lexsort_to_indices, SortColumn};
use iceberg::arrow::{arrow_struct_to_literal, PartitionValueCalculator};
use iceberg::spec::{Literal, PartitionKey, PartitionSpec, StructType};

use crate::error::{Error, Result};
use crate::spec::SchemaRef;

/// A batch's rows grouped by partition: `order` lists row indices partition after partition
/// (`None`: the batch's own order, one partition), each part names its range of `order`.
#[derive(Debug)]
pub(crate) struct Groups {
    pub order: Option<Vec<u32>>,
    pub parts: Vec<(PartitionKey, std::ops::Range<usize>)>,
}

/// Groups rows of batches by their partition tuple (an unpartitioned spec: one group, the
/// empty tuple).
#[derive(Debug)]
pub(crate) struct Partitioner {
    /// `None` for an unpartitioned spec.
    calc: Option<PartitionValueCalculator>,
    spec: PartitionSpec,
    schema: SchemaRef,
    partition_type: StructType,
}

impl Partitioner {
    pub(crate) fn new(spec: &PartitionSpec, schema: SchemaRef) -> Result<Self> {
        // A spec written elsewhere may hold bucket[0] / truncate[0]: refuse, do not divide by 0.
        for f in spec.fields() {
            crate::spec::check_transform(&f.transform).map_err(|e| {
                e.context(format!(
                    "partition spec {} field '{}' cannot be written",
                    spec.spec_id(),
                    f.name
                ))
            })?;
        }
        let calc = match spec.is_unpartitioned() {
            true => None,
            false => Some(PartitionValueCalculator::try_new(spec, &schema)?),
        };
        let partition_type = spec.partition_type(&schema)?;
        Ok(Self {
            calc,
            spec: spec.clone(),
            schema,
            partition_type,
        })
    }

    /// The batch's rows per partition (each group's rows keep their relative order).
    pub(crate) fn split(&self, batch: &RecordBatch) -> Result<Vec<(PartitionKey, RecordBatch)>> {
        let Groups { order, parts } = self.groups(batch)?;
        let batch = match order {
            None => batch.clone(),
            Some(order) => arrow_select::take::take_record_batch(batch, &UInt32Array::from(order))?,
        };
        Ok(parts
            .into_iter()
            .map(|(key, r)| (key, batch.slice(r.start, r.len())))
            .collect())
    }

    /// The batch's partitions, without copying any row: callers take the rows where the copy
    /// is cheapest. An empty batch has none.
    pub(crate) fn groups(&self, batch: &RecordBatch) -> Result<Groups> {
        if batch.num_rows() == 0 {
            return Ok(Groups {
                order: None,
                parts: vec![],
            });
        }
        let Some(calc) = &self.calc else {
            let key = PartitionKey::new(
                self.spec.clone(),
                self.schema.clone(),
                iceberg::spec::Struct::empty(),
            );
            return Ok(Groups {
                order: None,
                parts: vec![(key, 0..batch.num_rows())],
            });
        };
        let values = calc.calculate(batch)?;
        let values = values
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| Error::io("partition values are not a struct"))?;
        let columns: Vec<ArrayRef> = values.columns().to_vec();
        if all_equal(&columns) {
            let key = self.key(&columns, 0)?;
            return Ok(Groups {
                order: None,
                parts: vec![(key, 0..batch.num_rows())],
            });
        }
        match self.counted_groups(&columns)? {
            Some(groups) => Ok(groups),
            None => self.sorted_groups(&columns, batch.num_rows()),
        }
    }

    /// Groups by sorting the partition values (any types, nulls included).
    fn sorted_groups(&self, columns: &[ArrayRef], rows: usize) -> Result<Groups> {
        let sort: Vec<SortColumn> = columns
            .iter()
            .map(|c| SortColumn {
                values: c.clone(),
                options: None,
            })
            .collect();
        let idx = lexsort_to_indices(&sort, None)?;
        let sorted = columns
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let ranges = partition(&sorted)?.ranges();
        // The sort need not be stable: placing rows by group keeps input order.
        let mut group = vec![0u32; rows];
        for (g, r) in ranges.iter().enumerate() {
            for &row in &idx.values()[r.clone()] {
                group[row as usize] = g as u32;
            }
        }
        let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
        self.placed(columns, &sizes, |row| group[row] as usize)
    }

    /// Groups by counting when the partition value is one null-free 32-bit integer spanning
    /// no more values than the batch has rows (day, month, year and hour transforms, buckets,
    /// identity on an int or date): one pass to count, one to place each row, no sort. `None`
    /// for any other shape.
    fn counted_groups(&self, columns: &[ArrayRef]) -> Result<Option<Groups>> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Date32Type, Int32Type};
        let [c] = columns else {
            return Ok(None);
        };
        if c.null_count() > 0 {
            return Ok(None);
        }
        let values: &[i32] = match c.data_type() {
            arrow_schema::DataType::Int32 => c.as_primitive::<Int32Type>().values(),
            arrow_schema::DataType::Date32 => c.as_primitive::<Date32Type>().values(),
            _ => return Ok(None),
        };
        let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
            return Ok(None);
        };
        let span = (max as i64 - min as i64) as usize + 1;
        if span > values.len().max(1024) {
            return Ok(None);
        }
        let slot = |v: i32| (v as i64 - min as i64) as usize;
        let mut sizes = vec![0usize; span];
        for &v in values {
            sizes[slot(v)] += 1;
        }
        self.placed(columns, &sizes, |row| slot(values[row]))
            .map(Some)
    }

    /// Each group's rows in input order: `group_of(row)` names a row's group, `sizes` every
    /// group's row count (groups in the order their parts are listed; empty ones skipped).
    fn placed(
        &self,
        columns: &[ArrayRef],
        sizes: &[usize],
        group_of: impl Fn(usize) -> usize,
    ) -> Result<Groups> {
        let rows: usize = sizes.iter().sum();
        let mut next = Vec::with_capacity(sizes.len());
        let mut ranges = Vec::new();
        let mut at = 0;
        for &n in sizes {
            next.push(at);
            if n > 0 {
                ranges.push(at..at + n);
            }
            at += n;
        }
        let mut order = vec![0u32; rows];
        for row in 0..rows {
            let place = &mut next[group_of(row)];
            order[*place] = row as u32;
            *place += 1;
        }
        let parts = ranges
            .into_iter()
            .map(|r| Ok((self.key(columns, order[r.start] as usize)?, r)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Groups {
            order: Some(order),
            parts,
        })
    }

    /// The partition key of row `row` of the partition value columns.
    fn key(&self, values: &[ArrayRef], row: usize) -> Result<PartitionKey> {
        let one = StructArray::try_new(
            struct_fields(values, &self.partition_type),
            values.iter().map(|c| c.slice(row, 1)).collect(),
            None,
        )?;
        let one: ArrayRef = Arc::new(one);
        let lit = arrow_struct_to_literal(&one, &self.partition_type)?;
        let data = match lit.into_iter().next() {
            Some(Some(Literal::Struct(s))) => s,
            _ => return Err(Error::io("partition value is not a struct")),
        };
        Ok(PartitionKey::new(
            self.spec.clone(),
            self.schema.clone(),
            data,
        ))
    }
}

/// Arrow fields for the partition struct (names from the spec, types from the values).
fn struct_fields(values: &[ArrayRef], ty: &StructType) -> arrow_schema::Fields {
    ty.fields()
        .iter()
        .zip(values)
        .map(|(f, v)| {
            arrow_schema::Field::new(f.name.clone(), v.data_type().clone(), true).with_metadata(
                [(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    f.id.to_string(),
                )]
                .into_iter()
                .collect(),
            )
        })
        .collect()
}

/// Whether every column holds one non-null value (a single partition: no sort needed).
fn all_equal(columns: &[ArrayRef]) -> bool {
    columns.iter().all(|c| {
        let n = c.len();
        if n == 0 {
            return true;
        }
        if c.null_count() > 0 {
            return c.null_count() == n;
        }
        let first = arrow_array::Scalar::new(c.slice(0, 1));
        arrow_ord::cmp::eq(&first, c)
            .map(|b| b.true_count() == n)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse_partition_spec, parse_schema};
    use arrow_array::{Int64Array, StringArray};
    use iceberg::spec::Transform;

    #[test]
    fn groups_list_each_partitions_rows_in_input_order() {
        let schema = Arc::new(parse_schema("id long, s string").unwrap());
        let spec = parse_partition_spec("s", &schema)
            .unwrap()
            .bind(schema.clone())
            .unwrap();
        let p = Partitioner::new(&spec, schema.clone()).unwrap();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let batch = RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(Int64Array::from((0..8).collect::<Vec<i64>>())),
                Arc::new(StringArray::from(vec![
                    "b", "a", "b", "c", "a", "b", "c", "a",
                ])),
            ],
        )
        .unwrap();
        let g = p.groups(&batch).unwrap();
        let order = g.order.unwrap();
        let rows: Vec<Vec<u32>> = g
            .parts
            .iter()
            .map(|(_, r)| order[r.clone()].to_vec())
            .collect();
        assert_eq!(rows, vec![vec![1, 4, 7], vec![0, 2, 5], vec![3, 6]]);
        let split = p.split(&batch).unwrap();
        assert_eq!(split.len(), 3);
        assert_eq!(split[1].0.to_path(), "s=b");
        let ids = split[1]
            .1
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[0, 2, 5]);
        // One partition: no order, no copy.
        let one = p.groups(&batch.slice(1, 1)).unwrap();
        assert!(one.order.is_none());
        assert_eq!(one.parts[0].1, 0..1);
        // No rows: no partition (the partition values of row 0 do not exist).
        assert!(p.groups(&batch.slice(0, 0)).unwrap().parts.is_empty());
    }

    #[test]
    fn zero_buckets_or_width_from_elsewhere_are_refused_not_divided_by() {
        let schema = Arc::new(parse_schema("id long, s string").unwrap());
        for (source, t) in [(1, Transform::Bucket(0)), (2, Transform::Truncate(0))] {
            let spec = iceberg::spec::UnboundPartitionSpec::builder()
                .add_partition_field(source, "p", t)
                .unwrap()
                .build()
                .bind(schema.clone())
                .unwrap();
            let e = Partitioner::new(&spec, schema.clone()).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("cannot be written"), "{e}");
        }
    }

    #[test]
    fn counting_and_sorting_group_alike() {
        let schema = Arc::new(parse_schema("id long, n int, ts timestamp").unwrap());
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let ids: Vec<i64> = (0..12).collect();
        let n = vec![5, 3, 5, 9, 3, -2, 9, 5, 3, 3, -2, 9];
        let ts: Vec<i64> = n.iter().map(|d| *d as i64 * 86_400_000_000 + 7).collect();
        let batch = RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(arrow_array::Int32Array::from(n)),
                Arc::new(arrow_array::TimestampMicrosecondArray::from(ts)),
            ],
        )
        .unwrap();
        for spec in ["n", "day(ts)", "bucket(4, n)"] {
            let spec = parse_partition_spec(spec, &schema)
                .unwrap()
                .bind(schema.clone())
                .unwrap();
            let p = Partitioner::new(&spec, schema.clone()).unwrap();
            let values = p.calc.as_ref().unwrap().calculate(&batch).unwrap();
            let columns = values
                .as_any()
                .downcast_ref::<StructArray>()
                .unwrap()
                .columns()
                .to_vec();
            let counted = p.counted_groups(&columns).unwrap().expect("counted");
            let sorted = p.sorted_groups(&columns, batch.num_rows()).unwrap();
            assert_eq!(counted.order, sorted.order);
            let keyed = |g: &Groups| -> Vec<(String, std::ops::Range<usize>)> {
                g.parts
                    .iter()
                    .map(|(k, r)| (k.to_path(), r.clone()))
                    .collect()
            };
            assert_eq!(keyed(&counted), keyed(&sorted));
            assert!(counted.parts.len() > 1);
        }
    }
}
