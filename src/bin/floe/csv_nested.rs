//! Nested columns (list, struct, map) in CSV: written as JSON text (`["a","b"]`,
//! `{"a":1}`), and read back from it.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use arrow::json::writer::{make_encoder, EncoderOptions};
use floe::{Error, ErrorKind, Result};

/// Whether CSV carries a column of type `t` as JSON text.
pub fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Struct(_)
            | DataType::Map(..)
    )
}

/// `batch` with every nested column turned into JSON text (NULL stays NULL).
pub fn to_json_text(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| is_nested(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if is_nested(f.data_type()) {
            columns.push(json_text(f, c.as_ref())?);
            fields.push(Arc::new(Field::new(f.name(), DataType::Utf8, true)));
        } else {
            columns.push(c.clone());
            fields.push(f.clone());
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn json_text(field: &FieldRef, array: &dyn Array) -> Result<ArrayRef> {
    let options = EncoderOptions::default().with_explicit_nulls(true);
    let mut enc = make_encoder(field, array, &options)?;
    let mut out = StringBuilder::new();
    let mut buf = Vec::new();
    for i in 0..array.len() {
        if array.is_null(i) {
            out.append_null();
            continue;
        }
        buf.clear();
        enc.encode(i, &mut buf);
        out.append_value(String::from_utf8_lossy(&buf));
    }
    Ok(Arc::new(out.finish()))
}

/// `batch` (read from CSV with nested columns as text) with each column named in `targets`
/// parsed from JSON text into the target field's type. A value that is not JSON of that type
/// is an error naming the file, the column and the row.
pub fn from_json_text(
    batch: &RecordBatch,
    targets: &[FieldRef],
    path: &str,
    first_row: u64,
) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for target in targets {
        let Ok(i) = schema.index_of(target.name()) else {
            continue;
        };
        let text = columns[i]
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("{path}: column '{}' is not text", target.name()),
                )
            })?;
        columns[i] = parse_column(text, target, path, first_row)?;
        fields[i] = target.clone();
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn parse_column(
    text: &StringArray,
    target: &FieldRef,
    path: &str,
    first_row: u64,
) -> Result<ArrayRef> {
    let one = Arc::new(Schema::new(vec![target
        .as_ref()
        .clone()
        .with_nullable(true)]));
    let mut decoder = arrow::json::ReaderBuilder::new(one)
        .with_batch_size(text.len().max(1))
        .build_decoder()?;
    let name = serde_json::to_string(target.name())?;
    let mut parts: Vec<ArrayRef> = Vec::new();
    for row in 0..text.len() {
        let value = if text.is_null(row) || text.value(row).trim().is_empty() {
            "null"
        } else {
            text.value(row)
        };
        let bad = |why: String| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{path}: row {}: column '{}' ({}) must be JSON text, as floe writes it: {why}",
                    first_row + row as u64,
                    target.name(),
                    target.data_type()
                ),
            )
        };
        // Exactly one JSON value per cell.
        serde_json::from_str::<serde_json::Value>(value).map_err(|e| bad(e.to_string()))?;
        let line = format!("{{{name}:{value}}}\n");
        let used = decoder
            .decode(line.as_bytes())
            .map_err(|e| bad(e.to_string()))?;
        if used != line.len() {
            return Err(bad("the value was not read to its end".into()));
        }
        // Flush per row so a type error is reported at its row.
        if let Some(b) = decoder.flush().map_err(|e| bad(e.to_string()))? {
            parts.push(b.column(0).clone());
        }
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    if refs.is_empty() {
        return Ok(arrow::array::new_empty_array(target.data_type()));
    }
    Ok(arrow::compute::concat(&refs)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Builder, ListBuilder};

    #[test]
    fn lists_round_trip_through_json_text() {
        let mut b = ListBuilder::new(Int32Builder::new());
        b.append_value([Some(1), None, Some(3)]);
        b.append_null();
        b.append_value([]);
        let list: ArrayRef = Arc::new(b.finish());
        let field = Arc::new(Field::new("l", list.data_type().clone(), true));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![field.clone()])),
            vec![list.clone()],
        )
        .unwrap();
        let text = to_json_text(&batch).unwrap();
        let col = text
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(col.value(0), "[1,null,3]");
        assert!(col.is_null(1));
        assert_eq!(col.value(2), "[]");
        let back = from_json_text(&text, &[field], "x.csv", 1).unwrap();
        assert_eq!(back.column(0).as_ref(), list.as_ref());
    }

    #[test]
    fn bad_text_names_the_row_and_column() {
        let field = Arc::new(Field::new(
            "l",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ));
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("[1]"), Some("[\"x\"]")]));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("l", DataType::Utf8, true)])),
            vec![text],
        )
        .unwrap();
        let e = from_json_text(&batch, &[field], "x.csv", 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("row 2") && e.contains("column 'l'"), "{e}");
    }
}
