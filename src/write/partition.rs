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

/// Groups rows of batches by their partition tuple.
#[derive(Debug)]
pub(crate) struct Partitioner {
    calc: PartitionValueCalculator,
    spec: PartitionSpec,
    schema: SchemaRef,
    partition_type: StructType,
}

impl Partitioner {
    pub(crate) fn new(spec: &PartitionSpec, schema: SchemaRef) -> Result<Self> {
        let calc = PartitionValueCalculator::try_new(spec, &schema)?;
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
        self.groups(batch)?
            .into_iter()
            .map(|(key, rows)| {
                let piece = match rows {
                    None => batch.clone(),
                    Some(idx) => arrow_select::take::take_record_batch(batch, &idx)?,
                };
                Ok((key, piece))
            })
            .collect()
    }

    /// The batch's partitions and the rows of each, ascending (`None`: every row), without
    /// copying the rows: callers take them where the copy is cheapest.
    pub(crate) fn groups(
        &self,
        batch: &RecordBatch,
    ) -> Result<Vec<(PartitionKey, Option<UInt32Array>)>> {
        let values = self.calc.calculate(batch)?;
        let values = values
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| Error::io("partition values are not a struct"))?;
        let columns: Vec<ArrayRef> = values.columns().to_vec();
        if all_equal(&columns) {
            let key = self.key(&columns, 0)?;
            return Ok(vec![(key, None)]);
        }
        let sort: Vec<SortColumn> = columns
            .iter()
            .map(|c| SortColumn {
                values: c.clone(),
                options: None,
            })
            .collect();
        // A stable sort: rows of one partition keep their input order.
        let idx = lexsort_to_indices(&sort, None)?;
        let sorted = columns
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        partition(&sorted)?
            .ranges()
            .into_iter()
            .map(|r| {
                let key = self.key(&sorted, r.start)?;
                let mut rows: Vec<u32> = idx.values()[r.clone()].to_vec();
                rows.sort_unstable();
                Ok((key, Some(UInt32Array::from(rows))))
            })
            .collect()
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
