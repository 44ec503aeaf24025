//! Scans: choose a snapshot, plan the files (pure, `plan`), read them to Arrow.

mod adapt;
mod changelog;
mod compact;
mod delete_index;
mod deletes;
mod direct;
mod metadata_tables;
mod plan;
mod ranges;
mod read_file;

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowReaderBuilder;
use iceberg::expr::{Bind, BoundPredicate, Predicate};
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFileFormat, ManifestContentType, ManifestFile, NameMapping};

use crate::codec::manifest::{Pick, Probe};
use crate::table::EntryChooser;
pub use changelog::{appended_between, ChangeType, Changelog, ChangelogRange};
pub(crate) use delete_index::{canonical_path, is_file_scoped, DeleteEntry};
#[doc(hidden)]
pub use deletes::{decode_dv, decode_position_deletes, dv_range};
pub(crate) use deletes::{read_positions, FileDeletes, LoadedDeletes};
pub use metadata_tables::{read_metadata_table, MetadataTable};
#[cfg(test)]
pub(crate) use plan::test_files;
pub use plan::PlannedFile;
use plan::{plan_probe, ManifestPlanner, Planned};
pub(crate) use plan::{PartitionFilters, PlanStats};
pub(crate) use read_file::{lineage_fields, PositionedBatch};
use std::sync::atomic::{AtomicU64, Ordering};

use read_file::FileRead;

use crate::error::{Error, ErrorKind, Result};
use crate::expr::Expr;
use crate::spec::{resolve_column, resolve_field};
use crate::spec::{DataFile, PartitionSpec, SchemaRef, Snapshot};
use crate::table::Table;

/// Expands run-end-encoded columns (the iceberg reader uses them for constant partition
/// values) so callers always get plain Arrow arrays.
fn plain_batch(b: RecordBatch) -> iceberg::Result<RecordBatch> {
    use arrow_schema::{DataType, Field, Schema};
    if !b
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::RunEndEncoded(_, _)))
    {
        return Ok(b);
    }
    let err = |e: arrow_schema::ArrowError| {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            "expanding run-end-encoded column",
        )
        .with_source(e)
    };
    let mut fields = Vec::new();
    let mut cols = Vec::new();
    for (f, c) in b.schema().fields().iter().zip(b.columns()) {
        if let DataType::RunEndEncoded(_, values) = f.data_type() {
            let plain = arrow_cast::cast(c, values.data_type()).map_err(err)?;
            fields.push(Arc::new(
                Field::new(f.name(), values.data_type().clone(), f.is_nullable())
                    .with_metadata(f.metadata().clone()),
            ));
            cols.push(plain);
        } else {
            fields.push(f.clone());
            cols.push(c.clone());
        }
    }
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(
            fields,
            b.schema().metadata().clone(),
        )),
        cols,
    )
    .map_err(err)
}

/// A data file the iceberg crate's reader could not read: the kind of the storage error it
/// carries (a missing file is `NotFound`), else `Corrupt`.
fn read_error(table: &str, path: &str, e: iceberg::Error) -> Error {
    let msg = format!(
        "reading data file '{path}' of table {table}: {}",
        e.message()
    );
    let kind = crate::error::carried_kind(&e).unwrap_or(ErrorKind::Corrupt);
    Error::new(kind, msg).with_source(e)
}

/// Which snapshot a scan reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum SnapshotSelector {
    /// The current snapshot of `main`.
    #[default]
    Current,
    /// A snapshot id.
    Id(i64),
    /// A branch or tag.
    Ref(String),
    /// The snapshot current at a time (milliseconds since the epoch).
    AsOf(i64),
}

impl SnapshotSelector {
    /// The selector a caller's options name: a snapshot id, a branch or tag, or a time
    /// (milliseconds since the epoch); none of them: the current snapshot. More than one is
    /// refused, naming them as `what` does (e.g. `["--snapshot-id", "--ref", "--as-of"]`).
    ///
    /// ```
    /// use floe::scan::SnapshotSelector;
    /// let names = ["snapshot_id", "ref", "as_of"];
    /// assert_eq!(SnapshotSelector::from_options(None, Some("b".into()), None, names)?, SnapshotSelector::Ref("b".into()));
    /// assert_eq!(SnapshotSelector::from_options(None, None, None, names)?, SnapshotSelector::Current);
    /// assert!(SnapshotSelector::from_options(Some(1), None, Some(2), names).is_err());
    /// # Ok::<(), floe::Error>(())
    /// ```
    pub fn from_options(
        snapshot_id: Option<i64>,
        reference: Option<String>,
        as_of_ms: Option<i64>,
        what: [&str; 3],
    ) -> Result<Self> {
        let given: Vec<&str> = [
            snapshot_id.is_some(),
            reference.is_some(),
            as_of_ms.is_some(),
        ]
        .iter()
        .zip(what)
        .filter(|(g, _)| **g)
        .map(|(_, w)| w)
        .collect();
        if given.len() > 1 {
            return Err(Error::invalid(format!(
                "{} select a snapshot each; give at most one of them",
                given.join(" and ")
            )));
        }
        Ok(match (snapshot_id, reference, as_of_ms) {
            (Some(id), _, _) => Self::Id(id),
            (_, Some(r), _) => Self::Ref(r),
            (_, _, Some(t)) => Self::AsOf(t),
            _ => Self::Current,
        })
    }

    /// The snapshot selected in `table` (`None`: the table has no snapshot yet).
    pub fn resolve(&self, table: &Table) -> Result<Option<Arc<Snapshot>>> {
        let md = table.metadata();
        let name = table.name();
        Ok(match self {
            SnapshotSelector::Current => table.current_snapshot().cloned(),
            SnapshotSelector::Id(id) => Some(md.snapshot_by_id(*id).cloned().ok_or_else(|| {
                Error::not_found(format!(
                    "table {name} has no snapshot {id}; `floe snapshots {name}` lists them"
                ))
            })?),
            SnapshotSelector::Ref(r) => Some(md.snapshot_for_ref(r).cloned().ok_or_else(|| {
                Error::not_found(format!("table {name} has no branch or tag '{r}'"))
            })?),
            SnapshotSelector::AsOf(ts) => {
                let id = md
                    .history()
                    .iter()
                    .filter(|l| l.timestamp_ms <= *ts)
                    .max_by_key(|l| l.timestamp_ms)
                    .map(|l| l.snapshot_id)
                    .ok_or_else(|| {
                        let when = chrono::DateTime::from_timestamp_millis(*ts)
                            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                            .unwrap_or_else(|| format!("{ts} ms"));
                        let first = md
                            .history()
                            .iter()
                            .map(|l| l.timestamp_ms)
                            .min()
                            .and_then(chrono::DateTime::from_timestamp_millis)
                            .map(|t| {
                                format!(
                                    "; its oldest snapshot is from {}",
                                    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                                )
                            })
                            .unwrap_or_default();
                        Error::not_found(format!(
                            "table {name} has no snapshot at or before {when}{first}"
                        ))
                    })?;
                Some(md.snapshot_by_id(id).cloned().ok_or_else(|| {
                    Error::corrupt(format!("table {name}: history names missing snapshot {id}"))
                })?)
            }
        })
    }
}

