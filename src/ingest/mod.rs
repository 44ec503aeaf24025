//! Snapshot-dedup ingestion: full snapshots of a dataset are merged into a staging table that
//! keeps the latest row per key, and a target table is published from staging as a CLONE.
//!
//! The rule (both strategies): per key the row with the highest version wins; on equal
//! versions the newer arrival wins (a later snapshot over staging; inside one snapshot, the
//! later file in the given order, then the later row). Keys missing from a snapshot are kept.
//!
//! * `change-aware` (default): staging is compared with the snapshot one partition at a
//!   time; a snapshot row whose values (all columns but the version) equal the stored row's
//!   costs nothing, a newer changed row supersedes the stored one (a delete under
//!   `write.merge.mode=merge-on-read` — deletion vectors in v3, position deletes in v2 — or a
//!   rewrite of the touched files under copy-on-write), a new key is inserted; one commit.
//! * `rewrite`: the literal way — append the snapshot, then rewrite every touched partition
//!   keeping the latest row per key (an `overwrite` commit: rows do change, so it is not a
//!   `replace`).

mod change_aware;
mod dedup;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use iceberg::spec::{Literal, Operation, PrimitiveLiteral, Transform};

pub use change_aware::ChangeCounts;
pub(crate) use dedup::{latest_per_key, KeyColumns};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{PlannedFile, Scan, SnapshotSelector};
use crate::spec::{resolve_column, PrimitiveType, TableIdent, Type, WriteMode};
use crate::table::Table;
use crate::txn::{
    clone_table, commit, commit_or_discard, CloneResult, FileKey, RowLevelValidation,
    SnapshotProducer,
};
use crate::txn::{file_scoped_deletes, RowLevelKind, RowLevelResult};
use crate::write::{Conformer, DataWriter, PartitionSpill, Partitioner};

use change_aware::IngestChanger;

/// How a snapshot is merged into staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Compare per partition; write only what changed.
    ChangeAware,
    /// Append, then rewrite the touched partitions keeping the latest row per key.
    Rewrite,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ChangeAware => "change-aware",
            Self::Rewrite => "rewrite",
        })
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "change-aware" => Ok(Self::ChangeAware),
            "rewrite" => Ok(Self::Rewrite),
            _ => Err(Error::invalid(format!(
                "strategy '{s}': expected change-aware or rewrite"
            ))),
        }
    }
}

/// What to ingest and how.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IngestOptions {
    /// Key columns (every partition source column must be one of them).
    pub key: Vec<String>,
    /// The version column (integer, date or timestamp).
    pub version: String,
    /// Strategy (default change-aware).
    pub strategy: Strategy,
    /// Publish: make this table a clone of the new staging state (created or replaced).
    pub publish: Option<TableIdent>,
    /// Drop partitions older than this many days (by the day / date partition), metadata only.
    pub retain_days: Option<u32>,
    /// Snapshot rows held in memory before spilling to temporary files (bytes).
    pub memory_budget_bytes: usize,
}

impl IngestOptions {
    /// Change-aware ingestion by `key` and `version`, no publish, no retention, 1 GiB budget.
    pub fn new(key: Vec<String>, version: impl Into<String>) -> Self {
        Self {
            key,
            version: version.into(),
            strategy: Strategy::ChangeAware,
            publish: None,
            retain_days: None,
            memory_budget_bytes: 1 << 30,
        }
    }
}

/// What one ingestion did.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct IngestResult {
    /// Strategy used.
    pub strategy: Strategy,
    /// Write mode used (`write.merge.mode`; the rewrite strategy always rewrites).
    pub mode: WriteMode,
    /// Rows in the snapshot.
    pub snapshot_rows: u64,
    /// Partitions the snapshot touched.
    pub partitions: usize,
    /// What the comparison found (change-aware).
    pub changes: ChangeCounts,
    /// Rows written (new and changed rows; plus copied rows when files were rewritten).
    pub written_rows: u64,
    /// Bytes of every file written to staging.
    pub written_bytes: u64,
    /// Data files added to staging.
    pub added_data_files: usize,
    /// Delete files added to staging.
    pub added_delete_files: usize,
    /// Data files removed from staging (rewritten or expired).
    pub removed_data_files: usize,
    /// Snapshots committed to staging, oldest first.
    pub staging_snapshots: Vec<i64>,
    /// Data files dropped by the retention.
    pub expired_data_files: usize,
    /// The publish, when asked.
    pub published: Option<CloneResult>,
    /// Seconds spent merging into staging (retention and publish excluded).
    pub ingest_seconds: f64,
    /// Seconds spent publishing.
    pub publish_seconds: f64,
    /// The staging table at its new version.
    #[serde(skip)]
    pub staging: Table,
}

