//! `floe._floe.Table`: every command of the CLI on one table, called as the CLI calls the
//! library (`src/bin/floe`), results as the CLI's `--json` documents.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use arrow_schema::SchemaRef;
use floe::scan::{BatchStream, Scan, SnapshotSelector};
use floe::table::parse_ident;
use futures::{StreamExt, TryStreamExt};
use pyo3::prelude::*;
use serde_json::json;

use crate::catalog::Catalog;
use crate::runtime::{
    batches_of, block_on_interruptible, invalid, run, to_py, to_py_json, to_pyarrow_table,
};
use floe::report;

/// A table of a catalog: the state last loaded or written through this handle.
#[pyclass(module = "floe._floe", frozen)]
pub struct Table {
    catalog: Catalog,
    table: Mutex<floe::Table>,
}

impl Table {
    /// A handle on `table` of `catalog`.
    pub(crate) fn new(catalog: Catalog, table: floe::Table) -> Table {
        Table {
            catalog,
            table: Mutex::new(table),
        }
    }

    fn get(&self) -> floe::Table {
        match self.table.lock() {
            Ok(t) => t.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn set(&self, t: floe::Table) {
        match self.table.lock() {
            Ok(mut g) => *g = t,
            Err(p) => *p.into_inner() = t,
        }
    }

    fn cat(&self) -> floe::Catalog {
        self.catalog.inner.clone()
    }

    /// The name DML statements and reloads use: `ns.table`, or `ns.table.branch_<b>`.
    fn target(&self, branch: Option<&str>) -> String {
        let t = self.get();
        match branch.or(Some(t.branch()).filter(|b| *b != "main")) {
            Some(b) => format!("{}.branch_{b}", t.name()),
            None => t.name(),
        }
    }

    /// Reloads the table after a write whose result carries no table.
    fn reload(&self, py: Python<'_>) -> PyResult<()> {
        let (cat, name) = (self.cat(), self.target(None));
        let t = run(py, async move { cat.load_write_target(&name).await })?;
        self.set(t);
        Ok(())
    }

    fn scan_of(
        &self,
        row_filter: Option<&str>,
        columns: Option<Vec<String>>,
        snapshot_id: Option<i64>,
        reference: Option<String>,
    ) -> PyResult<Scan> {
        let t = self.get();
        let mut scan = Scan::new(&t);
        scan = scan.snapshot(
            SnapshotSelector::from_options(snapshot_id, reference, None, SELECTOR_ARGS)
                .map_err(to_py)?,
        );
        if let Some(f) = row_filter.filter(|f| !f.trim().is_empty()) {
            scan = scan.filter(floe::expr::parse_expr(f).map_err(to_py)?);
        }
        if let Some(c) = columns {
            scan = scan.select(c);
        }
        Ok(scan)
    }
}

/// A scan's batches, pulled one at a time by Python (`floe.DataScan.to_arrow_batch_reader`
/// wraps it in a `pyarrow.RecordBatchReader`): each `next` waits for the stream with the GIL
/// released and Ctrl-C honoured (a scan whose filter matches nothing for a long stretch
/// yields no batch meanwhile, so the wait itself must be interruptible). Dropping it (or the
/// reader around it) stops the scan's readers.
#[pyclass(module = "floe._floe", frozen)]
pub struct ScanBatches {
    schema: SchemaRef,
    /// `None` while another thread pulls, or once the stream ended.
    stream: Mutex<Option<BatchStream>>,
    done: std::sync::atomic::AtomicBool,
}

#[pymethods]
impl ScanBatches {
    /// The batches' schema (a `pyarrow.Schema`).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.schema.as_ref().to_pyarrow(py)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        use std::sync::atomic::Ordering;
        if self.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        // Taken out of the lock for the wait: the lock is never held without the GIL.
        let taken = match self.stream.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        let Some(mut stream) = taken else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this scan's batches are being read by another thread",
            ));
        };
        let next = block_on_interruptible(py, stream.next());
        let next = match next {
            Ok(n) => n,
            Err(signal) => {
                // Interrupted: the stream stays usable (`next` is cancel-safe).
                self.put_back(stream);
                return Err(signal);
            }
        };
        match next {
            Some(Ok(b)) => {
                self.put_back(stream);
                b.to_pyarrow(py).map(Some)
            }
            Some(Err(e)) => {
                self.done.store(true, Ordering::Release);
                Err(to_py(e))
            }
            None => {
                self.done.store(true, Ordering::Release);
                Ok(None)
            }
        }
    }
}

impl ScanBatches {
    fn put_back(&self, stream: BatchStream) {
        match self.stream.lock() {
            Ok(mut g) => *g = Some(stream),
            Err(p) => *p.into_inner() = Some(stream),
        }
    }
}

/// The CLI's name of a write mode.
pub(crate) fn mode_name(m: floe::spec::WriteMode) -> &'static str {
    match m {
        floe::spec::WriteMode::CopyOnWrite => "copy-on-write",
        floe::spec::WriteMode::MergeOnRead => "merge-on-read",
    }
}

/// A distributed task's rows (`data`: Arrow data) as one batch of changes.
fn task_changes(data: &Bound<'_, PyAny>) -> PyResult<floe::keyed::ChangeBatch> {
    let (_, batches) = batches_of(data)?;
    let mut changes = floe::keyed::ChangeBatch::new();
    for b in batches {
        changes.push("the task's rows", b.map_err(to_py)?);
    }
    Ok(changes)
}

/// The Python names of a snapshot selector's arguments.
const SELECTOR_ARGS: [&str; 3] = ["snapshot_id=", "ref=", "as_of="];

