//! The row delta (Iceberg's `RowDelta`): the row-level write engine shared by DELETE, UPDATE
//! and MERGE (`dml`), keyed upserts (`keyed`) and snapshot ingestion (`ingest`).
//!
//! 1. Plan the files that may hold affected rows (pruned by the operation's filter).
//! 2. Read their live rows with positions; a [`RowChanger`] says which rows go away and which
//!    new rows replace them (written as new data files, partitioned by the current spec).
//! 3. Copy-on-write: rewrite each touched file without its removed rows.
//!    Merge-on-read: position delete files (v2) or deletion vectors (v3, merged with the
//!    file's previous one) for the removed rows.
//!    Either way, a file that loses every row is dropped whole.
//! 4. Commit one snapshot, validated against what was committed meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use futures::StreamExt;
use iceberg::expr::{Bind, Predicate};
use iceberg::spec::Operation;
use roaring::RoaringTreemap;

use super::{
    commit_or_discard, FileKey, NoConcurrentCommit, PropertyUpdate, RowLevelValidation,
    SnapshotProducer, Validation,
};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{PlannedFile, Scan, ScanPlan, SnapshotSelector};
use crate::spec::{
    DataContentType, DataFile, DeleteGranularity, DistributionMode, FormatVersion, IsolationLevel,
    PartitionSpec, Struct, WriteMode,
};
use crate::table::Table;
use crate::write::{DataWriter, DeleteFileWriter};

/// Deleted positions bound for one delete file: the spec and partition it is written for,
/// and each referenced data file's positions.
type PositionGroup = (Arc<PartitionSpec>, Struct, Vec<(String, RoaringTreemap)>);

/// Which statement runs (selects the `write.*.mode` and `write.*.isolation-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowLevelKind {
    /// DELETE.
    Delete,
    /// UPDATE.
    Update,
    /// MERGE.
    Merge,
}

impl RowLevelKind {
    fn name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Update => "update",
            Self::Merge => "merge",
        }
    }
}

/// Decides, batch by batch, what happens to the live rows of the files read.
pub(crate) trait RowChanger: Send + Sync {
    /// Columns the changer reads (`None`: all of them).
    fn columns(&self) -> Option<Vec<String>>;

    /// For a batch of live rows: which rows go away (`true`), and new rows to write
    /// (deleted rows' replacements; any column order, matched to the table by name).
    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)>;

    /// [`RowChanger::change`] for a batch of planned file `file`; a file's batches arrive in
    /// row order (batches of different files may interleave).
    fn change_in_file(
        &mut self,
        _file: usize,
        batch: &RecordBatch,
    ) -> Result<(BooleanArray, Option<RecordBatch>)> {
        self.change(batch)
    }

    /// v3: whether the batches should end with the rows' `_row_id` and
    /// `_last_updated_sequence_number` (an UPDATE keeps a row's id).
    fn wants_row_lineage(&self) -> bool {
        false
    }

    /// Whether every row of a file goes away, judged from `constants`: the values of
    /// [`RowChanger::columns`], which are the same on every row of the file (its identity
    /// partition values). `None` when that cannot be told without reading the rows.
    fn removes_all(&self, _constants: &RecordBatch) -> Result<Option<bool>> {
        Ok(None)
    }

    /// New rows to write once every row was seen (MERGE's `WHEN NOT MATCHED`).
    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    /// Partition at a time: files are read one partition after another, each between
    /// [`RowChanger::start_group`] and [`RowChanger::end_group`], so the changer's state can
    /// be bounded by a partition. Default: every file in one pass.
    fn grouped(&self) -> bool {
        false
    }

    /// Called instead of the groups when a planned file is of another partition spec than
    /// the table's default (its partition says nothing about where the changer's rows go):
    /// every file is then read in one pass, or the changer refuses.
    fn ungroup(&mut self) -> Result<()> {
        Ok(())
    }

    /// The files of partition `partition` (of the default spec, `spec_id`) are read next;
    /// `false` skips them (nothing in this partition changes).
    fn start_group(&mut self, _spec_id: i32, _partition: &Struct) -> Result<bool> {
        Ok(true)
    }

    /// New rows to write once the group's rows were seen.
    fn end_group(&mut self) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    /// After every group: new rows for partitions the table has no file in, one partition
    /// per call, until `None`.
    fn next_new_group(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        Ok(None)
    }
}

/// What a row-level statement did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RowLevelResult {
    /// The table at the new version (unchanged if nothing was affected).
    pub table: Table,
    /// The new snapshot (`None` when no row was affected).
    pub snapshot_id: Option<i64>,
    /// The mode used.
    pub mode: WriteMode,
    /// Rows removed (deleted, or replaced by their updated version).
    pub removed_rows: u64,
    /// New rows written: updated versions and inserts.
    pub written_rows: u64,
    /// Unchanged rows copied into rewritten files (copy-on-write).
    pub rewritten_rows: u64,
    /// Data files dropped (rewritten or emptied).
    pub removed_data_files: usize,
    /// Data files added.
    pub added_data_files: usize,
    /// Delete files added.
    pub added_delete_files: usize,
    /// Bytes of every added file.
    pub written_bytes: u64,
    /// A MERGE whose source was split by the table's partitions and merged one partition at
    /// a time (`None`: read in one pass).
    pub aligned: Option<Alignment>,
    /// A MERGE: the target rows its clauses updated and deleted, and the source rows it
    /// inserted (`None` for other statements).
    pub merged: Option<MergeCounts>,
}

