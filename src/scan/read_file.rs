//! Reading one data file with its deletes applied: deleted positions are skipped (a
//! `RowSelection` when they come in long runs, else removed from the decoded batches in
//! place), the row filter runs in the decoder when it reads fewer columns than the scan
//! returns (else on the decoded rows, like equality deletes), and each surviving row's
//! position in the file can be returned with it (what row-level writes need).

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, UInt64Array};
use arrow_schema::SchemaRef as ArrowSchemaRef;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::arrow::ArrowReader;
use iceberg::scan::FileScanTask;
use roaring::RoaringTreemap;

use crate::spec::reserved::{LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, ROW_ID_FIELD_ID};

use super::deletes::FileDeletes;
use super::direct;
use super::ranges::{merge_ranges, runs};
use crate::error::{Error, Result};
use crate::expr::BoundExpr;
use crate::storage::Storage;

/// Rows of a file with their positions (`None` unless asked for).
pub(crate) type PositionedBatch = (RecordBatch, Option<UInt64Array>);

/// What to read from one file.
pub(super) struct FileRead {
    pub storage: Storage,
    pub reader: ArrowReader,
    /// Projection: the output columns first, then those only the deletes or filter need.
    pub task: FileScanTask,
    /// The Arrow schema of `task.project_field_ids` (for the direct path).
    pub target: ArrowSchemaRef,
    /// How many leading columns are returned.
    pub output_columns: usize,
    pub deletes: FileDeletes,
    /// The row filter, bound to `target`.
    pub filter: Option<BoundExpr>,
    pub with_positions: bool,
    /// Append `_row_id` and `_last_updated_sequence_number`: (first row id, data sequence).
    pub lineage: Option<(Option<i64>, i64)>,
    pub batch_size: usize,
    pub table: String,
    /// Row groups that cannot hold a row the filter keeps are not read.
    pub row_groups: Option<Arc<super::RowGroupFilter>>,
    /// The file is decoded in up to this many parts at once when no positions are
    /// wanted (see [`direct::DirectOptions::parts`]).
    pub parts: usize,
}

/// The row lineage columns as Arrow fields (nullable longs with their reserved field ids).
pub(crate) fn lineage_fields() -> [arrow_schema::FieldRef; 2] {
    let f = |name: &str, id: i32| {
        Arc::new(
            arrow_schema::Field::new(name, arrow_schema::DataType::Int64, true).with_metadata(
                [(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    id.to_string(),
                )]
                .into(),
            ),
        )
    };
    [
        f("_row_id", ROW_ID_FIELD_ID),
        f(
            "_last_updated_sequence_number",
            LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID,
        ),
    ]
}

/// Below this average run of kept rows between deletes, deleted rows are masked out after
/// decoding instead of skipped by a row selection.
const MIN_SELECTED_RUN: u64 = 4096;

/// Runs of consecutive deleted positions.
fn delete_runs(d: &RoaringTreemap) -> u64 {
    let mut runs = 0;
    let mut last = None;
    for p in d.iter() {
        if last.is_none_or(|l: u64| l + 1 != p) {
            runs += 1;
        }
        last = Some(p);
    }
    runs
}

/// Tracks the file positions of the rows a reader returns, in order.
struct PositionCursor {
    next: u64,
    /// Position ranges `[start, end)` the reader leaves out (pruned row groups, and deleted
    /// rows when they are skipped undecoded), ascending and disjoint, and how many lie before
    /// `next`.
    absent: Vec<(u64, u64)>,
    passed: usize,
    /// Deleted positions still in the decoded rows (to mask), ascending, and how many lie
    /// before `next`.
    masked: Vec<u64>,
    seen: usize,
}

impl PositionCursor {
    /// `deleted` positions (skipped undecoded when `skipped`, else masked after decoding) and
    /// `pruned` ranges the reader left out.
    fn new(deleted: Option<&RoaringTreemap>, skipped: bool, pruned: Vec<(u64, u64)>) -> Self {
        let (absent, masked) = match deleted {
            Some(d) if skipped => (merge_ranges(runs(d), pruned), Vec::new()),
            Some(d) => (pruned, d.iter().collect()),
            None => (pruned, Vec::new()),
        };
        Self {
            next: 0,
            absent,
            passed: 0,
            masked,
            seen: 0,
        }
    }

