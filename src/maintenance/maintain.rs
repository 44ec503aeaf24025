//! `maintain`: decides from a table's state and its policy ([`MaintainPolicy`]) which
//! maintenance is worth doing and does it in bounded steps, each its own commit, under the
//! table's maintenance lease ([`Lease`]).
//!
//! The steps, in order: bin-pack compaction (`rewrite_data_files` with the Spark procedure's
//! thresholds, committed in batches of file groups: a batch that loses a race against a
//! writer's deletes is planned again, the others stay committed), merging position delete
//! files, rewriting manifests once there are `commit.manifest.min-count-to-merge` small ones,
//! merging (and optionally expiring) tombstone files of keyed tables, `expire_snapshots` by
//! `history.expire.*` and each ref's retention, `remove_orphan_files` older than
//! `floe.maintain.remove-orphan-files.older-than-ms` (3 days).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::expire::{expire_snapshots, ExpireOptions};
use super::lease::{default_holder, Lease};
use super::orphans::remove_orphan_files;
use super::rewrite_data_files::{gib, plan_rewrite, rewrite_planned_groups, PlannedRewrite};
use super::rewrite_deletes::rewrite_position_delete_files;
use super::rewrite_manifests::rewrite_manifests;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::scan::Scan;
use crate::spec::maintain_policy::{MaintainPolicy, STEPS};
use crate::spec::{DataContentType, DataFileFormat, ManifestContentType};
use crate::table::Table;

/// How to run `maintain`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MaintainOptions {
    /// Only decide: report what would be done and why, change nothing (no lease taken).
    pub dry_run: bool,
    /// At most this many bytes of data files are compacted by this run.
    pub max_rewrite_bytes: Option<u64>,
    /// The lease holder's name (default `host:pid`).
    pub holder: Option<String>,
    /// Set (by a signal handler, say) to stop at the next step or batch boundary: the
    /// steps not begun are reported as skipped.
    pub stop: Option<Arc<AtomicBool>>,
}

impl MaintainOptions {
    /// Only report the plan.
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Compact at most `bytes` of data files in this run.
    pub fn with_max_rewrite_bytes(mut self, bytes: u64) -> Self {
        self.max_rewrite_bytes = Some(bytes);
        self
    }

    /// Stop at the next step or batch boundary once `flag` is set.
    pub fn with_stop(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Whether a stop was asked for.
    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// Take the lease under this name.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }
}

/// What one step of `maintain` decided and did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct MaintainStep {
    /// The step (`rewrite-data-files`, `rewrite-position-delete-files`, `rewrite-manifests`,
    /// `tombstones`, `expire-snapshots`, `remove-orphan-files`).
    pub step: &'static str,
    /// `done`, `planned` (a dry run), `skipped` (nothing worth doing, or switched off) or
    /// `failed`.
    pub action: &'static str,
    /// The numbers behind the decision.
    pub reason: String,
    /// Commits this step made.
    #[serde(rename = "commits_count")]
    pub commits: usize,
    /// Snapshots this step committed (expiry and tombstone merges change the metadata only).
    pub snapshot_ids: Vec<i64>,
    /// What it changed (or, in a dry run, would change): file and snapshot counts.
    pub counts: BTreeMap<&'static str, u64>,
    /// Why it failed (`action` = `failed`).
    pub error: Option<String>,
    /// The kind of that error.
    #[serde(skip)]
    pub error_kind: Option<ErrorKind>,
    /// How long the step took.
    pub elapsed_ms: u64,
}

impl MaintainStep {
    fn new(step: &'static str) -> Self {
        Self {
            step,
            action: "skipped",
            reason: String::new(),
            commits: 0,
            snapshot_ids: Vec::new(),
            counts: BTreeMap::new(),
            error: None,
            error_kind: None,
            elapsed_ms: 0,
        }
    }

    fn skip(mut self, reason: impl Into<String>) -> Self {
        self.action = "skipped";
        self.reason = reason.into();
        self
    }
}

/// What `maintain` did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct MaintainReport {
    /// The table's name.
    pub table: String,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The lease holder this run worked as (`None` in a dry run).
    pub lease_holder: Option<String>,
    /// The steps, in the order they ran.
    pub steps: Vec<MaintainStep>,
    /// Commits made.
    #[serde(rename = "commits_count")]
    pub commits: usize,
    /// Steps that failed.
    #[serde(rename = "failed_steps_count")]
    pub failed_steps: usize,
    /// The table after the run.
    #[serde(skip)]
    pub table_after: Option<Table>,
}