/// Ingests one full snapshot into `staging` (see the module documentation), then applies the
/// retention and publishes when asked.
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
/// // The latest version of each key wins; the table then holds exactly the snapshot.
/// let snapshot = RecordBatch::try_from_iter([
///     ("id", Arc::new(Int64Array::from(vec![1, 1, 2])) as _),
///     ("v", Arc::new(Int64Array::from(vec![10, 11, 20])) as _),
/// ])?;
/// let o = floe::ingest::IngestOptions::new(vec!["id".into()], "v");
/// let r = floe::ingest::ingest_snapshot(&cat, &table, [Ok(snapshot)], &o).await?;
/// assert_eq!(r.snapshot_rows, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn ingest_snapshot<I>(
    catalog: &Catalog,
    staging: &Table,
    snapshot: I,
    options: &IngestOptions,
) -> Result<IngestResult>
where
    I: IntoIterator<Item = Result<RecordBatch>>,
{
    let started = Instant::now();
    let arrow = staging.arrow_schema()?;
    let ctx = |e: Error| e.context(format!("ingesting into {}", staging.name()));
    // The table's own spelling of the names given (found by the one rule, resolve_column).
    let spelled = |n: &String| -> Result<String> {
        let names = arrow.fields().iter().map(|f| f.name().as_str());
        Ok(match resolve_column(names, n)? {
            Some(i) => arrow.field(i).name().clone(),
            None => n.clone(), // refused by KeyColumns::new, which lists the columns
        })
    };
    let given_key = options
        .key
        .iter()
        .map(spelled)
        .collect::<Result<Vec<_>>>()
        .map_err(ctx)?;
    let version = spelled(&options.version).map_err(ctx)?;
    check_key_covers_partition(staging, &given_key).map_err(ctx)?;
    let (key, sorted) = merge_key_order(staging, &given_key);
    let cols = KeyColumns::new(&arrow, &key, &version).map_err(ctx)?;
    let parts = split_snapshot(staging, snapshot, options.memory_budget_bytes).map_err(ctx)?;
    let mut result = IngestResult {
        strategy: options.strategy,
        mode: staging.properties()?.merge_mode,
        snapshot_rows: parts.rows,
        partitions: parts.len(),
        changes: ChangeCounts::default(),
        written_rows: 0,
        written_bytes: 0,
        added_data_files: 0,
        added_delete_files: 0,
        removed_data_files: 0,
        staging_snapshots: vec![],
        expired_data_files: 0,
        published: None,
        ingest_seconds: 0.0,
        publish_seconds: 0.0,
        staging: staging.clone(),
    };
    match options.strategy {
        Strategy::ChangeAware => {
            let mut changer = IngestChanger::new(parts, cols, sorted, staging.name())?;
            let r = crate::txn::run_row_delta(
                catalog,
                staging,
                RowLevelKind::Merge,
                None,
                &mut changer,
            )
            .await
            .map_err(ctx)?;
            result.changes = changer.counts;
            record(&mut result, &r);
        }
        Strategy::Rewrite => rewrite(catalog, staging, parts, &cols, &mut result)
            .await
            .map_err(ctx)?,
    }
    result.ingest_seconds = started.elapsed().as_secs_f64();
    if let Some(days) = options.retain_days {
        let (t, n, snap) = drop_old_partitions(catalog, &result.staging, days).await?;
        result.staging = t;
        result.expired_data_files = n;
        result.staging_snapshots.extend(snap);
    }
    if let Some(target) = &options.publish {
        let t = Instant::now();
        let exists = catalog.table_exists(target).await?;
        if exists && already_published(catalog, &result.staging, target).await? {
            // Nothing changed since the target was published from this very state.
            return Ok(result);
        }
        result.published = Some(
            clone_table(
                catalog,
                &result.staging,
                &SnapshotSelector::Current,
                target,
                exists,
            )
            .await?,
        );
        result.publish_seconds = t.elapsed().as_secs_f64();
    }
    Ok(result)
}

