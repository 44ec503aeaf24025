//! Keep-latest-per-key inside one batch of snapshot rows: the rule every ingestion strategy
//! shares. Pure: no I/O.
//!
//! Per key the row with the highest version wins; among rows with the same key and the same
//! version, the one that arrived last (the later row of the batch; batches keep file order,
//! then row order) wins. A null in a key column or in the version column is an error.

use arrow::row::{RowConverter, Rows, SortField};
use arrow_array::{Array, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// The columns ingestion works with, by index in the table's Arrow schema.
#[derive(Debug, Clone)]
pub(crate) struct KeyColumns {
    /// Key columns.
    pub key: Vec<usize>,
    /// The version column.
    pub version: usize,
    /// Every column but the version: two rows with equal values here are the same row.
    pub values: Vec<usize>,
    /// Names, for messages.
    pub names: Vec<String>,
    /// The version column's name.
    pub version_name: String,
}

impl KeyColumns {
    /// Resolves `key` and `version` names against `schema`.
    pub(crate) fn new(
        schema: &arrow_schema::Schema,
        key: &[String],
        version: &str,
    ) -> Result<Self> {
        let find = |name: &str| {
            schema.index_of(name).map_err(|_| {
                Error::invalid(format!(
                    "column '{name}' is not in the table (columns: {})",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        };
        if key.is_empty() {
            return Err(Error::invalid("the key names no column"));
        }
        let key_idx = key.iter().map(|k| find(k)).collect::<Result<Vec<_>>>()?;
        let version_idx = find(version)?;
        if key_idx.contains(&version_idx) {
            return Err(Error::invalid(format!(
                "the version column '{version}' cannot be part of the key"
            )));
        }
        let dt = schema.field(version_idx).data_type();
        if !matches!(
            dt,
            DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::Date32
                | DataType::Timestamp(_, _)
        ) {
            return Err(Error::invalid(format!(
                "version column '{version}' is {dt}; it must be an integer, date or timestamp"
            )));
        }
        Ok(Self {
            key: key_idx,
            version: version_idx,
            values: (0..schema.fields().len())
                .filter(|i| *i != version_idx)
                .collect(),
            names: key.to_vec(),
            version_name: version.to_string(),
        })
    }

    /// A converter of the key columns of batches with `schema`.
    pub(crate) fn key_converter(&self, schema: &arrow_schema::Schema) -> Result<RowConverter> {
        converter(schema, &self.key)
    }

    /// A converter of the value columns (all but the version).
    pub(crate) fn value_converter(&self, schema: &arrow_schema::Schema) -> Result<RowConverter> {
        converter(schema, &self.values)
    }

    /// The key columns of `batch` as comparable rows; a null key is an error.
    pub(crate) fn keys(
        &self,
        conv: &RowConverter,
        batch: &RecordBatch,
        what: &str,
    ) -> Result<Rows> {
        for (&i, name) in self.key.iter().zip(&self.names) {
            if batch.column(i).null_count() > 0 {
                return Err(Error::invalid(format!(
                    "{what}: key column '{name}' is null in {} rows; every key column needs a value",
                    batch.column(i).null_count()
                )));
            }
        }
        let cols: Vec<_> = self.key.iter().map(|&i| batch.column(i).clone()).collect();
        Ok(conv.convert_columns(&cols)?)
    }

    /// The value columns of `batch` as comparable rows.
    pub(crate) fn values(&self, conv: &RowConverter, batch: &RecordBatch) -> Result<Rows> {
        let cols: Vec<_> = self
            .values
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        Ok(conv.convert_columns(&cols)?)
    }

    /// The version column as i64; a null version is an error.
    pub(crate) fn versions(&self, batch: &RecordBatch, what: &str) -> Result<Int64Array> {
        let c = batch.column(self.version);
        if c.null_count() > 0 {
            return Err(Error::invalid(format!(
                "{what}: version column '{}' is null in {} rows",
                self.version_name,
                c.null_count()
            )));
        }
        let c = arrow_cast::cast(c, &DataType::Int64)?;
        c.as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| Error::invalid("version column did not cast to a 64-bit integer"))
    }
}

fn converter(schema: &arrow_schema::Schema, idx: &[usize]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        idx.iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect(),
    )?)
}

/// Indices of the rows of `batch` that win per key (in ascending order).
pub(crate) fn latest_per_key(
    cols: &KeyColumns,
    batch: &RecordBatch,
    what: &str,
) -> Result<UInt32Array> {
    let conv = cols.key_converter(&batch.schema())?;
    let keys = cols.keys(&conv, batch, what)?;
    let versions = cols.versions(batch, what)?;
    Ok(crate::keyed::latest_rows(&keys, Some(&versions)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn highest_version_then_latest_arrival() {
        let b = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![1, 1, 2, 2, 3, 1])) as _),
            (
                "v",
                Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e", "f"])) as _,
            ),
            (
                "ver",
                Arc::new(Int64Array::from(vec![5, 7, 1, 1, 9, 6])) as _,
            ),
        ])
        .unwrap();
        let cols = KeyColumns::new(&b.schema(), &["k".into()], "ver").unwrap();
        let idx = latest_per_key(&cols, &b, "test").unwrap();
        // key 1: version 7 (row 1) beats 5 and the later 6; key 2: equal versions, row 3 is
        // later; key 3: alone.
        assert_eq!(idx.values().to_vec(), vec![1, 3, 4]);
    }

    #[test]
    fn bad_columns_are_named() {
        let b = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![Some(1), None])) as _),
            ("ver", Arc::new(Int64Array::from(vec![1, 2])) as _),
        ])
        .unwrap();
        let e = KeyColumns::new(&b.schema(), &["nope".into()], "ver").unwrap_err();
        assert!(e.to_string().contains("'nope'"), "{e}");
        let cols = KeyColumns::new(&b.schema(), &["k".into()], "ver").unwrap();
        let e = latest_per_key(&cols, &b, "snapshot").unwrap_err();
        assert!(e.to_string().contains("key column 'k' is null"), "{e}");
        let e = KeyColumns::new(&b.schema(), &["k".into()], "k").unwrap_err();
        assert!(e.to_string().contains("cannot be part of the key"), "{e}");
    }
}