/// How one planned file is read.
enum Job {
    /// No deletes, no positions: the direct path (in this many parts) or the iceberg
    /// reader with pushdown.
    Plain(Box<FileScanTask>, usize),
    /// Deletes, positions or our own filtering.
    WithDeletes(Box<FileRead>),
}

impl Job {
    /// The data file read.
    fn path(&self) -> &str {
        match self {
            Job::Plain(task, _) => &task.data_file_path,
            Job::WithDeletes(read) => &read.task.data_file_path,
        }
    }
}

/// Runs the read of one file; a panic in it (a decoder bug, a file it cannot handle) is sent
/// as an error on `tx`, so the scan fails instead of ending without that file's rows.
async fn panics_as_errors(
    work: impl std::future::Future<Output = ()>,
    (tx, path, table): (
        tokio::sync::mpsc::Sender<Result<(usize, PositionedBatch)>>,
        String,
        String,
    ),
) {
    use futures::FutureExt;
    if let Err(panic) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
        let e = Error::read_panicked(&path, &*panic).context(format!("table {table}"));
        let _ = tx.send(Err(e)).await;
    }
}

/// A delete-free file: the direct path when the scan is unfiltered and the file's layout
/// matches, else the iceberg reader with the filter pushed down.
async fn plain_stream(
    storage: &crate::storage::Storage,
    reader: &iceberg::arrow::ArrowReader,
    task: FileScanTask,
    direct_target: Option<&arrow_schema::SchemaRef>,
    batch_size: usize,
    parts: usize,
    name: &str,
) -> Result<futures::stream::BoxStream<'static, Result<PositionedBatch>>> {
    let path = task.data_file_path.clone();
    if let Some(target) = direct_target {
        let options = direct::DirectOptions {
            file_size: task.file_size_in_bytes,
            target: target.clone(),
            schema: task.schema.clone(),
            batch_size,
            deleted: None,
            row_groups: None,
            filter: None,
            positions: false,
            then: None,
            parts,
        };
        if let Some(d) = direct::open(storage, &path, options)
            .await
            .map_err(|e| e.context(format!("table {name}")))?
        {
            let name = name.to_string();
            return Ok(d
                .map(move |b| b.map_err(|e| e.context(format!("table {name}"))))
                .boxed());
        }
    }
    let one = futures::stream::iter([Ok(task)]).boxed();
    let stream = reader
        .clone()
        .read(one)
        .map_err(|e| read_error(name, &path, e))?
        .stream();
    let name = name.to_string();
    Ok(stream
        .map(move |item| {
            item.and_then(plain_batch)
                .map(|b| (b, None))
                .map_err(|e| read_error(&name, &path, e))
        })
        .boxed())
}

/// The id of the top-level field that is or contains field `id`.
fn top_level_id(schema: &crate::spec::Schema, id: i32) -> Option<i32> {
    use iceberg::spec::Type;
    fn contains(t: &Type, id: i32) -> bool {
        match t {
            Type::Primitive(_) => false,
            Type::Struct(s) => s
                .fields()
                .iter()
                .any(|f| f.id == id || contains(&f.field_type, id)),
            Type::List(l) => l.element_field.id == id || contains(&l.element_field.field_type, id),
            Type::Map(m) => {
                m.key_field.id == id
                    || m.value_field.id == id
                    || contains(&m.key_field.field_type, id)
                    || contains(&m.value_field.field_type, id)
            }
        }
    }
    schema
        .as_struct()
        .fields()
        .iter()
        .find(|f| f.id == id || contains(&f.field_type, id))
        .map(|f| f.id)
}

