//! A partition's pending rows, gathered by index from the batches that carry them: each row
//! is copied once, straight into column buffers that grow until the partition is written,
//! instead of into one small batch per incoming batch (which costs an allocation per column
//! and a Parquet write call per piece). Fixed-width and variable-length columns are gathered
//! here; other layouts (booleans, nested, fixed-size binary) go through Arrow's `take`.

use arrow_array::{make_array, Array, ArrayRef, OffsetSizeTrait, RecordBatch, UInt32Array};
use arrow_buffer::{ArrowNativeType, Buffer, MutableBuffer, NullBufferBuilder};
use arrow_data::ArrayData;
use arrow_schema::{DataType, SchemaRef};

use crate::error::{Error, Result};

/// Pending rows of one partition, column by column.
pub(crate) struct Gather {
    schema: SchemaRef,
    columns: Vec<Column>,
    rows: usize,
}

/// One column's pending values. The buffered variants remember how many bytes the last
/// finished batch needed, to reserve that much at once for the next one.
enum Column {
    /// Values of `width` bytes each.
    Fixed {
        width: usize,
        values: MutableBuffer,
        nulls: NullBufferBuilder,
        hint: usize,
    },
    /// Variable-length values with `i32` (`large: false`) or `i64` offsets.
    Bytes {
        large: bool,
        offsets: MutableBuffer,
        values: MutableBuffer,
        nulls: NullBufferBuilder,
        hint: (usize, usize),
    },
    /// Any other layout: pieces copied by `take`, concatenated when finished.
    Pieces(Vec<ArrayRef>),
}

impl Column {
    fn new(data_type: &DataType) -> Self {
        let nulls = NullBufferBuilder::new(0);
        match data_type {
            DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary => {
                let large = matches!(data_type, DataType::LargeUtf8 | DataType::LargeBinary);
                Column::Bytes {
                    large,
                    offsets: MutableBuffer::new(0),
                    values: MutableBuffer::new(0),
                    nulls,
                    hint: (0, 0),
                }
            }
            DataType::Boolean => Column::Pieces(Vec::new()),
            t => match t.primitive_width() {
                Some(width) => Column::Fixed {
                    width,
                    values: MutableBuffer::new(0),
                    nulls,
                    hint: 0,
                },
                None => Column::Pieces(Vec::new()),
            },
        }
    }

    /// Appends the values of `array` (whose data is `data`) at `rows`.
    fn append(
        &mut self,
        array: &ArrayRef,
        data: &ArrayData,
        rows: &[u32],
        pool: &mut BufferPool,
    ) -> Result<()> {
        match self {
            Column::Fixed {
                width,
                values,
                nulls,
                hint,
            } => {
                if values.capacity() == 0 {
                    *values = pool.take(*hint);
                }
                gather_fixed(data, *width, rows, values);
                gather_nulls(data, rows, nulls);
            }
            Column::Bytes {
                large,
                offsets,
                values,
                nulls,
                hint,
            } => {
                if offsets.capacity() == 0 {
                    *offsets = pool.take(hint.0);
                    *values = pool.take(hint.1);
                }
                if *large {
                    gather_bytes::<i64>(data, rows, offsets, values);
                } else {
                    gather_bytes::<i32>(data, rows, offsets, values);
                }
                gather_nulls(data, rows, nulls);
            }
            Column::Pieces(pieces) => {
                let idx = UInt32Array::from(rows.to_vec());
                pieces.push(arrow_select::take::take(array.as_ref(), &idx, None)?);
            }
        }
        Ok(())
    }

    /// Bytes the pending values fill.
    fn bytes(&self) -> usize {
        match self {
            Column::Fixed { values, nulls, .. } => values.len() + nulls.allocated_size(),
            Column::Bytes {
                offsets,
                values,
                nulls,
                ..
            } => offsets.len() + values.len() + nulls.allocated_size(),
            Column::Pieces(p) => p.iter().map(|a| a.get_array_memory_size()).sum(),
        }
    }
}

