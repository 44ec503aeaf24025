//! An external merge sort for one partition's rows: sorted runs that do not fit the writer's
//! memory are spilled to local Arrow IPC files, then merged back in sort order, so that a
//! file stamped with a sort order is sorted end to end however many rows the partition has.
//! Memory during a merge: one chunk of each run being merged (at most [`MAX_FAN_IN`] runs;
//! more are first merged in groups into longer runs) and one output chunk.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;

use arrow::row::{RowConverter, Rows, SortField};
use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_ord::sort::SortColumn;
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};

/// Runs merged at once; more are merged in groups first.
pub(super) const MAX_FAN_IN: usize = 64;

/// Bytes a run's chunk (what a merge holds of each run) aims at.
const CHUNK_BYTES: usize = 1 << 20;

/// Rows per chunk, whatever the row width.
const MIN_CHUNK_ROWS: usize = 256;
const MAX_CHUNK_ROWS: usize = 8192;

/// The sort key columns of a batch (already transformed, with their sort options).
pub(super) type SortKeys<'a> = dyn Fn(&RecordBatch) -> Result<Vec<SortColumn>> + Send + Sync + 'a;

/// Rows per chunk for rows of `batch`'s width.
fn chunk_rows(batch: &RecordBatch) -> usize {
    let per_row = batch.get_array_memory_size() / batch.num_rows().max(1);
    (CHUNK_BYTES / per_row.max(1)).clamp(MIN_CHUNK_ROWS, MAX_CHUNK_ROWS)
}

/// One partition's sorted runs on local disk, in the order they were spilled; the files go
/// when it is dropped.
pub(super) struct SpilledRuns {
    dir: PathBuf,
    schema: SchemaRef,
    runs: Vec<PathBuf>,
    next: usize,
}

impl SpilledRuns {
    /// No runs yet; they will be written under the system's temporary directory (`TMPDIR`).
    pub(super) fn new(schema: SchemaRef) -> Self {
        Self {
            dir: std::env::temp_dir().join(format!("floe-sort-{}", uuid::Uuid::new_v4())),
            schema,
            runs: Vec::new(),
            next: 0,
        }
    }

    fn io(&self, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::io(format!(
            "{what} a sorted run under {} (the writer spills sorted runs that exceed its memory \
             to the temporary directory; set TMPDIR to a disk with room)",
            self.dir.display()
        ))
        .with_source(e)
    }

    /// A new run file, written chunk by chunk by `fill`.
    fn write_run(
        &mut self,
        fill: impl FnOnce(&mut FileWriter<BufWriter<File>>) -> Result<()>,
    ) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io("creating the directory of", e))?;
        let path = self.dir.join(format!("run-{}.arrow", self.next));
        self.next += 1;
        let f = File::create(&path).map_err(|e| self.io("creating", e))?;
        let mut w = FileWriter::try_new(BufWriter::new(f), &self.schema)?;
        fill(&mut w)?;
        w.finish()?;
        self.runs.push(path);
        Ok(())
    }

    /// Spills `sorted` (rows already in sort order) as one run.
    pub(super) fn spill(&mut self, sorted: &RecordBatch) -> Result<()> {
        if sorted.num_rows() == 0 {
            return Ok(());
        }
        let chunk = chunk_rows(sorted);
        self.write_run(|w| {
            let mut offset = 0;
            while offset < sorted.num_rows() {
                let len = chunk.min(sorted.num_rows() - offset);
                w.write(&sorted.slice(offset, len))?;
                offset += len;
            }
            Ok(())
        })
    }

    /// A merge of every spilled run and `last` (sorted, in memory; its rows count as the
    /// latest run), in sort order by `keys`. Beyond [`MAX_FAN_IN`] runs, the oldest are
    /// merged in groups into longer runs first.
    pub(super) fn merge(mut self, last: RecordBatch, keys: &SortKeys<'_>) -> Result<Merge> {
        while self.runs.len() + 1 > MAX_FAN_IN {
            let group: Vec<PathBuf> = self.runs.drain(..MAX_FAN_IN).collect();
            let sources = group
                .iter()
                .map(|p| self.open(p))
                .collect::<Result<Vec<_>>>()?;
            let mut m = Merge::new(sources, keys)?;
            self.write_run(|w| {
                while let Some(b) = m.next_chunk(keys)? {
                    w.write(&b)?;
                }
                Ok(())
            })?;
            // A merged group goes after the runs not yet merged: ties keep spill order only
            // within a group, which a sort order does not promise anyway.
            group.iter().for_each(|p| {
                let _ = std::fs::remove_file(p);
            });
        }
        let mut sources = self
            .runs
            .iter()
            .map(|p| self.open(p))
            .collect::<Result<Vec<_>>>()?;
        if last.num_rows() > 0 {
            let chunk = chunk_rows(&last);
            let n = last.num_rows();
            sources.push(Box::new(
                (0..n)
                    .step_by(chunk)
                    .map(move |o| Ok(last.slice(o, chunk.min(n - o)))),
            ));
        }
        let mut m = Merge::new(sources, keys)?;
        m.spilled = Some(self);
        Ok(m)
    }

    fn open(&self, path: &PathBuf) -> Result<Source> {
        let f = File::open(path).map_err(|e| self.io("reading", e))?;
        let reader = FileReader::try_new(BufReader::new(f), None)?;
        Ok(Box::new(reader.map(|b| b.map_err(Error::from))))
    }
}

