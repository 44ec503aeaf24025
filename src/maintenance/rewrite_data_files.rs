//! `rewrite_data_files`: compacts data files with their deletes applied, committed as a
//! `replace` snapshot that removes the old files and the delete files only they used.
//!
//! It runs in three steps that can also run in different processes: [`plan_rewrite`] makes
//! serializable file-group tasks ([`RewritePlan`], JSON), [`execute_task`] rewrites one group
//! (its new files are recorded in an Avro file next to the table metadata), and
//! [`commit_rewrite`] commits every group's result at once. [`rewrite_data_files`] does all
//! three in this process.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use iceberg::expr::Bind;
use iceberg::spec::Operation;
use serde::{Deserialize, Serialize};

use super::carry_deletes::Carrier;
use super::dangling::remove_dangling_deletes;
use super::rewrite_plan::{plan_groups, removed_with_their_deletes, RewriteOptions};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::expr::FileSelection;
use crate::scan::{PlannedFile, Scan, ScanPlan, SnapshotSelector};
use crate::spec::{DataFile, IsolationLevel, PartitionSpec};
use crate::storage::join;
use crate::table::Table;
use crate::txn::{commit, commit_since, RowLevelValidation, SnapshotProducer};
use crate::write::DataWriter;

/// What `rewrite_data_files` did (the result columns of Iceberg's Spark procedure).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RewriteResult {
    /// The table at the new version.
    #[serde(skip)]
    pub table: Option<Table>,
    /// The `replace` snapshot (`None` when nothing needed rewriting).
    pub snapshot_id: Option<i64>,
    /// Data files rewritten.
    pub rewritten_data_files_count: usize,
    /// Data files written.
    pub added_data_files_count: usize,
    /// Bytes of the rewritten data files.
    pub rewritten_bytes_count: u64,
    /// Data files of groups that failed (0: a failed group fails the whole job).
    pub failed_data_files_count: usize,
    /// Delete files removed because no live data file needs them any more.
    pub removed_delete_files_count: usize,
    /// File groups rewritten.
    pub file_groups: usize,
    /// Why nothing was rewritten, with the figures behind it (`None` when something was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RewriteResult {
    /// The result of a rewrite that found nothing to do.
    fn nothing(table: &Table) -> Self {
        Self {
            table: Some(table.clone()),
            snapshot_id: None,
            rewritten_data_files_count: 0,
            added_data_files_count: 0,
            rewritten_bytes_count: 0,
            failed_data_files_count: 0,
            removed_delete_files_count: 0,
            file_groups: 0,
            reason: None,
        }
    }

    fn nothing_because(table: &Table, reason: String) -> Self {
        Self {
            reason: Some(reason),
            ..Self::nothing(table)
        }
    }
}

/// `bytes` in KiB, MiB or GiB, one decimal.
pub(super) fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

impl PlannedRewrite {
    /// What the planner saw and decided, in figures: data files under and over the size
    /// bounds, files with deletes, and the file groups that pass the thresholds. With no
    /// group, what to pass to rewrite anyway.
    pub fn explain(&self) -> String {
        let o = &self.options;
        let data: Vec<_> = self
            .scan
            .files
            .iter()
            .filter(|f| f.file.content_type() == crate::spec::DataContentType::Data)
            .collect();
        let small = data
            .iter()
            .filter(|f| f.file.file_size_in_bytes() < o.min_file_size_bytes)
            .count();
        let large = data
            .iter()
            .filter(|f| f.file.file_size_in_bytes() > o.max_file_size_bytes)
            .count();
        let with_deletes = data.iter().filter(|f| !f.deletes.is_empty()).count();
        let planned_files: usize = self.plan.tasks.iter().map(|t| t.files.len()).sum();
        let mut r = format!(
            "{} data files: {small} under min-file-size-bytes {}, {large} over max-file-size-bytes {}, \
             {with_deletes} with deletes; {} file groups of {planned_files} files pass \
             min-input-files {} / delete-ratio-threshold {} / delete-file-threshold {}",
            data.len(),
            gib(o.min_file_size_bytes),
            gib(o.max_file_size_bytes),
            self.plan.tasks.len(),
            o.min_input_files,
            o.delete_ratio_threshold,
            if o.delete_file_threshold == usize::MAX {
                "unset".to_string()
            } else {
                o.delete_file_threshold.to_string()
            },
        );
        if self.plan.tasks.is_empty() && small + large + with_deletes > 0 {
            r.push_str(&format!(
                "; no partition holds min-input-files {} candidates: pass \
                 --option min-input-files=2 (or rewrite-all=true to rewrite every file)",
                o.min_input_files
            ));
        }
        r
    }
}