/// Runs one pass of maintenance on `table` under its maintenance lease (taken here and
/// given back at the end; a [`ErrorKind::Conflict`] naming the holder if another maintainer
/// has it). Each step's failure is reported in its [`MaintainStep`] and the next step runs.
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
/// # let schema = floe::spec::parse_schema("id long")?;
/// # let mut table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// for i in 0..5 {
///     let rows = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![i])) as _)])?;
///     table = floe::txn::append(&cat, &table, [Ok(rows)]).await?.table;
/// }
/// // Five small files: compaction is worth it (min-input-files 5).
/// let r = floe::maintenance::maintain(&cat, &table, &Default::default()).await?;
/// assert_eq!(r.steps[0].step, "rewrite-data-files");
/// assert_eq!(r.steps[0].counts["rewritten_data_files_count"], 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn maintain(
    catalog: &Catalog,
    table: &Table,
    options: &MaintainOptions,
) -> Result<MaintainReport> {
    if options.dry_run {
        return run(catalog, table, options, None).await;
    }
    let policy =
        MaintainPolicy::of(table.metadata().properties()).map_err(|e| e.context(table.name()))?;
    let holder = options.holder.clone().unwrap_or_else(default_holder);
    let mut lease = Lease::acquire(table, &holder, policy.lease_ms).await?;
    let r = run(catalog, table, options, Some(&mut lease)).await;
    let released = lease.release().await;
    let r = r?;
    released?;
    Ok(r)
}

/// One pass of maintenance under a lease the caller holds (and renews between steps here):
/// what `maintain --watch` runs at each wake-up.
pub async fn maintain_with_lease(
    catalog: &Catalog,
    table: &Table,
    options: &MaintainOptions,
    lease: &mut Lease,
) -> Result<MaintainReport> {
    run(catalog, table, options, Some(lease)).await
}

async fn run(
    catalog: &Catalog,
    table: &Table,
    options: &MaintainOptions,
    mut lease: Option<&mut Lease>,
) -> Result<MaintainReport> {
    let policy =
        MaintainPolicy::of(table.metadata().properties()).map_err(|e| e.context(table.name()))?;
    let mut report = MaintainReport {
        table: table.name(),
        dry_run: options.dry_run,
        lease_holder: lease.as_ref().map(|l| l.holder().holder.clone()),
        steps: Vec::new(),
        commits: 0,
        failed_steps: 0,
        table_after: None,
    };
    let mut current = table.clone();
    if lease.is_some() {
        // An intent its maintainer left behind when it died holds nobody any more: it goes.
        crate::txn::withdraw_lapsed(catalog, table).await?;
    }
    for step in STEPS {
        if let Some(l) = lease.as_deref_mut() {
            l.renew().await?;
        }
        // Each step starts from the table as it is now (writers keep committing).
        // Its commits retry as long as a service may wait (writers come first).
        current = catalog.load_table(current.ident()).await?.patient();
        let mut s = MaintainStep::new(step);
        let started = std::time::Instant::now();
        if options.stopped() {
            s = s.skip("stopped before this step");
        } else if !policy.enabled {
            s = s.skip("floe.maintain.enabled=false");
        } else if !policy.runs(step) {
            s = s.skip(format!("floe.maintain.{step}.enabled=false"));
        } else {
            let r = match step {
                "rewrite-data-files" => {
                    compact(catalog, &current, &policy, options, lease.as_deref_mut(), s).await
                }
                "rewrite-position-delete-files" => {
                    merge_deletes(catalog, &current, &policy, options, s).await
                }
                "rewrite-manifests" => merge_manifests(catalog, &current, options, s).await,
                "tombstones" => tombstones(catalog, &current, &policy, options, s).await,
                "expire-snapshots" => expire(catalog, &current, options, s).await,
                _ => orphans(catalog, &current, &policy, options, s).await,
            };
            s = match r {
                Ok(s) => s,
                Err((mut s, e)) => {
                    if e.kind() == ErrorKind::Conflict && e.message().contains("maintenance lease")
                    {
                        return Err(e);
                    }
                    s.action = "failed";
                    s.error = Some(e.to_string());
                    s.error_kind = Some(e.kind());
                    s
                }
            };
        }
        s.commits = s.commits.max(s.snapshot_ids.len());
        s.elapsed_ms = started.elapsed().as_millis() as u64;
        report.commits += s.commits;
        report.failed_steps += usize::from(s.action == "failed");
        report.steps.push(s);
    }
    report.table_after = Some(catalog.load_table(current.ident()).await?);
    Ok(report)
}