fn parse_pending(items: &[String]) -> PyResult<Vec<floe::pending::PendingChange>> {
    items
        .iter()
        .map(|s| floe::pending::PendingChange::from_json(s).map_err(to_py))
        .collect()
}

#[pymethods]
impl Table {
    /// `ns.table`.
    #[getter]
    fn name(&self) -> String {
        self.get().name()
    }

    /// The branch this handle reads and writes (`main` unless loaded as `ns.t.branch_<b>`).
    #[getter]
    fn branch(&self) -> String {
        self.get().branch().to_string()
    }

    /// The catalog the table belongs to.
    #[getter]
    fn catalog(&self) -> Catalog {
        self.catalog.same()
    }

    /// The current metadata file.
    #[getter]
    fn metadata_location(&self) -> String {
        self.get().metadata_location().to_string()
    }

    /// The table location.
    #[getter]
    fn location(&self) -> String {
        self.get().metadata().location().to_string()
    }

    /// The format version.
    #[getter]
    fn format_version(&self) -> u8 {
        self.get().metadata().format_version() as u8
    }

    /// The current snapshot id (None: no snapshot yet).
    #[getter]
    fn current_snapshot_id(&self) -> Option<i64> {
        self.get().current_snapshot().map(|s| s.snapshot_id())
    }

    /// The table properties.
    fn properties(&self) -> HashMap<String, String> {
        self.get().metadata().properties().clone()
    }