impl Gather {
    /// The schema of the rows gathered.
    pub(super) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Empty buffers for batches of `schema`.
    pub(crate) fn new(schema: SchemaRef) -> Self {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::new(f.data_type()))
            .collect();
        Self {
            schema,
            columns,
            rows: 0,
        }
    }

    /// Rows pending.
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes the pending rows fill.
    pub(crate) fn bytes(&self) -> usize {
        self.columns.iter().map(Column::bytes).sum()
    }

    /// Whether the rows of `batch` at `rows` can be appended: `false` when a column with
    /// 32-bit offsets could not address its values any more (past 2 GiB): finish first.
    /// Rows out of range or a batch of other columns are an error.
    pub(crate) fn fits(&self, batch: &RecordBatch, rows: &[u32]) -> Result<bool> {
        if batch.num_columns() != self.columns.len() {
            return Err(Error::io(format!(
                "gathering rows of a batch of {} columns into {} columns",
                batch.num_columns(),
                self.columns.len()
            )));
        }
        if let Some(&r) = rows.iter().max() {
            if r as usize >= batch.num_rows() {
                return Err(Error::io(format!(
                    "row {r} gathered from a batch of {} rows",
                    batch.num_rows()
                )));
            }
        }
        for (col, array) in self.columns.iter().zip(batch.columns()) {
            if let Column::Bytes {
                large: false,
                values,
                ..
            } = col
            {
                let data = array.to_data();
                if data.is_empty() {
                    continue;
                }
                let offsets = offsets_from::<i32>(&data);
                // The whole batch's values bound the rows' values: exact sum only if needed.
                let all = (offsets[data.len()] - offsets[0]) as usize;
                if values.len() + all <= i32::MAX as usize {
                    continue;
                }
                let incoming: usize = rows
                    .iter()
                    .map(|&r| (offsets[r as usize + 1] - offsets[r as usize]) as usize)
                    .sum();
                if values.len() + incoming > i32::MAX as usize {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Appends the rows of `batch` at `rows`, in that order; `false` (nothing appended) when
    /// they do not [`fit`](Self::fits).
    #[cfg(test)]
    pub(crate) fn append(&mut self, batch: &RecordBatch, rows: &[u32]) -> Result<bool> {
        if !self.fits(batch, rows)? {
            return Ok(false);
        }
        append_all(batch, &mut [(self, rows)], &mut BufferPool::default())?;
        Ok(true)
    }

    /// The pending rows as one batch (`None` when there are none); the buffers start empty
    /// again.
    pub(crate) fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows == 0 {
            return Ok(None);
        }
        let rows = std::mem::take(&mut self.rows);
        let mut arrays = Vec::with_capacity(self.columns.len());
        for (col, field) in self.columns.iter_mut().zip(self.schema.fields()) {
            let data_type = field.data_type().clone();
            let array = match col {
                Column::Fixed {
                    values,
                    nulls,
                    hint,
                    ..
                } => {
                    *hint = values.len();
                    let values = std::mem::replace(values, MutableBuffer::new(0));
                    build(data_type, rows, vec![values.into()], nulls.finish())
                }
                Column::Bytes {
                    offsets,
                    values,
                    nulls,
                    hint,
                    ..
                } => {
                    *hint = (offsets.len(), values.len());
                    let offsets = std::mem::replace(offsets, MutableBuffer::new(0));
                    let values = std::mem::replace(values, MutableBuffer::new(0));
                    build(
                        data_type,
                        rows,
                        vec![offsets.into(), values.into()],
                        nulls.finish(),
                    )
                }
                Column::Pieces(pieces) => {
                    let pieces = std::mem::take(pieces);
                    let refs: Vec<&dyn Array> = pieces.iter().map(|a| a.as_ref()).collect();
                    arrow_select::concat::concat(&refs)?
                }
            };
            arrays.push(array);
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), arrays)?))
    }
}

/// Appends to each gather the rows of `batch` it names, column by column across all of them,
/// so that each column of `batch` is read while it is still in cache (a row-by-row pass over
/// every column per gather would read the whole batch from memory once per gather). Each
/// gather's rows must [`fit`](Gather::fits).
pub(crate) fn append_all(
    batch: &RecordBatch,
    targets: &mut [(&mut Gather, &[u32])],
    pool: &mut BufferPool,
) -> Result<()> {
    for (g, rows) in targets.iter() {
        if !g.fits(batch, rows)? {
            return Err(Error::io(
                "gathered string values would pass 2 GiB: finish the batch first",
            ));
        }
    }
    for (c, array) in batch.columns().iter().enumerate() {
        let data = array.to_data();
        for (g, rows) in targets.iter_mut() {
            g.columns[c].append(array, &data, rows, pool)?;
        }
    }
    for (g, rows) in targets.iter_mut() {
        g.rows += rows.len();
    }
    Ok(())
}

/// Bytes of emptied buffers a pool keeps at most.
const POOL_BYTES: usize = 32 * 1024 * 1024;

/// Buffers of batches already written, kept for the next gathers: a lane in its steady state
/// then reuses memory it has touched instead of mapping (and faulting in) fresh pages for
/// every partition it writes out.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Vec<MutableBuffer>,
    bytes: usize,
    /// Whether anything was ever taken (a lane that gathers nothing keeps nothing).
    used: bool,
}

