//! Bytes in CSV: `binary` and `fixed` columns as hex text, `uuid` also in its 8-4-4-4-12
//! form (as `scan --format csv` prints them).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, RecordBatch};
use arrow::datatypes::{DataType, FieldRef};
use floe::{Error, Result};

/// `b` with the text columns `fields` (binary in the table) decoded: hex digits, or for a
/// 16-byte column also a UUID's 8-4-4-4-12 form. The batch's first row is on line
/// `first_line` of the file; a value that does not decode names its column and line.
pub fn bytes_from_text(
    b: &RecordBatch,
    fields: &[FieldRef],
    path: &str,
    first_line: u64,
) -> Result<RecordBatch> {
    crate::text_columns::decode_text_columns(b, fields, path, |target, text| {
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
                            target.name(),
                            first_line + r as u64
                        ),
                    )
                })
        };
        let values = (0..text.len())
            .map(|r| (!text.is_null(r)).then(|| decode(r)).transpose())
            .collect::<Result<Vec<Option<Vec<u8>>>>>()?;
        let column: ArrayRef = match width {
            Some(w) => Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                values.into_iter(),
                w as i32,
            )?),
            None => arrow::compute::cast(&BinaryArray::from_iter(values), target.data_type())?,
        };
        Ok(column)
    })
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