impl Drop for SpilledRuns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A run's chunks, in order.
type Source = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// One run's position in a merge: its current chunk, that chunk's encoded sort keys and the
/// next row.
struct Cursor {
    source: Source,
    /// Index of the current chunk in the merge's `held` chunks.
    held: usize,
    keys: Rows,
    row: usize,
    len: usize,
}

/// A k-way merge of sorted runs, handing out chunks of rows in sort order (ties: the earlier
/// run first).
pub(super) struct Merge {
    cursors: Vec<Cursor>,
    /// Min-heap of live cursor indexes by their current row.
    heap: Vec<usize>,
    /// Chunks the rows of the output chunk in progress come from.
    held: Vec<RecordBatch>,
    converter: Option<RowConverter>,
    out_rows: usize,
    /// The spilled runs, kept until the merge is done with their files.
    spilled: Option<SpilledRuns>,
}

impl Merge {
    fn new(sources: Vec<Source>, keys: &SortKeys<'_>) -> Result<Self> {
        let mut m = Merge {
            cursors: Vec::with_capacity(sources.len()),
            heap: Vec::with_capacity(sources.len()),
            held: Vec::new(),
            converter: None,
            out_rows: MAX_CHUNK_ROWS,
            spilled: None,
        };
        for source in sources {
            m.cursors.push(Cursor {
                source,
                held: 0,
                keys: RowConverter::new(vec![])?.empty_rows(0, 0),
                row: 0,
                len: 0,
            });
            let c = m.cursors.len() - 1;
            if m.advance_chunk(c, keys)? {
                m.heap.push(c);
                m.sift_up(m.heap.len() - 1);
            }
        }
        Ok(m)
    }

    /// Loads cursor `c`'s next non-empty chunk; false when its run is done.
    fn advance_chunk(&mut self, c: usize, keys: &SortKeys<'_>) -> Result<bool> {
        loop {
            let Some(chunk) = self.cursors[c].source.next().transpose()? else {
                return Ok(false);
            };
            if chunk.num_rows() == 0 {
                continue;
            }
            let cols = keys(&chunk)?;
            if self.converter.is_none() {
                self.converter = Some(RowConverter::new(
                    cols.iter()
                        .map(|s| {
                            SortField::new_with_options(
                                s.values.data_type().clone(),
                                s.options.unwrap_or_default(),
                            )
                        })
                        .collect(),
                )?);
                self.out_rows = chunk_rows(&chunk);
            }
            let conv = self
                .converter
                .as_ref()
                .ok_or_else(|| Error::io("merge without a row converter"))?;
            let values: Vec<_> = cols.into_iter().map(|s| s.values).collect();
            let cur = &mut self.cursors[c];
            cur.keys = conv.convert_columns(&values)?;
            cur.row = 0;
            cur.len = chunk.num_rows();
            cur.held = self.held.len();
            self.held.push(chunk);
            return Ok(true);
        }
    }

    /// Whether cursor `a`'s current row sorts before cursor `b`'s.
    fn less(&self, a: usize, b: usize) -> bool {
        let (ca, cb) = (&self.cursors[a], &self.cursors[b]);
        match ca.keys.row(ca.row).cmp(&cb.keys.row(cb.row)) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => a < b,
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(self.heap[i], self.heap[parent]) {
                break;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut min = i;
            if l < self.heap.len() && self.less(self.heap[l], self.heap[min]) {
                min = l;
            }
            if r < self.heap.len() && self.less(self.heap[r], self.heap[min]) {
                min = r;
            }
            if min == i {
                break;
            }
            self.heap.swap(i, min);
            i = min;
        }
    }

    /// The next rows in sort order (`None` once every run is done).
    pub(super) fn next_chunk(&mut self, keys: &SortKeys<'_>) -> Result<Option<RecordBatch>> {
        if self.heap.is_empty() {
            return Ok(None);
        }
        // Only the cursors' current chunks are still needed from earlier output chunks.
        if self.held.len() > self.cursors.len() {
            let mut kept = Vec::with_capacity(self.cursors.len());
            for &c in &self.heap {
                let cur = &mut self.cursors[c];
                kept.push(self.held[cur.held].clone());
                cur.held = kept.len() - 1;
            }
            self.held = kept;
        }
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(self.out_rows);
        while picks.len() < self.out_rows {
            let Some(&c) = self.heap.first() else {
                break;
            };
            let cur = &mut self.cursors[c];
            picks.push((cur.held, cur.row));
            cur.row += 1;
            if cur.row == cur.len && !self.advance_chunk(c, keys)? {
                let last = self.heap.len() - 1;
                self.heap.swap(0, last);
                self.heap.pop();
            }
            if !self.heap.is_empty() {
                self.sift_down(0);
            }
        }
        let refs: Vec<&RecordBatch> = self.held.iter().collect();
        Ok(Some(arrow_select::interleave::interleave_record_batch(
            &refs, &picks,
        )?))
    }