/// What a MERGE's clauses did, row by row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MergeCounts {
    /// Target rows an `UPDATE` clause (matched or not matched by source) rewrote.
    pub updated: u64,
    /// Target rows a `DELETE` clause removed.
    pub deleted: u64,
    /// Source rows a `WHEN NOT MATCHED THEN INSERT` clause added.
    pub inserted: u64,
}

/// How a partition-aligned MERGE went: the source split by the table's default partition
/// spec (every partition source column is an ON key), then, per partition, only that
/// partition's target files read against only its source rows.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Alignment {
    /// Partitions the source rows fall in.
    pub source_partitions: u64,
    /// Partitions whose target files were read (those holding source rows; every one with
    /// `WHEN NOT MATCHED BY SOURCE`).
    pub target_partitions_read: u64,
    /// Bytes of source rows written to temporary files beyond the memory budget.
    pub spilled_bytes: u64,
}

/// Per planned file: rows seen and positions removed.
#[derive(Default)]
struct FileState {
    live_rows: u64,
    removed: RoaringTreemap,
}

impl FileState {
    /// `None` when the file lost no row; else whether it lost every row (it is dropped, not
    /// rewritten or given deletes).
    fn lost_every_row(&self) -> Option<bool> {
        (!self.removed.is_empty()).then(|| self.removed.len() == self.live_rows)
    }
}

/// Step 1's result: what the change reads, and what it removes without reading.
struct RowLevelPlan {
    mode: WriteMode,
    isolation: IsolationLevel,
    version: FormatVersion,
    /// The snapshot read (`None`: an empty table); the copy-on-write rescan reads it too.
    snapshot_id: Option<i64>,
    /// The configured scan (columns, row lineage) and its plan.
    scan: Scan,
    plan: ScanPlan,
    /// The files read (the plan's, in its order) and their already-deleted positions
    /// (`None` also where known positions made them unneeded: see [`plan`]).
    files: Vec<PlannedFile>,
    previous: Vec<Option<RoaringTreemap>>,
    /// Files the changer removes whole judging by partition values alone.
    dropped: Vec<PlannedFile>,
    /// `plan` projects every column (its files can be read again for a rewrite).
    all_columns: bool,
    /// `plan` was moved out to be read whole.
    plan_moved: bool,
}

/// Step 3's input: what happens to each file, decided from the rows located.
#[derive(Debug, Default)]
struct Decision {
    /// Data files (and the delete files only they use) the snapshot removes.
    removed: Vec<FileKey>,
    /// Files that lost rows (for conflict validation).
    touched: Vec<(DataFile, Arc<PartitionSpec>)>,
    removed_rows: u64,
    removed_data_files: usize,
    /// Copy-on-write: files rewritten without these positions.
    rewrite: Vec<(usize, RoaringTreemap)>,
    /// Merge-on-read: files keeping their rows, with the positions to delete.
    new_positions: Vec<(usize, RoaringTreemap)>,
}

/// Runs a row-level change on `table`. `filter` prunes the files read (it must hold for every
/// row the changer may remove; `None` reads the whole table).
pub(crate) async fn run(
    catalog: &Catalog,
    table: &Table,
    kind: RowLevelKind,
    filter: Option<Predicate>,
    changer: &mut dyn RowChanger,
) -> Result<RowLevelResult> {
    stage(table, kind, filter, changer)
        .await?
        .commit(catalog, table, CommitExtras::default())
        .await
}

/// A row-level change whose files are written, not yet committed.
pub(crate) struct Staged {
    result: RowLevelResult,
    filter: Option<Predicate>,
    isolation: IsolationLevel,
    decision: Decision,
    added_data: Vec<DataFile>,
    /// Data files written elsewhere, with the partition spec each was written with.
    added_elsewhere: Vec<(i32, DataFile)>,
    added_deletes: Vec<(i32, DataFile)>,
    written: Vec<String>,
}

/// What a caller commits with a staged change besides its files.
#[derive(Default)]
pub(crate) struct CommitExtras {
    /// Snapshot summary entries.
    pub summary: Vec<(String, String)>,
    /// Table property changes (each conditional on the base).
    pub properties: Vec<PropertyUpdate>,
    /// A new current schema (derived from schema id `.0`).
    pub schema: Option<(i32, crate::spec::Schema)>,
    /// Other files the caller wrote for this commit (deleted if it does not commit).
    pub written: Vec<String>,
    /// Refuse any commit since the base (the change is then planned again) instead of
    /// validating by isolation level.
    pub no_concurrent_commit: bool,
}

impl CommitExtras {
    /// Nothing to commit (a property update that keeps its value only guards the commit).
    fn is_empty(&self) -> bool {
        self.summary.is_empty()
            && self.properties.iter().all(|u| u.value == u.expected)
            && self.schema.is_none()
    }
}

impl Staged {
    /// The data files the change adds.
    pub(crate) fn added_data_files(&self) -> impl Iterator<Item = &DataFile> {
        self.added_data
            .iter()
            .chain(self.added_elsewhere.iter().map(|(_, f)| f))
    }