impl BufferPool {
    /// An empty buffer of at least `capacity` bytes (plus an eighth of headroom for a
    /// slightly larger next round): the smallest pooled one that is large enough, else new.
    fn take(&mut self, capacity: usize) -> MutableBuffer {
        self.used = true;
        let wanted = capacity + capacity / 8;
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= wanted)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let b = self.free.swap_remove(i);
                self.bytes -= b.capacity();
                b
            }
            None => MutableBuffer::new(wanted),
        }
    }

    /// Keeps the value and offset buffers of `batch` that nothing else holds (while the pool
    /// has room, and once buffers were taken from it); the rest is freed.
    pub(crate) fn recycle(&mut self, batch: RecordBatch) {
        if !self.used {
            return;
        }
        let (_, columns, _) = batch.into_parts();
        for column in columns {
            let data = column.to_data();
            drop(column);
            let (_, _, _, _, buffers, _) = data.into_parts();
            for b in buffers {
                let Ok(mut m) = b.into_mutable() else {
                    continue;
                };
                // Arrow's own allocations only (64-byte aligned: fit for any value type).
                if m.capacity() == 0 || m.as_ptr().align_offset(64) != 0 {
                    continue;
                }
                // When full, smaller buffers make room for a larger one.
                while self.bytes + m.capacity() > POOL_BYTES {
                    let smallest = self
                        .free
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, b)| b.capacity())
                        .filter(|(_, b)| b.capacity() < m.capacity())
                        .map(|(i, _)| i);
                    let Some(i) = smallest else {
                        break;
                    };
                    self.bytes -= self.free.swap_remove(i).capacity();
                }
                if self.bytes + m.capacity() > POOL_BYTES {
                    continue;
                }
                m.clear();
                self.bytes += m.capacity();
                self.free.push(m);
            }
        }
    }
}

/// An array from buffers this module filled.
fn build(
    data_type: DataType,
    len: usize,
    buffers: Vec<Buffer>,
    nulls: Option<arrow_buffer::NullBuffer>,
) -> ArrayRef {
    let builder = ArrayData::builder(data_type)
        .len(len)
        .nulls(nulls)
        .buffers(buffers);
    // SAFETY: every value was copied whole from a valid array of the same type: fixed-width
    // values byte for byte, variable-length values with offsets that start at 0 and ascend by
    // each value's length, and one validity bit per row. Validating again would cost more
    // than the copy (every offset and UTF-8 byte).
    let data = unsafe { builder.build_unchecked() };
    debug_assert!(data.validate_full().is_ok());
    make_array(data)
}

/// The offsets of a variable-length array, from its first row.
fn offsets_from<O: ArrowNativeType>(data: &ArrayData) -> &[O] {
    &data.buffers()[0].typed_data::<O>()[data.offset()..]
}

fn gather_fixed(data: &ArrayData, width: usize, rows: &[u32], out: &mut MutableBuffer) {
    fn typed<T: ArrowNativeType>(data: &ArrayData, rows: &[u32], out: &mut MutableBuffer) {
        let src = &data.buffers()[0].typed_data::<T>()[data.offset()..];
        out.extend(rows.iter().map(|&r| src[r as usize]));
    }
    match width {
        1 => typed::<u8>(data, rows, out),
        2 => typed::<u16>(data, rows, out),
        4 => typed::<u32>(data, rows, out),
        8 => typed::<u64>(data, rows, out),
        16 => typed::<i128>(data, rows, out),
        w => {
            let src = &data.buffers()[0].as_slice()[data.offset() * w..];
            out.reserve(rows.len() * w);
            for &r in rows {
                let at = r as usize * w;
                out.extend_from_slice(&src[at..at + w]);
            }
        }
    }
}

fn gather_bytes<O: OffsetSizeTrait>(
    data: &ArrayData,
    rows: &[u32],
    offsets: &mut MutableBuffer,
    values: &mut MutableBuffer,
) {
    if rows.is_empty() {
        return;
    }
    let src_offsets = offsets_from::<O>(data);
    let src = data.buffers()[1].as_slice();
    if offsets.is_empty() {
        offsets.push(O::zero());
    }
    // Reserved from the batch's average value size (the buffers grow if that is short).
    let all = (src_offsets[data.len()] - src_offsets[0]).as_usize();
    values.reserve(all / data.len().max(1) * rows.len());
    offsets.reserve(rows.len() * std::mem::size_of::<O>());
    for &r in rows {
        let (start, end) = (
            src_offsets[r as usize].as_usize(),
            src_offsets[r as usize + 1].as_usize(),
        );
        let len = end - start;
        match src[start..].first_chunk::<32>() {
            // A short value is copied as a whole 32-byte block (one move instead of a
            // `memcpy` call) and the buffer cut back to its end.
            Some(block) if len <= 32 => {
                let keep = values.len() + len;
                values.extend_from_slice(block);
                values.truncate(keep);
            }
            _ => values.extend_from_slice(&src[start..end]),
        }
        // Cannot overflow: `Gather::fits` checked that 32-bit offsets can address the values.
        offsets.push(O::usize_as(values.len()));
    }
}

