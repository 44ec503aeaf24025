//! Bytes in CSV: `binary` and `fixed` columns as hex text, `uuid` also in its 8-4-4-4-12
//! form (as `scan --format csv` prints them).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use floe::{Error, Result};

/// `b` with the text columns `fields` (binary in the table) decoded: hex digits, or for a
/// 16-byte column also a UUID's 8-4-4-4-12 form. Rows count from 1 at `first_row`; a value
/// that does not decode names its column and file line.
pub fn bytes_from_text(
    b: &RecordBatch,
    fields: &[arrow::datatypes::FieldRef],
    path: &str,
    first_row: u64,
) -> Result<RecordBatch> {
    use arrow::array::{
        Array, ArrayRef, BinaryBuilder, FixedSizeBinaryBuilder, LargeBinaryBuilder, StringArray,
    };
    if fields.is_empty() {
        return Ok(b.clone());
    }
    let schema = b.schema();
    let mut out_fields = Vec::with_capacity(b.num_columns());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(b.num_columns());
    for (f, c) in schema.fields().iter().zip(b.columns()) {
        let Some(target) = fields.iter().find(|t| t.name() == f.name()) else {
            out_fields.push(f.clone());
            columns.push(c.clone());
            continue;
        };
        let text = c.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
            Error::new(
                floe::ErrorKind::InvalidInput,
                format!("{path}: column '{}' was not read as text", f.name()),
            )
        })?;
        let width = match target.data_type() {
            DataType::FixedSizeBinary(n) => Some(*n as usize),
            _ => None,
        };
        let decode = |r: usize| -> Result<Vec<u8>> {
            let v = text.value(r).trim();
            let bytes = match width {
                Some(16) => uuid::Uuid::parse_str(v).map(|u| u.as_bytes().to_vec()).ok(),
                _ => hex_bytes(v),
            };
            bytes
                .filter(|x| width.is_none_or(|w| x.len() == w))
                .ok_or_else(|| {
                    let what = match width {
                        Some(16) => "a uuid (8-4-4-4-12 hex digits) or 32 hex digits".to_string(),
                        Some(w) => format!("{} hex digits ({w} bytes)", w * 2),
                        None => "hex digits (two per byte)".to_string(),
                    };
                    Error::new(
                        floe::ErrorKind::InvalidInput,
                        format!(
                            "{path}: in column '{}' on line {} of the file: '{v}' is not {what}",
                            f.name(),
                            first_row + r as u64 + 1
                        ),
                    )
                })
        };
        let column: ArrayRef = match width {
            Some(w) => {
                let mut bld = FixedSizeBinaryBuilder::with_capacity(text.len(), w as i32);
                for r in 0..text.len() {
                    if text.is_null(r) {
                        bld.append_null();
                    } else {
                        bld.append_value(decode(r)?)?;
                    }
                }
                Arc::new(bld.finish())
            }
            None if matches!(target.data_type(), DataType::LargeBinary) => {
                let mut bld = LargeBinaryBuilder::new();
                for r in 0..text.len() {
                    if text.is_null(r) {
                        bld.append_null();
                    } else {
                        bld.append_value(decode(r)?);
                    }
                }
                Arc::new(bld.finish())
            }
            None => {
                let mut bld = BinaryBuilder::new();
                for r in 0..text.len() {
                    if text.is_null(r) {
                        bld.append_null();
                    } else {
                        bld.append_value(decode(r)?);
                    }
                }
                Arc::new(bld.finish())
            }
        };
        out_fields.push(Arc::new(Field::new(
            f.name(),
            target.data_type().clone(),
            true,
        )));
        columns.push(column);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(out_fields)),
        columns,
    )?)
}

/// Bytes from hex digits (either case), two per byte.
fn hex_bytes(v: &str) -> Option<Vec<u8>> {
    if v.len() % 2 != 0 {
        return None;
    }
    (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(v.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_digits_two_per_byte() {
        assert_eq!(super::hex_bytes("00fFa0"), Some(vec![0, 255, 160]));
        assert_eq!(super::hex_bytes(""), Some(vec![]));
        assert_eq!(super::hex_bytes("abc"), None);
        assert_eq!(super::hex_bytes("zz"), None);
    }
}