    /// Adds data files written elsewhere (a distributed upsert's tasks), each with the
    /// partition spec it was written with (the table's default may have changed since), to
    /// the change; `written`: those of them to delete if the change is given up.
    pub(crate) fn add_data_files(
        &mut self,
        files: impl IntoIterator<Item = (i32, DataFile)>,
        written: Vec<String>,
    ) {
        for (spec_id, f) in files {
            self.result.added_data_files += 1;
            self.result.written_rows += f.record_count();
            self.result.written_bytes += f.file_size_in_bytes();
            self.added_elsewhere.push((spec_id, f));
        }
        self.written.extend(written);
    }

    /// Whether the change rewrites files (copy-on-write): rows of kept files move.
    pub(crate) fn rewrites_files(&self) -> bool {
        self.result.rewritten_rows > 0
    }

    /// Deletes the staged files (the change is given up).
    pub(crate) async fn abort(self, table: &Table) {
        for p in &self.written {
            let _ = table.storage().delete(p).await;
        }
    }

    /// Commits the staged change with `extras` onto `table` (the base it was staged from);
    /// nothing happens when it changes nothing and `extras` is empty.
    pub(crate) async fn commit(
        self,
        catalog: &Catalog,
        table: &Table,
        extras: CommitExtras,
    ) -> Result<RowLevelResult> {
        let mut result = self.result;
        let d = self.decision;
        if d.removed.is_empty()
            && self.added_data.is_empty()
            && self.added_elsewhere.is_empty()
            && self.added_deletes.is_empty()
            && extras.is_empty()
        {
            return Ok(result);
        }
        let mut written = self.written;
        written.extend(extras.written.iter().cloned());
        let (t, id) = commit_change(
            catalog,
            table,
            self.filter.as_ref(),
            self.isolation,
            d,
            self.added_data,
            self.added_elsewhere,
            self.added_deletes,
            &written,
            extras,
        )
        .await?;
        result.table = t;
        result.snapshot_id = Some(id);
        Ok(result)
    }
}

/// Steps 1-4 of [`run`]: the change planned, located, decided and its files written.
pub(crate) async fn stage(
    table: &Table,
    kind: RowLevelKind,
    filter: Option<Predicate>,
    changer: &mut dyn RowChanger,
) -> Result<Staged> {
    stage_with(table, kind, filter, Locate::Scan(changer)).await
}

/// [`stage`] for a change whose removed rows are already known (from a key index): the
/// positions to remove per data file path, and the new rows. No data file is read (but
/// copy-on-write rewrites). A path that is not a live data file of `table` is a conflict.
pub(crate) async fn stage_known(
    table: &Table,
    kind: RowLevelKind,
    removed: HashMap<String, RoaringTreemap>,
    rows: Vec<RecordBatch>,
) -> Result<Staged> {
    stage_with(table, kind, None, Locate::Known { removed, rows }).await
}

/// How step 2 finds the removed rows.
enum Locate<'a> {
    /// By reading the planned files through a changer.
    Scan(&'a mut dyn RowChanger),
    /// Given.
    Known {
        removed: HashMap<String, RoaringTreemap>,
        rows: Vec<RecordBatch>,
    },
}

/// Reads nothing: the changer of a [`Locate::Known`] plan.
struct ReadsNothing;

impl RowChanger for ReadsNothing {
    fn columns(&self) -> Option<Vec<String>> {
        Some(vec![])
    }
    fn change(&mut self, b: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        Ok((BooleanArray::from(vec![false; b.num_rows()]), None))
    }
}

/// Step 2 for known positions: each file's state from its record count and deletes.
fn known_states(
    p: &RowLevelPlan,
    mut removed: HashMap<String, RoaringTreemap>,
    table: &Table,
) -> Result<Vec<FileState>> {
    let mut states = Vec::with_capacity(p.files.len());
    for (i, f) in p.files.iter().enumerate() {
        let previous = p.previous[i].as_ref().map(|r| r.len()).unwrap_or(0);
        let mut st = FileState {
            live_rows: f.file.record_count().saturating_sub(previous),
            removed: removed.remove(f.file.file_path()).unwrap_or_default(),
        };
        if let Some(prev) = &p.previous[i] {
            st.removed -= prev;
        }
        states.push(st);
    }
    if let Some(path) = removed.keys().next() {
        return Err(Error::new(
            crate::ErrorKind::Conflict,
            format!(
                "data file '{path}' is no longer live in table {} (changed by another commit)",
                table.name()
            ),
        ));
    }
    Ok(states)
}

