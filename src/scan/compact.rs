//! Removing a batch's deleted rows in place: the kept runs of each column are moved down over
//! the deleted ones inside the buffers the decoder just filled, instead of being copied into
//! new ones. Scattered deletes (a deletion vector hitting every page) then cost one pass over
//! memory that is still in cache and no allocation. Columns whose buffers are shared, sliced
//! or of another layout go through Arrow's `filter`.

use arrow_array::{make_array, Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow_buffer::{Buffer, MutableBuffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::DataType;
use arrow_select::filter::SlicesIterator;

use crate::error::Result;

/// The rows of `batch` where `keep` is true (null counts as false; one value per row).
pub(crate) fn retain(batch: RecordBatch, keep: &BooleanArray) -> Result<RecordBatch> {
    if keep.len() != batch.num_rows() {
        return Err(crate::error::Error::io(format!(
            "row mask of {} values for a batch of {} rows",
            keep.len(),
            batch.num_rows()
        )));
    }
    let keep = &match keep.null_count() {
        0 => keep.clone(),
        _ => arrow_select::filter::prep_null_mask_filter(keep),
    };
    let runs: Vec<(usize, usize)> = SlicesIterator::new(keep).collect();
    let rows = runs.iter().map(|(s, e)| e - s).sum();
    let (schema, columns, _) = batch.into_parts();
    let columns = columns
        .into_iter()
        .map(|c| retain_column(c, keep, &runs, rows))
        .collect::<Result<Vec<_>>>()?;
    let opts = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema, columns, &opts)?)
}

fn retain_column(
    column: ArrayRef,
    keep: &BooleanArray,
    runs: &[(usize, usize)],
    rows: usize,
) -> Result<ArrayRef> {
    let width = match column.data_type() {
        DataType::Utf8 | DataType::Binary => None,
        DataType::Boolean => return Ok(arrow_select::filter::filter(&column, keep)?),
        t => match t.primitive_width() {
            Some(w) => Some(w),
            None => return Ok(arrow_select::filter::filter(&column, keep)?),
        },
    };
    // Take the buffers out of the column so that, when nothing else holds them, they can be
    // written in place.
    let data = column.to_data();
    drop(column);
    let (data_type, len, nulls, offset, buffers, children) = data.into_parts();
    let mut owned = Vec::with_capacity(buffers.len());
    let mut shared = offset != 0 || !children.is_empty();
    for b in buffers {
        match b.into_mutable() {
            Ok(m) if !shared => owned.push(Ok(m)),
            Ok(m) => owned.push(Err(Buffer::from(m))),
            Err(b) => {
                shared = true;
                owned.push(Err(b));
            }
        }
    }
    if shared || owned.len() != if width.is_some() { 1 } else { 2 } {
        let buffers = owned
            .into_iter()
            .map(|b| b.map(Buffer::from).unwrap_or_else(|b| b))
            .collect();
        let data = ArrayData::builder(data_type)
            .len(len)
            .offset(offset)
            .nulls(nulls)
            .buffers(buffers)
            .child_data(children)
            .build()?;
        return Ok(arrow_select::filter::filter(&make_array(data), keep)?);
    }
    let mut owned: Vec<MutableBuffer> = owned.into_iter().flatten().collect();
    match width {
        Some(w) => {
            compact_fixed(owned[0].as_slice_mut(), w, runs);
            owned[0].truncate(rows * w);
        }
        None => {
            let (o, v) = owned.split_at_mut(1);
            let end = compact_bytes(o[0].typed_data_mut::<i32>(), v[0].as_slice_mut(), runs);
            o[0].truncate((rows + 1) * 4);
            v[0].truncate(end);
        }
    }
    let nulls = match nulls {
        None => None,
        Some(n) => {
            let bits = BooleanArray::new(n.into_inner(), None);
            let kept = arrow_select::filter::filter(&bits, keep)?;
            kept.as_any()
                .downcast_ref::<BooleanArray>()
                .map(|b| NullBuffer::new(b.values().clone()))
                .filter(|n| n.null_count() > 0)
        }
    };
    let builder = ArrayData::builder(data_type)
        .len(rows)
        .nulls(nulls)
        .buffers(owned.into_iter().map(Buffer::from).collect());
    // SAFETY: the column was valid; its kept values were moved whole (variable-length values
    // with their byte runs intact and offsets rebased, still ascending), the buffers were
    // truncated to `rows` values and the null buffer filtered by the same mask. Validating
    // again would cost more than the move itself (every offset and UTF-8 byte).
    let data = unsafe { builder.build_unchecked() };
    debug_assert!(data.validate_full().is_ok());
    Ok(make_array(data))
}