/// Progress callback: (groups done, groups in all).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Send + Sync);

/// A plan together with what this process needs to run it.
#[derive(Debug)]
pub struct PlannedRewrite {
    /// The serializable plan.
    pub plan: RewritePlan,
    /// The scan plan of the starting snapshot the groups index into.
    pub scan: ScanPlan,
    /// Each task's files, as indexes into `scan.files`.
    pub groups: Vec<Vec<usize>>,
    /// The parsed options.
    pub options: RewriteOptions,
}

/// One file group to rewrite: everything a worker needs, given the catalog.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RewriteTask {
    /// The table's identifier in the catalog.
    pub table: String,
    /// The snapshot the rewrite reads.
    pub snapshot_id: i64,
    /// Group number within the plan.
    pub group: usize,
    /// The data files of the group.
    pub files: Vec<String>,
    /// Target size of the new files.
    pub target_file_size_bytes: u64,
    /// `None`: bin-pack; `Some("")`: the table's sort order; else a sort order's text.
    pub sort_order: Option<String>,
    /// The partition spec the new files are written with (`output-spec-id`; `None`, in plans
    /// written before the option existed: the table's default spec).
    #[serde(default)]
    pub output_spec_id: Option<i32>,
}

/// A planned rewrite: its tasks and what the commit needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RewritePlan {
    /// The table's identifier in the catalog.
    pub table: String,
    /// The starting snapshot.
    pub snapshot_id: i64,
    /// Its sequence number (new files take it with `use-starting-sequence-number`).
    pub sequence_number: i64,
    /// `use-starting-sequence-number`.
    pub use_starting_sequence_number: bool,
    /// The `where` filter the files were chosen by (for conflict validation).
    pub filter: Option<FileSelection>,
    /// The file groups.
    pub tasks: Vec<RewriteTask>,
    /// How many groups the plan has (kept when `tasks` is left out of a result).
    #[serde(rename = "file_groups_count", alias = "groups")]
    pub groups: usize,
    /// `remove-dangling-deletes`: the commit is followed by one removing delete files that
    /// no longer apply to any live data file.
    #[serde(default)]
    pub remove_dangling_deletes: bool,
}

/// What one task wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskResult {
    /// The plan the task belongs to, without its tasks (the commit needs only the results).
    pub plan: RewritePlan,
    /// The task.
    pub task: RewriteTask,
    /// The partition spec the new files were written with.
    pub spec_id: i32,
    /// An Avro file listing the new data files (iceberg's `data_file` struct).
    #[serde(rename = "data_files_location", alias = "data_files")]
    pub data_files: String,
    /// How many new files.
    pub added_data_files_count: usize,
    /// The new files' locations, known in the process that wrote them (not serialized:
    /// [`crate::pending::PendingChange`] carries every file written).
    #[serde(skip)]
    pub(crate) written: Vec<String>,
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

fn ctx(table: &Table) -> impl Fn(Error) -> Error + '_ {
    move |e: Error| e.context(format!("rewrite_data_files on {}", table.name()))
}