async fn stage_with(
    table: &Table,
    kind: RowLevelKind,
    filter: Option<Predicate>,
    mut locator: Locate<'_>,
) -> Result<Staged> {
    // A grouped copy-on-write change rewrites one partition after another: one lane encodes
    // a partition while the next is read, so the writer holds one partition, not one per lane.
    let grouped = matches!(&locator, Locate::Scan(c) if c.grouped());
    let data = match grouped && mode_of(table, kind)?.0 == WriteMode::CopyOnWrite {
        true => DataWriter::with_lanes(table, 1)?,
        false => DataWriter::new(table)?,
    };
    let mut data = data.with_distribution(distribution(table, kind)?);
    if table.metadata().format_version() == FormatVersion::V3 {
        // Rows copied by copy-on-write keep their lineage; new and updated rows get new row
        // ids (their lineage columns are NULL, so they inherit the new file's).
        data = data.with_row_lineage(table)?;
    }
    let mut deletes = DeleteFileWriter::new(table)?;
    let staged = async {
        // Known rows are encoded (on the writer's lanes) while the plan loads deletes.
        if let Locate::Known { rows, .. } = &mut locator {
            write_all(&mut data, std::mem::take(rows)).await?;
        }
        let nothing = ReadsNothing;
        let (changer_for_plan, known): (&dyn RowChanger, _) = match &locator {
            Locate::Scan(c) => (&**c, None),
            Locate::Known { removed, .. } => (&nothing, Some(removed)),
        };
        let mut p = plan(table, kind, filter.as_ref(), changer_for_plan, known).await?;
        let located = match &mut locator {
            Locate::Scan(changer) => locate(table, &mut p, &mut **changer, &mut data).await?,
            Locate::Known { removed, .. } => Located {
                states: known_states(&p, std::mem::take(removed), table)?,
                ..Located::default()
            },
        };
        let mut d = decide(&p.files, &p.dropped, located.states, p.mode);
        // Files a grouped read rewrote already, group by group.
        d.rewrite.retain(|(i, _)| !located.rewritten.contains(i));
        let rewritten_rows =
            located.rewritten_rows + rewrite_files(table, &p, &d.rewrite, &mut data).await?;
        let positions = std::mem::take(&mut d.new_positions);
        let granularity = table.properties()?.delete_granularity;
        let added_deletes =
            write_deletes(&p, granularity, positions, &mut deletes, &mut d.removed).await?;
        Ok::<_, Error>((p.mode, p.isolation, d, rewritten_rows, added_deletes))
    }
    .await;
    let (mode, isolation, d, rewritten_rows, added_deletes) = match staged {
        Ok(s) => s,
        Err(e) => {
            data.abort(table.storage()).await;
            deletes.abort().await;
            return Err(e);
        }
    };
    let written_rows = data.rows_written() - rewritten_rows;
    let added_data = match data.close().await {
        Ok(f) => f,
        Err(e) => {
            deletes.abort().await;
            return Err(e);
        }
    };
    // Deletion vectors share a Puffin file: count each file once.
    let mut seen = std::collections::HashSet::new();
    let written_bytes = added_data
        .iter()
        .chain(added_deletes.iter().map(|(_, f)| f))
        .filter(|f| seen.insert(f.file_path().to_string()))
        .map(|f| f.file_size_in_bytes())
        .sum::<u64>();
    let result = RowLevelResult {
        table: table.clone(),
        snapshot_id: None,
        mode,
        removed_rows: d.removed_rows,
        written_rows,
        rewritten_rows,
        removed_data_files: d.removed_data_files,
        added_data_files: added_data.len(),
        added_delete_files: added_deletes.len(),
        written_bytes,
        aligned: None,
        merged: None,
    };
    let written: Vec<String> = added_data
        .iter()
        .map(|f| f.file_path().to_string())
        .chain(deletes.written().iter().cloned())
        .collect();
    Ok(Staged {
        result,
        filter,
        isolation,
        decision: d,
        added_data,
        added_elsewhere: Vec::new(),
        added_deletes,
        written,
    })
}

/// How the rows a row-level operation writes are spread over the writer's lanes
/// (`write.{delete,update,merge}.distribution-mode`, Iceberg Spark's defaults).
fn distribution(table: &Table, kind: RowLevelKind) -> Result<DistributionMode> {
    let props = table.properties()?;
    let md = table.metadata();
    Ok(match kind {
        RowLevelKind::Delete => props.delete_distribution,
        RowLevelKind::Update => props.update_distribution,
        RowLevelKind::Merge => props.merge_distribution(
            props.merge_mode,
            !md.default_partition_spec().is_unpartitioned(),
            !md.default_sort_order().fields.is_empty(),
        ),
    })
}

/// The statement's `write.*.mode` and `write.*.isolation-level`.
fn mode_of(table: &Table, kind: RowLevelKind) -> Result<(WriteMode, IsolationLevel)> {
    let props = table.properties()?;
    Ok(match kind {
        RowLevelKind::Delete => (props.delete_mode, props.delete_isolation),
        RowLevelKind::Update => (props.update_mode, props.update_isolation),
        RowLevelKind::Merge => (props.merge_mode, props.merge_isolation),
    })
}

/// A scan of `table` at `snapshot_id` (the current state of an empty table when `None`).
fn scan_at(table: &Table, snapshot_id: Option<i64>) -> Scan {
    match snapshot_id {
        // The rows are rewritten in the current schema (an ALTER since the snapshot
        // renamed, dropped, widened or added columns).
        Some(id) => Scan::new(table)
            .snapshot(SnapshotSelector::Id(id))
            .in_current_schema(),
        None => Scan::new(table),
    }
}

