//! Pending changes: what a distributed write's tasks write and its driver commits, as one
//! JSON-serializable value with one commit path and one discard.
//!
//! A task (in any process) stages its share of a change with one of the `stage_*`
//! functions: the files are written under the table's location, every name tagged with the
//! job's [`StagingJob`] where the operation has one, and nothing is committed. The task
//! hands its [`PendingChange`] to the driver (as JSON: [`PendingChange::to_json`] /
//! [`PendingChange::from_json`]), which calls [`commit_pending`] once with every task's
//! change (the conflict rules of the operation apply, with retries, as the one-process
//! operation does), or [`discard_pending`] to delete what they wrote. A job whose tasks'
//! changes never reached the driver is cleaned up by its tag
//! ([`crate::maintenance::discard_staging_job`]).
//!
//! | operation | staged by | committed as |
//! |---|---|---|
//! | `append` | [`stage_append`] | one `append` snapshot |
//! | `upsert` | [`stage_upsert`], [`stage_merged_upsert`] | one upsert of a keyed table |
//! | `shuffle` | [`stage_shuffle`] | not committed: the input of [`stage_merged_upsert`] |
//! | `rewrite` | [`stage_rewrite`] | one `replace` snapshot of a planned rewrite |

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::keyed::{ChangeBatch, StagedShards, StagedUpsert, UpsertOptions, UpsertResult};
use crate::maintenance::{RewritePlan, RewriteResult, TaskResult};
use crate::table::{parse_ident, Table};
use crate::txn::{AppendResult, StagedFiles, StagingJob};

/// A change written by a task and not committed yet (JSON-serializable, to hand from a
/// worker to the driver).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int64Array, RecordBatch};
/// use floe::pending::{commit_pending, stage_append, CommitPendingOptions, PendingChange};
/// use floe::txn::StagingJob;
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// # let ident = floe::table::parse_ident("db.t")?;
/// # let schema = floe::spec::parse_schema("id long")?;
/// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
/// #     ("id", Arc::new(Int64Array::from_iter_values(r)) as _),
/// # ])?) };
/// let job = StagingJob::new();
/// // Each task stages its rows; only the JSON crosses to the driver.
/// let a = stage_append(&table, [rows(0..100)], &job).await?.to_json()?;
/// let b = stage_append(&table, [rows(100..150)], &job).await?.to_json()?;
/// // The driver commits every task's change at once.
/// let changes = [PendingChange::from_json(&a)?, PendingChange::from_json(&b)?];
/// let r = commit_pending(&cat, &changes, &CommitPendingOptions::new()).await?;
/// assert!(r.snapshot_id().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingChange {
    /// The table's name (`ns.table`).
    pub table: String,
    /// The snapshot the change was staged against (`None`: the table had none). A rewrite
    /// and a merged upsert commit onto it only (or carry what changed since); an append and
    /// a replace-engine upsert are planned again at commit.
    pub base_snapshot_id: Option<i64>,
    /// The staging job whose tag the files carry (`None`: a rewrite task's files).
    pub job: Option<String>,
    /// Every file the task wrote (data files, listings, key lists, shard files).
    pub files: Vec<String>,
    /// What the change does when committed.
    #[serde(flatten)]
    pub operation: PendingOperation,
}

/// The operation of a [`PendingChange`] and what its task staged for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "operation", content = "staged", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PendingOperation {
    /// Data files to append.
    Append(StagedFiles),
    /// A task's share of an upsert into a keyed table.
    Upsert(StagedUpsert),
    /// A task's share of an upsert split by key into shard files (engines that fold rows);
    /// merged per shard by [`stage_merged_upsert`], never committed itself.
    Shuffle(StagedShards),
    /// One file group of a planned rewrite.
    Rewrite(TaskResult),
}

impl PendingOperation {
    /// The operation's name in the JSON form (`append`, `upsert`, `shuffle`, `rewrite`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Append(_) => "append",
            Self::Upsert(_) => "upsert",
            Self::Shuffle(_) => "shuffle",
            Self::Rewrite(_) => "rewrite",
        }
    }
}

impl PendingChange {
    /// The JSON form.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string(self)?)
    }

    /// A change from its JSON form; an error says what is wrong with the text.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| {
            Error::invalid(format!(
                "not a pending change ({e}); give the JSON a stage_* function returned"
            ))
        })
    }
}

