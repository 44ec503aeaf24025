//! CSV columns read as text and decoded into their table type afterwards (bytes, uuids,
//! timestamps in a user's format): the walk over a batch's columns they share.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{Field, FieldRef, Schema};
use floe::{Error, ErrorKind, Result};

/// `b` with each column named in `targets` (read as text) replaced by `decode(target, text)`;
/// the other columns as they are.
pub fn decode_text_columns(
    b: &RecordBatch,
    targets: &[FieldRef],
    path: &str,
    decode: impl Fn(&FieldRef, &StringArray) -> Result<ArrayRef>,
) -> Result<RecordBatch> {
    if targets.is_empty() {
        return Ok(b.clone());
    }
    let schema = b.schema();
    let mut fields = Vec::with_capacity(b.num_columns());
    let mut columns = Vec::with_capacity(b.num_columns());
    for (f, c) in schema.fields().iter().zip(b.columns()) {
        let Some(target) = targets.iter().find(|t| t.name() == f.name()) else {
            fields.push(f.clone());
            columns.push(c.clone());
            continue;
        };
        let text = c.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{path}: column '{}' was not read as text", f.name()),
            )
        })?;
        let column = decode(target, text)?;
        fields.push(Arc::new(Field::new(
            f.name(),
            column.data_type().clone(),
            true,
        )));
        columns.push(column);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}