type StepResult = std::result::Result<MaintainStep, (MaintainStep, Error)>;

fn fail(s: MaintainStep) -> impl FnOnce(Error) -> (MaintainStep, Error) {
    move |e| (s, e)
}

/// Rounds of planning a compaction gets when batches lose races against writers.
const COMPACTION_ROUNDS: usize = 3;

async fn compact(
    catalog: &Catalog,
    table: &Table,
    policy: &MaintainPolicy,
    options: &MaintainOptions,
    mut lease: Option<&mut Lease>,
    mut s: MaintainStep,
) -> StepResult {
    if table.current_snapshot().is_none() {
        return Ok(s.skip("the table has no snapshot"));
    }
    let mut budget = options.max_rewrite_bytes.unwrap_or(u64::MAX);
    let (mut rewritten, mut added, mut bytes, mut groups, mut lost, mut removed_deletes) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut table = table.clone();
    let mut last_error = None;
    for round in 0..COMPACTION_ROUNDS {
        let planned = match plan_rewrite(&table, None, &policy.rewrite_data_files).await {
            Ok(p) => p,
            Err(e) => return Err((s, e.context("floe.maintain.rewrite-data-files.* options"))),
        };
        let chosen = within_budget(&planned, &mut budget);
        if round == 0 {
            s.reason = compaction_reason(&planned, chosen.len(), options.max_rewrite_bytes);
        }
        if chosen.is_empty() {
            break;
        }
        if options.dry_run {
            s.action = "planned";
            s.counts.insert("file_groups_count", chosen.len() as u64);
            s.counts.insert(
                "rewritten_data_files_count",
                chosen
                    .iter()
                    .map(|&i| planned.plan.tasks[i].files.len() as u64)
                    .sum(),
            );
            s.counts.insert(
                "rewritten_bytes_count",
                chosen.iter().map(|&i| group_bytes(&planned, i)).sum(),
            );
            return Ok(s);
        }
        // Batches as Java's partial progress cuts them: up to max-commits commits.
        let per_commit = chosen
            .len()
            .div_ceil(planned.options.partial_progress_max_commits.max(1));
        let mut conflicts = 0;
        for batch in chosen.chunks(per_commit.max(1)) {
            if options.stopped() {
                break;
            }
            if let Some(l) = lease.as_deref_mut() {
                l.renew().await.map_err(fail(s.clone()))?;
            }
            match rewrite_planned_groups(catalog, &table, &planned, batch).await {
                Ok(r) => {
                    rewritten += r.rewritten_data_files_count as u64;
                    added += r.added_data_files_count as u64;
                    bytes += r.rewritten_bytes_count;
                    groups += r.file_groups as u64;
                    removed_deletes += r.removed_delete_files_count as u64;
                    s.snapshot_ids.extend(r.snapshot_id);
                }
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    // A writer deleted rows of these files meanwhile: their groups are
                    // planned again from the table as it is now.
                    lost += batch.len() as u64;
                    conflicts += 1;
                    budget = budget
                        .saturating_add(batch.iter().map(|&i| group_bytes(&planned, i)).sum());
                    last_error = Some(e);
                }
                Err(e) => return Err((s, e)),
            }
        }
        if conflicts == 0 {
            break;
        }
        table = catalog
            .load_table(table.ident())
            .await
            .map_err(fail(s.clone()))?
            .patient();
    }
    for (k, v) in [
        ("rewritten_data_files_count", rewritten),
        ("added_data_files_count", added),
        ("rewritten_bytes_count", bytes),
        ("file_groups_count", groups),
        ("removed_delete_files_count", removed_deletes),
        ("conflicting_file_groups_count", lost),
    ] {
        s.counts.insert(k, v);
    }
    s.action = if !s.snapshot_ids.is_empty() {
        "done"
    } else if let Some(e) = last_error {
        return Err((
            s,
            e.context("every compaction batch lost its race against concurrent commits; the next pass plans again"),
        ));
    } else {
        "skipped"
    };
    Ok(s)
}

fn group_bytes(planned: &PlannedRewrite, i: usize) -> u64 {
    planned.groups[i]
        .iter()
        .map(|&f| planned.scan.files[f].file.file_size_in_bytes())
        .sum()
}