/// How [`commit_pending`] commits.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CommitPendingOptions {
    /// Options of an upsert's commit (a sink checkpoint); refused for other operations
    /// when they ask for anything.
    pub upsert: UpsertOptions,
    /// A rewrite's `partial-progress.enabled`: the changes may be some of the plan's groups.
    pub partial_progress: bool,
}

impl CommitPendingOptions {
    /// The defaults: no checkpoint, every group of a rewrite.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commits an upsert with `options` (a sink id and checkpoint).
    pub fn with_upsert(mut self, options: UpsertOptions) -> Self {
        self.upsert = options;
        self
    }

    /// Commits the groups of a rewrite that are given (partial progress).
    pub fn with_partial_progress(mut self, enabled: bool) -> Self {
        self.partial_progress = enabled;
        self
    }
}

/// What [`commit_pending`] committed, by operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum PendingCommit {
    /// An append.
    Append(AppendResult),
    /// An upsert.
    Upsert(UpsertResult),
    /// A rewrite.
    Rewrite(RewriteResult),
}

impl PendingCommit {
    /// The snapshot committed (`None`: nothing changed).
    pub fn snapshot_id(&self) -> Option<i64> {
        match self {
            Self::Append(r) => r.snapshot_id,
            Self::Upsert(r) => r.snapshot_id,
            Self::Rewrite(r) => r.snapshot_id,
        }
    }

    /// The table after the commit, when the operation reports it.
    pub fn table(&self) -> Option<&Table> {
        match self {
            Self::Append(r) => Some(&r.table),
            Self::Upsert(r) => Some(&r.table),
            Self::Rewrite(r) => r.table.as_ref(),
        }
    }
}

fn job_id(job: &StagingJob) -> Option<String> {
    Some(job.id().to_string())
}

/// Writes `batches` as data files of `table` (partitioned, sorted and rolled as an append
/// writes them) tagged with `job`; commits nothing. On an error the files written so far
/// are deleted.
pub async fn stage_append<I>(table: &Table, batches: I, job: &StagingJob) -> Result<PendingChange>
where
    I: IntoIterator<Item = Result<RecordBatch>>,
{
    let staged = crate::txn::stage_data_files(table, batches, job).await?;
    let mut files = staged.written.clone();
    files.push(staged.data_files_location.clone());
    Ok(PendingChange {
        table: table.name(),
        base_snapshot_id: table.metadata().current_snapshot_id(),
        job: job_id(job),
        files,
        operation: PendingOperation::Append(staged),
    })
}

fn of_upsert(table: &Table, job: &StagingJob, staged: StagedUpsert) -> PendingChange {
    let mut files = staged.files.written.clone();
    files.push(staged.files.data_files_location.clone());
    files.push(staged.keys_location.clone());
    let base_snapshot_id = match staged.merged_onto {
        Some(m) => m.snapshot_id,
        None => table.metadata().current_snapshot_id(),
    };
    PendingChange {
        table: table.name(),
        base_snapshot_id,
        job: job_id(job),
        files,
        operation: PendingOperation::Upsert(staged),
    }
}

/// Folds `changes` (a task's share of an upsert into the keyed table `table`, replace
/// engine, in arrival order) and writes its winning upserts as data files with the task's
/// key list, tagged with `job`; commits nothing. The driver decides every change against
/// the table at commit ([`crate::keyed::upsert`]'s rules; a later task wins ties).
pub async fn stage_upsert(
    table: &Table,
    changes: &ChangeBatch,
    job: &StagingJob,
) -> Result<PendingChange> {
    let staged = crate::keyed::stage_upsert(table, changes, job).await?;
    Ok(of_upsert(table, job, staged))
}

/// Splits `changes` (a task's share of an upsert into a keyed table whose merge engine
/// folds rows) by a hash of the key into `shards` files, folded first where the engine
/// allows; tagged with `job`, committing nothing. Each shard is merged by
/// [`stage_merged_upsert`].
pub async fn stage_shuffle(
    table: &Table,
    changes: &ChangeBatch,
    shards: usize,
    job: &StagingJob,
) -> Result<PendingChange> {
    let staged = crate::keyed::stage_shards(table, changes, shards, job).await?;
    Ok(PendingChange {
        table: table.name(),
        base_snapshot_id: table.metadata().current_snapshot_id(),
        job: job_id(job),
        files: staged.shards.iter().flatten().cloned().collect(),
        operation: PendingOperation::Shuffle(staged),
    })
}