/// The top-level field ids a row filter reads (`s.a` reads struct column `s`).
fn row_filter_ids(f: &Expr, schema: &crate::spec::Schema) -> Result<Vec<i32>> {
    let top = schema.as_struct().fields();
    let find = |name: &str| -> Result<Option<i32>> {
        let i = resolve_column(top.iter().map(|c| c.name.as_str()), name)?;
        Ok(i.map(|i| top[i].id))
    };
    let mut ids = Vec::new();
    for c in f.column_refs() {
        let full = c.qualified_name();
        let first = full.split('.').next().unwrap_or(&full);
        let id = match find(&full)? {
            Some(id) => Some(id),
            None => find(first)?,
        };
        if let Some(id) = id {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// `_row_id` (0) and `_last_updated_sequence_number` (1), the row lineage columns a scan
/// may select by name.
fn lineage_column(name: &str) -> Option<usize> {
    ["_row_id", "_last_updated_sequence_number"]
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
}

/// Stream of Arrow batches produced by a scan.
pub type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch>>;

/// Sums the record counts of a manifest's live (added or existing) entries, keeping none.
struct LiveRows(u64);

impl EntryChooser for LiveRows {
    fn want(&mut self, entry: &iceberg::spec::ManifestEntry) -> Pick {
        if entry.is_alive() {
            self.0 += entry.data_file().record_count();
        }
        Pick::Skip
    }

    fn restart(&mut self) {
        self.0 = 0;
    }
}

/// The first `n` rows of `stream`, which is dropped (its reads stopped) once they came.
fn take_rows(stream: BatchStream, n: usize) -> BatchStream {
    futures::stream::unfold((Some(stream), n), |(stream, left)| async move {
        let mut s = stream?;
        if left == 0 {
            return None;
        }
        match s.next().await? {
            Err(e) => Some((Err(e), (None, 0))),
            Ok(b) => {
                let k = b.num_rows().min(left);
                let rest = left - k;
                let next = (rest > 0).then_some(s);
                Some((Ok(b.slice(0, k)), (next, rest)))
            }
        }
    })
    .boxed()
}

/// [`Scan::split_rows`]'s default.
const DEFAULT_SPLIT_ROWS: u64 = 512 * 1024;

/// A configured scan of a table.
#[derive(Debug, Clone)]
pub struct Scan {
    table: Table,
    columns: Option<Vec<String>>,
    filter: Option<Expr>,
    prune: Option<Predicate>,
    snapshot: SnapshotSelector,
    batch_size: Option<usize>,
    concurrency: usize,
    /// A file of at least twice this many rows is decoded in parts when the scan reads
    /// fewer files than `concurrency`.
    split_rows: u64,
    row_lineage: bool,
    /// Read every snapshot in the current schema (changelogs), not the snapshot's own.
    current_schema: bool,
    /// At most this many rows.
    limit: Option<usize>,
}

/// The row filter as an inclusive predicate on the scan schema: a file's row groups whose
/// statistics rule it out are not read.
#[derive(Debug)]
pub(crate) struct RowGroupFilter {
    pub predicate: BoundPredicate,
    /// The predicate before binding (narrowed per file, see [`Self::for_file`]).
    pub unbound: Predicate,
    pub schema: SchemaRef,
    pub counters: Arc<ReadCounters>,
    /// Fields the file holds no NaN of (its manifest entry's NaN counts are 0): float
    /// ranges above a value can then prune row groups and pages by their upper bounds.
    pub nan_free: Arc<[i32]>,
}

impl RowGroupFilter {
    /// The filter for `file` of `spec`: IN / NOT IN values its bucket partition values rule
    /// out are dropped (`crate::expr::narrow_to_partition`), and the fields it holds no NaN
    /// of are known.
    fn for_file(self: &Arc<Self>, spec: &PartitionSpec, file: &DataFile) -> Arc<Self> {
        let partition = file.partition();
        let mut ids = Vec::new();
        crate::expr::field_ids(&self.predicate, &mut ids);
        let nan_free: Arc<[i32]> = ids
            .into_iter()
            .filter(|id| file.nan_value_counts().get(id) == Some(&0))
            .collect();
        let narrowed =
            crate::expr::narrow_to_partition(&self.unbound, &self.schema, spec, partition);
        if narrowed == self.unbound && nan_free.is_empty() {
            return self.clone();
        }
        // The scan's own predicate when the narrowed one cannot be bound (it always can).
        let bound = (narrowed != self.unbound)
            .then(|| narrowed.clone().bind(self.schema.clone(), false).ok())
            .flatten();
        let (predicate, unbound) = match bound {
            Some(b) => (b.rewrite_not(), narrowed),
            None => (self.predicate.clone(), self.unbound.clone()),
        };
        Arc::new(RowGroupFilter {
            predicate,
            unbound,
            schema: self.schema.clone(),
            counters: self.counters.clone(),
            nan_free,
        })
    }
}

/// Counters of what reading a plan's files pruned below the file level (shared by the
/// file readers, read at any time).
#[derive(Debug, Default)]
pub struct ReadCounters {
    row_groups: std::sync::atomic::AtomicU64,
    row_groups_pruned: std::sync::atomic::AtomicU64,
    row_groups_pruned_by_bloom: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
    pages: std::sync::atomic::AtomicU64,
    pages_pruned: std::sync::atomic::AtomicU64,
}

/// What reading pruned below the file level, so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReadStats {
    /// Row groups of the files read with a row filter.
    pub row_groups: u64,
    /// Of those, row groups skipped by their column statistics or bloom filters.
    pub row_groups_pruned: u64,
    /// Of the row groups skipped, those that only their bloom filters ruled out.
    pub row_groups_pruned_by_bloom: u64,
    /// Bytes the decoder fetched from the files read with a row filter: the column chunks
    /// or pages it decoded (with late materialization, the filter's columns first and the
    /// others' pages holding kept rows), not footers, page indexes or bloom filters.
    pub row_group_bytes_read: u64,
    /// Pages of the filter's columns in the row groups read (files with a page index).
    pub pages: u64,
    /// Of those, pages the page index ruled out (no row of them is read).
    pub pages_pruned: u64,
}

impl ReadCounters {
    fn add(&self, row_groups: usize, pruned: usize, by_bloom: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.row_groups.fetch_add(row_groups as u64, Relaxed);
        self.row_groups_pruned.fetch_add(pruned as u64, Relaxed);
        self.row_groups_pruned_by_bloom
            .fetch_add(by_bloom as u64, Relaxed);
    }

    fn add_bytes(&self, bytes: u64) {
        self.bytes
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    fn add_pages(&self, pages: usize, pruned: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.pages.fetch_add(pages as u64, Relaxed);
        self.pages_pruned.fetch_add(pruned as u64, Relaxed);
    }

    /// The counts so far.
    pub fn stats(&self) -> ReadStats {
        use std::sync::atomic::Ordering::Relaxed;
        ReadStats {
            row_groups: self.row_groups.load(Relaxed),
            row_groups_pruned: self.row_groups_pruned.load(Relaxed),
            row_groups_pruned_by_bloom: self.row_groups_pruned_by_bloom.load(Relaxed),
            row_group_bytes_read: self.bytes.load(Relaxed),
            pages: self.pages.load(Relaxed),
            pages_pruned: self.pages_pruned.load(Relaxed),
        }
    }
}

/// What a planned scan will read.
#[derive(Debug)]
pub struct ScanPlan {
    /// The snapshot read (`None` for an empty table).
    pub snapshot: Option<Arc<Snapshot>>,
    /// The schema rows are returned in.
    pub schema: SchemaRef,
    /// The files to read.
    pub files: Vec<PlannedFile>,
    /// Pruning counters.
    pub stats: PlanStats,
    tasks: Vec<FileScanTask>,
    /// The loaded deletes of each file (aligned with `files`; `None`: not loaded, and the
    /// file cannot be read).
    deletes: Vec<Option<FileDeletes>>,
    /// The table's name and storage, to load deletes later.
    table: Table,
    /// The pruning predicate (inclusive: files it rules out hold no row the scan returns).
    filter: Option<BoundPredicate>,
    /// The row filter, evaluated on every row read (Spark's semantics).
    row_filter: Option<Expr>,
    /// The row filter as an inclusive predicate for row group pruning (`None` when every row
    /// of the files read is wanted).
    row_groups: Option<Arc<RowGroupFilter>>,
    counters: Arc<ReadCounters>,
}

/// The iceberg reader's task for each of `files` (Parquet only), projecting `project_ids` of
/// `schema` (files are matched by field id, or by the table's name mapping).
fn file_tasks(
    table: &Table,
    files: &[PlannedFile],
    schema: &SchemaRef,
    project_ids: &[i32],
) -> Result<Vec<FileScanTask>> {
    let name = table.name();
    let name_mapping: Option<Arc<NameMapping>> = table
        .metadata()
        .properties()
        .get("schema.name-mapping.default")
        .and_then(|s| serde_json::from_str(s).ok())
        .map(Arc::new);
    files
        .iter()
        .map(|p| {
            if p.file.file_format() != DataFileFormat::Parquet {
                return Err(Error::unsupported(format!(
                    "data file '{}' of table {name} is {:?}; floe reads Parquet only",
                    p.file.file_path(),
                    p.file.file_format()
                )));
            }
            Ok(FileScanTask {
                file_size_in_bytes: p.file.file_size_in_bytes(),
                start: 0,
                length: p.file.file_size_in_bytes(),
                record_count: Some(p.file.record_count()),
                data_file_path: p.file.file_path().to_string(),
                data_file_format: DataFileFormat::Parquet,
                schema: schema.clone(),
                project_field_ids: project_ids.to_vec(),
                // floe evaluates rows itself; the iceberg reader only decodes.
                predicate: None,
                deletes: vec![],
                partition: Some(p.partition.clone()),
                partition_spec: Some(p.spec.clone()),
                name_mapping: name_mapping.clone(),
                case_sensitive: false,
            })
        })
        .collect()
}

impl ScanPlan {
    /// The files of the plan in order up to the first whose rows make `n` certain: the
    /// record counts of files without deletes, when no row filter (`filtered`) may drop
    /// rows. All of them when that never reaches `n`.
    fn enough_for(self, n: usize, filtered: bool) -> ScanPlan {
        if filtered {
            return self;
        }
        let mut certain = 0u64;
        let mut keep = self.files.len();
        for (i, f) in self.files.iter().enumerate() {
            if certain >= n as u64 {
                keep = i;
                break;
            }
            if f.deletes.is_empty() {
                certain += f.file.record_count();
            }
        }
        if keep == self.files.len() {
            return self;
        }
        let idx: Vec<usize> = (0..keep).collect();
        self.subset(&idx)
    }

    /// A plan of the files at `indexes` only (each with its loaded deletes).
    pub(crate) fn subset(&self, indexes: &[usize]) -> ScanPlan {
        let pick = |i: &usize| *i < self.files.len();
        ScanPlan {
            snapshot: self.snapshot.clone(),
            schema: self.schema.clone(),
            files: indexes
                .iter()
                .filter(|i| pick(i))
                .map(|i| self.files[*i].clone())
                .collect(),
            stats: self.stats,
            tasks: indexes
                .iter()
                .filter(|i| pick(i))
                .map(|i| self.tasks[*i].clone())
                .collect(),
            deletes: indexes
                .iter()
                .filter(|i| pick(i))
                .map(|i| self.deletes[*i].clone())
                .collect(),
            filter: self.filter.clone(),
            row_filter: self.row_filter.clone(),
            row_groups: self.row_groups.clone(),
            counters: self.counters.clone(),
            table: self.table.clone(),
        }
    }

    /// This plan restricted to the files at `paths` (each with its deletes; a path the plan
    /// does not hold is left out): a distributed reader plans once, then each worker reads
    /// its group of files (the paths of `files`).
    pub fn only_files(&self, paths: &[String]) -> ScanPlan {
        let want: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
        let idx: Vec<usize> = self
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| want.contains(f.file.file_path()))
            .map(|(i, _)| i)
            .collect();
        self.subset(&idx)
    }

    /// What reading this plan pruned below the file level (counted as files are read).
    pub fn read_counters(&self) -> Arc<ReadCounters> {
        self.counters.clone()
    }

    /// Reads the planned files without their deletes (every row the files hold).
    pub(crate) fn ignoring_deletes(mut self) -> Self {
        for f in &mut self.files {
            f.deletes.clear();
        }
        self.deletes = vec![Some(FileDeletes::default()); self.files.len()];
        self
    }

    /// Keeps only the files `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&PlannedFile) -> bool) {
        let keep: Vec<bool> = self.files.iter().map(&mut keep).collect();
        let mut it = keep.iter();
        self.files.retain(|_| *it.next().unwrap_or(&false));
        let mut it = keep.iter();
        self.tasks.retain(|_| *it.next().unwrap_or(&false));
        let mut it = keep.iter();
        self.deletes.retain(|_| *it.next().unwrap_or(&false));
    }

    /// Reads every row of the planned files: the filter still pruned files, but no longer
    /// filters rows (row-level writes evaluate their own condition).
    pub(crate) fn without_row_filter(mut self) -> Self {
        self.row_filter = None;
        self.row_groups = None;
        for t in &mut self.tasks {
            t.predicate = None;
        }
        self
    }

    /// Positions already deleted in file `i` (position deletes and deletion vectors): the
    /// outer `None` when its deletes were not loaded.
    pub(crate) fn deleted_positions(&self, i: usize) -> Option<Option<&roaring::RoaringTreemap>> {
        self.deletes
            .get(i)
            .and_then(|d| d.as_ref())
            .map(|d| d.positions.as_ref())
    }

    /// Loads the deletes of the planned files `wanted` accepts (each delete file read once,
    /// however many of them it applies to); the others stay unloaded.
    pub(crate) async fn load_deletes(
        &mut self,
        mut wanted: impl FnMut(&PlannedFile) -> bool,
    ) -> Result<()> {
        let pick: Vec<usize> = (0..self.files.len())
            .filter(|&i| self.deletes[i].is_none() && wanted(&self.files[i]))
            .collect();
        let with_deletes: Vec<usize> = pick
            .iter()
            .copied()
            .filter(|&i| !self.files[i].deletes.is_empty())
            .collect();
        let loaded = if with_deletes.is_empty() {
            LoadedDeletes::default()
        } else {
            LoadedDeletes::load(
                self.table.storage(),
                &self.schema,
                with_deletes
                    .iter()
                    .flat_map(|&i| self.files[i].deletes.iter()),
                &self.table.name(),
            )
            .await?
        };
        for i in pick {
            let f = &self.files[i];
            self.deletes[i] = Some(loaded.for_file(f.file.file_path(), &f.deletes));
        }
        Ok(())
    }
}

impl Scan {
    /// A full scan of the current snapshot.
    ///
    /// # Example
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # use std::sync::Arc;
    /// # use arrow_array::{Int64Array, RecordBatch};
    /// # let dir = tempfile::tempdir()?;
    /// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
    /// # let ident = floe::table::parse_ident("db.t")?;
    /// # let schema = floe::spec::parse_schema("id long, v long")?;
    /// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
    /// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
    /// #     ("id", Arc::new(Int64Array::from_iter_values(r.clone())) as _),
    /// #     ("v", Arc::new(Int64Array::from_iter_values(r)) as _),
    /// # ])?) };
    /// # let table = floe::txn::append(&cat, &table, [rows(0..100)]).await?.table;
    /// let batches = floe::scan::Scan::new(&table)
    ///     .select(["id"])
    ///     .filter(floe::expr::parse_expr("id BETWEEN 10 AND 19")?)
    ///     .to_batches()
    ///     .await?;
    /// assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn new(table: &Table) -> Self {
        Self {
            table: table.clone(),
            columns: None,
            filter: None,
            prune: None,
            snapshot: SnapshotSelector::Current,
            batch_size: Some(32768),
            concurrency: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            split_rows: DEFAULT_SPLIT_ROWS,
            row_lineage: false,
            current_schema: false,
            limit: None,
        }
    }

    /// Returns at most `n` rows (any `n` of the matching rows: files are read in parallel).
    /// Only the files needed are read: when files without deletes, under no row filter,
    /// already hold `n` rows by their record counts, the files after them are not opened,
    /// and reading stops once `n` rows arrived.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Reads an older snapshot in the table's current schema (as changelogs and incremental
    /// reads do) instead of the snapshot's own.
    pub(crate) fn in_current_schema(mut self) -> Self {
        self.current_schema = true;
        self
    }

    /// v3: also returns each row's `_row_id` and `_last_updated_sequence_number` as two last
    /// columns (what the file stores, else the values inherited from the file's first row id
    /// and data sequence number).
    pub fn with_row_lineage(mut self) -> Self {
        self.row_lineage = true;
        self
    }
    /// Selects columns by name (default: all). v3: `_row_id` and
    /// `_last_updated_sequence_number` (row lineage) may be named too, in any place.
    pub fn select(mut self, columns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let columns: Vec<String> = columns.into_iter().map(Into::into).collect();
        if columns.iter().any(|c| lineage_column(c).is_some()) {
            self.row_lineage = true;
        }
        self.columns = Some(columns);
        self
    }

    /// With row lineage columns selected by name: the output's columns as indexes into what
    /// the reader returns (the data columns, then `_row_id`, `_last_updated_sequence_number`).
    fn output_order(&self) -> Option<Vec<usize>> {
        let cols = self.columns.as_ref()?;
        if !cols.iter().any(|c| lineage_column(c).is_some()) {
            return None;
        }
        let n = cols.iter().filter(|c| lineage_column(c).is_none()).count();
        let mut next = 0;
        Some(
            cols.iter()
                .map(|c| match lineage_column(c) {
                    Some(k) => n + k,
                    None => {
                        next += 1;
                        next - 1
                    }
                })
                .collect(),
        )
    }

    /// The Arrow schema of the rows [`Scan::read`] returns for `plan`.
    pub fn output_schema(&self, plan: &ScanPlan) -> Result<arrow_schema::SchemaRef> {
        let full = crate::spec::arrow_schema(&plan.schema)?;
        let mut fields: Vec<arrow_schema::FieldRef> = match &self.columns {
            None => full.fields().iter().cloned().collect(),
            Some(cols) => cols
                .iter()
                .filter(|c| lineage_column(c).is_none())
                .filter_map(|c| resolve_field(&plan.schema, c).ok().flatten())
                .filter_map(|f| full.field_with_name(&f.name).ok())
                .map(|f| Arc::new(f.clone()))
                .collect(),
        };
        if self.row_lineage {
            fields.extend(read_file::lineage_fields());
        }
        if let Some(order) = self.output_order() {
            fields = order
                .iter()
                .filter_map(|&i| fields.get(i).cloned())
                .collect();
        }
        Ok(Arc::new(arrow_schema::Schema::new(fields)))
    }
    /// Returns only the rows for which `condition` is TRUE (a SQL expression, as
    /// [`crate::expr::parse_expr`] reads `--where`), with Spark's semantics: NULL never
    /// satisfies a comparison, NaN is above every number and equal to itself, -0.0 = 0.0,
    /// decimals compare by value. Files, row groups and partitions that cannot hold such a
    /// row are skipped; every row read is evaluated.
    pub fn filter(mut self, condition: Expr) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(f) => f.binary(crate::expr::BinaryOp::And, condition),
            None => condition,
        });
        self
    }

    /// Skips the files `predicate` rules out (inclusive metrics and partition pruning) but
    /// returns every row of the files read: for callers that evaluate rows themselves.
    pub(crate) fn prune(mut self, predicate: Predicate) -> Self {
        self.prune = Some(match self.prune.take() {
            Some(p) => p.and(predicate),
            None => predicate,
        });
        self
    }
    /// Reads another snapshot.
    pub fn snapshot(mut self, s: SnapshotSelector) -> Self {
        self.snapshot = s;
        self
    }
    /// Rows per batch (default 32768).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = Some(n);
        self
    }
    /// Files read concurrently.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// When the scan reads fewer files than its concurrency, a file of at least twice `rows`
    /// rows is decoded in parts of at least `rows` rows, each on a core of its own,
    /// cut at row group boundaries or, where the file has an offset index, at any row
    /// (default 524,288). Batches of a file's parts interleave; a scan for row-level
    /// operations (which wants positions) reads each file in one part.
    pub fn split_rows(mut self, rows: u64) -> Self {
        self.split_rows = rows.max(1);
        self
    }

    /// The snapshot this scan selects.
    pub fn resolve_snapshot(&self) -> Result<Option<Arc<Snapshot>>> {
        self.snapshot.resolve(&self.table)
    }

    /// The schema rows are returned in: the snapshot's own schema when time travelling (a
    /// snapshot id, a time, a tag), the current schema otherwise (also for a branch, as
    /// Iceberg Java's `SnapshotUtil.schemaFor`: a branch moves on under the table's schema).
    pub fn schema(&self) -> Result<SchemaRef> {
        Ok(self.schema_of(&self.resolve_snapshot()?))
    }

    fn schema_of(&self, snapshot: &Option<Arc<Snapshot>>) -> SchemaRef {
        let md = self.table.metadata();
        match (&self.snapshot, snapshot) {
            _ if self.current_schema => md.current_schema().clone(),
            (SnapshotSelector::Current, _) | (_, None) => md.current_schema().clone(),
            (SnapshotSelector::Ref(r), _)
                if crate::spec::refs(md)
                    .iter()
                    .any(|(n, s)| n == r && s.is_branch()) =>
            {
                md.current_schema().clone()
            }
            (_, Some(s)) => s.schema(md).unwrap_or_else(|_| md.current_schema().clone()),
        }
    }

    /// Plans the scan: snapshot, schema, pruned file list, the deletes of each file.
    pub async fn plan(&self) -> Result<ScanPlan> {
        let mut plan = self.plan_without_deletes().await?;
        plan.load_deletes(|_| true).await?;
        Ok(plan)
    }

    /// [`Scan::plan`] with no delete file read: the plan's deletes are loaded later, for the
    /// files that need them ([`ScanPlan::load_deletes`]; a file without them cannot be read).
    pub(crate) async fn plan_without_deletes(&self) -> Result<ScanPlan> {
        let md = self.table.metadata();
        let name = self.table.name();
        let snapshot = self.resolve_snapshot()?;
        let schema = self.schema_of(&snapshot);
        if self.output_order().is_some() && md.format_version() < crate::spec::FormatVersion::V3 {
            return Err(Error::invalid(format!(
                "table {name} is format {:?}: _row_id and _last_updated_sequence_number exist in \
                 format v3 tables (`floe alter {name} --set format-version=3` upgrades it)",
                md.format_version()
            )));
        }
        let project_ids: Vec<i32> = match &self.columns {
            None => schema.as_struct().fields().iter().map(|f| f.id).collect(),
            Some(cols) => cols
                .iter()
                .filter(|c| lineage_column(c).is_none())
                .map(|c| {
                    resolve_field(&schema, c)
                        .map_err(|e| e.context(format!("table {name}")))?
                        .map(|f| f.id)
                        .ok_or_else(|| {
                            let names: Vec<&str> = schema
                                .as_struct()
                                .fields()
                                .iter()
                                .map(|f| f.name.as_str())
                                .collect();
                            Error::invalid(format!(
                                "unknown column '{c}' in table {name}; its columns: {}",
                                names.join(", ")
                            ))
                        })
                })
                .collect::<Result<_>>()?,
        };
        if let Some(f) = &self.filter {
            let arrow = iceberg::arrow::schema_to_arrow_schema(&schema)?;
            f.bind_predicate(&arrow)
                .map_err(|e| e.context(format!("filter on table {name}")))?;
        }
        let lowered = self
            .filter
            .as_ref()
            .and_then(|f| crate::expr::to_iceberg_predicate(f, &schema));
        let counters = Arc::new(ReadCounters::default());
        // Row groups are pruned by the row filter alone (rows `prune` rules out are still
        // returned).
        let row_groups = match &lowered {
            Some(p) => match p.clone().bind(schema.clone(), false) {
                Ok(b) => Some(Arc::new(RowGroupFilter {
                    predicate: b.rewrite_not(),
                    unbound: p.clone(),
                    schema: schema.clone(),
                    counters: counters.clone(),
                    nan_free: Arc::from([]),
                })),
                Err(_) => None,
            },
            None => None,
        };
        let pruning = match (lowered, self.prune.clone()) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, b) => a.or(b),
        };
        let bound: Option<BoundPredicate> = match &pruning {
            None => None,
            Some(p) => Some(
                p.bind(schema.clone(), false)
                    .map_err(|e| {
                        Error::invalid(format!("filter on table {name}: {}", e.message()))
                    })?
                    .rewrite_not(),
            ),
        };
        let Some(snap) = snapshot.clone() else {
            return Ok(ScanPlan {
                snapshot: None,
                schema,
                files: vec![],
                stats: PlanStats::default(),
                tasks: vec![],
                deletes: vec![],
                filter: bound,
                row_filter: self.filter.clone(),
                row_groups,
                counters,
                table: self.table.clone(),
            });
        };
        let list = self.table.manifest_list(&snap).await?;
        let partition_filters = PartitionFilters::new(bound.as_ref(), md.partition_specs_iter())?;
        let mut wanted: Vec<(Arc<PartitionSpec>, ManifestFile, Option<i64>)> = Vec::new();
        let (mut data_manifests, mut pruned_manifests) = (0, 0);
        // A manifest with no added or existing entry lists only removed files.
        for mf in list
            .iter()
            .filter(|mf| mf.has_added_files() || mf.has_existing_files())
        {
            let spec = md
                .partition_spec_by_id(mf.partition_spec_id)
                .cloned()
                .ok_or_else(|| {
                    Error::corrupt(format!(
                        "manifest '{}' of table {name} uses unknown partition spec {}",
                        mf.manifest_path, mf.partition_spec_id
                    ))
                })?;
            if mf.content == ManifestContentType::Data {
                data_manifests += 1;
                if !partition_filters.manifest_may_match(&spec, &schema, mf) {
                    pruned_manifests += 1;
                    continue;
                }
            }
            let first_row_id = (md.format_version() == crate::spec::FormatVersion::V3
                && mf.content == ManifestContentType::Data)
                .then(|| mf.first_row_id.map(|r| r as i64))
                .flatten();
            wanted.push((spec, mf.clone(), first_row_id));
        }
        // Manifests are planned as they are decoded (a plan holds the files it keeps, not
        // the table's), in the snapshot's order. A limit with no filter and no delete
        // manifest plans them one after another and stops once its rows are certain.
        // A row filter that does not lower to a pruning predicate still drops rows.
        let rows_wanted = match self.limit {
            Some(n) if bound.is_none() && self.filter.is_none() => Some(n as u64),
            _ => None,
        };
        let filter = bound.clone().map(Arc::new);
        let table = self.table.clone();
        let partition_filters = &partition_filters;
        let mut planned = Planned::default();
        // A limited plan reads the delete manifests first: a data file with deletes adds no
        // certain rows. It probes entries for their record counts (and, with deletes, the
        // paths and partitions the delete files are matched by).
        let mut delete_index = None;
        if rows_wanted.is_some()
            && wanted
                .iter()
                .any(|(_, mf, _)| mf.content != ManifestContentType::Data)
        {
            let (deletes, data): (Vec<_>, Vec<_>) = wanted
                .into_iter()
                .partition(|(_, mf, _)| mf.content != ManifestContentType::Data);
            wanted = data;
            for (spec, mf, first_row_id) in deletes {
                let planner =
                    ManifestPlanner::new(&spec, partition_filters, None, first_row_id, None);
                let (kept, planner) = table.select_manifest(&mf, None, planner).await?;
                planned.add(planner, kept, &name)?;
            }
            delete_index = Some(Arc::new(planned.delete_index()));
        }
        let probe = match rows_wanted {
            Some(_) => Some(Arc::new(Probe {
                metric_ids: Vec::new(),
                partition: delete_index.is_some(),
                path: delete_index.is_some(),
            })),
            None => plan_probe(bound.as_ref()),
        };
        // Rows still wanted (a limited plan runs one manifest at a time, so each planner is
        // made after the one before it finished).
        let left = AtomicU64::new(rows_wanted.unwrap_or(u64::MAX));
        let left = &left;
        let mut manifests = futures::stream::iter(wanted)
            .map(|(spec, mf, first_row_id)| {
                let mut planner = ManifestPlanner::new(
                    &spec,
                    partition_filters,
                    filter.clone(),
                    first_row_id,
                    rows_wanted.map(|_| left.load(Ordering::Relaxed)),
                );
                if let Some(ix) = &delete_index {
                    planner = planner.with_deletes(ix.clone());
                }
                let (table, probe) = (table.clone(), probe.clone());
                async move { table.select_manifest(&mf, probe, planner).await }
            })
            .buffered(if rows_wanted.is_some() { 1 } else { 8 });
        while let Some(r) = manifests.next().await {
            let (kept, planner) = r?;
            let rows = planner.rows_certain();
            planned.add(planner, kept, &name)?;
            if rows_wanted.is_some() {
                let n = left.load(Ordering::Relaxed).saturating_sub(rows);
                left.store(n, Ordering::Relaxed);
                if n == 0 {
                    break;
                }
            }
        }
        drop(manifests);
        let (files, mut stats) = planned.finish();
        stats.data_manifests = data_manifests;
        stats.pruned_data_manifests = pruned_manifests;
        let deletes = vec![None; files.len()];
        let tasks = file_tasks(&self.table, &files, &schema, &project_ids)?;
        Ok(ScanPlan {
            snapshot,
            schema,
            files,
            stats,
            tasks,
            deletes,
            filter: bound,
            row_filter: self.filter.clone(),
            row_groups,
            counters,
            table: self.table.clone(),
        })
    }

    /// A plan reading `files` whole (every column of the current schema, by field id; no
    /// deletes, no filter), whether or not a snapshot lists them: the staged files of a
    /// distributed write, read in the table's current schema.
    pub(crate) fn plan_of_files(table: &Table, files: Vec<PlannedFile>) -> Result<ScanPlan> {
        let schema = table.metadata().current_schema().clone();
        let ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
        let tasks = file_tasks(table, &files, &schema, &ids)?;
        Ok(ScanPlan {
            snapshot: None,
            schema,
            deletes: vec![Some(FileDeletes::default()); files.len()],
            files,
            stats: PlanStats::default(),
            tasks,
            filter: None,
            row_filter: None,
            row_groups: None,
            counters: Arc::new(ReadCounters::default()),
            table: table.clone(),
        })
    }

    /// Runs the scan as a stream of Arrow batches.
    pub async fn to_stream(&self) -> Result<BatchStream> {
        let plan = self.plan().await?;
        self.read(plan)
    }

    /// Reads a planned scan: each file is decoded on its own task (at most `concurrency` at
    /// a time), so decoding uses every worker thread. Batch order across files is unspecified.
    pub fn read(&self, plan: ScanPlan) -> Result<BatchStream> {
        let order = self.output_order();
        let plan = match self.limit {
            Some(n) => plan.enough_for(n, self.filter.is_some()),
            None => plan,
        };
        let stream = self
            .read_positioned(plan, false)?
            .map(move |r| {
                let b = r?.1 .0;
                match &order {
                    Some(o) => Ok(b.project(o)?),
                    None => Ok(b),
                }
            })
            .boxed();
        Ok(match self.limit {
            Some(n) => take_rows(stream, n),
            None => stream,
        })
    }

    /// Reads a planned scan returning, with each batch, the index of its file in
    /// `plan.files` and (when `with_positions`) each row's position in that file. Rows come
    /// in file order within a file; files interleave.
    pub(crate) fn read_positioned(
        &self,
        plan: ScanPlan,
        with_positions: bool,
    ) -> Result<futures::stream::BoxStream<'static, Result<(usize, PositionedBatch)>>> {
        let mut b =
            ArrowReaderBuilder::new(self.table.storage().file_io(), iceberg::Runtime::current())
                .with_data_file_concurrency_limit(1)
                .with_row_group_filtering_enabled(false)
                .with_row_selection_enabled(false);
        if let Some(n) = self.batch_size {
            b = b.with_batch_size(n);
        }
        let reader = b.build();
        // Files read with deletes, a filter we evaluate, or positions: no pushdown in the
        // iceberg reader (rows must come whole and in order).
        let plain_reader = {
            let mut b = ArrowReaderBuilder::new(
                self.table.storage().file_io(),
                iceberg::Runtime::current(),
            )
            .with_data_file_concurrency_limit(1)
            .with_row_group_filtering_enabled(false)
            .with_row_selection_enabled(false);
            if let Some(n) = self.batch_size {
                b = b.with_batch_size(n);
            }
            b.build()
        };
        let name = self.table.name();
        let concurrency = self.concurrency;
        let full = Arc::new(iceberg::arrow::schema_to_arrow_schema(&plan.schema)?);
        let top_ids: Vec<i32> = plan
            .schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.id)
            .collect();
        let projection_of = |ids: &[i32]| -> Option<arrow_schema::SchemaRef> {
            let idx: Vec<usize> = ids
                .iter()
                .filter_map(|id| top_ids.iter().position(|t| t == id))
                .collect();
            (idx.len() == ids.len())
                .then(|| full.project(&idx).ok().map(Arc::new))
                .flatten()
        };
        // The direct path serves unfiltered scans of delete-free files.
        let direct_target = match (&plan.row_filter, plan.tasks.first()) {
            (None, Some(t)) => projection_of(&t.project_field_ids),
            _ => None,
        };
        let filter_ids: Vec<i32> = match &plan.row_filter {
            Some(f) => row_filter_ids(f, &plan.schema)?,
            None => vec![],
        };
        let mut jobs = Vec::with_capacity(plan.tasks.len());
        // Progress: the planned files, each counted as read once its stream ends.
        let progress = crate::progress::Progress::current();
        let sizes: Vec<u64> = plan
            .files
            .iter()
            .map(|f| f.file.file_size_in_bytes())
            .collect();
        if let Some(p) = &progress {
            p.add_planned(sizes.len() as u64, sizes.iter().sum());
        }
        let lineage_of: Vec<Option<(Option<i64>, i64)>> = plan
            .files
            .iter()
            .map(|f| {
                self.row_lineage
                    .then_some((f.first_row_id, f.sequence_number))
            })
            .collect();
        // Cores a file may use: a scan of fewer files than its concurrency splits them.
        let cores_per_file = (concurrency / plan.tasks.len().max(1)).max(1);
        let split_rows = self.split_rows;
        let parts_of = |task: &FileScanTask| {
            let rows = task.record_count.unwrap_or(0);
            ((rows / split_rows) as usize).clamp(1, cores_per_file)
        };
        for (i, (task, deletes)) in plan.tasks.into_iter().zip(plan.deletes).enumerate() {
            let deletes = deletes.ok_or_else(|| {
                Error::io(format!(
                    "table {name}: data file '{}' was planned without its deletes and cannot be read",
                    task.data_file_path
                ))
            })?;
            let lineage = lineage_of[i];
            if !with_positions
                && deletes.is_empty()
                && lineage.is_none()
                && plan.row_filter.is_none()
            {
                let parts = parts_of(&task);
                jobs.push((i, Job::Plain(Box::new(task), parts)));
                continue;
            }
            let mut ids = task.project_field_ids.clone();
            let output_columns = ids.len();
            for id in deletes
                .equality_field_ids()
                .into_iter()
                .chain(filter_ids.iter().copied())
            {
                let top = top_level_id(&plan.schema, id).ok_or_else(|| {
                    Error::unsupported(format!(
                        "table {name}: field id {id} (used by a filter or an equality delete) is not in the scan schema"
                    ))
                })?;
                if !ids.contains(&top) {
                    ids.push(top);
                }
            }
            let mut target = projection_of(&ids).ok_or_else(|| {
                Error::io(format!("table {name}: cannot project field ids {ids:?}"))
            })?;
            if lineage.is_some() {
                // Read the lineage columns a file stores (rewritten files do); absent ones are NULL.
                let mut fields: Vec<arrow_schema::FieldRef> =
                    target.fields().iter().cloned().collect();
                fields.extend(read_file::lineage_fields());
                target = Arc::new(arrow_schema::Schema::new(fields));
            }
            let filter = match &plan.row_filter {
                Some(f) => Some(
                    f.bind_predicate(&target)
                        .map_err(|e| e.context(format!("filter on table {name}")))?,
                ),
                None => None,
            };
            let parts = parts_of(&task);
            let task = FileScanTask {
                project_field_ids: ids,
                predicate: None,
                ..task
            };
            jobs.push((
                i,
                Job::WithDeletes(Box::new(FileRead {
                    storage: self.table.storage().clone(),
                    reader: plain_reader.clone(),
                    task,
                    target,
                    output_columns,
                    deletes,
                    filter,
                    with_positions: with_positions || lineage.is_some(),
                    lineage,
                    batch_size: self.batch_size.unwrap_or(32768),
                    table: name.clone(),
                    row_groups: plan
                        .row_filter
                        .as_ref()
                        .and(plan.row_groups.as_ref())
                        .map(|rg| rg.for_file(&plan.files[i].spec, &plan.files[i].file)),
                    parts,
                })),
            ));
        }
        let storage = self.table.storage().clone();
        let batch_size = self.batch_size.unwrap_or(32768);
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<(usize, PositionedBatch)>>(concurrency * 2);
        tokio::spawn(async move {
            let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
            for (i, job) in jobs {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                if tx.is_closed() {
                    return;
                }
                let (reader, tx, name) = (reader.clone(), tx.clone(), name.clone());
                let (direct_target, storage) = (direct_target.clone(), storage.clone());
                let (progress, size) = (progress.clone(), sizes.get(i).copied().unwrap_or(0));
                let guard = (tx.clone(), job.path().to_string(), name.clone());
                let work = async move {
                    let _permit = permit;
                    let mut stream = match job {
                        Job::WithDeletes(read) => match read.read().await {
                            Ok(s) => s,
                            Err(e) => {
                                let _ = tx.send(Err(e)).await;
                                return;
                            }
                        },
                        Job::Plain(task, parts) => {
                            match plain_stream(
                                &storage,
                                &reader,
                                *task,
                                direct_target.as_ref(),
                                batch_size,
                                parts,
                                &name,
                            )
                            .await
                            {
                                Ok(s) => s,
                                Err(e) => {
                                    let _ = tx.send(Err(e)).await;
                                    return;
                                }
                            }
                        }
                    };
                    while let Some(item) = stream.next().await {
                        let stop = item.is_err();
                        if let (Some(p), Ok((b, _))) = (&progress, &item) {
                            p.add_rows_read(b.num_rows() as u64);
                        }
                        if tx.send(item.map(|b| (i, b))).await.is_err() || stop {
                            return;
                        }
                    }
                    if let Some(p) = &progress {
                        p.add_file_done(size);
                    }
                };
                tokio::spawn(panics_as_errors(work, guard));
            }
        });
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed())
    }

    /// The rows of the selected snapshot from its manifests' entries alone (no plan, no data
    /// file opened), when no delete file is live in it; `None` otherwise.
    async fn count_from_manifests(&self) -> Result<Option<u64>> {
        let Some(snap) = self.resolve_snapshot()? else {
            return Ok(Some(0));
        };
        let list = self.table.manifest_list(&snap).await?;
        let live = |mf: &&ManifestFile| mf.has_added_files() || mf.has_existing_files();
        if list
            .iter()
            .filter(live)
            .any(|mf| mf.content != ManifestContentType::Data)
        {
            return Ok(None);
        }
        // Entries are probed for their status and record count only; none is kept.
        let table = self.table.clone();
        let probe = Some(Arc::new(Probe::default()));
        let counts: Vec<u64> = futures::stream::iter(list.into_iter().filter(|mf| live(&mf)))
            .map(move |mf| {
                let (table, probe) = (table.clone(), probe.clone());
                async move {
                    let (_, counter) = table.select_manifest(&mf, probe, LiveRows(0)).await?;
                    Ok::<_, Error>(counter.0)
                }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
        Ok(Some(counts.iter().sum()))
    }

    /// Runs the scan and collects all batches.
    pub async fn to_batches(&self) -> Result<Vec<RecordBatch>> {
        self.to_stream().await?.try_collect().await
    }

    /// Counts matching rows, at most [`Self::limit`]'s. Without a filter and deletes, from
    /// the manifests alone; a file whose deletes are positions counts its rows less them, and
    /// with a filter so does a file whose column metrics prove that every row matches (a
    /// strict metrics evaluation); only the other files are read.
    pub async fn count(&self) -> Result<u64> {
        let most = self.limit.map_or(u64::MAX, |n| n as u64);
        if self.filter.is_none() && self.prune.is_none() {
            if let Some(n) = self.count_from_manifests().await? {
                return Ok(n.min(most));
            }
        }
        let scan = self.clone().select(Vec::<String>::new());
        let mut n = 0u64;
        // A file whose deletes are positions only counts its record count less the deleted
        // positions below it (a position past the file's end deletes nothing), when there is
        // no filter or its column metrics prove that every row matches; the other files are
        // read (with the filter).
        let plan = scan.plan().await?;
        let mut read = Vec::new();
        for (i, f) in plan.files.iter().enumerate() {
            let rows = f.file.record_count();
            let deleted = match plan.deletes.get(i).and_then(Option::as_ref) {
                None => Some(0),
                Some(d) if d.equality.is_empty() => Some(
                    d.positions
                        .as_ref()
                        .map_or(0, |p| p.range_cardinality(..rows)),
                ),
                Some(_) => None,
            };
            let proven = self
                .filter
                .as_ref()
                .is_none_or(|filter| crate::expr::all_rows_match(filter, &plan.schema, &f.file));
            match deleted {
                Some(gone) if proven => n += rows - gone.min(rows),
                _ => read.push(i),
            }
        }
        if read.is_empty() || n >= most {
            return Ok(n.min(most));
        }
        let plan = plan.subset(&read);
        let mut s = scan.read(plan)?;
        while let Some(b) = s.next().await {
            n += b?.num_rows() as u64;
            if n >= most {
                break;
            }
        }
        Ok(n.min(most))
    }
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    /// A file read that panics after sending rows leaves an error on the channel: the scan
    /// fails rather than ending without the rest of that file.
    #[tokio::test]
    async fn a_panicking_file_read_ends_the_scan_with_an_error() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let batch = RecordBatch::new_empty(Arc::new(arrow_schema::Schema::empty()));
        let sender = tx.clone();
        let work = async move {
            let _ = sender.send(Ok((0, (batch, None)))).await;
            panic!("mid-file");
        };
        panics_as_errors(work, (tx, "f.parquet".to_string(), "db.t".to_string())).await;
        assert!(rx.recv().await.unwrap().is_ok());
        let e = rx.recv().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{e}");
        assert!(e.to_string().contains("f.parquet"), "{e}");
        assert!(e.to_string().contains("mid-file"), "{e}");
    }
}
