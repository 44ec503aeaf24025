//! An upsert larger than memory (the replace engine): changes are held in memory up to a
//! number of rows, past it every change is checked as [`super::upsert`] checks it and
//! spilled to local Arrow IPC files by a hash of its key; the spilled batch is then applied
//! in parts of whole key buckets, one commit each, the last carrying the sink checkpoint.
//! Re-sending the batch after a failure between parts is safe: under the replace rule a
//! change applied twice leaves the same row (the highest version wins, ties go to the later
//! arrival, which is the same change).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::apply::{apply_with_retries, prepare};
use super::batch::{ChangeBatch, UpsertOptions, UpsertResult};
use super::checkpoint::committed_checkpoint;
use super::shards::KeyHasher;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::spec::keyed::{KeyedSpec, MergeEngine};
use crate::spec::TableIdent;
use crate::table::Table;

/// Key buckets a spilled batch is split into (a part of the upsert is a run of whole
/// buckets).
const BUCKETS: usize = 64;

/// Rows a bucket gathers in memory before they are written to its file.
const BUCKET_ROWS: usize = 8192;

/// A batch of changes that may not fit in memory: held whole up to `max_rows_per_commit`
/// changes, spilled to local files by key past it, and applied by [`upsert_spilled`].
///
/// ```no_run
/// # async fn f(catalog: floe::Catalog, table: floe::Table,
/// #            batches: Vec<arrow_array::RecordBatch>) -> floe::Result<()> {
/// let tmp = std::env::temp_dir();
/// let opts = floe::keyed::UpsertOptions::default();
/// let mut changes = floe::keyed::SpillingBatch::new(&table, &opts, 5_000_000, &tmp)?;
/// for b in batches {
///     changes.push("changes.parquet", b)?;
/// }
/// let r = floe::keyed::upsert_spilled(&catalog, table.ident(), changes).await?;
/// println!("{} changes in {} commits", r.input_rows, r.parts);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SpillingBatch {
    table: Table,
    options: UpsertOptions,
    engine: MergeEngine,
    max_rows: usize,
    spill_dir: PathBuf,
    /// The changes while they fit (all of them unless spilled).
    held: ChangeBatch,
    /// The number of the next row of each source.
    next_row: HashMap<String, u64>,
    rows: u64,
    spill: Option<Spill>,
}

/// The spilled changes: one list of files per key bucket.
#[derive(Debug)]
struct Spill {
    dir: PathBuf,
    hasher: KeyHasher,
    buckets: Vec<Bucket>,
}

/// One key bucket's changes in arrival order: files written, rows gathering in memory.
#[derive(Debug, Default)]
struct Bucket {
    files: Vec<PathBuf>,
    gathering: Vec<RecordBatch>,
    gathering_rows: usize,
    rows: u64,
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spill_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "spilling changes to '{}': {e} (set the spill directory to a disk with room)",
            path.display()
        ),
    )
}

impl SpillingBatch {
    /// A batch for keyed table `table`, applied with `options`, that spills into a new
    /// directory under `spill_dir` (removed when the batch is dropped) once it holds more
    /// than `max_rows_per_commit` changes; each commit of [`upsert_spilled`] then applies at
    /// most about that many. Only the replace engine splits a batch (the engines that fold
    /// rows would count a re-sent part twice): for them, more changes than that are refused.
    pub fn new(
        table: &Table,
        options: &UpsertOptions,
        max_rows_per_commit: usize,
        spill_dir: &Path,
    ) -> Result<Self> {
        let spec = KeyedSpec::of(table.metadata(), &table.name())?;
        if max_rows_per_commit == 0 {
            return Err(Error::invalid(
                "max rows per commit must be at least 1 (the changes a commit applies)",
            ));
        }
        Ok(Self {
            table: table.clone(),
            options: options.clone(),
            engine: spec.engine,
            max_rows: max_rows_per_commit,
            spill_dir: spill_dir.to_path_buf(),
            held: ChangeBatch::new(),
            next_row: HashMap::new(),
            rows: 0,
            spill: None,
        })
    }

    /// Changes pushed so far.
    pub fn num_rows(&self) -> u64 {
        self.rows
    }