/// Moves the kept runs of `w`-byte values to the front of `values`.
fn compact_fixed(values: &mut [u8], w: usize, runs: &[(usize, usize)]) {
    let mut to = 0;
    for &(start, end) in runs {
        let n = (end - start) * w;
        if start * w != to {
            values.copy_within(start * w..start * w + n, to);
        }
        to += n;
    }
}

/// Moves the kept runs of variable-length values (and their offsets, rebased) to the front;
/// returns the new length of `values`.
fn compact_bytes(offsets: &mut [i32], values: &mut [u8], runs: &[(usize, usize)]) -> usize {
    let mut row = 0;
    let mut to = 0usize;
    for &(start, end) in runs {
        // Both ends are read before this run's writes, which land at or below `end`.
        let (first, last) = (offsets[start] as usize, offsets[end] as usize);
        if first != to {
            values.copy_within(first..last, to);
        }
        let shift = first as i64 - to as i64;
        for i in start..end {
            offsets[row + 1 + (i - start)] = (offsets[i + 1] as i64 - shift) as i32;
        }
        offsets[row] = to as i32;
        row += end - start;
        to += last - first;
    }
    if runs.is_empty() {
        offsets[0] = 0;
    }
    to
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "a",
                Arc::new(Int64Array::from((0..10).collect::<Vec<i64>>())) as ArrayRef,
            ),
            (
                "b",
                Arc::new(Int32Array::from(
                    (0..10)
                        .map(|i| (i % 3 != 0).then_some(i))
                        .collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from(
                    (0..10)
                        .map(|i| (i != 4).then(|| "x".repeat(i as usize)))
                        .collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn retain_matches_filter() {
        for mask in [
            vec![true; 10],
            vec![false; 10],
            (0..10).map(|i| i % 3 != 1).collect::<Vec<_>>(),
            (0..10).map(|i| !(2..=7).contains(&i)).collect(),
            (0..10).map(|i| i == 0).collect(),
            (0..10).map(|i| i == 9).collect(),
        ] {
            // A null in the mask drops its row, as in Arrow's filter.
            let keep = BooleanArray::from(
                mask.iter()
                    .enumerate()
                    .map(|(i, k)| (i != 5).then_some(*k))
                    .collect::<Vec<_>>(),
            );
            let want = arrow_select::filter::filter_record_batch(&batch(), &keep).unwrap();
            let b = batch();
            let before: Vec<*const u8> = b
                .columns()
                .iter()
                .map(|c| c.to_data().buffers()[0].as_ptr())
                .collect();
            let got = retain(b, &keep).unwrap();
            assert_eq!(got, want, "mask {keep:?}");
            // Uniquely owned buffers were compacted where they lie.
            let after: Vec<*const u8> = got
                .columns()
                .iter()
                .map(|c| c.to_data().buffers()[0].as_ptr())
                .collect();
            assert_eq!(before, after);
            // A shared batch (buffers not uniquely owned) takes the copying path.
            let shared = batch();
            let got = retain(shared.clone(), &keep).unwrap();
            assert_eq!(got, want);
            assert_eq!(shared, batch());
        }
    }
}