    /// Positions of the next `n` rows, and a keep-mask when deleted rows are still in them.
    fn advance(&mut self, n: usize, want: bool) -> (Option<Vec<u64>>, Option<BooleanArray>) {
        if self.absent.is_empty() && self.masked.is_empty() && !want {
            self.next += n as u64;
            return (None, None);
        }
        while self
            .absent
            .get(self.passed)
            .is_some_and(|r| r.1 <= self.next)
        {
            self.passed += 1;
        }
        let end = self.next + n as u64;
        if self.absent.get(self.passed).is_none_or(|r| r.0 >= end) {
            // The rows are positions `next..end`: a deleted one unsets its bit (no per-row
            // work, which scattered deletes on a plain scan would otherwise pay).
            let start = std::mem::replace(&mut self.next, end);
            while self.masked.get(self.seen).is_some_and(|d| *d < start) {
                self.seen += 1;
            }
            let first = self.seen;
            while self.masked.get(self.seen).is_some_and(|d| *d < end) {
                self.seen += 1;
            }
            let keep = (self.seen > first).then(|| {
                let mut b = arrow_buffer::BooleanBufferBuilder::new(n);
                b.append_n(n, true);
                for &d in &self.masked[first..self.seen] {
                    b.set_bit((d - start) as usize, false);
                }
                BooleanArray::new(b.finish(), None)
            });
            return (want.then(|| (start..end).collect()), keep);
        }
        let mut out: Vec<u64> = Vec::with_capacity(n);
        while out.len() < n {
            while self
                .absent
                .get(self.passed)
                .is_some_and(|r| r.1 <= self.next)
            {
                self.passed += 1;
            }
            let stop = match self.absent.get(self.passed) {
                Some(&(start, end)) if start <= self.next => {
                    self.next = end;
                    continue;
                }
                Some(&(start, _)) => start,
                None => u64::MAX,
            };
            let take = (stop - self.next).min((n - out.len()) as u64);
            out.extend(self.next..self.next + take);
            self.next += take;
        }
        let mut keep = None;
        if self
            .masked
            .get(self.seen)
            .is_some_and(|d| Some(d) <= out.last())
        {
            let mut b = arrow_buffer::BooleanBufferBuilder::new(n);
            for &p in &out {
                while self.masked.get(self.seen).is_some_and(|d| *d < p) {
                    self.seen += 1;
                }
                let deleted = self.masked.get(self.seen) == Some(&p);
                b.append(!deleted);
            }
            keep = Some(BooleanArray::new(b.finish(), None));
        }
        (want.then_some(out), keep)
    }
}

fn and(a: Option<BooleanArray>, b: Option<BooleanArray>) -> Result<Option<BooleanArray>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(arrow_arith::boolean::and(&a, &b)?),
        (a, b) => a.or(b),
    })
}

/// Where the positions of a reader's rows come from.
enum Positions {
    /// The reader returns every row outside the absent ranges, in order.
    Cursor(PositionCursor),
    /// The reader filtered rows while decoding and returns their positions (when wanted);
    /// deleted rows it did not skip are masked by position.
    Given { masked: Option<Arc<RoaringTreemap>> },
}

impl Positions {
    /// The positions of a reader that leaves out the `pruned` ranges, and the `deleted` rows
    /// when `skipped` (else they are masked); `filtered`: it filters while decoding and
    /// returns positions itself.
    fn of_reader(
        deleted: Option<Arc<RoaringTreemap>>,
        skipped: bool,
        pruned: &[(u64, u64)],
        filtered: bool,
    ) -> Self {
        match filtered {
            true => Positions::Given {
                masked: deleted.filter(|_| !skipped),
            },
            false => Positions::Cursor(PositionCursor::new(
                deleted.as_deref(),
                skipped,
                pruned.to_vec(),
            )),
        }
    }

    /// The positions of a batch's rows (when wanted) and a keep-mask when deleted rows are
    /// still in it.
    fn next(
        &mut self,
        rows: usize,
        given: Option<UInt64Array>,
        want: bool,
    ) -> Result<(Option<UInt64Array>, Option<BooleanArray>)> {
        match self {
            Positions::Cursor(c) => {
                let (p, keep) = c.advance(rows, want);
                Ok((p.map(UInt64Array::from), keep))
            }
            Positions::Given { masked } => {
                let missing = || Error::io("the reader returned no row positions");
                let keep = match masked {
                    Some(d) => {
                        let p = given.as_ref().ok_or_else(missing)?;
                        Some(p.values().iter().map(|p| Some(!d.contains(*p))).collect())
                    }
                    None => None,
                };
                match want {
                    true => Ok((Some(given.ok_or_else(missing)?), keep)),
                    false => Ok((None, keep)),
                }
            }
        }
    }
}

