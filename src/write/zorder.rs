//! Z-order: rows ordered by the interleaved bits of several columns' order-preserving bytes
//! (Iceberg Java's `ZOrderByteUtils`, as Spark's `rewrite_data_files` z-order uses them), so
//! that files cluster on all the columns at once.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    TimestampNanosecondType,
};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

use crate::error::{Error, Result};

/// Bytes each column contributes (Java's `PRIMITIVE_BUFFER_SIZE`).
const WIDTH: usize = 8;

/// The indexes in `schema` of the z-order columns `columns` (top-level, of a type z-order
/// takes), or an error naming the column and table `table`.
pub(crate) fn zorder_columns(
    schema: &arrow_schema::Schema,
    columns: &[String],
    table: &str,
) -> Result<Vec<usize>> {
    if columns.is_empty() {
        return Err(Error::invalid("z-order needs at least one column"));
    }
    columns
        .iter()
        .map(|c| {
            let i = schema.index_of(c).map_err(|_| {
                Error::invalid(format!(
                    "z-order column '{c}' is not a top-level column of table {table}"
                ))
            })?;
            let t = schema.field(i).data_type();
            if !supported(t) {
                return Err(Error::unsupported(format!(
                    "z-order column '{c}' of table {table} is {t}: z-order takes numbers, dates, \
                     timestamps, strings, binary and booleans"
                )));
            }
            Ok(i)
        })
        .collect()
}

/// Whether a column of type `t` can be z-ordered.
fn supported(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Date32
            | DataType::Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, _)
            | DataType::Utf8
            | DataType::Binary
            | DataType::Boolean
    )
}

/// A whole number as 8 bytes that sort (unsigned, big-endian) as the numbers do.
fn whole(v: i64) -> [u8; WIDTH] {
    (v ^ i64::MIN).to_be_bytes()
}

/// A floating point number as 8 bytes that sort as the numbers do.
fn floating(v: f64) -> [u8; WIDTH] {
    let bits = v.to_bits() as i64;
    (bits ^ ((bits >> 63) | i64::MIN)).to_be_bytes()
}

/// The first 8 bytes, zero-filled.
fn prefix(v: &[u8]) -> [u8; WIDTH] {
    let mut out = [0u8; WIDTH];
    let n = v.len().min(WIDTH);
    out[..n].copy_from_slice(&v[..n]);
    out
}

/// Row `r` of `c` as its order-preserving bytes (NULL: zeros, first).
fn ordered(c: &ArrayRef, r: usize) -> Result<[u8; WIDTH]> {
    if c.is_null(r) {
        return Ok([0; WIDTH]);
    }
    Ok(match c.data_type() {
        DataType::Int32 => whole(i64::from(c.as_primitive::<Int32Type>().value(r))),
        DataType::Int64 => whole(c.as_primitive::<Int64Type>().value(r)),
        DataType::Date32 => whole(i64::from(c.as_primitive::<Date32Type>().value(r))),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            whole(c.as_primitive::<TimestampMicrosecondType>().value(r))
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            whole(c.as_primitive::<TimestampNanosecondType>().value(r))
        }
        DataType::Float32 => floating(f64::from(c.as_primitive::<Float32Type>().value(r))),
        DataType::Float64 => floating(c.as_primitive::<Float64Type>().value(r)),
        DataType::Utf8 => prefix(c.as_string::<i32>().value(r).as_bytes()),
        DataType::Binary => prefix(c.as_binary::<i32>().value(r)),
        DataType::Boolean => whole(i64::from(c.as_boolean().value(r))),
        t => {
            return Err(Error::unsupported(format!(
                "z-order on a column of type {t} is not supported (numbers, dates, timestamps, \
                 strings, binary, booleans)"
            )))
        }
    })
}