/// Step 1, plan: the mode, and the files that may hold affected rows (pruned by `filter`);
/// files the changer removes whole by their identity partition values are not read. With
/// `known` removed positions, only the deletes the decision needs are read: those of
/// removed-from files under v3 (the new deletion vector holds the old positions) or
/// copy-on-write, and under v2 merge-on-read those of files that could lose their last live
/// row (their file-scoped delete files' record counts bound what they already lost).
async fn plan(
    table: &Table,
    kind: RowLevelKind,
    filter: Option<&Predicate>,
    changer: &dyn RowChanger,
    known: Option<&HashMap<String, RoaringTreemap>>,
) -> Result<RowLevelPlan> {
    let (mode, isolation) = mode_of(table, kind)?;
    let version = table.metadata().format_version();
    if mode == WriteMode::MergeOnRead && version == FormatVersion::V1 {
        return Err(Error::unsupported(format!(
            "table {} is format v1, which has no delete files, so write.{}.mode=merge-on-read cannot apply; \
             upgrade it (format-version=2) or use copy-on-write",
            table.name(),
            kind.name()
        )));
    }
    let snapshot_id = table.current_snapshot().map(|s| s.snapshot_id());
    let mut scan = scan_at(table, snapshot_id);
    if let Some(f) = filter {
        scan = scan.prune(f.clone());
    }
    if let Some(cols) = changer.columns() {
        scan = scan.select(cols);
    }
    if version == FormatVersion::V3 && changer.wants_row_lineage() {
        scan = scan.with_row_lineage();
    }
    let mut plan = scan.plan_without_deletes().await?.without_row_filter();
    match known {
        None => plan.load_deletes(|_| true).await?,
        Some(removed) => {
            let v2_merge_on_read = version == FormatVersion::V2 && mode == WriteMode::MergeOnRead;
            plan.load_deletes(|f| match removed.get(f.file.file_path()) {
                None => false,
                Some(_) if !v2_merge_on_read => true,
                Some(r) => {
                    // Only the file's own delete files count: a partition-scoped one's
                    // records are spread over the partition's files, so it bounds nothing,
                    // and a file that loses its last live row that way keeps position
                    // deletes for all its rows (as Spark leaves it) until a compaction.
                    let lost_at_most: u64 = f
                        .deletes
                        .iter()
                        .filter(|d| crate::scan::is_file_scoped(&d.file))
                        .map(|d| d.file.record_count())
                        .fold(0, u64::saturating_add);
                    r.len().saturating_add(lost_at_most) >= f.file.record_count()
                }
            })
            .await?
        }
    }
    let mut dropped: Vec<PlannedFile> = Vec::new();
    if let Some(cols) = changer.columns() {
        let arrow = table.arrow_schema()?;
        // A file with deletes is read instead: its live rows are what the statement removes
        // (its record count also counts rows deleted before).
        for f in plan.files.iter().filter(|f| f.deletes.is_empty()) {
            if let Some(row) = identity_row(table, &arrow, f, &cols)? {
                if changer.removes_all(&row)? == Some(true) {
                    dropped.push(f.clone());
                }
            }
        }
        let gone: std::collections::HashSet<String> = dropped
            .iter()
            .map(|f| f.file.file_path().to_string())
            .collect();
        plan.retain(|p| !gone.contains(p.file.file_path()));
    }
    let files = plan.files.clone();
    let previous = (0..files.len())
        .map(|i| plan.deleted_positions(i).flatten().cloned())
        .collect();
    Ok(RowLevelPlan {
        mode,
        isolation,
        version,
        snapshot_id,
        scan,
        plan,
        files,
        previous,
        dropped,
        all_columns: changer.columns().is_none(),
        plan_moved: false,
    })
}

/// Step 2's result.
#[derive(Default)]
struct Located {
    states: Vec<FileState>,
    /// Copy-on-write files a grouped read rewrote with their group, and the rows copied.
    rewritten: std::collections::HashSet<usize>,
    rewritten_rows: u64,
}