/// The planned groups, in plan order, that fit in what is left of the byte budget.
fn within_budget(planned: &PlannedRewrite, budget: &mut u64) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..planned.plan.tasks.len() {
        let b = group_bytes(planned, i);
        if b <= *budget {
            *budget -= b;
            out.push(i);
        }
    }
    out
}

fn compaction_reason(planned: &PlannedRewrite, chosen: usize, max: Option<u64>) -> String {
    let mut r = planned.explain();
    if let Some(m) = max {
        r.push_str(&format!(
            "; {chosen} of them fit in --max-rewrite-bytes {}",
            gib(m)
        ));
    }
    r
}

async fn merge_deletes(
    catalog: &Catalog,
    table: &Table,
    policy: &MaintainPolicy,
    options: &MaintainOptions,
    mut s: MaintainStep,
) -> StepResult {
    if table.current_snapshot().is_none() {
        return Ok(s.skip("the table has no snapshot"));
    }
    let plan = Scan::new(table).plan().await.map_err(fail(s.clone()))?;
    // Position delete files (not deletion vectors) per partition.
    let mut seen = HashSet::new();
    let mut per_partition: HashMap<String, usize> = HashMap::new();
    for f in &plan.files {
        for d in &f.deletes {
            if d.file.content_type() == DataContentType::PositionDeletes
                && d.file.file_format() != DataFileFormat::Puffin
                && seen.insert(d.file.file_path().to_string())
            {
                let key = format!("{}/{:?}", f.spec.spec_id(), d.file.partition());
                *per_partition.entry(key).or_default() += 1;
            }
        }
    }
    let min = policy.deletes_min_input_files;
    let due = per_partition.values().filter(|n| **n >= min).count();
    s.reason = format!(
        "{} position delete files in {} partitions; {due} partitions hold at least \
         min-input-files {min}",
        seen.len(),
        per_partition.len()
    );
    if due == 0 {
        s.action = "skipped";
        return Ok(s);
    }
    if options.dry_run {
        s.action = "planned";
        s.counts.insert("partitions_count", due as u64);
        return Ok(s);
    }
    let o = HashMap::from([("min-input-files".to_string(), min.to_string())]);
    let r = rewrite_position_delete_files(catalog, table, &o)
        .await
        .map_err(fail(s.clone()))?;
    s.snapshot_ids.extend(r.snapshot_id);
    s.counts.insert(
        "rewritten_delete_files_count",
        r.rewritten_delete_files_count as u64,
    );
    s.counts.insert(
        "added_delete_files_count",
        r.added_delete_files_count as u64,
    );
    s.action = if r.snapshot_id.is_some() {
        "done"
    } else {
        "skipped"
    };
    Ok(s)
}

async fn merge_manifests(
    catalog: &Catalog,
    table: &Table,
    options: &MaintainOptions,
    mut s: MaintainStep,
) -> StepResult {
    let Some(snap) = table.current_snapshot() else {
        return Ok(s.skip("the table has no snapshot"));
    };
    let props = table.properties().map_err(fail(s.clone()))?;
    let list = table.manifest_list(snap).await.map_err(fail(s.clone()))?;
    let target = props.manifest_target_size_bytes;
    let small = |c: ManifestContentType| {
        list.iter()
            .filter(|m| m.content == c && (m.manifest_length as u64) < target)
            .count()
    };
    let (data, deletes) = (
        small(ManifestContentType::Data),
        small(ManifestContentType::Deletes),
    );
    let min = props.manifest_min_count_to_merge.max(2);
    s.reason = format!(
        "{} manifests: {data} data and {deletes} delete manifests under \
         commit.manifest.target-size-bytes {}; rewritten at commit.manifest.min-count-to-merge {min}",
        list.len(),
        gib(target)
    );
    if data < min && deletes < min {
        s.action = "skipped";
        return Ok(s);
    }
    if options.dry_run {
        s.action = "planned";
        return Ok(s);
    }
    let r = rewrite_manifests(catalog, table, None)
        .await
        .map_err(fail(s.clone()))?;
    s.snapshot_ids.extend(r.snapshot_id);
    s.counts
        .insert("rewritten_manifests_count", r.rewritten_manifests_count);
    s.counts
        .insert("added_manifests_count", r.added_manifests_count);
    s.action = "done";
    Ok(s)
}