    /// Every remaining row, chunk by chunk.
    #[cfg(test)]
    fn drain(&mut self, keys: &SortKeys<'_>) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        while let Some(b) = self.next_chunk(keys)? {
            out.push(b);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, ArrayRef, Int64Array};
    use arrow_ord::sort::{lexsort_to_indices, SortOptions};
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    /// Sorted by `k` descending, nulls first, then `v` ascending.
    fn keys_of(b: &RecordBatch) -> Result<Vec<SortColumn>> {
        Ok(vec![
            SortColumn {
                values: b.column(0).clone(),
                options: Some(SortOptions {
                    descending: true,
                    nulls_first: true,
                }),
            },
            SortColumn {
                values: b.column(1).clone(),
                options: Some(SortOptions::default()),
            },
        ])
    }

    fn sorted(b: &RecordBatch) -> RecordBatch {
        let idx = lexsort_to_indices(&keys_of(b).unwrap(), None).unwrap();
        arrow_select::take::take_record_batch(b, &idx).unwrap()
    }

    fn batch(rng: &mut impl Rng, n: usize, tag: i64) -> RecordBatch {
        let k: Int64Array = (0..n)
            .map(|_| (rng.gen_range(0..10) > 0).then(|| rng.gen_range(-50..50)))
            .collect();
        let v = Int64Array::from_iter_values((0..n).map(|_| rng.gen_range(0..1000)));
        let t = Int64Array::from(vec![tag; n]);
        RecordBatch::try_from_iter([
            ("k", Arc::new(k) as ArrayRef),
            ("v", Arc::new(v) as ArrayRef),
            ("t", Arc::new(t) as ArrayRef),
        ])
        .unwrap()
    }

    fn rows(batches: &[RecordBatch]) -> Vec<(Option<i64>, i64, i64)> {
        let mut out = Vec::new();
        for b in batches {
            let (k, v, t) = (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
                b.column(2).as_primitive::<Int64Type>(),
            );
            for r in 0..b.num_rows() {
                out.push((k.is_valid(r).then(|| k.value(r)), v.value(r), t.value(r)));
            }
        }
        out
    }

    /// Random runs (some empty, one beyond a chunk, more than the fan-in in one case)
    /// merged: the rows of all runs, in sort order, ties in spill order.
    #[test]
    fn merged_runs_are_every_row_in_sort_order() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (n_runs, max_rows) in [(1usize, 10usize), (3, 20_000), (MAX_FAN_IN + 5, 300)] {
            let mut runs = Vec::new();
            for i in 0..n_runs {
                let n = if i == 1 {
                    0
                } else {
                    rng.gen_range(0..max_rows)
                };
                runs.push(sorted(&batch(&mut rng, n, i as i64)));
            }
            let schema = runs[0].schema();
            let mut spilled = SpilledRuns::new(schema.clone());
            for r in &runs[..n_runs - 1] {
                spilled.spill(r).unwrap();
            }
            let dir = spilled.dir.clone();
            let last = runs[n_runs - 1].clone();
            let mut merge = spilled.merge(last, &keys_of).unwrap();
            let out = merge.drain(&keys_of).unwrap();
            drop(merge);
            assert!(!dir.exists(), "the run files are removed");
            let got = rows(&out);
            // The expected order: every row sorted, ties by run (a stable sort of the runs'
            // concatenation keeps each run's own order for equal keys).
            let all = arrow_select::concat::concat_batches(&schema, &runs).unwrap();
            let mut want = rows(&[all]);
            // Nulls first, then `k` descending, then `v`.
            let key = |r: &(Option<i64>, i64, i64)| (r.0.is_some(), std::cmp::Reverse(r.0), r.1);
            want.sort_by_key(key);
            assert_eq!(got.len(), want.len(), "{n_runs} runs");
            assert!(
                got.windows(2).all(|w| key(&w[0]) <= key(&w[1])),
                "{n_runs} runs: not in sort order"
            );
            let mut g = got.clone();
            g.sort();
            let mut w = want.clone();
            w.sort();
            assert_eq!(g, w, "{n_runs} runs: not the same rows");
            if n_runs <= MAX_FAN_IN {
                // Within one merge, equal keys come in run order.
                assert!(got
                    .windows(2)
                    .all(|w| key(&w[0]) != key(&w[1]) || w[0].2 <= w[1].2));
            }
        }
    }
}