fn gather_nulls(data: &ArrayData, rows: &[u32], out: &mut NullBufferBuilder) {
    match data.nulls() {
        None => out.append_n_non_nulls(rows.len()),
        Some(n) => {
            for &r in rows {
                out.append(n.is_valid(r as usize));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        BooleanArray, Decimal128Array, Int32Array, Int64Array, LargeBinaryArray, ListArray,
        StringArray,
    };
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(
            (0..6).map(|i| (i % 3 != 0).then(|| vec![Some(i), None])),
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("d", DataType::Int32, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::LargeBinary, true),
            Field::new("f", DataType::Boolean, true),
            Field::new("m", DataType::Decimal128(10, 2), true),
            Field::new("l", list.data_type().clone(), true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    None,
                    Some(6),
                ])),
                Arc::new(Int32Array::from(vec![10, 11, 12, 13, 14, 15])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("bb"),
                    None,
                    Some(""),
                    Some("eeeee"),
                    Some("ff"),
                ])),
                Arc::new(LargeBinaryArray::from(vec![
                    Some(&b"x"[..]),
                    None,
                    Some(&b"yz"[..]),
                    Some(&b""[..]),
                    Some(&b"w"[..]),
                    None,
                ])),
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    None,
                    Some(false),
                    Some(true),
                    Some(false),
                    None,
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(100), None, Some(-5), Some(7), Some(8), None])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(list),
            ],
        )
        .unwrap()
    }

    #[test]
    fn gathered_rows_equal_take() {
        let b = batch();
        let mut g = Gather::new(b.schema());
        // From the whole batch and from a slice (non-zero offsets), in any order.
        let sliced = b.slice(1, 5);
        assert!(g.append(&b, &[5, 0, 3]).unwrap());
        assert!(g.append(&sliced, &[4, 1, 0]).unwrap());
        assert_eq!(g.rows(), 6);
        let got = g.finish().unwrap().unwrap();
        let want = arrow_select::concat::concat_batches(
            &b.schema(),
            &[
                arrow_select::take::take_record_batch(&b, &UInt32Array::from(vec![5, 0, 3]))
                    .unwrap(),
                arrow_select::take::take_record_batch(&sliced, &UInt32Array::from(vec![4, 1, 0]))
                    .unwrap(),
            ],
        )
        .unwrap();
        assert_eq!(got, want);
        for c in got.columns() {
            c.to_data().validate_full().unwrap();
        }
        // Empty again, and reusable.
        assert_eq!(g.rows(), 0);
        assert!(g.finish().unwrap().is_none());
        assert!(g.append(&b, &[2]).unwrap());
        let again = g.finish().unwrap().unwrap();
        assert_eq!(again, b.slice(2, 1));
    }

    #[test]
    fn bad_rows_are_refused() {
        let b = batch();
        let mut g = Gather::new(b.schema());
        assert!(g.append(&b, &[6]).is_err());
        assert!(g.append(&b.project(&[0]).unwrap(), &[0]).is_err());
        assert_eq!(g.rows(), 0);
    }

    #[test]
    fn pooled_buffers_are_reused_and_rows_stay_right() {
        let b = batch();
        let mut pool = BufferPool::default();
        let mut g = Gather::new(b.schema());
        let mut rounds = Vec::new();
        for rows in [&[0u32, 1, 2, 3, 4, 5][..], &[5, 4, 1][..]] {
            append_all(&b, &mut [(&mut g, rows)], &mut pool).unwrap();
            let got = g.finish().unwrap().unwrap();
            let want = arrow_select::take::take_record_batch(&b, &UInt32Array::from(rows.to_vec()))
                .unwrap();
            assert_eq!(got, want);
            pool.recycle(got);
            rounds.push(pool.bytes);
        }
        // The first round's buffers went back to the pool and the second round took them.
        assert!(rounds[0] > 0);
        assert!(rounds.iter().all(|b| *b <= POOL_BYTES));
        let before = pool.bytes;
        let reused = pool.take(8);
        assert!(reused.capacity() >= 9);
        assert_eq!(pool.bytes, before - reused.capacity());
    }
}
