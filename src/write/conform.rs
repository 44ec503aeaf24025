//! Makes input batches fit the table's Arrow schema (by column name, with safe casts).

use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};

use crate::arrow_layout::{relabel, same_layout};
use crate::error::{Error, Result};

/// Conforms input batches to a target Arrow schema that carries Iceberg field ids.
#[derive(Debug, Clone)]
pub struct Conformer {
    target: SchemaRef,
    table: String,
}

impl Conformer {
    /// A conformer for the table's current schema.
    pub fn new(schema: &iceberg::spec::Schema, table: &str) -> Result<Self> {
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?);
        Ok(Self {
            target,
            table: table.to_string(),
        })
    }

    /// The Arrow schema (with `PARQUET:field_id` metadata) batches are conformed to.
    pub fn schema(&self) -> &SchemaRef {
        &self.target
    }

    /// Reorders, casts and null-fills `batch` to the table schema; errors name the column.
    pub fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let input = batch.schema();
        for f in input.fields() {
            if self.target.field_with_name(f.name()).is_err() {
                return Err(Error::invalid(format!(
                    "input column '{}' is not in the schema of table {}; add it to the table schema or drop it from the input",
                    f.name(),
                    self.table
                )));
            }
        }
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.target.fields().len());
        for tf in self.target.fields() {
            let col = match input.index_of(tf.name()) {
                Ok(i) => fit(batch.column(i), tf.data_type()).map_err(|e| {
                    Error::invalid(format!(
                        "column '{}' of type {} does not fit table {} column of type {}: {e}",
                        tf.name(),
                        batch.column(i).data_type(),
                        self.table,
                        tf.data_type()
                    ))
                })?,
                Err(_) if tf.is_nullable() => new_null_array(tf.data_type(), batch.num_rows()),
                Err(_) => {
                    return Err(Error::invalid(format!(
                        "required column '{}' of table {} is missing from the input",
                        tf.name(),
                        self.table
                    )))
                }
            };
            if !tf.is_nullable() && col.null_count() > 0 {
                return Err(Error::invalid(format!(
                    "required column '{}' of table {} has {} null values in the input",
                    tf.name(),
                    self.table,
                    col.null_count()
                )));
            }
            cols.push(col);
        }
        RecordBatch::try_new(self.target.clone(), cols)
            .map_err(|e| Error::invalid(format!("table {}: {e}", self.table)))
    }
}

/// Same layout → relabel (field ids live in nested field metadata); else a safe cast.
fn fit(a: &ArrayRef, to: &DataType) -> std::result::Result<ArrayRef, String> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    if same_layout(a.data_type(), to) {
        return relabel(a, to).map_err(|e| e.to_string());
    }
    if !lossless(a.data_type(), to) {
        return Err("the conversion could lose data".into());
    }
    let opts = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(a, to, &opts).map_err(|e| e.to_string())
}

/// Casts that never lose information (widening, re-encoding, timezone relabel).
fn lossless(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    matches!(
        (from, to),
        (Int8 | Int16 | Int32 | UInt8 | UInt16, Int32 | Int64)
            | (UInt32 | Int64, Int64)
            | (Float16 | Float32, Float32 | Float64)
            | (Float64, Float64)
            | (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8)
            | (Binary | LargeBinary | BinaryView, Binary | LargeBinary)
            | (Date32 | Date64, Date32)
            | (Timestamp(_, _), Timestamp(_, _))
            | (Decimal128(_, _), Decimal128(_, _))
            | (Int32 | Int64, Decimal128(_, _))
            | (Dictionary(_, _), _)
            | (List(_) | LargeList(_), List(_) | LargeList(_))
            | (Struct(_), Struct(_))
            | (FixedSizeBinary(_), FixedSizeBinary(_))
            | (Null, _)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{Field, Schema};

    #[test]
    fn widen_reorder_and_fill() {
        let s = crate::spec::parse_schema("id long not null, name string, extra double").unwrap();
        let c = Conformer::new(&s, "db.t").unwrap();
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("id", DataType::Int32, false),
            ])),
            vec![
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(Int32Array::from(vec![7])),
            ],
        )
        .unwrap();
        let out = c.conform(&b).unwrap();
        assert_eq!(out.schema().field(0).data_type(), &DataType::Int64);
        assert_eq!(out.column(2).null_count(), 1);
    }

    #[test]
    fn unknown_and_lossy_columns_fail() {
        let s = crate::spec::parse_schema("id int").unwrap();
        let c = Conformer::new(&s, "db.t").unwrap();
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("zz", DataType::Int32, true)])),
            vec![Arc::new(Int32Array::from(vec![1]))],
        )
        .unwrap();
        assert!(c.conform(&b).unwrap_err().to_string().contains("'zz'"));
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true)])),
            vec![Arc::new(StringArray::from(vec!["x"]))],
        )
        .unwrap();
        assert!(c.conform(&b).is_err());
    }
}