/// Whether `target`'s current snapshot is a clone of `staging`'s current snapshot (then
/// publishing again would only add a snapshot that changes nothing).
async fn already_published(
    catalog: &Catalog,
    staging: &Table,
    target: &TableIdent,
) -> Result<bool> {
    let Some(current) = staging.current_snapshot().map(|s| s.snapshot_id()) else {
        return Ok(false);
    };
    let t = catalog.load_table(target).await?;
    // The target's current snapshot must be that clone itself: a commit to the target since
    // (its summary names no source) means it differs from staging, so it is published again.
    let Some(head) = t.current_snapshot() else {
        return Ok(false);
    };
    let p = &head.summary().additional_properties;
    Ok(p.get(crate::txn::CLONE_SOURCE) == Some(&staging.name())
        && p.get(crate::txn::CLONE_SOURCE_SNAPSHOT) == Some(&current.to_string()))
}

fn record(result: &mut IngestResult, r: &RowLevelResult) {
    result.written_rows += r.written_rows + r.rewritten_rows;
    result.written_bytes += r.written_bytes;
    result.added_data_files += r.added_data_files;
    result.added_delete_files += r.added_delete_files;
    result.removed_data_files += r.removed_data_files;
    result.staging_snapshots.extend(r.snapshot_id);
    result.staging = r.table.clone();
    result.mode = r.mode;
}

/// A key must live in exactly one partition: every partition source column is a key column.
fn check_key_covers_partition(table: &Table, key: &[String]) -> Result<()> {
    let md = table.metadata();
    let schema = md.current_schema();
    for pf in md.default_partition_spec().fields() {
        if pf.transform == Transform::Void {
            continue;
        }
        let name = schema
            .name_by_field_id(pf.source_id)
            .unwrap_or_default()
            .to_string();
        if !key.contains(&name) {
            return Err(Error::invalid(format!(
                "partition column '{name}' is not part of the key; a key's rows must all live in one partition, so add '{name}' to the key"
            )));
        }
    }
    Ok(())
}

/// The key columns in the order staging files are sorted by, and whether they are: columns
/// constant within a partition (identity and `day` partition sources) first, then the table's
/// sort order, which must start with the remaining key columns, ascending, untransformed.
/// Unsorted tables keep the given order (the comparison is then a hash join).
fn merge_key_order(table: &Table, key: &[String]) -> (Vec<String>, bool) {
    let md = table.metadata();
    let schema = md.current_schema();
    let name = |id: i32| schema.name_by_field_id(id).unwrap_or_default().to_string();
    let constant: Vec<String> = md
        .default_partition_spec()
        .fields()
        .iter()
        .filter(|pf| {
            pf.transform == Transform::Identity
                || (pf.transform == Transform::Day
                    && schema.field_by_id(pf.source_id).is_some_and(|f| {
                        matches!(*f.field_type, Type::Primitive(PrimitiveType::Date))
                    }))
        })
        .map(|pf| name(pf.source_id))
        .filter(|n| key.contains(n))
        .collect();
    let rest: Vec<&String> = key.iter().filter(|k| !constant.contains(k)).collect();
    let order = md.default_sort_order();
    let sorted_prefix: Vec<String> = order
        .fields
        .iter()
        .take(rest.len())
        .take_while(|f| {
            f.transform == Transform::Identity
                && f.direction == iceberg::spec::SortDirection::Ascending
        })
        .map(|f| name(f.source_id))
        .collect();
    let sorted = !rest.is_empty()
        && sorted_prefix.len() == rest.len()
        && rest.iter().all(|k| sorted_prefix.contains(k));
    if !sorted {
        return (key.to_vec(), false);
    }
    (constant.into_iter().chain(sorted_prefix).collect(), true)
}