async fn tombstones(
    catalog: &Catalog,
    table: &Table,
    policy: &MaintainPolicy,
    options: &MaintainOptions,
    mut s: MaintainStep,
) -> StepResult {
    if !table
        .metadata()
        .properties()
        .contains_key(crate::spec::keyed::TOMBSTONES)
    {
        return Ok(s.skip("no tombstones (not a keyed table, or nothing deleted)"));
    }
    let report = crate::keyed::tombstones(table, false)
        .await
        .map_err(fail(s.clone()))?;
    let cutoff = policy
        .tombstones_max_age_ms
        .map(|age| chrono::Utc::now().timestamp_millis() - age);
    let old = cutoff.is_some_and(|c| report.oldest_ms.is_some_and(|o| o < c));
    let many = report.files >= policy.tombstones_min_files;
    s.reason = format!(
        "{} tombstones in {} files (merged at floe.maintain.tombstones.min-files {}){}",
        report.count,
        report.files,
        policy.tombstones_min_files,
        match policy.tombstones_max_age_ms {
            Some(a) => format!(
                "; {} older than floe.maintain.tombstones.max-age-ms {a}",
                if old { "some" } else { "none" }
            ),
            None => String::new(),
        }
    );
    if !many && !old {
        s.action = "skipped";
        return Ok(s);
    }
    let r = crate::keyed::merge_tombstones_holding(
        catalog,
        table.ident(),
        cutoff,
        options.dry_run,
        (
            &options.holder.clone().unwrap_or_else(default_holder),
            policy.max_writer_pause_ms,
        ),
    )
    .await
    .map_err(fail(s.clone()))?;
    s.counts
        .insert("tombstone_files_count", report.files as u64);
    s.counts.insert("expired_tombstones_count", r.removed);
    s.counts.insert("kept_tombstones_count", r.kept);
    if options.dry_run {
        s.action = "planned";
    } else if r.committed {
        s.action = "done";
        s.commits = 1;
    }
    Ok(s)
}

async fn expire(
    catalog: &Catalog,
    table: &Table,
    options: &MaintainOptions,
    mut s: MaintainStep,
) -> StepResult {
    let props = table.properties().map_err(fail(s.clone()))?;
    let planned = expire_snapshots(catalog, table, &ExpireOptions::default().with_dry_run(true))
        .await
        .map_err(fail(s.clone()))?;
    s.reason = format!(
        "{} snapshots; {} older than history.expire.max-snapshot-age-ms {} beyond \
         history.expire.min-snapshots-to-keep {} and the refs' retention",
        table.metadata().snapshots().count(),
        planned.expired_snapshot_ids.len(),
        props.expire_max_snapshot_age_ms,
        props.expire_min_snapshots_to_keep
    );
    if planned.expired_snapshot_ids.is_empty() {
        s.action = "skipped";
        return Ok(s);
    }
    if options.dry_run {
        s.action = "planned";
        s.counts.insert(
            "expired_snapshots_count",
            planned.expired_snapshot_ids.len() as u64,
        );
        return Ok(s);
    }
    let r = expire_snapshots(catalog, table, &ExpireOptions::default())
        .await
        .map_err(fail(s.clone()))?;
    s.counts.insert(
        "expired_snapshots_count",
        r.expired_snapshot_ids.len() as u64,
    );
    s.counts.insert(
        "deleted_data_files_count",
        r.deleted_data_files_count as u64,
    );
    s.counts.insert(
        "deleted_delete_files_count",
        r.deleted_delete_files_count as u64,
    );
    s.counts.insert(
        "deleted_manifest_files_count",
        r.deleted_manifest_files_count as u64,
    );
    s.commits = usize::from(r.metadata_location.is_some());
    s.action = "done";
    Ok(s)
}

async fn orphans(
    catalog: &Catalog,
    table: &Table,
    policy: &MaintainPolicy,
    options: &MaintainOptions,
    mut s: MaintainStep,
) -> StepResult {
    let cutoff = chrono::Utc::now().timestamp_millis() - policy.orphans_older_than_ms;
    let r = remove_orphan_files(catalog, table, Some(cutoff), options.dry_run)
        .await
        .map_err(fail(s.clone()))?;
    s.reason = format!(
        "{} unreferenced files older than floe.maintain.remove-orphan-files.older-than-ms {}",
        r.orphan_file_locations.len(),
        policy.orphans_older_than_ms
    );
    if r.orphan_file_locations.is_empty() {
        s.action = "skipped";
        return Ok(s);
    }
    s.counts
        .insert("orphan_files_count", r.orphan_file_locations.len() as u64);
    s.action = if options.dry_run { "planned" } else { "done" };
    Ok(s)
}