/// Merges shard `shard` of every task's shuffle (`shares`, in task order) with the stored
/// rows of its keys in `table`'s current snapshot and writes the keys' new rows, tagged with
/// `job`; commits nothing. The change commits (with the other shards') onto that snapshot
/// only; afterwards the shares are discarded ([`discard_pending`]).
pub async fn stage_merged_upsert(
    table: &Table,
    shares: &[PendingChange],
    shard: usize,
    job: &StagingJob,
) -> Result<PendingChange> {
    let tasks = shares
        .iter()
        .enumerate()
        .map(|(i, c)| match &c.operation {
            PendingOperation::Shuffle(s) => Ok(s.clone()),
            other => Err(Error::invalid(format!(
                "task {} of a shuffled upsert into table {} handed an '{}' change, not a \
                 'shuffle' (give the changes stage_shuffle returned)",
                i + 1,
                table.name(),
                other.name()
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    let staged = crate::keyed::stage_merged_upsert(table, &tasks, shard, job).await?;
    Ok(of_upsert(table, job, staged))
}

/// Rewrites file group `group` of `plan` (in any process) and lists the new files; commits
/// nothing.
pub async fn stage_rewrite(
    catalog: &Catalog,
    plan: &RewritePlan,
    group: usize,
) -> Result<PendingChange> {
    let task = plan
        .tasks
        .iter()
        .find(|t| t.group == group)
        .ok_or_else(|| {
            Error::invalid(format!(
                "the rewrite plan of table {} (snapshot {}) has no group {group}; its groups are \
             0 to {}",
                plan.table,
                plan.snapshot_id,
                plan.tasks.len().saturating_sub(1)
            ))
        })?;
    let r = crate::maintenance::execute_task(catalog, plan, task).await?;
    let mut files = r.written.clone();
    files.push(r.data_files.clone());
    Ok(PendingChange {
        table: plan.table.clone(),
        base_snapshot_id: Some(plan.snapshot_id),
        job: None,
        files,
        operation: PendingOperation::Rewrite(r),
    })
}

/// The one operation of `changes`, or an error naming the first change that differs.
fn one_operation(changes: &[PendingChange]) -> Result<(&str, &'static str)> {
    let Some(first) = changes.first() else {
        return Err(Error::invalid(
            "nothing to commit: give the pending changes of the job's tasks",
        ));
    };
    let op = first.operation.name();
    for (i, c) in changes.iter().enumerate() {
        if c.table != first.table {
            return Err(Error::invalid(format!(
                "pending change {} is of table {}, the first of table {}; one commit takes the \
                 changes of one table; nothing was committed",
                i + 1,
                c.table,
                first.table
            )));
        }
        if c.operation.name() != op {
            return Err(Error::invalid(format!(
                "pending change {} of table {} is an '{}', the first an '{op}'; one commit \
                 takes the changes of one operation; nothing was committed",
                i + 1,
                c.table,
                c.operation.name()
            )));
        }
    }
    Ok((&first.table, op))
}

/// Commits every change of `changes` (the tasks' changes of one operation on one table) as
/// one snapshot: an `append`, an upsert (every task's share decided against the table as
/// one batch; a sink checkpoint from `options`), or a rewrite's `replace`. A failed commit
/// deletes what the changes wrote unless its outcome is unknown
/// ([`ErrorKind::CommitStateUnknown`]); a committed one deletes the listings it no longer
/// needs.
pub async fn commit_pending(
    catalog: &Catalog,
    changes: &[PendingChange],
    options: &CommitPendingOptions,
) -> Result<PendingCommit> {
    let (table, op) = one_operation(changes)?;
    let ident = parse_ident(table)?;
    let asks_upsert = options.upsert.sink_id.is_some() || options.upsert.checkpoint.is_some();
    if asks_upsert && op != "upsert" {
        return Err(Error::invalid(format!(
            "a sink checkpoint is committed with an upsert, not an '{op}' (table {table}); \
             nothing was committed"
        )));
    }
    if options.partial_progress && op != "rewrite" {
        return Err(Error::invalid(format!(
            "partial progress is a rewrite's option, not an '{op}''s (table {table}); nothing \
             was committed"
        )));
    }
    match op {
        "append" => {
            let staged: Vec<StagedFiles> = payloads(changes, |o| match o {
                PendingOperation::Append(s) => Some(s.clone()),
                _ => None,
            });
            let t = catalog.load_table(&ident).await?;
            let r = crate::txn::commit_staged(catalog, &t, &staged).await?;
            Ok(PendingCommit::Append(r))
        }
        "upsert" => {
            let staged: Vec<StagedUpsert> = payloads(changes, |o| match o {
                PendingOperation::Upsert(s) => Some(s.clone()),
                _ => None,
            });
            let r = crate::keyed::commit_staged_upserts(catalog, &ident, &staged, &options.upsert)
                .await?;
            Ok(PendingCommit::Upsert(r))
        }
        "rewrite" => {
            let results: Vec<TaskResult> = payloads(changes, |o| match o {
                PendingOperation::Rewrite(s) => Some(s.clone()),
                _ => None,
            });
            let r = match options.partial_progress {
                true => crate::maintenance::commit_rewrite_groups(catalog, &results).await?,
                false => crate::maintenance::commit_rewrite(catalog, &results).await?,
            };
            Ok(PendingCommit::Rewrite(r))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "a 'shuffle' change of table {table} is not committed itself: merge each shard \
                 with stage_merged_upsert and commit those; nothing was committed"
            ),
        )),
    }
}

fn payloads<T>(changes: &[PendingChange], of: impl Fn(&PendingOperation) -> Option<T>) -> Vec<T> {
    changes.iter().filter_map(|c| of(&c.operation)).collect()
}

/// Deletes every file `changes` wrote (changes that will not be committed, or shuffle
/// shares once their shards are merged), best effort: a file already gone is not an error.
/// Returns how many files were named. Refused, deleting nothing, when a change is of
/// another table or names a file outside the table's location.
pub async fn discard_pending(table: &Table, changes: &[PendingChange]) -> Result<usize> {
    let location = table.metadata().location().trim_end_matches('/');
    let inside = format!("{location}/");
    for c in changes {
        if c.table != table.name() {
            return Err(Error::invalid(format!(
                "a pending change of table {} cannot be discarded through table {}; nothing \
                 was deleted",
                c.table,
                table.name()
            )));
        }
        if let Some(f) = c.files.iter().find(|f| !f.starts_with(&inside)) {
            return Err(Error::invalid(format!(
                "pending change of table {} names '{f}', outside the table's location \
                 '{location}'; nothing was deleted",
                c.table
            )));
        }
    }
    let mut n = 0;
    for f in changes.iter().flat_map(|c| &c.files) {
        let _ = table.storage().delete(f).await;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shuffle(table: &str) -> PendingChange {
        PendingChange {
            table: table.into(),
            base_snapshot_id: Some(7),
            job: Some("0123".into()),
            files: vec!["s3://b/t/metadata/staged-shard0-x.parquet".into()],
            operation: PendingOperation::Shuffle(StagedShards {
                table: table.into(),
                pre_folded: true,
                shards: vec![
                    vec!["s3://b/t/metadata/staged-shard0-x.parquet".into()],
                    vec![],
                ],
                input_rows: vec![3, 0],
            }),
        }
    }

    #[test]
    fn the_json_form_names_the_operation_and_round_trips() {
        let c = shuffle("db.t");
        let text = c.to_json().unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["operation"], "shuffle", "{text}");
        assert_eq!(v["staged"]["input_rows"][0], 3, "{text}");
        assert_eq!(v["base_snapshot_id"], 7, "{text}");
        let back = PendingChange::from_json(&text).unwrap();
        assert_eq!(back.to_json().unwrap(), text);
        let e = PendingChange::from_json(r#"{"table": "db.t", "operation": "merge"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a pending change"), "{e}");
    }

    #[test]
    fn one_commit_takes_one_table_and_one_operation() {
        let e = one_operation(&[]).unwrap_err().to_string();
        assert!(e.contains("nothing to commit"), "{e}");
        assert_eq!(
            one_operation(&[shuffle("db.t"), shuffle("db.t")]).unwrap(),
            ("db.t", "shuffle")
        );
        let e = one_operation(&[shuffle("db.t"), shuffle("db.u")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("pending change 2 is of table db.u"), "{e}");
    }
}