/// Plans the rewrite of `table` at its current snapshot. `options` takes Spark's options plus
/// the procedure's `strategy` (`binpack`, default, or `sort`) and `sort-order` (default: the
/// table's). The sort strategy sorts each partition's rows in runs of up to a million rows
/// (not one total order per file group).
pub async fn plan_rewrite(
    table: &Table,
    filter: Option<FileSelection>,
    options: &HashMap<String, String>,
) -> Result<PlannedRewrite> {
    let props = table.properties()?;
    let mut options = options.clone();
    let strategy = options
        .remove("strategy")
        .unwrap_or_else(|| "binpack".into());
    let mut sort_text = options.remove("sort-order");
    let zorder_by = options.remove("zorder-by");
    let md = table.metadata();
    let mut strategy = strategy.to_ascii_lowercase();
    match (strategy.as_str(), zorder_by) {
        // `strategy=zorder` with `zorder-by=a,b` is `strategy=sort` with `sort-order='zorder(a,b)'`.
        ("zorder", Some(cols)) if sort_text.is_none() => {
            sort_text = Some(format!("zorder({cols})"));
            strategy = "sort".into();
        }
        ("zorder", _) => return Err(ctx(table)(Error::invalid(
            "strategy zorder needs zorder-by (the columns, e.g. zorder-by=x,y) and no sort-order",
        ))),
        (_, Some(_)) => {
            return Err(ctx(table)(Error::invalid(
                "zorder-by needs strategy=zorder",
            )))
        }
        _ => {}
    }
    let sort_order = match (strategy.as_str(), sort_text) {
        ("binpack", None) => None,
        ("sort", Some(text)) if zorder_columns(&text).is_some() => {
            let cols = zorder_columns(&text).unwrap_or_default();
            crate::write::zorder_columns(table.arrow_schema()?.as_ref(), &cols, &table.name())
                .map_err(ctx(table))?;
            Some(format!("zorder({})", cols.join(",")))
        }
        ("sort", Some(text)) => {
            crate::spec::parse_sort_order(&text, md.current_schema()).map_err(ctx(table))?;
            Some(text)
        }
        ("sort", None) => {
            if md.default_sort_order().fields.is_empty() {
                return Err(ctx(table)(Error::invalid(
                    "strategy sort needs a sort order: the table has none, so give one (e.g. sort-order='id DESC NULLS LAST')",
                )));
            }
            Some(String::new())
        }
        ("binpack", Some(_)) => {
            return Err(ctx(table)(Error::invalid(
                "a sort order needs strategy=sort",
            )))
        }
        (s, _) => {
            return Err(ctx(table)(Error::invalid(format!(
                "unknown strategy '{s}': expected binpack, sort or zorder"
            ))))
        }
    };
    let o = RewriteOptions::parse(props.target_file_size_bytes, &options).map_err(ctx(table))?;
    let output_spec_id = match o.output_spec_id {
        None => md.default_partition_spec_id(),
        Some(id) => {
            if md.partition_spec_by_id(id).is_none() {
                let mut ids: Vec<i32> = md.partition_specs_iter().map(|s| s.spec_id()).collect();
                ids.sort_unstable();
                let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
                return Err(Error::invalid(format!(
                    "rewrite option output-spec-id={id}: table {} has no partition spec {id}; \
                     use one of its spec ids: {} (default {})",
                    table.name(),
                    ids.join(", "),
                    md.default_partition_spec_id()
                )));
            }
            id
        }
    };
    let Some(start) = table.current_snapshot().cloned() else {
        return Err(Error::invalid(format!(
            "table {} has no snapshot to rewrite",
            table.name()
        )));
    };
    let mut planning = Scan::new(table)
        .snapshot(SnapshotSelector::Id(start.snapshot_id()))
        .in_current_schema();
    if let Some(f) = &filter {
        planning = planning.prune(f.predicate().clone());
    }
    let scan_plan = planning.plan().await?.without_row_filter();
    let groups = plan_groups(&scan_plan.files, md.default_partition_spec(), &o);
    let tasks: Vec<RewriteTask> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| RewriteTask {
            table: table.name(),
            snapshot_id: start.snapshot_id(),
            group: i,
            files: g
                .files
                .iter()
                .map(|f| scan_plan.files[*f].file.file_path().to_string())
                .collect(),
            target_file_size_bytes: o.target_file_size_bytes,
            sort_order: sort_order.clone(),
            output_spec_id: Some(output_spec_id),
        })
        .collect();
    let plan = RewritePlan {
        table: table.name(),
        snapshot_id: start.snapshot_id(),
        sequence_number: start.sequence_number(),
        use_starting_sequence_number: o.use_starting_sequence_number,
        filter,
        groups: tasks.len(),
        tasks,
        remove_dangling_deletes: o.remove_dangling_deletes,
    };
    Ok(PlannedRewrite {
        plan,
        groups: groups.into_iter().map(|g| g.files).collect(),
        scan: scan_plan,
        options: o,
    })
}

/// The columns of a z-order written `zorder(a, b)` (Spark's `sort_order => 'zorder(a,b)'`).
fn zorder_columns(text: &str) -> Option<Vec<String>> {
    let t = text.trim();
    let inner = t
        .get(..7)
        .filter(|p| p.eq_ignore_ascii_case("zorder("))
        .and(t.strip_suffix(')'))
        .map(|t| &t[7..])?;
    Some(
        inner
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty())
            .collect(),
    )
}

