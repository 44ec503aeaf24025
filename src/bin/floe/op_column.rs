//! `upsert --op-column`: a CDC file's operation column (`I`/`U`/`D`, Debezium's `c`/`u`/`d`/`r`)
//! mapped onto the table's delete rule, so change files come in as CDC tools write them.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use floe::{Error, ErrorKind, Result};

/// How an operation column maps onto the delete rule.
pub struct OpColumn {
    /// The input column's name.
    pub name: String,
    /// Values that delete the row's key.
    pub delete_values: Vec<String>,
    /// Values that upsert the row.
    pub upsert_values: Vec<String>,
    /// The table's delete column and its type, when it has one.
    pub delete_column: Option<(String, DataType)>,
    /// The table, for messages.
    pub table: String,
}

impl OpColumn {
    /// `schema` (the table's, read by name) with the operation column as text; refused when
    /// the table has a column of that name.
    pub fn reading_schema(&self, schema: &SchemaRef) -> Result<SchemaRef> {
        if schema.field_with_name(&self.name).is_ok() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "--op-column '{}' is a column of table {}; name the input's operation column, \
                     which is not stored",
                    self.name, self.table
                ),
            ));
        }
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(&self.name, DataType::Utf8, true)));
        Ok(Arc::new(Schema::new(fields)))
    }

    /// `batch` (rows of `source`, the first counted `first_row` from 1) without the operation
    /// column, its deletes set in the table's delete column.
    pub fn apply(&self, batch: &RecordBatch, source: &str, first_row: u64) -> Result<RecordBatch> {
        let bad = |m: String| Error::new(ErrorKind::InvalidInput, format!("{source}: {m}"));
        let schema = batch.schema();
        let at = schema.index_of(&self.name).map_err(|_| {
            bad(format!(
                "has no column '{}' (--op-column); its columns: {}",
                self.name,
                names(&schema)
            ))
        })?;
        let ops = arrow::compute::cast(batch.column(at), &DataType::Utf8)?;
        let ops = ops
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or_else(|| bad(format!("column '{}' is not text", self.name)))?;
        let mut flags = Vec::with_capacity(ops.len());
        for r in 0..ops.len() {
            let row = first_row + r as u64;
            if ops.is_null(r) {
                return Err(bad(format!(
                    "row {row}: the operation column '{}' is empty; every change needs one",
                    self.name
                )));
            }
            let v = ops.value(r).trim();
            if self.delete_values.iter().any(|d| d == v) {
                flags.push(1);
            } else if self.upsert_values.iter().any(|u| u == v) {
                flags.push(0);
            } else {
                return Err(bad(format!(
                    "row {row}: operation '{v}' in column '{}' is neither a delete ({}) nor an \
                     upsert ({}); pass --delete-values / --upsert-values to say what it is",
                    self.name,
                    self.delete_values.join(","),
                    self.upsert_values.join(",")
                )));
            }
        }
        let mut fields: Vec<_> = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (i, (f, c)) in schema.fields().iter().zip(batch.columns()).enumerate() {
            if i != at {
                fields.push(f.clone());
                columns.push(c.clone());
            }
        }
        match &self.delete_column {
            Some((name, ty)) => {
                if schema.field_with_name(name).is_ok() {
                    return Err(bad(format!(
                        "has both the delete column '{name}' and --op-column '{}'; give one",
                        self.name
                    )));
                }
                let flags: ArrayRef = Arc::new(Int32Array::from(flags));
                fields.push(Arc::new(Field::new(name, ty.clone(), true)));
                columns.push(arrow::compute::cast(&flags, ty)?);
            }
            None => {
                if let Some(r) = flags.iter().position(|f| *f == 1) {
                    return Err(bad(format!(
                        "row {}: a delete, but table {} has no delete column to record it (set \
                         floe.merge.delete-column to a 0/1 column)",
                        first_row + r as u64,
                        self.table
                    )));
                }
            }
        }
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?)
    }
}

fn names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