    /// The current schema as a pyarrow schema (with Iceberg field ids as field metadata).
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.get().arrow_schema().map_err(to_py)?;
        s.as_ref().to_pyarrow(py)
    }

    /// The identifier (primary key) columns.
    fn primary_key(&self) -> Vec<String> {
        let t = self.get();
        let schema = t.metadata().current_schema().clone();
        schema
            .identifier_field_ids()
            .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
            .collect()
    }

    /// Reloads the table from the catalog.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.reload(py)
    }

    /// The snapshots, oldest first (the CLI's `snapshots --json` rows).
    fn snapshots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.get();
        let mut snaps: Vec<_> = t.metadata().snapshots().cloned().collect();
        snaps.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
        let v: Vec<_> = snaps.iter().map(|s| report::snapshot(s)).collect();
        to_py_json(py, &json!(v))
    }

    /// Appends Arrow data in one snapshot (the CLI's `append --json` result).
    #[pyo3(signature = (data, branch=None, wap_id=None))]
    fn append<'py>(
        &self,
        py: Python<'py>,
        data: Bound<'py, PyAny>,
        branch: Option<String>,
        wap_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (_, batches) = batches_of(&data)?;
        let mut table = self.get();
        if let Some(b) = &branch {
            table = table.on_branch(b).map_err(to_py)?;
        }
        if let Some(w) = &wap_id {
            table = table.with_wap_id(w).map_err(to_py)?;
        }
        let name = table.name();
        let cat = self.cat();
        let started = Instant::now();
        let r = run(
            py,
            async move { floe::txn::append(&cat, &table, batches).await },
        )?;
        let v = report::append(&name, &r, started);
        if branch.is_none() && wap_id.is_none() {
            self.set(r.table);
        }
        to_py_json(py, &v)
    }

    /// Runs a DELETE / UPDATE / MERGE INTO statement on this table (the CLI's `delete`,
    /// `update`, `merge` and `sql` results); `source` is the MERGE source's rows.
    #[pyo3(signature = (sql, source=None, wap_id=None))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        sql: String,
        source: Option<Bound<'py, PyAny>>,
        wap_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let source = match source {
            None => None,
            // Streamed: read batch by batch as the MERGE needs it (the GIL released).
            Some(s) => Some(floe::dml::SourceRows::new(batches_of(&s)?.1)),
        };
        let cat = self.cat();
        let started = Instant::now();
        let r = run(py, async move {
            floe::dml::execute_with(&cat, &sql, source, wap_id.as_deref()).await
        })?;
        let v = report::dml(&r, mode_name(r.mode), started);
        if r.table.name() == self.get().name() && r.table.branch() == self.get().branch() {
            self.set(r.table);
        }
        to_py_json(py, &v)
    }

    /// The name a DML statement targets (`ns.t`, or `ns.t.branch_<b>`).
    #[pyo3(signature = (branch=None))]
    fn dml_target(&self, branch: Option<String>) -> String {
        self.target(branch.as_deref())
    }

    /// Applies changes to a keyed table in one commit (the CLI's `upsert --json` result).
    #[pyo3(signature = (data, sink_id=None, checkpoint=None, evolve_schema=false, branch=None,
        wap_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn upsert<'py>(
        &self,
        py: Python<'py>,
        data: Bound<'py, PyAny>,
        sink_id: Option<String>,
        checkpoint: Option<i64>,
        evolve_schema: bool,
        branch: Option<String>,
        wap_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (_, batches) = batches_of(&data)?;
        let mut changes = floe::keyed::ChangeBatch::new();
        for b in batches {
            changes.push("the input", b.map_err(to_py)?);
        }
        self.upsert_changes(
            py,
            changes,
            sink_id,
            checkpoint,
            evolve_schema,
            branch,
            wap_id,
            false,
        )
    }

    /// Folds `data` (a distributed upsert's task, for the merge engines that fold rows) into
    /// one row per key, the functions' states included, without reading the table
    /// ([`floe::keyed::pre_fold`]).
    fn pre_fold<'py>(
        &self,
        py: Python<'py>,
        data: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let changes = task_changes(&data)?;
        let table = self.get();
        let folded = run(
            py,
            async move { floe::keyed::pre_fold(&table, &changes).await },
        )?;
        to_pyarrow_table(py, folded.schema(), vec![folded])
    }

    /// Applies the tasks' `pre_fold` results (in task order) as one upsert.
    #[pyo3(signature = (folded, sink_id=None, checkpoint=None))]
    fn upsert_pre_folded<'py>(
        &self,
        py: Python<'py>,
        folded: Vec<Bound<'py, PyAny>>,
        sink_id: Option<String>,
        checkpoint: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut changes = floe::keyed::ChangeBatch::new();
        for (i, data) in folded.iter().enumerate() {
            let (_, batches) = batches_of(data)?;
            for b in batches {
                changes.push(format!("task {}", i + 1), b.map_err(to_py)?);
            }
        }
        self.upsert_changes(py, changes, sink_id, checkpoint, false, None, None, true)
    }

    /// Stages `data` as uncommitted data files of staging job `job` (a distributed append's
    /// task); returns the JSON of a [`floe::pending::PendingChange`].
    fn stage(&self, py: Python<'_>, data: Bound<'_, PyAny>, job: &str) -> PyResult<String> {
        let job = floe::txn::StagingJob::parse(job).map_err(to_py)?;
        let (_, batches) = batches_of(&data)?;
        let table = self.get();
        let r = run(py, async move {
            floe::pending::stage_append(&table, batches, &job).await
        })?;
        r.to_json().map_err(to_py)
    }

    /// Deletes the uncommitted files staging job `job` wrote (a failed distributed write
    /// whose tasks' results never reached the driver); returns their locations.
    fn discard_staging_job(&self, py: Python<'_>, job: &str) -> PyResult<Vec<String>> {
        let job = floe::txn::StagingJob::parse(job).map_err(to_py)?;
        let (cat, table) = (self.cat(), self.get());
        run(py, async move {
            floe::maintenance::discard_staging_job(&cat, &table, &job).await
        })
    }

    /// Folds `data` (a distributed upsert's task) and stages its winning upserts as
    /// uncommitted data files with the task's keys; returns the JSON of a
    /// [`floe::pending::PendingChange`] (`upsert`).
    fn stage_upsert(&self, py: Python<'_>, data: Bound<'_, PyAny>, job: &str) -> PyResult<String> {
        let job = floe::txn::StagingJob::parse(job).map_err(to_py)?;
        let changes = task_changes(&data)?;
        let table = self.get();
        let r = run(py, async move {
            floe::pending::stage_upsert(&table, &changes, &job).await
        })?;
        r.to_json().map_err(to_py)
    }

    /// Splits `data` (a distributed upsert's task, the table's engine folding rows) by key
    /// into `shards` files, folded first where the engine allows; returns the JSON of a
    /// [`floe::pending::PendingChange`] (`shuffle`).
    fn stage_shuffle(
        &self,
        py: Python<'_>,
        data: Bound<'_, PyAny>,
        shards: usize,
        job: &str,
    ) -> PyResult<String> {
        let job = floe::txn::StagingJob::parse(job).map_err(to_py)?;
        let changes = task_changes(&data)?;
        let table = self.get();
        let r = run(py, async move {
            floe::pending::stage_shuffle(&table, &changes, shards, &job).await
        })?;
        r.to_json().map_err(to_py)
    }

    /// Merges shard `shard` of the tasks' `stage_shuffle` changes (JSON, in task order) with
    /// the stored rows and stages the keys' new rows; returns the JSON of a
    /// [`floe::pending::PendingChange`] (`upsert`, committed by `commit_pending`).
    fn stage_merged_upsert(
        &self,
        py: Python<'_>,
        shares: Vec<String>,
        shard: usize,
        job: &str,
    ) -> PyResult<String> {
        let job = floe::txn::StagingJob::parse(job).map_err(to_py)?;
        let shares = parse_pending(&shares)?;
        let (cat, table) = (self.cat(), self.get());
        let r = run(py, async move {
            let t = cat.load_table(table.ident()).await?;
            floe::pending::stage_merged_upsert(&t, &shares, shard, &job).await
        })?;
        r.to_json().map_err(to_py)
    }

    /// Commits the tasks' pending changes (JSON, in task order) of one operation as one
    /// snapshot; returns the operation's result (the CLI's `append`, `upsert` or
    /// `rewrite-data-files --json` document). `sink_id` / `checkpoint`: an upsert's sink
    /// checkpoint; `partial`: a rewrite's groups may be a subset of its plan's.
    #[pyo3(signature = (changes, sink_id=None, checkpoint=None, partial=false))]
    fn commit_pending<'py>(
        &self,
        py: Python<'py>,
        changes: Vec<String>,
        sink_id: Option<String>,
        checkpoint: Option<i64>,
        partial: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let changes = parse_pending(&changes)?;
        let mut upsert = floe::keyed::UpsertOptions::default();
        upsert.sink_id = sink_id.clone();
        upsert.checkpoint = checkpoint;
        let options = floe::pending::CommitPendingOptions::new()
            .with_upsert(upsert)
            .with_partial_progress(partial);
        let cat = self.cat();
        let (name, target) = (self.get().name(), self.target(None));
        let started = Instant::now();
        let r = run(py, async move {
            floe::pending::commit_pending(&cat, &changes, &options).await
        })?;
        let v = match &r {
            floe::pending::PendingCommit::Append(r) => report::append(&name, r, started),
            floe::pending::PendingCommit::Upsert(r) => {
                report::upsert(&name, &sink_id, checkpoint, r, started)
            }
            floe::pending::PendingCommit::Rewrite(r) => {
                report::rewrite_data_files(&target, r, started)
            }
            _ => return Err(to_py(invalid("an operation this binding does not know"))),
        };
        match r.table() {
            Some(t) => self.set(t.clone()),
            None => self.reload(py)?,
        }
        to_py_json(py, &v)
    }

    /// Deletes every file the pending changes (JSON) wrote: changes that will not be
    /// committed, or shuffle shares once their shards are merged. Returns how many files
    /// they named.
    fn discard_pending(&self, py: Python<'_>, changes: Vec<String>) -> PyResult<usize> {
        let changes = parse_pending(&changes)?;
        let table = self.get();
        run(py, async move {
            floe::pending::discard_pending(&table, &changes).await
        })
    }

    /// Reads the scan whole as a `pyarrow.Table`.
    #[pyo3(signature = (row_filter=None, selected_fields=None, snapshot_id=None, r#ref=None,
        limit=None))]
    fn scan_to_arrow<'py>(
        &self,
        py: Python<'py>,
        row_filter: Option<String>,
        selected_fields: Option<Vec<String>>,
        snapshot_id: Option<i64>,
        r#ref: Option<String>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut scan = self.scan_of(row_filter.as_deref(), selected_fields, snapshot_id, r#ref)?;
        if let Some(n) = limit {
            scan = scan.limit(n);
        }
        let (schema, batches) = run(py, async move {
            let plan = scan.plan().await?;
            let schema = scan.output_schema(&plan)?;
            let out: Vec<RecordBatch> = scan.read(plan)?.try_collect().await?;
            Ok((schema, out))
        })?;
        to_pyarrow_table(py, schema, batches)
    }

    /// The scan's batches, pulled one at a time ([`ScanBatches`]).
    #[pyo3(signature = (row_filter=None, selected_fields=None, snapshot_id=None, r#ref=None))]
    fn scan_to_reader(
        &self,
        py: Python<'_>,
        row_filter: Option<String>,
        selected_fields: Option<Vec<String>>,
        snapshot_id: Option<i64>,
        r#ref: Option<String>,
    ) -> PyResult<ScanBatches> {
        let scan = self.scan_of(row_filter.as_deref(), selected_fields, snapshot_id, r#ref)?;
        let (schema, stream) = run(py, async move {
            let plan = scan.plan().await?;
            let schema = scan.output_schema(&plan)?;
            Ok((schema, scan.read(plan)?))
        })?;
        Ok(ScanBatches {
            schema,
            stream: Mutex::new(Some(stream)),
            done: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Counts the scan's rows (from metadata alone when it can).
    #[pyo3(signature = (row_filter=None, snapshot_id=None, r#ref=None))]
    fn scan_count(
        &self,
        py: Python<'_>,
        row_filter: Option<String>,
        snapshot_id: Option<i64>,
        r#ref: Option<String>,
    ) -> PyResult<u64> {
        let scan = self.scan_of(row_filter.as_deref(), None, snapshot_id, r#ref)?;
        run(py, async move { scan.count().await })
    }

    /// Plans a scan for a distributed reader: the snapshot, the output schema, and the
    /// data files in groups of about `target_bytes` (each group one read task), with their
    /// record counts and sizes.
    #[pyo3(signature = (row_filter=None, selected_fields=None, snapshot_id=None,
        target_bytes=134217728))]
    fn plan_file_groups<'py>(
        &self,
        py: Python<'py>,
        row_filter: Option<String>,
        selected_fields: Option<Vec<String>>,
        snapshot_id: Option<i64>,
        target_bytes: u64,
    ) -> PyResult<(Option<i64>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let scan = self.scan_of(row_filter.as_deref(), selected_fields, snapshot_id, None)?;
        let (snap, schema, files) = run(py, async move {
            let plan = scan.plan().await?;
            let schema = scan.output_schema(&plan)?;
            let files: Vec<(String, u64, u64)> = plan
                .files
                .iter()
                .map(|f| {
                    (
                        f.file.file_path().to_string(),
                        f.file.record_count(),
                        f.file.file_size_in_bytes(),
                    )
                })
                .collect();
            Ok((
                plan.snapshot.as_ref().map(|s| s.snapshot_id()),
                schema,
                files,
            ))
        })?;
        let mut groups: Vec<serde_json::Value> = Vec::new();
        let (mut cur, mut rows, mut bytes) = (Vec::new(), 0u64, 0u64);
        for (path, r, b) in files {
            if !cur.is_empty() && bytes + b > target_bytes {
                groups.push(json!({"files": cur, "record_count": rows, "size_in_bytes": bytes}));
                (cur, rows, bytes) = (Vec::new(), 0, 0);
            }
            cur.push(path);
            rows += r;
            bytes += b;
        }
        if !cur.is_empty() {
            groups.push(json!({"files": cur, "record_count": rows, "size_in_bytes": bytes}));
        }
        Ok((
            snap,
            schema.as_ref().to_pyarrow(py)?,
            to_py_json(py, &json!(groups))?,
        ))
    }

    /// Reads only `files` of the scan (one group of [`Table::plan_file_groups`]) with their
    /// deletes applied and the row filter evaluated, as a `pyarrow.Table`.
    #[pyo3(signature = (files, row_filter=None, selected_fields=None, snapshot_id=None))]
    fn read_files<'py>(
        &self,
        py: Python<'py>,
        files: Vec<String>,
        row_filter: Option<String>,
        selected_fields: Option<Vec<String>>,
        snapshot_id: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let scan = self.scan_of(row_filter.as_deref(), selected_fields, snapshot_id, None)?;
        let (schema, batches) = run(py, async move {
            let plan = scan.plan().await?.only_files(&files);
            let schema = scan.output_schema(&plan)?;
            let batches: Vec<RecordBatch> = scan.read(plan)?.try_collect().await?;
            Ok((schema, batches))
        })?;
        to_pyarrow_table(py, schema, batches)
    }

    /// Compacts data files in one process (the CLI's `rewrite-data-files --json`).
    #[pyo3(signature = (r#where=None, options=HashMap::new()))]
    fn rewrite_data_files<'py>(
        &self,
        py: Python<'py>,
        r#where: Option<String>,
        options: HashMap<String, String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let name = self.target(None);
        let pred = match &r#where {
            Some(f) => Some(
                floe::expr::file_selection(f, table.metadata().current_schema()).map_err(to_py)?,
            ),
            None => None,
        };
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::rewrite_data_files(&cat, &table, pred, &options, None).await
        })?;
        let v = report::rewrite_data_files(&name, &r, started);
        match r.table {
            Some(t) => self.set(t),
            None => self.reload(py)?,
        }
        to_py_json(py, &v)
    }

    /// Plans a distributed rewrite: the JSON of [`floe::maintenance::RewritePlan`] (the
    /// CLI's `rewrite-data-files --plan-only`).
    #[pyo3(signature = (r#where=None, options=HashMap::new()))]
    fn plan_rewrite(
        &self,
        py: Python<'_>,
        r#where: Option<String>,
        options: HashMap<String, String>,
    ) -> PyResult<String> {
        let table = self.get();
        let pred = match &r#where {
            Some(f) => Some(
                floe::expr::file_selection(f, table.metadata().current_schema()).map_err(to_py)?,
            ),
            None => None,
        };
        let planned = run(py, async move {
            if table.current_snapshot().is_none() {
                return Ok(None);
            }
            floe::maintenance::plan_rewrite(&table, pred, &options)
                .await
                .map(Some)
        })?;
        match planned {
            None => Ok("null".into()),
            Some(p) => serde_json::to_string(&p.plan).map_err(|e| to_py(e.into())),
        }
    }

    /// Rewrites file group `group` of a rewrite plan (JSON of `plan_rewrite`) and stages the
    /// new files; returns the JSON of a [`floe::pending::PendingChange`] (`rewrite`, the
    /// CLI's `--execute-task`).
    fn stage_rewrite(&self, py: Python<'_>, plan: String, group: usize) -> PyResult<String> {
        let plan: floe::maintenance::RewritePlan = serde_json::from_str(&plan)
            .map_err(|e| to_py(invalid(format!("rewrite plan: {e}"))))?;
        let cat = self.cat();
        let r = run(py, async move {
            floe::pending::stage_rewrite(&cat, &plan, group).await
        })?;
        r.to_json().map_err(to_py)
    }

    /// Merges position delete files (the CLI's `rewrite-position-delete-files --json`).
    #[pyo3(signature = (options=HashMap::new()))]
    fn rewrite_position_delete_files<'py>(
        &self,
        py: Python<'py>,
        options: HashMap<String, String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let name = self.target(None);
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::rewrite_position_delete_files(&cat, &table, &options).await
        })?;
        let v = report::rewrite_position_delete_files(&name, &r, started);
        match r.table {
            Some(t) => self.set(t),
            None => self.reload(py)?,
        }
        to_py_json(py, &v)
    }

    /// Rewrites the manifests (the CLI's `rewrite-manifests --json`).
    #[pyo3(signature = (target_size_bytes=None))]
    fn rewrite_manifests<'py>(
        &self,
        py: Python<'py>,
        target_size_bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let name = self.target(None);
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::rewrite_manifests(&cat, &table, target_size_bytes).await
        })?;
        let v = report::rewrite_manifests(&name, &r, started);
        match r.table {
            Some(t) => self.set(t),
            None => self.reload(py)?,
        }
        to_py_json(py, &v)
    }

    /// Expires snapshots (the CLI's `expire-snapshots --json`).
    #[pyo3(signature = (older_than_ms=None, retain_last=None, snapshot_ids=Vec::new(),
        dry_run=false))]
    fn expire_snapshots<'py>(
        &self,
        py: Python<'py>,
        older_than_ms: Option<i64>,
        retain_last: Option<usize>,
        snapshot_ids: Vec<i64>,
        dry_run: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let name = self.target(None);
        let mut o = floe::maintenance::ExpireOptions::default();
        o.older_than_ms = older_than_ms;
        o.retain_last = retain_last;
        o.snapshot_ids = snapshot_ids;
        o.dry_run = dry_run;
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::expire_snapshots(&cat, &table, &o).await
        })?;
        let v = report::expire_snapshots(&name, &r, dry_run, started);
        self.reload(py)?;
        to_py_json(py, &v)
    }

    /// Deletes orphan files (the CLI's `remove-orphan-files --json`).
    #[pyo3(signature = (older_than_ms=None, dry_run=false))]
    fn remove_orphan_files<'py>(
        &self,
        py: Python<'py>,
        older_than_ms: Option<i64>,
        dry_run: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let name = self.target(None);
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::remove_orphan_files(&cat, &table, older_than_ms, dry_run).await
        })?;
        to_py_json(py, &report::remove_orphan_files(&name, &r, started))
    }

    /// A sink writing this keyed table: `write` buffers rows, `commit` applies them as one
    /// batch through one key index kept between commits.
    #[pyo3(signature = (sink_id=None, evolve_schema=false))]
    fn sink(&self, sink_id: Option<String>, evolve_schema: bool) -> PyResult<Sink> {
        let table = self.get();
        floe::spec::keyed::KeyedSpec::of(table.metadata(), &table.name()).map_err(to_py)?;
        if let Some(s) = &sink_id {
            floe::spec::keyed::check_sink_id(s).map_err(to_py)?;
        }
        let mut writer = floe::keyed::KeyedWriter::new(&self.cat(), table.ident().clone())
            .with_evolve_schema(evolve_schema);
        if let Some(s) = &sink_id {
            writer = writer.with_sink_id(s.clone());
        }
        Ok(Sink {
            name: self.target(None),
            sink_id,
            writer,
            pending: Mutex::new(Vec::new()),
        })
    }

    /// Runs the maintenance the table's state and policy call for, under the table's
    /// maintenance lease (the CLI's `maintain --json`): a dict with `steps`, each with its
    /// `action`, `reason` and `counts`.
    #[pyo3(signature = (dry_run=false, max_rewrite_bytes=None))]
    fn maintain<'py>(
        &self,
        py: Python<'py>,
        dry_run: bool,
        max_rewrite_bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cat, table) = (self.cat(), self.get());
        let mut o = floe::maintenance::MaintainOptions::default().with_dry_run(dry_run);
        if let Some(b) = max_rewrite_bytes {
            o = o.with_max_rewrite_bytes(b);
        }
        let started = Instant::now();
        let r = run(py, async move {
            floe::maintenance::maintain(&cat, &table, &o).await
        })?;
        let mut v = serde_json::to_value(&r).map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!("maintain report: {e}"))
        })?;
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "elapsed_ms".into(),
                (started.elapsed().as_millis() as u64).into(),
            );
        }
        match r.table_after {
            Some(t) => self.set(t),
            None => self.reload(py)?,
        }
        to_py_json(py, &v)
    }

    /// Clones this table (metadata only) into `target` (the CLI's `clone --json`).
    #[pyo3(signature = (target, snapshot_id=None, r#ref=None, as_of_ms=None, replace=false,
        all_refs=false))]
    #[allow(clippy::too_many_arguments)]
    fn clone_to<'py>(
        &self,
        py: Python<'py>,
        target: String,
        snapshot_id: Option<i64>,
        r#ref: Option<String>,
        as_of_ms: Option<i64>,
        replace: bool,
        all_refs: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sel = SnapshotSelector::from_options(snapshot_id, r#ref, as_of_ms, SELECTOR_ARGS)
            .map_err(to_py)?;
        let (cat, source) = (self.cat(), self.get());
        let name = source.name();
        let target = parse_ident(&target).map_err(to_py)?;
        let started = Instant::now();
        let r = run(py, async move {
            let r = if all_refs {
                floe::txn::clone_table_all_refs(&cat, &source, &sel, &target).await
            } else {
                floe::txn::clone_table(&cat, &source, &sel, &target, replace).await
            };
            r.map_err(|e| match e.kind() {
                floe::ErrorKind::AlreadyExists => {
                    e.with_hint("pass replace=True to publish onto it")
                }
                _ => e,
            })
        })?;
        to_py_json(
            py,
            &report::clone(&name, &r, started.elapsed().as_millis() as u64),
        )
    }

    /// Merges a full snapshot into this (staging) table keeping the latest row per key
    /// (the CLI's `ingest-snapshot --json`).
    #[pyo3(signature = (data, key, version, strategy="change-aware".to_string(), publish=None,
        retain_days=None, memory_budget_bytes=1<<30))]
    #[allow(clippy::too_many_arguments)]
    fn ingest_snapshot<'py>(
        &self,
        py: Python<'py>,
        data: Bound<'py, PyAny>,
        key: Vec<String>,
        version: String,
        strategy: String,
        publish: Option<String>,
        retain_days: Option<u32>,
        memory_budget_bytes: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (_, batches) = batches_of(&data)?;
        let (cat, staging) = (self.cat(), self.get());
        let conformer =
            floe::write::Conformer::new(staging.metadata().current_schema(), &staging.name())
                .map_err(to_py)?;
        let mut o = floe::ingest::IngestOptions::new(key, version);
        o.strategy = strategy.parse().map_err(to_py)?;
        o.publish = publish
            .as_deref()
            .map(parse_ident)
            .transpose()
            .map_err(to_py)?;
        o.retain_days = retain_days;
        o.memory_budget_bytes = memory_budget_bytes;
        let name = self.target(None);
        let started = Instant::now();
        let r = run(py, async move {
            let conformed = batches.map(move |b| b.and_then(|b| conformer.conform(&b)));
            floe::ingest::ingest_snapshot(&cat, &staging, conformed, &o).await
        })?;
        let v = report::ingest_snapshot(&name, &r, started);
        self.reload(py)?;
        to_py_json(py, &v)
    }

    /// A metadata table (`snapshots`, `files`, `manifests`, …) as a `pyarrow.Table`.
    #[pyo3(signature = (name, snapshot_id=None))]
    fn inspect<'py>(
        &self,
        py: Python<'py>,
        name: String,
        snapshot_id: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let which = floe::scan::MetadataTable::parse(&name).ok_or_else(|| {
            to_py(invalid(format!(
                "no metadata table '{name}'; metadata tables: {}",
                floe::scan::MetadataTable::names()
            )))
        })?;
        let table = self.get();
        let b = run(py, async move {
            floe::scan::read_metadata_table(&table, which, snapshot_id).await
        })?;
        to_pyarrow_table(py, b.schema(), vec![b])
    }

    /// Applies ALTER clauses (`"ADD COLUMN c long, SET TBLPROPERTIES ('k'='v')"`, as after
    /// `ALTER TABLE t`) in one commit (the CLI's `alter --json` result).
    fn alter<'py>(&self, py: Python<'py>, clauses: String) -> PyResult<Bound<'py, PyAny>> {
        let changes = floe::spec::parse_alter_clause(&clauses).map_err(to_py)?;
        let (cat, t) = (self.cat(), self.get());
        let name = t.name();
        let id = parse_ident(&name).map_err(to_py)?;
        let r = run(py, async move {
            floe::txn::alter_table(&cat, &id, &changes).await
        })?;
        let v = report::alter(&name, &r);
        self.set(r.table);
        to_py_json(py, &v)
    }

    /// Changes a ref or the current snapshot in one commit (the CLI's `branch`, `tag`,
    /// `rollback` and `set-current-snapshot --json` results). `action`: `create-branch`,
    /// `replace-branch`, `drop-branch`, `fast-forward` (branch `name` to ref `to`),
    /// `create-tag`, `replace-tag`, `drop-tag`, `rollback-to-snapshot`,
    /// `rollback-to-timestamp` (`timestamp_ms`), `set-current-snapshot`.
    #[pyo3(signature = (action, name=None, snapshot_id=None, to=None, timestamp_ms=None))]
    fn manage_ref<'py>(
        &self,
        py: Python<'py>,
        action: String,
        name: Option<String>,
        snapshot_id: Option<i64>,
        to: Option<String>,
        timestamp_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        use floe::spec::snapshot_refs::{RefChange, Retention};
        let need = |what: &str, v: Option<String>| {
            v.ok_or_else(|| to_py(invalid(format!("{action} needs {what}"))))
        };
        let need_id = |v: Option<i64>, what: &str| {
            v.ok_or_else(|| to_py(invalid(format!("{action} needs {what}"))))
        };
        let (change, reference, ref_type) = match action.as_str() {
            "create-branch" => {
                let n = need("a branch name", name)?;
                (
                    RefChange::CreateBranch {
                        name: n.clone(),
                        snapshot: snapshot_id,
                        retention: Retention::default(),
                    },
                    n,
                    "branch",
                )
            }
            "replace-branch" => {
                let n = need("a branch name", name)?;
                (
                    RefChange::ReplaceBranch {
                        name: n.clone(),
                        snapshot: need_id(snapshot_id, "snapshot_id=")?,
                        retention: None,
                    },
                    n,
                    "branch",
                )
            }
            "drop-branch" => {
                let n = need("a branch name", name)?;
                (RefChange::DropBranch(n.clone()), n, "branch")
            }
            "fast-forward" => {
                let n = need("a branch name", name)?;
                (
                    RefChange::FastForward {
                        name: n.clone(),
                        to: need("to= (the ref to fast-forward to)", to)?,
                    },
                    n,
                    "branch",
                )
            }
            "create-tag" => {
                let n = need("a tag name", name)?;
                (
                    RefChange::CreateTag {
                        name: n.clone(),
                        snapshot: snapshot_id,
                        retention: Retention::default(),
                    },
                    n,
                    "tag",
                )
            }
            "replace-tag" => {
                let n = need("a tag name", name)?;
                (
                    RefChange::ReplaceTag {
                        name: n.clone(),
                        snapshot: need_id(snapshot_id, "snapshot_id=")?,
                        retention: None,
                    },
                    n,
                    "tag",
                )
            }
            "drop-tag" => {
                let n = need("a tag name", name)?;
                (RefChange::DropTag(n.clone()), n, "tag")
            }
            "rollback-to-snapshot" => (
                RefChange::RollbackTo(need_id(snapshot_id, "snapshot_id=")?),
                "main".to_string(),
                "branch",
            ),
            "rollback-to-timestamp" => (
                RefChange::RollbackToTime(need_id(timestamp_ms, "a timestamp")?),
                "main".to_string(),
                "branch",
            ),
            "set-current-snapshot" => (
                RefChange::SetCurrentSnapshot(need_id(snapshot_id, "snapshot_id=")?),
                "main".to_string(),
                "branch",
            ),
            other => return Err(to_py(invalid(format!("unknown ref action '{other}'")))),
        };
        let (cat, t) = (self.cat(), self.get());
        let table = t.name();
        let before = t.metadata().current_snapshot_id();
        let id = parse_ident(&table).map_err(to_py)?;
        let new = run(py, async move {
            floe::txn::manage_refs(&cat, &id, &change).await
        })?;
        let at = floe::spec::refs(new.metadata())
            .into_iter()
            .find(|(n, _)| *n == reference)
            .map(|(_, r)| r.snapshot_id);
        let v = json!({
            "table": table,
            "ref": reference,
            "ref_type": ref_type,
            "snapshot_id": at,
            "current_snapshot_id": new.metadata().current_snapshot_id(),
            "previous_snapshot_id": before,
        });
        if t.branch() == "main" {
            self.set(new);
        } else {
            self.reload(py)?;
        }
        to_py_json(py, &v)
    }

    /// The changelog between two snapshots as a `pyarrow.Table` (the CLI's `changes`):
    /// rows with `_change_type`, `_change_ordinal` and `_commit_snapshot_id`.
    #[pyo3(signature = (from_snapshot_id=None, to_snapshot_id=None, start_timestamp_ms=None,
        end_timestamp_ms=None, identifier_columns=None, compute_updates=None,
        net_changes=false))]
    #[allow(clippy::too_many_arguments)]
    fn changes<'py>(
        &self,
        py: Python<'py>,
        from_snapshot_id: Option<i64>,
        to_snapshot_id: Option<i64>,
        start_timestamp_ms: Option<i64>,
        end_timestamp_ms: Option<i64>,
        identifier_columns: Option<Vec<String>>,
        compute_updates: Option<bool>,
        net_changes: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let range = floe::scan::ChangelogRange {
            from_snapshot_exclusive: from_snapshot_id,
            from_timestamp_ms: start_timestamp_ms,
            to_snapshot: to_snapshot_id,
            to_timestamp_ms: end_timestamp_ms,
        };
        let mut log = floe::scan::Changelog::new(&self.get(), range).net_changes(net_changes);
        if let Some(c) = identifier_columns {
            log = log.identifier_columns(c);
        }
        if let Some(on) = compute_updates {
            log = log.compute_updates(on);
        }
        let schema = log.schema().map_err(to_py)?;
        let batches = run(py, async move { log.read().await })?;
        to_pyarrow_table(py, schema, batches)
    }
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    fn upsert_changes<'py>(
        &self,
        py: Python<'py>,
        changes: floe::keyed::ChangeBatch,
        sink_id: Option<String>,
        checkpoint: Option<i64>,
        evolve_schema: bool,
        branch: Option<String>,
        wap_id: Option<String>,
        pre_folded: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let table = self.get();
        let mut options = floe::keyed::UpsertOptions::default()
            .with_evolve_schema(evolve_schema)
            .with_pre_folded(pre_folded);
        options.sink_id = sink_id.clone();
        options.checkpoint = checkpoint;
        match (&branch, table.branch()) {
            (Some(b), _) => options = options.with_branch(b.clone()),
            (None, "main") => {}
            (None, b) => options = options.with_branch(b.to_string()),
        }
        if let Some(w) = &wap_id {
            options = options.with_wap_id(w.clone());
        }
        let ident = table.ident().clone();
        let cat = self.cat();
        let name = self.target(None);
        let started = Instant::now();
        let r = run(py, async move {
            floe::keyed::upsert(&cat, &ident, &changes, &options)
                .await
                .map_err(|e| {
                    if e.to_string().contains("let the upsert evolve the schema") {
                        e.with_hint("pass evolve_schema=True to add new columns")
                    } else {
                        e
                    }
                })
        })?;
        let v = report::upsert(&name, &sink_id, checkpoint, &r, started);
        if branch.is_none() && wap_id.is_none() && table.branch() == "main" {
            self.set(r.table.clone());
        }
        to_py_json(py, &v)
    }
}