/// The partition spec `task` writes its files with.
fn output_spec(table: &Table, task: &RewriteTask) -> Result<Arc<PartitionSpec>> {
    let md = table.metadata();
    match task.output_spec_id {
        None => Ok(md.default_partition_spec().clone()),
        Some(id) => md.partition_spec_by_id(id).cloned().ok_or_else(|| {
            Error::new(
                crate::ErrorKind::Conflict,
                format!(
                    "rewrite task {} of table {}: the table no longer has partition spec {id}; plan the rewrite again",
                    task.group, task.table
                ),
            )
        }),
    }
}

/// Rewrites one group's planned files (`sub`: a scan plan of exactly those files), encoding
/// on `lanes` parallel writers (each holds one open file); returns the new files and the id
/// of the partition spec they were written with.
async fn rewrite_group(
    table: &Table,
    task: &RewriteTask,
    sub: ScanPlan,
    lanes: usize,
) -> Result<(i32, Vec<DataFile>)> {
    let spec = output_spec(table, task)?;
    let spec_id = spec.spec_id();
    let zorder = task.sort_order.as_deref().and_then(zorder_columns);
    let sort = match &task.sort_order {
        None => None,
        Some(_) if zorder.is_some() => None,
        Some(t) if t.is_empty() => Some(table.metadata().default_sort_order().as_ref().clone()),
        Some(t) => Some(crate::spec::parse_sort_order(
            t,
            table.metadata().current_schema(),
        )?),
    };
    let v3 = table.metadata().format_version() == crate::spec::FormatVersion::V3;
    // Rows are rewritten in the current schema (an ALTER since the snapshot may have
    // renamed, dropped, widened or added columns).
    let mut scan = Scan::new(table)
        .snapshot(SnapshotSelector::Id(task.snapshot_id))
        .in_current_schema();
    let mut w = DataWriter::with_lanes(table, lanes)?.with_partition_spec(spec);
    if v3 {
        // Rewritten rows keep their row ids and last-updated sequence numbers.
        scan = scan.with_row_lineage();
        w = w.with_row_lineage(table)?;
    }
    let mut w = w
        .with_target_file_size(task.target_file_size_bytes)
        .with_sort_order(sort, table);
    if let Some(cols) = &zorder {
        w = w.with_zorder(cols, table)?;
    }
    if task.sort_order.is_some() {
        // Sorted as one range, like Spark's sort and z-order rewriters (a group's files hold
        // consecutive ranges).
        w = w.with_distribution(crate::spec::DistributionMode::Range);
    }
    let run = async {
        let mut rows = scan.read(sub)?;
        while let Some(b) = rows.next().await {
            w.write(b?).await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    match run {
        Ok(()) => Ok((spec_id, w.close().await?)),
        Err(e) => {
            w.abort(table.storage()).await;
            Err(e)
        }
    }
}

/// Runs one task of `plan` (in any process): rewrites its files and records the new files in
/// an Avro file under the table's metadata directory.
pub(crate) async fn execute_task(
    catalog: &Catalog,
    plan: &RewritePlan,
    task: &RewriteTask,
) -> Result<TaskResult> {
    let table = catalog
        .load_table(&crate::table::parse_ident(&task.table)?)
        .await?;
    let scan_plan = Scan::new(&table)
        .snapshot(SnapshotSelector::Id(task.snapshot_id))
        .in_current_schema()
        .plan()
        .await?;
    let keep: HashSet<&str> = task.files.iter().map(String::as_str).collect();
    let idx: Vec<usize> = scan_plan
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| keep.contains(f.file.file_path()))
        .map(|(i, _)| i)
        .collect();
    if idx.len() != task.files.len() {
        return Err(Error::new(
            crate::ErrorKind::Conflict,
            format!(
                "rewrite task {} of table {}: some of its files are not in snapshot {}",
                task.group, task.table, task.snapshot_id
            ),
        ));
    }
    let (spec_id, files) = rewrite_group(&table, task, scan_plan.subset(&idx), cores()).await?;
    let md = table.metadata();
    let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
        Error::corrupt(format!(
            "table {} lost partition spec {spec_id}",
            task.table
        ))
    })?;
    let partition_type = spec.partition_type(md.current_schema())?;
    let mut bytes = Vec::new();
    iceberg::spec::write_data_files_to_avro(
        &mut bytes,
        files.clone(),
        &partition_type,
        md.format_version(),
    )?;
    let path = join(
        md.location(),
        &format!(
            "metadata/rewrite-{}-g{}.avro",
            uuid::Uuid::new_v4(),
            task.group
        ),
    );
    table.storage().put(&path, bytes.into()).await?;
    let mut header = plan.clone();
    header.tasks.clear();
    header.groups = plan.tasks.len().max(plan.groups);
    Ok(TaskResult {
        plan: header,
        task: task.clone(),
        spec_id,
        data_files: path,
        added_data_files_count: files.len(),
        written: files.iter().map(|f| f.file_path().to_string()).collect(),
    })
}