/// Interleaves the bits of `columns` (each `WIDTH` bytes), most significant first, one bit of
/// each column in turn (Java's `interleaveBits` on equal-width inputs).
fn interleave(columns: &[[u8; WIDTH]], out: &mut Vec<u8>) {
    let n = columns.len();
    let start = out.len();
    out.resize(start + n * WIDTH, 0);
    for bit in 0..WIDTH * 8 {
        for (c, col) in columns.iter().enumerate() {
            let set = col[bit / 8] >> (7 - bit % 8) & 1;
            let k = bit * n + c;
            out[start + k / 8] |= set << (7 - k % 8);
        }
    }
}

/// The z-value of each row of `batch` over the columns at `columns`.
pub(crate) fn zorder_values(batch: &RecordBatch, columns: &[usize]) -> Result<BinaryArray> {
    let cols: Vec<&ArrayRef> = columns.iter().map(|&i| batch.column(i)).collect();
    let mut data = Vec::with_capacity(batch.num_rows() * cols.len() * WIDTH);
    let mut offsets = Vec::with_capacity(batch.num_rows() + 1);
    offsets.push(0i32);
    let mut keys = Vec::with_capacity(cols.len());
    for r in 0..batch.num_rows() {
        keys.clear();
        for c in &cols {
            keys.push(ordered(c, r)?);
        }
        interleave(&keys, &mut data);
        offsets.push(
            i32::try_from(data.len())
                .map_err(|_| Error::unsupported("z-order: a batch too large to order at once"))?,
        );
    }
    Ok(BinaryArray::new(
        arrow_buffer::OffsetBuffer::new(offsets.into()),
        data.into(),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};

    use super::*;

    /// `batch` ordered by the z-value of the columns at `columns`.
    fn sort_by_zorder(batch: &RecordBatch, columns: &[usize]) -> Result<RecordBatch> {
        let z = zorder_values(batch, columns)?;
        let idx = arrow_ord::sort::sort_to_indices(&z, None, None)?;
        Ok(arrow_select::take::take_record_batch(batch, &idx)?)
    }

    #[test]
    fn ordered_bytes_sort_as_the_values() {
        let mut v: Vec<i64> = vec![-5, 3, i64::MIN, 0, i64::MAX, -1];
        let mut by_bytes = v.clone();
        by_bytes.sort_by_key(|x| whole(*x));
        v.sort_unstable();
        assert_eq!(by_bytes, v);
        let mut f = vec![-2.5f64, 0.0, -0.0, 1e300, -1e300, 3.25];
        let mut fb = f.clone();
        fb.sort_by_key(|x| floating(*x));
        f.sort_by(|a, b| a.total_cmp(b));
        assert_eq!(fb, f);
    }

    /// Java's interleaving of two one-byte-wide inputs 0b1111_0000 and 0b0000_1111 is
    /// 0b1010_1010 0b0101_0101; on 8-byte inputs each output byte takes 4 bits of each.
    #[test]
    fn bits_alternate_between_columns() {
        let mut a = [0u8; WIDTH];
        let mut b = [0u8; WIDTH];
        a[0] = 0b1111_0000;
        b[0] = 0b0000_1111;
        let mut out = Vec::new();
        interleave(&[a, b], &mut out);
        assert_eq!(out.len(), 16);
        assert_eq!(&out[..2], &[0b1010_1010, 0b0101_0101]);
        assert!(out[2..].iter().all(|x| *x == 0));
    }

    #[test]
    fn a_grid_is_ordered_in_z_curve_order() {
        // The 2x2 grid of (x, y) in {0, 1}: z order (0,0), (0,1), (1,0), (1,1) by (x first).
        let x = Int64Array::from(vec![1, 0, 1, 0]);
        let y = Int64Array::from(vec![1, 1, 0, 0]);
        let s = StringArray::from(vec!["d", "b", "c", "a"]);
        let b = RecordBatch::try_from_iter([
            ("x", Arc::new(x) as ArrayRef),
            ("y", Arc::new(y) as _),
            ("s", Arc::new(s) as _),
        ])
        .unwrap();
        let sorted = sort_by_zorder(&b, &[0, 1]).unwrap();
        let s = sorted.column(2).as_string::<i32>();
        assert_eq!(
            (0..4).map(|i| s.value(i)).collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
    }
}