impl FileRead {
    fn finish(
        &self,
        (batch, given): direct::Positioned,
        positions: &mut Positions,
    ) -> Result<Option<PositionedBatch>> {
        let filtered = matches!(positions, Positions::Given { .. });
        let (positions, keep) = positions.next(batch.num_rows(), given, self.with_positions)?;
        let mut keep = and(keep, self.deletes.equality_survivors(&batch)?)?;
        if let (Some(f), false) = (&self.filter, filtered) {
            keep = and(keep, Some(f.evaluate_predicate(&batch)?))?;
        }
        let (batch, positions) = match keep {
            Some(k) if k.true_count() < k.len() => (
                super::compact::retain(batch, &k)?,
                match positions {
                    Some(p) => Some(
                        arrow_select::filter::filter(&p, &k)?
                            .as_any()
                            .downcast_ref::<UInt64Array>()
                            .cloned()
                            .ok_or_else(|| Error::io("filtering positions"))?,
                    ),
                    None => None,
                },
            ),
            _ => (batch, positions),
        };
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let lineage = match (self.lineage, &positions) {
            (Some((first_row_id, seq)), Some(pos)) => {
                Some(self.lineage_columns(&batch, pos, first_row_id, seq)?)
            }
            _ => None,
        };
        let batch = if batch.num_columns() > self.output_columns {
            batch.project(&(0..self.output_columns).collect::<Vec<_>>())?
        } else {
            batch
        };
        let batch = match lineage {
            None => batch,
            Some(cols) => {
                let mut fields: Vec<arrow_schema::FieldRef> =
                    batch.schema().fields().iter().cloned().collect();
                fields.extend(lineage_fields());
                let mut columns = batch.columns().to_vec();
                columns.extend(cols);
                RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)?
            }
        };
        Ok(Some((batch, positions)))
    }

    /// `_row_id` and `_last_updated_sequence_number` of the rows: stored values where the
    /// file has them, else inherited (first row id + position, the file's data sequence).
    fn lineage_columns(
        &self,
        batch: &RecordBatch,
        pos: &UInt64Array,
        first_row_id: Option<i64>,
        seq: i64,
    ) -> Result<[arrow_array::ArrayRef; 2]> {
        use arrow_array::Int64Array;
        let stored = |id: i32| {
            crate::expr::column_by_field_id(batch, id)
                .ok()
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned())
        };
        let (ids, seqs) = (
            stored(ROW_ID_FIELD_ID),
            stored(LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID),
        );
        let row_id: Int64Array = (0..batch.num_rows())
            .map(|i| match &ids {
                Some(a) if a.is_valid(i) => Some(a.value(i)),
                _ => first_row_id.map(|f| f + pos.value(i) as i64),
            })
            .collect();
        let last: Int64Array = (0..batch.num_rows())
            .map(|i| match &seqs {
                Some(a) if a.is_valid(i) => Some(a.value(i)),
                _ => Some(seq),
            })
            .collect();
        Ok([Arc::new(row_id), Arc::new(last)])
    }

    /// Streams the file's surviving rows.
    pub(super) async fn read(self) -> Result<BoxStream<'static, Result<PositionedBatch>>> {
        let path = self.task.data_file_path.clone();
        let deleted = self
            .deletes
            .positions
            .clone()
            .filter(|d| !d.is_empty())
            .map(Arc::new);
        // Long runs of deleted rows are skipped undecoded (a row selection); scattered ones
        // are moved out of the decoded batches in place (`compact`) on the thread that
        // decoded them, while they are in its cache: many tiny selections decode slower
        // (measured on 1% scattered deletes: 0.86-0.88x of a plain scan with selections or
        // Arrow's filter, 0.91-0.92x compacting in place on another thread, 0.91-0.97x on
        // the decoding thread).
        let skip = deleted
            .as_ref()
            .filter(|d| {
                let rows = self.task.record_count.unwrap_or(0);
                rows.saturating_sub(d.len()) / (delete_runs(d) + 1) >= MIN_SELECTED_RUN
            })
            .map(|d| d.as_ref().clone());
        let (skipped, masked) = (skip.is_some(), deleted.is_some() && skip.is_none());
        let this = Arc::new(self);
        let then: direct::ThenStep = {
            let (this, deleted) = (this.clone(), deleted.clone());
            Box::new(move |pruned: &[(u64, u64)], filtered: bool| {
                let mut positions =
                    Positions::of_reader(deleted.clone(), skipped, pruned, filtered);
                let this = this.clone();
                Box::new(move |b| this.finish(b, &mut positions))
            })
        };
        let direct = direct::open(
            &this.storage,
            &path,
            direct::DirectOptions {
                file_size: this.task.file_size_in_bytes,
                target: this.target.clone(),
                schema: this.task.schema.clone(),
                batch_size: this.batch_size,
                deleted: skip,
                row_groups: this.row_groups.clone(),
                filter: this.filter.clone(),
                positions: this.with_positions || masked,
                then: Some(then),
                parts: match this.with_positions {
                    true => 1,
                    false => this.parts,
                },
            },
        )
        .await
        .map_err(|e| e.context(format!("table {}", this.table)))?;
        if let Some(batches) = direct {
            return Ok(batches);
        }
        let one = futures::stream::iter([Ok(this.task.clone())]).boxed();
        let table = this.table.clone();
        let p = path.clone();
        let stream = this
            .reader
            .clone()
            .read(one)
            .map_err(|e| super::read_error(&table, &p, e))?
            .stream()
            .map(move |b| {
                b.and_then(super::plain_batch)
                    .map(|b| (b, None))
                    .map_err(|e| super::read_error(&table, &p, e))
            });
        // The general reader returns every row: deleted ones are masked.
        let mut positions = Positions::of_reader(deleted, false, &[], false);
        Ok(stream
            .filter_map(move |b| {
                let out = b.and_then(|b| this.finish(b, &mut positions)).transpose();
                async move { out }
            })
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cursor against a naive model: positions not in `absent`, in order, `n` at a time,
    /// each kept unless `masked`.
    #[test]
    fn cursor_agrees_with_a_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..300 {
            let total = rng.gen_range(1..400u64);
            let mut deleted = RoaringTreemap::new();
            for p in 0..total {
                if rng.gen_bool(0.1) {
                    deleted.insert(p);
                }
            }
            let mut pruned = Vec::new();
            let mut at = 0;
            while at < total && rng.gen_bool(0.7) {
                let s = at + rng.gen_range(0..50);
                let e = s + rng.gen_range(1..30);
                pruned.push((s, e.min(total)));
                at = e + 1;
            }
            pruned.retain(|r| r.0 < r.1);
            let skipped = rng.gen_bool(0.3);
            let absent = |p: u64| {
                pruned.iter().any(|r| r.0 <= p && p < r.1) || (skipped && deleted.contains(p))
            };
            let rows: Vec<u64> = (0..total).filter(|&p| !absent(p)).collect();
            let mut c = PositionCursor::new(Some(&deleted), skipped, pruned.clone());
            let mut i = 0;
            while i < rows.len() {
                let n = rng.gen_range(1..40).min(rows.len() - i);
                let want = rng.gen_bool(0.5);
                let (p, keep) = c.advance(n, want);
                let expect = &rows[i..i + n];
                if want {
                    assert_eq!(p.as_deref(), Some(expect));
                } else {
                    assert!(p.is_none());
                }
                let kept: Vec<bool> = expect.iter().map(|p| !deleted.contains(*p)).collect();
                match keep {
                    Some(k) => assert_eq!(k.iter().map(|v| v.unwrap()).collect::<Vec<_>>(), kept),
                    None => assert!(kept.iter().all(|k| *k), "{expect:?} {deleted:?}"),
                }
                i += n;
            }
        }
    }

    #[test]
    fn cursor_positions() {
        let mut d = RoaringTreemap::new();
        d.extend([1u64, 2, 5]);
        let mut c = PositionCursor::new(Some(&d), true, vec![]);
        assert_eq!(c.advance(3, true).0.unwrap(), vec![0, 3, 4]);
        assert_eq!(c.advance(2, true).0.unwrap(), vec![6, 7]);
        // Pruned row groups [10, 20) and [30, 40), deletes 12 and 41 masked.
        let mut m = RoaringTreemap::new();
        m.extend([5u64, 12, 41]);
        let mut c = PositionCursor::new(Some(&m), false, vec![(10, 20), (30, 40)]);
        let (p, k) = c.advance(12, true);
        assert_eq!(p.unwrap(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21]);
        assert_eq!(k.unwrap().false_count(), 1);
        let (p, k) = c.advance(10, true);
        assert_eq!(p.unwrap(), [22, 23, 24, 25, 26, 27, 28, 29, 40, 41]);
        assert!(!k.unwrap().value(9));
        // Skipped deletes and pruned ranges together.
        let mut c = PositionCursor::new(Some(&m), true, vec![(10, 20)]);
        assert_eq!(c.advance(6, true).0.unwrap(), [0, 1, 2, 3, 4, 6]);
        assert_eq!(c.advance(3, true).0.unwrap(), [7, 8, 9]);
        assert_eq!(c.advance(2, true).0.unwrap(), [20, 21]);
        let mut c = PositionCursor::new(Some(&d), false, vec![]);
        let (p, k) = c.advance(4, true);
        assert_eq!(p.unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(
            k.unwrap().iter().map(|v| v.unwrap()).collect::<Vec<_>>(),
            vec![true, false, false, true]
        );
    }
}