/// Commits the results of every task of one plan as one `replace` snapshot.
pub(crate) async fn commit_rewrite(
    catalog: &Catalog,
    results: &[TaskResult],
) -> Result<RewriteResult> {
    commit_results(catalog, results, true).await
}

/// Commits the results of some tasks of one plan (each group at most once) as one `replace`
/// snapshot: partial progress of a distributed rewrite (`partial-progress.enabled`), whose
/// driver commits the groups that succeeded, in up to `partial-progress.max-commits`
/// commits. Validation starts from the plan's snapshot, as every commit of an in-process
/// rewrite with partial progress does.
pub(crate) async fn commit_rewrite_groups(
    catalog: &Catalog,
    results: &[TaskResult],
) -> Result<RewriteResult> {
    commit_results(catalog, results, false).await
}

async fn commit_results(
    catalog: &Catalog,
    results: &[TaskResult],
    require_all: bool,
) -> Result<RewriteResult> {
    let Some(first) = results.first() else {
        return Err(Error::invalid(
            "commit of a rewrite needs the results of its tasks",
        ));
    };
    let mut plan = first.plan.clone();
    plan.tasks = results.iter().map(|r| r.task.clone()).collect();
    let plan = &plan;
    let table = catalog
        .load_table(&crate::table::parse_ident(&plan.table)?)
        .await?;
    let md = table.metadata();
    let mut written: Vec<(i32, Vec<DataFile>)> = Vec::new();
    let groups: HashSet<usize> = results.iter().map(|r| r.task.group).collect();
    if (require_all && groups.len() != plan.groups)
        || groups.len() > plan.groups
        || groups.len() != results.len()
        || results
            .iter()
            .any(|r| r.task.snapshot_id != plan.snapshot_id || r.plan.table != plan.table)
    {
        return Err(Error::invalid(format!(
            "rewrite of {}: {} results for the {} tasks of snapshot {}; give exactly one result per task of one plan",
            plan.table,
            results.len(),
            plan.groups,
            plan.snapshot_id
        )));
    }
    for r in results {
        let spec = md.partition_spec_by_id(r.spec_id).ok_or_else(|| {
            Error::corrupt(format!(
                "rewrite result {} names unknown spec {}",
                r.data_files, r.spec_id
            ))
        })?;
        let bytes = table.storage().get(&r.data_files).await?;
        let files = iceberg::spec::read_data_files_from_avro(
            &mut bytes.as_ref(),
            md.current_schema(),
            r.spec_id,
            &spec.partition_type(md.current_schema())?,
            md.format_version(),
        )
        .map_err(|e| Error::corrupt(format!("rewrite result '{}': {e}", r.data_files)))?;
        written.push((r.spec_id, files));
    }
    let plan_scan = Scan::new(&table)
        .snapshot(SnapshotSelector::Id(plan.snapshot_id))
        .plan()
        .await?;
    let in_plan: HashSet<&str> = plan
        .tasks
        .iter()
        .flat_map(|t| t.files.iter().map(String::as_str))
        .collect();
    let rewritten: Vec<&PlannedFile> = plan_scan
        .files
        .iter()
        .filter(|f| in_plan.contains(f.file.file_path()))
        .collect();
    let r = commit_files(catalog, &table, plan, &rewritten, written).await;
    for res in results {
        let _ = table.storage().delete(&res.data_files).await;
    }
    if plan.remove_dangling_deletes {
        return then_remove_dangling(catalog, r?).await;
    }
    r
}

/// `remove-dangling-deletes`: a second commit, after the rewrite's, that removes the delete
/// files no live data file needs any more (counted in `removed_delete_files_count`).
async fn then_remove_dangling(catalog: &Catalog, mut r: RewriteResult) -> Result<RewriteResult> {
    let Some(t) = r.table.clone() else {
        return Ok(r);
    };
    let (t, n) = remove_dangling_deletes(catalog, &t).await.map_err(|e| {
        e.context(format!(
            "rewrite_data_files on {} committed snapshot {}, but removing dangling delete files failed; \
             run the rewrite again with remove-dangling-deletes=true to retry",
            t.name(),
            r.snapshot_id.map(|s| s.to_string()).unwrap_or_default()
        ))
    })?;
    r.table = Some(t);
    r.removed_delete_files_count += n;
    Ok(r)
}