/// A keyed table's sink (`Table.sink()`): rows written are buffered, `commit` applies them
/// as one batch through one [`floe::keyed::KeyedWriter`], whose key index stays in memory
/// between commits (the CLI's `floe sink` in a Python process).
#[pyclass(module = "floe._floe", frozen)]
pub struct Sink {
    name: String,
    sink_id: Option<String>,
    writer: floe::keyed::KeyedWriter,
    pending: Mutex<Vec<RecordBatch>>,
}

impl Sink {
    fn take(&self) -> Vec<RecordBatch> {
        match self.pending.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        }
    }
}

#[pymethods]
impl Sink {
    /// Buffers `data` (anything `Table.append` takes) for the next commit; returns the
    /// rows buffered so far.
    fn write(&self, data: Bound<'_, PyAny>) -> PyResult<usize> {
        let (_, batches) = batches_of(&data)?;
        let mut got = Vec::new();
        for b in batches {
            got.push(b.map_err(to_py)?);
        }
        let mut g = match self.pending.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        g.extend(got);
        Ok(g.iter().map(|b| b.num_rows()).sum())
    }

    /// Applies the buffered rows as one batch (with `checkpoint`, exactly once for this
    /// sink id); the CLI's `upsert --json` document. Nothing buffered: nothing is done.
    #[pyo3(signature = (checkpoint=None))]
    fn commit<'py>(&self, py: Python<'py>, checkpoint: Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        if checkpoint.is_some() && self.sink_id.is_none() {
            return Err(to_py(invalid(format!(
                "sink of {}: a checkpoint needs the sink_id it belongs to (Table.sink(sink_id=...)); \
                 nothing was committed",
                self.name
            ))));
        }
        let batches = self.take();
        let writer = self.writer.clone();
        let started = Instant::now();
        let r = run(py, async move { writer.apply(batches, checkpoint).await })?;
        let v = report::upsert(&self.name, &self.sink_id, checkpoint, &r, started);
        to_py_json(py, &v)
    }

    /// Rows buffered and not committed.
    fn pending_rows(&self) -> usize {
        match self.pending.lock() {
            Ok(g) => g.iter().map(|b| b.num_rows()).sum(),
            Err(p) => p.into_inner().iter().map(|b| b.num_rows()).sum(),
        }
    }

    /// Drops the buffered rows (nothing of them is committed); returns how many.
    fn discard(&self) -> usize {
        self.take().iter().map(|b| b.num_rows()).sum()
    }

    /// The checkpoint the table holds for this sink.
    fn committed_checkpoint(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let writer = self.writer.clone();
        run(py, async move { writer.committed_checkpoint().await })
    }

    /// Brings the sink's key index up to the table after maintenance in this process
    /// (`Table.maintain()`), so the next commit does not pay for it: `"caught-up"`,
    /// `"current"`, `"dropped"` (rebuilt by the next commit) or `"none"`.
    fn refresh(&self, py: Python<'_>) -> PyResult<&'static str> {
        let writer = self.writer.clone();
        run(
            py,
            async move { writer.refresh().await.map(|r| r.as_str()) },
        )
    }
}