/// Step 2, locate: the planned files' live rows go through the changer, which marks removed
/// positions; its new rows are written as they come. A grouped changer sees one partition
/// after another: after each, the copy-on-write rewrites of the partition's files are written
/// and the writer's files are finished, so that neither holds more than one partition.
async fn locate(
    table: &Table,
    p: &mut RowLevelPlan,
    changer: &mut dyn RowChanger,
    data: &mut DataWriter,
) -> Result<Located> {
    let mut out = Located {
        states: (0..p.files.len()).map(|_| FileState::default()).collect(),
        ..Located::default()
    };
    let default_spec = table.metadata().default_partition_spec_id();
    let grouped = changer.grouped()
        && (p.files.iter().all(|f| f.spec.spec_id() == default_spec) || {
            changer.ungroup()?;
            false
        });
    if grouped {
        let mut groups: Vec<(Struct, Vec<usize>)> = Vec::new();
        let mut at_group: HashMap<Struct, usize> = HashMap::new();
        for (i, f) in p.files.iter().enumerate() {
            let g = *at_group.entry(f.partition.clone()).or_insert_with(|| {
                groups.push((f.partition.clone(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        for (partition, idx) in groups {
            if !changer.start_group(default_spec, &partition)? {
                continue;
            }
            let stream = p.scan.read_positioned(p.plan.subset(&idx), true)?;
            consume(stream, &idx, &mut out.states, changer, data).await?;
            write_all(data, changer.end_group()?).await?;
            if p.mode == WriteMode::CopyOnWrite {
                let rewrite: Vec<(usize, RoaringTreemap)> = idx
                    .iter()
                    .filter(|i| out.states[**i].lost_every_row() == Some(false))
                    .map(|i| (*i, out.states[*i].removed.clone()))
                    .collect();
                out.rewritten_rows += rewrite_files(table, p, &rewrite, data).await?;
                out.rewritten.extend(rewrite.iter().map(|(i, _)| *i));
            }
            data.finish_files().await?;
        }
        while let Some(batches) = changer.next_new_group()? {
            write_all(data, batches).await?;
            data.finish_files().await?;
        }
    } else {
        let idx: Vec<usize> = (0..p.files.len()).collect();
        // The whole plan is read once: moved out, not copied (its loaded deletes can be big).
        let empty = p.plan.subset(&[]);
        let whole = std::mem::replace(&mut p.plan, empty);
        p.plan_moved = true;
        let stream = p.scan.read_positioned(whole, true)?;
        consume(stream, &idx, &mut out.states, changer, data).await?;
    }
    write_all(data, changer.finish()?).await?;
    Ok(out)
}

/// Step 3, decide (pure): a file that loses every row (or, judged by partition values, is
/// `dropped`) goes away whole; under copy-on-write the others that lost rows are rewritten,
/// under merge-on-read they get delete files for the removed positions.
fn decide(
    files: &[PlannedFile],
    dropped: &[PlannedFile],
    states: Vec<FileState>,
    mode: WriteMode,
) -> Decision {
    let mut d = Decision::default();
    for f in dropped {
        d.removed.push(FileKey::of(&f.file));
        d.removed.extend(file_scoped_deletes(f));
        d.touched.push((f.file.clone(), f.spec.clone()));
        d.removed_data_files += 1;
        d.removed_rows += f.file.record_count();
    }
    for (i, st) in states.into_iter().enumerate() {
        let Some(whole) = st.lost_every_row() else {
            continue;
        };
        let f = &files[i];
        d.removed_rows += st.removed.len();
        d.touched.push((f.file.clone(), f.spec.clone()));
        if whole || mode == WriteMode::CopyOnWrite {
            d.removed.push(FileKey::of(&f.file));
            d.removed.extend(file_scoped_deletes(f));
            d.removed_data_files += 1;
            if !whole {
                d.rewrite.push((i, st.removed));
            }
        } else {
            d.new_positions.push((i, st.removed));
        }
    }
    d
}

/// Step 4a, copy-on-write: the files in `rewrite` read again, whole, and written without
/// their removed positions (rows keep their lineage). Returns the rows copied.
async fn rewrite_files(
    table: &Table,
    p: &RowLevelPlan,
    rewrite: &[(usize, RoaringTreemap)],
    data: &mut DataWriter,
) -> Result<u64> {
    if rewrite.is_empty() {
        return Ok(0);
    }
    let (plan, order) = if p.plan_moved || !p.all_columns {
        // Planned again: the plan was read whole and let go, or projects some columns only.
        let removed_of: HashMap<&str, &RoaringTreemap> = rewrite
            .iter()
            .map(|(i, r)| (p.files[*i].file.file_path(), r))
            .collect();
        let mut plan = scan_at(table, p.snapshot_id).plan().await?;
        plan.retain(|f| removed_of.contains_key(f.file.file_path()));
        // After `retain`, every planned file is one to rewrite.
        let order: Vec<&RoaringTreemap> = plan
            .files
            .iter()
            .filter_map(|f| removed_of.get(f.file.file_path()).copied())
            .collect();
        (plan, order)
    } else {
        let idx: Vec<usize> = rewrite.iter().map(|(i, _)| *i).collect();
        (
            p.plan.subset(&idx),
            rewrite.iter().map(|(_, r)| r).collect(),
        )
    };
    let mut rescan = scan_at(table, p.snapshot_id);
    if p.version == FormatVersion::V3 {
        rescan = rescan.with_row_lineage();
    }
    let mut rewritten = 0u64;
    let mut stream = rescan.read_positioned(plan, true)?;
    while let Some(item) = stream.next().await {
        let (j, (batch, positions)) = item?;
        let positions =
            positions.ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        let removed = order
            .get(j)
            .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
        let keep: BooleanArray = positions
            .values()
            .iter()
            .map(|p| Some(!removed.contains(*p)))
            .collect();
        let b = arrow_select::filter::filter_record_batch(&batch, &keep)?;
        if b.num_rows() > 0 {
            rewritten += b.num_rows() as u64;
            data.write(b).await?;
        }
    }
    Ok(rewritten)
}

/// Step 4b, merge-on-read: v3 deletion vectors (each merged with the file's previous one,
/// whose delete files `removed` then gains) or v2 position delete files grouped by
/// `write.delete.granularity`. Returns each delete file with its spec id.
async fn write_deletes(
    p: &RowLevelPlan,
    granularity: DeleteGranularity,
    new_positions: Vec<(usize, RoaringTreemap)>,
    deletes: &mut DeleteFileWriter,
    removed: &mut Vec<FileKey>,
) -> Result<Vec<(i32, DataFile)>> {
    let mut added = Vec::new();
    if new_positions.is_empty() {
        return Ok(added);
    }
    if p.version == FormatVersion::V3 {
        let mut vectors = Vec::new();
        for (i, positions) in new_positions {
            let f = &p.files[i];
            let mut all = positions;
            if let Some(prev) = &p.previous[i] {
                all |= prev;
            }
            removed.extend(file_scoped_deletes(f));
            vectors.push((&f.file, f.spec.spec_id(), all));
        }
        for dv in deletes.write_deletion_vectors(&vectors).await? {
            let spec_id = vectors
                .iter()
                .find(|(f, _, _)| Some(f.file_path().to_string()) == dv.referenced_data_file())
                .map(|(_, s, _)| *s)
                .unwrap_or(0);
            added.push((spec_id, dv));
        }
    } else {
        for (spec, partition, entries) in position_groups(&p.files, new_positions, granularity) {
            let df = deletes
                .write_position_deletes(&spec, &partition, &entries)
                .await?;
            added.push((spec.spec_id(), df));
        }
    }
    Ok(added)
}

/// v2 position deletes, one delete file per data file or per partition (pure).
fn position_groups(
    files: &[PlannedFile],
    new_positions: Vec<(usize, RoaringTreemap)>,
    granularity: DeleteGranularity,
) -> Vec<PositionGroup> {
    let mut groups: BTreeMap<(i32, String), PositionGroup> = BTreeMap::new();
    for (i, positions) in new_positions {
        let f = &files[i];
        let key = match granularity {
            DeleteGranularity::File => (f.spec.spec_id(), f.file.file_path().to_string()),
            DeleteGranularity::Partition => (f.spec.spec_id(), format!("{:?}", f.partition)),
        };
        groups
            .entry(key)
            .or_insert_with(|| (f.spec.clone(), f.partition.clone(), Vec::new()))
            .2
            .push((f.file.file_path().to_string(), positions));
    }
    groups.into_values().collect()
}

/// Step 5, commit: one snapshot (`delete` when nothing was added, else `overwrite`),
/// validated against what was committed since the snapshot read; `written` files are
/// deleted when it does not commit.
#[allow(clippy::too_many_arguments)]
async fn commit_change(
    catalog: &Catalog,
    table: &Table,
    filter: Option<&Predicate>,
    isolation: IsolationLevel,
    d: Decision,
    added_data: Vec<DataFile>,
    added_elsewhere: Vec<(i32, DataFile)>,
    added_deletes: Vec<(i32, DataFile)>,
    written: &[String],
    extras: CommitExtras,
) -> Result<(Table, i64)> {
    let operation = if !added_data.is_empty() || !added_elsewhere.is_empty() {
        Operation::Overwrite
    } else if !d.removed.is_empty() || !added_deletes.is_empty() {
        Operation::Delete
    } else {
        // Only summary or property changes (a keyed batch whose every change lost).
        Operation::Append
    };
    let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
    for (s, f) in added_elsewhere.into_iter().chain(added_deletes) {
        by_spec.entry(s).or_default().push(f);
    }
    let mut producer = SnapshotProducer::new(operation, added_data).remove_files(d.removed);
    for (s, fs) in by_spec {
        producer = producer.add_files(s, fs);
    }
    for (k, v) in extras.summary {
        producer = producer.with_summary_property(k, v);
    }
    producer = producer.with_property_updates(extras.properties);
    if let Some((from, schema)) = extras.schema {
        producer = producer.with_schema(from, schema);
    }
    let conflict_filter = match filter {
        Some(f) => Some(
            f.clone()
                .bind(table.metadata().current_schema().clone(), false)
                .map_err(|e| {
                    Error::invalid(format!("filter on table {}: {}", table.name(), e.message()))
                })?,
        ),
        None => None,
    };
    let validation = RowLevelValidation {
        isolation,
        conflict_filter,
        touched: d.touched,
        ignore_equality_deletes: false,
        table: table.name(),
    };
    let strict = NoConcurrentCommit {
        table: table.name(),
    };
    let validation: &dyn Validation = if extras.no_concurrent_commit {
        &strict
    } else {
        &validation
    };
    let t = commit_or_discard(catalog, table, &mut producer, validation, written).await?;
    Ok((t, producer.snapshot_id()))
}

/// Feeds a stream of positioned batches (file `j` of the stream is planned file `idx[j]`) to
/// the changer, recording removed positions and writing new rows.
async fn consume(
    mut stream: futures::stream::BoxStream<'static, Result<(usize, crate::scan::PositionedBatch)>>,
    idx: &[usize],
    states: &mut [FileState],
    changer: &mut dyn RowChanger,
    data: &mut DataWriter,
) -> Result<()> {
    while let Some(item) = stream.next().await {
        let (j, (batch, positions)) = item?;
        let positions =
            positions.ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        let i = *idx
            .get(j)
            .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
        let (remove, new_rows) = changer.change_in_file(i, &batch)?;
        let st = &mut states[i];
        st.live_rows += batch.num_rows() as u64;
        for (r, gone) in remove.iter().enumerate() {
            if gone == Some(true) {
                st.removed.insert(positions.value(r));
            }
        }
        if let Some(b) = new_rows {
            write_all(data, vec![b]).await?;
        }
    }
    Ok(())
}

async fn write_all(data: &mut DataWriter, batches: Vec<RecordBatch>) -> Result<()> {
    for b in batches {
        if b.num_rows() > 0 {
            data.write(b).await?;
        }
    }
    Ok(())
}

/// A one-row batch of `cols` holding the file's identity partition values, or `None` when a
/// column is not an identity partition source of the file's spec.
fn identity_row(
    table: &Table,
    arrow: &arrow_schema::Schema,
    f: &PlannedFile,
    cols: &[String],
) -> Result<Option<RecordBatch>> {
    use iceberg::spec::{Literal, Transform};
    let schema = table.metadata().current_schema();
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for c in cols {
        let Some(field) = schema.field_by_name(c) else {
            return Ok(None);
        };
        let Some(k) = f
            .spec
            .fields()
            .iter()
            .position(|pf| pf.source_id == field.id && pf.transform == Transform::Identity)
        else {
            return Ok(None);
        };
        let (Ok(af), Some(prim)) = (
            arrow.field_with_name(c),
            field.field_type.as_primitive_type(),
        ) else {
            return Ok(None);
        };
        let array = match f.partition.iter().nth(k).flatten() {
            None => arrow_array::new_null_array(af.data_type(), 1),
            Some(Literal::Primitive(p)) => crate::expr::literal_array(p, prim, af.data_type())?,
            Some(_) => return Ok(None),
        };
        fields.push(af.clone());
        arrays.push(array);
    }
    Ok(Some(RecordBatch::try_new_with_options(
        Arc::new(arrow_schema::Schema::new(fields)),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(1)),
    )?))
}

/// Keys of the delete files that only concern `f` (its deletion vector, file-scoped position
/// deletes): they go away with it or are replaced by a merged deletion vector.
pub(crate) fn file_scoped_deletes(f: &PlannedFile) -> Vec<FileKey> {
    f.deletes
        .iter()
        .filter(|d| {
            d.file.content_type() == DataContentType::PositionDeletes
                && crate::scan::is_file_scoped(&d.file)
        })
        .map(|d| FileKey::of(&d.file))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::test_files::{by_p, file, planned, schema};

    fn positions(p: impl IntoIterator<Item = u64>) -> RoaringTreemap {
        p.into_iter().collect()
    }

    fn state(live_rows: u64, removed: &[u64]) -> FileState {
        FileState {
            live_rows,
            removed: positions(removed.iter().copied()),
        }
    }

    /// Files a (10 rows, with a file-scoped DV), b (10 rows), c (5 rows), d (untouched);
    /// `e` dropped by partition values.
    fn files() -> (Vec<PlannedFile>, Vec<PlannedFile>) {
        let spec = by_p(&schema());
        let data = |path: &str, rows| file(path, DataContentType::Data, Some(1), rows, (0, 9));
        let mut dv = file(
            "a.puffin",
            DataContentType::PositionDeletes,
            Some(1),
            1,
            (0, 0),
        );
        dv = crate::spec::data_file_builder(&dv)
            .referenced_data_file(Some("a".into()))
            .content_offset(Some(4))
            .content_size_in_bytes(Some(40))
            .build()
            .unwrap();
        let files = vec![
            planned(data("a", 10), &spec, 1, vec![dv]),
            planned(data("b", 10), &spec, 1, vec![]),
            planned(data("c", 5), &spec, 1, vec![]),
            planned(data("d", 5), &spec, 1, vec![]),
        ];
        let dropped = vec![planned(data("e", 7), &spec, 1, vec![])];
        (files, dropped)
    }

    fn states() -> Vec<FileState> {
        vec![
            state(10, &[1, 2]),
            state(10, &[0]),
            state(5, &[0, 1, 2, 3, 4]),
            state(5, &[]),
        ]
    }

    fn paths(keys: &[FileKey]) -> Vec<String> {
        let mut v: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        v.sort();
        v
    }

    #[test]
    fn copy_on_write_rewrites_touched_files_and_drops_emptied_ones() {
        let (files, dropped) = files();
        let d = decide(&files, &dropped, states(), WriteMode::CopyOnWrite);
        // e (dropped, 7 rows) + a 2 + b 1 + c 5 (all of it).
        assert_eq!(d.removed_rows, 15);
        assert_eq!(d.removed_data_files, 4);
        let rewritten: Vec<(usize, Vec<u64>)> = d
            .rewrite
            .iter()
            .map(|(i, r)| (*i, r.iter().collect()))
            .collect();
        assert_eq!(rewritten, [(0, vec![1, 2]), (1, vec![0])]);
        assert!(d.new_positions.is_empty());
        // a's deletion vector goes with it; d is not touched.
        let removed = paths(&d.removed);
        assert_eq!(removed.len(), 5, "{removed:?}");
        assert!(
            removed.iter().any(|k| k.contains("a.puffin")),
            "{removed:?}"
        );
        assert!(!removed.iter().any(|k| k.contains("\"d\"")), "{removed:?}");
        assert_eq!(d.touched.len(), 4);
    }

    #[test]
    fn merge_on_read_keeps_files_and_deletes_positions() {
        let (files, dropped) = files();
        let d = decide(&files, &dropped, states(), WriteMode::MergeOnRead);
        assert_eq!(d.removed_rows, 15);
        // Only the emptied file c and the dropped e go away whole.
        assert_eq!(d.removed_data_files, 2);
        assert!(d.rewrite.is_empty());
        let kept: Vec<usize> = d.new_positions.iter().map(|(i, _)| *i).collect();
        assert_eq!(kept, [0, 1]);
    }

    #[test]
    fn position_deletes_group_by_granularity() {
        let (files, _) = files();
        let new = || vec![(0, positions([1])), (1, positions([2, 3]))];
        let by_file = position_groups(&files, new(), DeleteGranularity::File);
        assert_eq!(by_file.len(), 2);
        let by_partition = position_groups(&files, new(), DeleteGranularity::Partition);
        assert_eq!(by_partition.len(), 1);
        let entries: Vec<(&str, u64)> = by_partition[0]
            .2
            .iter()
            .map(|(p, r)| (p.as_str(), r.len()))
            .collect();
        assert_eq!(entries, [("a", 1), ("b", 2)]);
    }
}