async fn commit_files(
    catalog: &Catalog,
    table: &Table,
    plan: &RewritePlan,
    rewritten: &[&PlannedFile],
    written: Vec<(i32, Vec<DataFile>)>,
) -> Result<RewriteResult> {
    let mut result = RewriteResult {
        table: Some(table.clone()),
        snapshot_id: None,
        rewritten_data_files_count: rewritten.len(),
        added_data_files_count: written.iter().map(|(_, f)| f.len()).sum(),
        rewritten_bytes_count: rewritten.iter().map(|f| f.file.file_size_in_bytes()).sum(),
        failed_data_files_count: 0,
        removed_delete_files_count: 0,
        file_groups: plan.tasks.len(),
        reason: None,
    };
    // Delete files used only by rewritten files go with them; others stay.
    let (removed, removed_deletes) = removed_with_their_deletes(rewritten.iter().copied());
    result.removed_delete_files_count = removed_deletes;
    let all_new: Vec<String> = written
        .iter()
        .flat_map(|(_, f)| f.iter().map(|f| f.file_path().to_string()))
        .collect();
    let written_files = written;
    let mut producer = replace_producer(plan, removed, &written_files);
    let conflict_filter = match &plan.filter {
        Some(f) => Some(
            f.predicate()
                .clone()
                .bind(table.metadata().current_schema().clone(), false)
                .map_err(|e| Error::invalid(format!("rewrite filter: {}", e.message())))?,
        ),
        None => None,
    };
    let validation = RowLevelValidation {
        isolation: IsolationLevel::Snapshot,
        conflict_filter,
        touched: rewritten
            .iter()
            .map(|f| (f.file.clone(), f.spec.clone()))
            .collect(),
        ignore_equality_deletes: plan.use_starting_sequence_number,
        table: table.name(),
    };
    // Validated against every snapshot since the one the plan read: the tasks may have run
    // in other processes, and `table` may be a later load than the plan's.
    match commit_since(
        catalog,
        table,
        Some(plan.snapshot_id),
        &mut producer,
        &validation,
    )
    .await
    {
        Ok(t) => {
            result.table = Some(t);
            result.snapshot_id = Some(producer.snapshot_id());
            Ok(result)
        }
        Err(e) => {
            let e = if e.kind() == crate::ErrorKind::Conflict {
                // Deletes committed to the rewritten files meanwhile: carried onto the new
                // files, the rewrite commits on the newer state.
                match commit_carrying_deletes(
                    catalog,
                    table,
                    plan,
                    rewritten,
                    &written_files,
                    &validation,
                    e,
                )
                .await
                {
                    Ok((t, snapshot_id, removed_deletes)) => {
                        result.table = Some(t);
                        result.snapshot_id = Some(snapshot_id);
                        result.removed_delete_files_count = removed_deletes;
                        return Ok(result);
                    }
                    Err(e) => e,
                }
            } else {
                e
            };
            if e.kind() != crate::ErrorKind::CommitStateUnknown {
                for p in all_new {
                    let _ = table.storage().delete(&p).await;
                }
            }
            Err(e)
        }
    }
}

/// The `replace` producer of a rewrite: `remove` out, the written files in, at the plan's
/// starting sequence number when it keeps one.
fn replace_producer(
    plan: &RewritePlan,
    remove: Vec<crate::txn::FileKey>,
    written: &[(i32, Vec<DataFile>)],
) -> SnapshotProducer {
    let mut producer = SnapshotProducer::new(Operation::Replace, vec![]).remove_files(remove);
    for (spec, files) in written {
        producer = producer.add_files(*spec, files.clone());
    }
    if plan.use_starting_sequence_number {
        producer = producer.with_data_sequence_number(plan.sequence_number);
    }
    producer
}