/// Reads a full snapshot (conformed to `table`'s schema; every table column must be present)
/// split by the table's default partition spec, at most `budget` bytes in memory.
fn split_snapshot<I>(table: &Table, input: I, budget: usize) -> Result<PartitionSpill>
where
    I: IntoIterator<Item = Result<RecordBatch>>,
{
    let md = table.metadata();
    let conformer = Conformer::new(md.current_schema(), &table.name())?;
    let partitioner = Partitioner::new(md.default_partition_spec(), md.current_schema().clone())?;
    let mut out = PartitionSpill::new(conformer.schema().clone(), budget);
    for batch in input {
        let batch = batch?;
        for f in conformer.schema().fields() {
            if batch.schema().field_with_name(f.name()).is_err() {
                return Err(Error::invalid(format!(
                    "the snapshot has no column '{}' of table {}; a full snapshot must carry every column",
                    f.name(),
                    table.name()
                )));
            }
        }
        let batch = conformer.conform_from(&batch, "the snapshot", out.rows + 1)?;
        for (key, rows) in partitioner.split(&batch)? {
            out.push(key.data(), rows)?;
        }
    }
    Ok(out)
}

/// The literal strategy: append the deduplicated snapshot, then rewrite each touched
/// partition that already had rows, keeping the latest row per key.
async fn rewrite(
    catalog: &Catalog,
    staging: &Table,
    mut parts: PartitionSpill,
    cols: &KeyColumns,
    result: &mut IngestResult,
) -> Result<()> {
    result.mode = WriteMode::CopyOnWrite;
    // 1. Append.
    let mut w = DataWriter::new(staging)?;
    for i in 0..parts.len() {
        let rows = parts.take(i)?;
        let keep = latest_per_key(cols, &rows, "snapshot")?;
        result.changes.duplicates += (rows.num_rows() - keep.len()) as u64;
        let rows = arrow_select::take::take_record_batch(&rows, &keep)?;
        result.written_rows += rows.num_rows() as u64;
        if let Err(e) = w.write(rows).await {
            w.abort(staging.storage()).await;
            return Err(e);
        }
    }
    let appended = w.close().await?;
    result.added_data_files += appended.len();
    result.written_bytes += appended.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
    let touched: HashSet<_> = parts.partitions().cloned().collect();
    drop(parts);
    let a = crate::txn::append_files(catalog, staging, appended).await?;
    result.staging_snapshots.extend(a.snapshot_id);
    let table = a.table;
    let Some(append_id) = a.snapshot_id else {
        result.staging = table;
        return Ok(());
    };
    let append_seq = table
        .metadata()
        .snapshot_by_id(append_id)
        .map(|s| s.sequence_number())
        .unwrap_or(i64::MAX);
    // 2. Rewrite the partitions that had rows before.
    let scan = Scan::new(&table)
        .snapshot(SnapshotSelector::Id(append_id))
        .in_current_schema();
    let plan = scan.plan().await?;
    let mut groups: HashMap<&crate::spec::Struct, Vec<usize>> = HashMap::new();
    for (i, f) in plan.files.iter().enumerate() {
        if touched.contains(&f.partition) {
            groups.entry(&f.partition).or_default().push(i);
        }
    }
    let mut w = DataWriter::new(&table)?;
    let mut removed: Vec<FileKey> = Vec::new();
    let mut touched_files = Vec::new();
    let outcome = async {
        for idx in groups.values() {
            if idx
                .iter()
                .all(|&i| plan.files[i].sequence_number >= append_seq)
            {
                continue; // a new partition: the appended files are already the result
            }
            let mut batches: Vec<(i64, usize, RecordBatch)> = scan
                .read_positioned(plan.subset(idx), false)?
                .map_ok(|(j, (b, _))| (plan.files[idx[j]].sequence_number, j, b))
                .try_collect()
                .await?;
            // Older data first, so the newer arrival wins ties; a file's batches in order.
            batches.sort_by_key(|(seq, j, _)| (*seq, *j));
            let schema = batches
                .first()
                .map(|(_, _, b)| b.schema())
                .ok_or_else(|| Error::io("a touched partition returned no rows"))?;
            let all =
                arrow_select::concat::concat_batches(&schema, batches.iter().map(|(_, _, b)| b))?;
            let keep = latest_per_key(cols, &all, "staging")?;
            let winners = arrow_select::take::take_record_batch(&all, &keep)?;
            result.written_rows += winners.num_rows() as u64;
            w.write(winners).await?;
            for &i in idx {
                let f = &plan.files[i];
                removed.push(FileKey::of(&f.file));
                removed.extend(file_scoped_deletes(f));
                touched_files.push((f.file.clone(), f.spec.clone()));
            }
        }
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = outcome {
        w.abort(table.storage()).await;
        return Err(e);
    }
    let added = w.close().await?;
    result.staging = table.clone();
    if removed.is_empty() {
        return Ok(());
    }
    result.added_data_files += added.len();
    result.removed_data_files += touched_files.len();
    result.written_bytes += added.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
    let paths: Vec<String> = added.iter().map(|f| f.file_path().to_string()).collect();
    let mut producer = SnapshotProducer::new(Operation::Overwrite, added).remove_files(removed);
    let validation = RowLevelValidation {
        isolation: table.properties()?.merge_isolation,
        conflict_filter: None,
        touched: touched_files,
        ignore_equality_deletes: false,
        table: table.name(),
    };
    result.staging = commit_or_discard(catalog, &table, &mut producer, &validation, &paths).await?;
    result.staging_snapshots.push(producer.snapshot_id());
    Ok(())
}

/// Drops (metadata only) the files of partitions whose day is more than `days` days before
/// today (UTC). The table must be partitioned by `day(col)` or by a date column.
async fn drop_old_partitions(
    catalog: &Catalog,
    table: &Table,
    days: u32,
) -> Result<(Table, usize, Option<i64>)> {
    let md = table.metadata();
    let schema = md.current_schema();
    let spec = md.default_partition_spec();
    let pos = spec
        .fields()
        .iter()
        .position(|pf| {
            let date_source = schema
                .field_by_id(pf.source_id)
                .is_some_and(|f| matches!(*f.field_type, Type::Primitive(PrimitiveType::Date)));
            pf.transform == Transform::Day || (pf.transform == Transform::Identity && date_source)
        })
        .ok_or_else(|| {
            Error::invalid(format!(
                "retention in days needs table {} partitioned by day(col) or by a date column",
                table.name()
            ))
        })?;
    let today = chrono::Utc::now().date_naive();
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    let cutoff = (today - epoch).num_days() - days as i64;
    let plan = Scan::new(table).plan().await?;
    let old: Vec<&PlannedFile> = plan
        .files
        .iter()
        .filter(|f| {
            f.spec.spec_id() == spec.spec_id()
                && matches!(
                    f.partition.iter().nth(pos).flatten(),
                    Some(Literal::Primitive(PrimitiveLiteral::Int(d))) if (*d as i64) < cutoff
                )
        })
        .collect();
    if old.is_empty() {
        return Ok((table.clone(), 0, None));
    }
    let removed: Vec<FileKey> = old
        .iter()
        .flat_map(|f| std::iter::once(FileKey::of(&f.file)).chain(file_scoped_deletes(f)))
        .collect();
    let mut producer = SnapshotProducer::new(Operation::Delete, vec![]).remove_files(removed);
    let validation = RowLevelValidation {
        isolation: table.properties()?.delete_isolation,
        conflict_filter: None,
        touched: old
            .iter()
            .map(|f| (f.file.clone(), f.spec.clone()))
            .collect(),
        ignore_equality_deletes: true,
        table: table.name(),
    };
    let t = commit(catalog, table, &mut producer, &validation).await?;
    Ok((t, old.len(), Some(producer.snapshot_id())))
}