    /// Whether the changes went to files (they will be applied in more than one commit
    /// when they exceed the limit).
    pub fn spilled(&self) -> bool {
        self.spill.is_some()
    }

    /// Adds `rows` that came from `source` (numbered on from its earlier rows). Once the
    /// batch spills, every change is checked as the upsert will check it, so that bad input
    /// is refused (naming its row) before anything is committed.
    pub fn push(&mut self, source: impl Into<String>, rows: RecordBatch) -> Result<()> {
        let source = source.into();
        let first = *self.next_row.entry(source.clone()).or_insert(1);
        self.next_row
            .insert(source.clone(), first + rows.num_rows() as u64);
        self.rows += rows.num_rows() as u64;
        if self.spill.is_none() {
            self.held.push_from(source, first, rows);
            if self.rows > self.max_rows as u64 {
                self.start_spilling()?;
            }
            return Ok(());
        }
        self.spill_rows(&source, first, rows)
    }

    /// Moves the held changes to files.
    fn start_spilling(&mut self) -> Result<()> {
        if self.engine != MergeEngine::Replace {
            return Err(Error::unsupported(format!(
                "{} changes are more than {} per commit, and table {} uses merge engine '{}', \
                 whose batch is applied in one commit (a part applied twice would be counted \
                 twice): raise the limit (about 200-400 bytes of memory per change) or split \
                 the input into batches with their own checkpoints",
                self.rows,
                self.max_rows,
                self.table.name(),
                self.engine.name()
            )));
        }
        let spec = KeyedSpec::of(self.table.metadata(), &self.table.name())?;
        let dir = self
            .spill_dir
            .join(format!("floe-spill-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|e| spill_error(&dir, e))?;
        self.spill = Some(Spill {
            dir,
            hasher: KeyHasher::of(&self.table, &spec)?,
            buckets: (0..BUCKETS).map(|_| Bucket::default()).collect(),
        });
        let held = std::mem::take(&mut self.held);
        for (source, first, rows) in held.into_numbered() {
            self.spill_rows(&source, first, rows)?;
        }
        Ok(())
    }

    /// Checks `rows` as an upsert would and adds them to their key buckets.
    fn spill_rows(&mut self, source: &str, first: u64, rows: RecordBatch) -> Result<()> {
        let mut one = ChangeBatch::new();
        one.push_from(source.to_string(), first, rows.clone());
        // New columns (evolve) are checked against the evolved schema the first part
        // commits.
        prepare(&self.table, &one, &self.options)?;
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let of_row = spill.hasher.shards(&rows, BUCKETS, source)?;
        let mut take: Vec<Vec<u32>> = vec![Vec::new(); BUCKETS];
        for (r, b) in of_row.iter().enumerate() {
            take[*b as usize].push(r as u32);
        }
        for (b, idx) in take.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            let part =
                arrow_select::take::take_record_batch(&rows, &arrow_array::UInt32Array::from(idx))?;
            let bucket = &mut spill.buckets[b];
            bucket.rows += part.num_rows() as u64;
            bucket.gathering_rows += part.num_rows();
            bucket.gathering.push(part);
            if bucket.gathering_rows >= BUCKET_ROWS {
                flush(&spill.dir, b, bucket)?;
            }
        }
        Ok(())
    }
}

/// Writes a bucket's gathered rows to a new file of the bucket (one per schema met).
fn flush(dir: &Path, b: usize, bucket: &mut Bucket) -> Result<()> {
    let gathered = std::mem::take(&mut bucket.gathering);
    bucket.gathering_rows = 0;
    let mut start = 0;
    while start < gathered.len() {
        let schema: SchemaRef = gathered[start].schema();
        let end = gathered[start..]
            .iter()
            .position(|g| g.schema() != schema)
            .map_or(gathered.len(), |n| start + n);
        let path = dir.join(format!("b{b:02}-{:06}.arrow", bucket.files.len()));
        let file = File::create(&path).map_err(|e| spill_error(&path, e))?;
        let mut w = arrow_ipc::writer::FileWriter::try_new(BufWriter::new(file), &schema)
            .map_err(|e| spill_error(&path, e))?;
        let rows = arrow_select::concat::concat_batches(&schema, &gathered[start..end])?;
        w.write(&rows).map_err(|e| spill_error(&path, e))?;
        w.finish().map_err(|e| spill_error(&path, e))?;
        bucket.files.push(path);
        start = end;
    }
    Ok(())
}

/// The changes of buckets `buckets` (in arrival order within each bucket), read back.
fn read_part(spill: &Spill, buckets: std::ops::Range<usize>, name: &str) -> Result<ChangeBatch> {
    let mut changes = ChangeBatch::new();
    for b in buckets {
        for path in &spill.buckets[b].files {
            let file = File::open(path).map_err(|e| spill_error(path, e))?;
            let reader =
                arrow_ipc::reader::FileReader::try_new(std::io::BufReader::new(file), None)
                    .map_err(|e| spill_error(path, e))?;
            for rows in reader {
                changes.push(name.to_string(), rows.map_err(|e| spill_error(path, e))?);
            }
        }
    }
    Ok(changes)
}

/// Applies `changes` to keyed table `ident` as [`super::upsert`] does, with the batch's
/// options: in one commit while they were held whole, else in parts of whole key buckets of
/// at most about the batch's limit, one commit each, the sink checkpoint recorded with the
/// last. A
/// checkpoint already committed applies nothing. When a part fails, the parts before it stay
/// committed and the error says so: send the batch again (its changes re-apply to the same
/// rows; the checkpoint was not recorded).
pub async fn upsert_spilled(
    catalog: &Catalog,
    ident: &TableIdent,
    mut changes: SpillingBatch,
) -> Result<UpsertResult> {
    let options = &changes.options;
    let Some(mut spill) = changes.spill.take() else {
        return apply_with_retries(catalog, ident, &changes.held, options, None).await;
    };
    for (b, bucket) in spill.buckets.iter_mut().enumerate() {
        flush(&spill.dir, b, bucket)?;
    }
    let table = catalog.load_table(ident).await?;
    if let (Some(sink), Some(n)) = (&options.sink_id, options.checkpoint) {
        let committed = committed_checkpoint(&table, sink)?;
        if committed.is_some_and(|c| n <= c) {
            let mut r = UpsertResult::nothing(&table, changes.rows, committed);
            r.already_committed = true;
            return Ok(r);
        }
    }
    // Runs of whole buckets of at most `max_rows` changes (a bucket past it on its own);
    // a part is cut only before a bucket with changes, so none is empty (the last one
    // carries the checkpoint).
    let mut parts: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    let mut rows = 0u64;
    for (b, bucket) in spill.buckets.iter().enumerate() {
        if rows > 0 && bucket.rows > 0 && rows + bucket.rows > changes.max_rows as u64 {
            parts.push(start..b);
            (start, rows) = (b, 0);
        }
        rows += bucket.rows;
    }
    parts.push(start..BUCKETS);
    let n = parts.len();
    let mut total: Option<UpsertResult> = None;
    for (i, buckets) in parts.into_iter().enumerate() {
        let name = format!("the changes of part {} of {n}", i + 1);
        let part = read_part(&spill, buckets, &name)?;
        let mut opts = options.clone();
        if i + 1 < n {
            // The checkpoint goes with the last part only.
            (opts.sink_id, opts.checkpoint) = (None, None);
        }
        let r = apply_with_retries(catalog, ident, &part, &opts, None)
            .await
            .map_err(|e| {
                let done = match &total {
                    Some(t) => format!(
                        "parts 1 to {i} of {n} were committed (up to snapshot {}); send the \
                         batch again: its changes re-apply to the same rows",
                        t.snapshot_id
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "-".into())
                    ),
                    None => "nothing was committed".to_string(),
                };
                e.context(format!(
                    "part {} of {n} of the upsert into {} ({} changes in all): {done}",
                    i + 1,
                    changes.table.name(),
                    changes.rows
                ))
            })?;
        total = Some(match total {
            None => r,
            Some(mut t) => {
                t.add_part(r);
                t
            }
        });
    }
    total.ok_or_else(|| Error::io("a spilled upsert had no part"))
}