/// After a rewrite's commit lost to deletes committed to its input files, carries those
/// deletes onto the written files ([`Carrier`]) and commits on the newer state, a few
/// times while the writer keeps winning; `lost` when they cannot be carried. Maintenance (a
/// patient handle) that lost a carried round asks floe writers to hold their commits
/// ([`crate::txn::ask_writers_to_hold`]) for the rounds after; the intent goes with the
/// rewrite's commit, or is withdrawn when none lands.
async fn commit_carrying_deletes(
    catalog: &Catalog,
    table: &Table,
    plan: &RewritePlan,
    rewritten: &[&PlannedFile],
    written: &[(i32, Vec<DataFile>)],
    validation: &RowLevelValidation,
    lost: Error,
) -> Result<(Table, i64, usize)> {
    let pause_ms = crate::txn::writer_pause_ms(table);
    let mut intent: Option<String> = None;
    let r = async {
        let mut last = lost;
        // Maintenance (a patient handle) keeps trying while a busy writer keeps winning.
        let rounds = if table.is_patient() { 16 } else { 4 };
        let mut carrier = Carrier::new(
            catalog,
            table,
            plan.snapshot_id,
            rewritten,
            written,
            plan.use_starting_sequence_number,
        );
        for round in 0..rounds {
            if round > 0 && pause_ms > 0 && intent.is_none() {
                let holder = super::default_holder();
                let v = crate::txn::ask_writers_to_hold(catalog, table, &holder, pause_ms).await?;
                intent = Some(v);
            }
            let c = match carrier.carry().await {
                Ok(Some(c)) => c,
                Ok(None) => return Err(last),
                Err(e) => return Err(e.context(format!("{last}; carrying the new deletes failed"))),
            };
            let mut producer = replace_producer(plan, c.remove.clone(), written);
            for (spec, d) in &c.add {
                producer = producer.add_files(*spec, [d.clone()]);
            }
            if let Some(v) = intent.as_deref() {
                producer = producer.clearing_intent(v);
            }
            match commit(catalog, &c.table, &mut producer, validation).await {
                Ok(t) => return Ok((t, producer.snapshot_id(), c.removed_delete_files)),
                Err(e) => {
                    if e.kind() != crate::ErrorKind::CommitStateUnknown {
                        for (_, d) in &c.add {
                            let _ = table.storage().delete(d.file_path()).await;
                        }
                    }
                    if e.kind() != crate::ErrorKind::Conflict {
                        return Err(e);
                    }
                    last = e;
                }
            }
        }
        Err(last)
    }
    .await;
    if let (Some(v), Err(_)) = (&intent, &r) {
        let _ = crate::txn::withdraw_intent(catalog, table, v).await;
    }
    r
}

/// Rewrites the data files the planner selects (`filter` limits them to files that may hold
/// matching rows), applying their deletes, as one `replace` commit: [`plan_rewrite`], the
/// tasks run here (up to `max-concurrent-file-group-rewrites` at once), [`crate::pending::commit_pending`].
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
/// # let table = floe::txn::append(&cat, &table, [rows(0..10)]).await?.table;
/// # let table = floe::txn::append(&cat, &table, [rows(10..20)]).await?.table;
/// // Bin-pack small files (Spark's options; here: every file).
/// let options = [("rewrite-all".to_string(), "true".to_string())].into();
/// let r = floe::maintenance::rewrite_data_files(&cat, &table, None, &options, None).await?;
/// assert_eq!((r.rewritten_data_files_count, r.added_data_files_count), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn rewrite_data_files(
    catalog: &Catalog,
    table: &Table,
    filter: Option<FileSelection>,
    options: &HashMap<String, String>,
    progress: Option<Progress<'_>>,
) -> Result<RewriteResult> {
    if table.current_snapshot().is_none() {
        return Ok(RewriteResult::nothing_because(
            table,
            "the table has no snapshot".into(),
        ));
    }
    let planned = plan_rewrite(table, filter, options).await?;
    if planned.plan.tasks.is_empty() {
        return Ok(RewriteResult::nothing_because(table, planned.explain()));
    }
    let PlannedRewrite {
        plan,
        scan: scan_plan,
        groups,
        options: o,
    } = planned;
    let total = plan.tasks.len();
    let concurrency = o.max_concurrent_file_group_rewrites;
    let partial = o.partial_progress_enabled;
    let max_commits = o.partial_progress_max_commits;
    // With partial progress, groups are committed in up to `max_commits` batches, and a
    // failed batch does not undo the others; otherwise everything commits at once or not at all.
    let per_commit = if partial {
        total.div_ceil(max_commits)
    } else {
        total
    };
    let mut done = 0;
    let mut result: Option<RewriteResult> = None;
    let mut failed_files = 0;
    let mut last_error = None;
    // Every batch commits from the starting snapshot, so its validation covers everything
    // committed since the rewrite began (the earlier batches' own commits included).
    for batch in (0..total).collect::<Vec<_>>().chunks(per_commit) {
        let tasks: Vec<(&RewriteTask, &Vec<usize>)> = batch
            .iter()
            .map(|&i| (&plan.tasks[i], &groups[i]))
            .collect();
        let r = rewrite_batch(
            catalog,
            table,
            &plan,
            &scan_plan,
            &tasks,
            concurrency,
            &mut |n| {
                done += n;
                if let Some(p) = progress {
                    p(done, total);
                }
            },
        )
        .await;
        match r {
            Ok(r) => {
                result = Some(match result.take() {
                    None => r,
                    Some(acc) => RewriteResult {
                        table: r.table,
                        snapshot_id: r.snapshot_id,
                        rewritten_data_files_count: acc.rewritten_data_files_count
                            + r.rewritten_data_files_count,
                        added_data_files_count: acc.added_data_files_count
                            + r.added_data_files_count,
                        rewritten_bytes_count: acc.rewritten_bytes_count + r.rewritten_bytes_count,
                        failed_data_files_count: 0,
                        removed_delete_files_count: acc.removed_delete_files_count
                            + r.removed_delete_files_count,
                        file_groups: acc.file_groups + r.file_groups,
                        reason: None,
                    },
                });
            }
            Err(e) if partial => {
                failed_files += tasks.iter().map(|(t, _)| t.files.len()).sum::<usize>();
                last_error = Some(e);
            }
            Err(e) => return Err(ctx(table)(e)),
        }
    }
    match result {
        Some(mut r) => {
            r.failed_data_files_count = failed_files;
            if o.remove_dangling_deletes {
                r = then_remove_dangling(catalog, r).await?;
            }
            Ok(r)
        }
        None => {
            Err(ctx(table)(last_error.unwrap_or_else(|| {
                Error::io("no file group was rewritten")
            })))
        }
    }
}

/// Rewrites the groups `which` (indexes into `planned.plan.tasks`) of an in-process plan of
/// `table` and commits them as one `replace` snapshot, validated from the plan's snapshot
/// (one bounded step of `maintain`).
pub(crate) async fn rewrite_planned_groups(
    catalog: &Catalog,
    table: &Table,
    planned: &PlannedRewrite,
    which: &[usize],
) -> Result<RewriteResult> {
    let tasks: Vec<(&RewriteTask, &Vec<usize>)> = which
        .iter()
        .filter_map(|&i| Some((planned.plan.tasks.get(i)?, planned.groups.get(i)?)))
        .collect();
    let concurrency = planned.options.max_concurrent_file_group_rewrites.max(1);
    rewrite_batch(
        catalog,
        table,
        &planned.plan,
        &planned.scan,
        &tasks,
        concurrency,
        &mut |_| {},
    )
    .await
}

/// Rewrites some groups of a plan and commits them as one `replace` snapshot.
async fn rewrite_batch(
    catalog: &Catalog,
    table: &Table,
    plan: &RewritePlan,
    scan_plan: &ScanPlan,
    tasks: &[(&RewriteTask, &Vec<usize>)],
    concurrency: usize,
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<RewriteResult> {
    // Groups running at once share the cores: memory stays about one open file per core or
    // per group, whichever is more.
    let lanes = (cores() / concurrency.min(tasks.len()).max(1)).max(1);
    // Each future owns its task and table handle (borrowing ones would make the rewrite's
    // future not `Send`).
    let groups: Vec<_> = tasks
        .iter()
        .map(|(task, idx)| {
            let (sub, task, table) = (scan_plan.subset(idx), (*task).clone(), table.clone());
            async move { rewrite_group(&table, &task, sub, lanes).await }
        })
        .collect();
    let mut stream = futures::stream::iter(groups).buffer_unordered(concurrency);
    let (mut written, mut failure): (Vec<(i32, Vec<DataFile>)>, _) = (Vec::new(), None);
    while let Some(r) = stream.next().await {
        match r {
            Ok(files) => written.push(files),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        progress(1);
    }
    drop(stream);
    if let Some(e) = failure {
        for f in written.iter().flat_map(|(_, f)| f) {
            let _ = table.storage().delete(f.file_path()).await;
        }
        return Err(e);
    }
    let rewritten: Vec<&PlannedFile> = tasks
        .iter()
        .flat_map(|(_, idx)| idx.iter())
        .map(|i| &scan_plan.files[*i])
        .collect();
    let mut batch_plan = plan.clone();
    batch_plan.tasks = tasks.iter().map(|(t, _)| (*t).clone()).collect();
    commit_files(catalog, table, &batch_plan, &rewritten, written).await
}
