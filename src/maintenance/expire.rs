//! `expire_snapshots`: drops old snapshots from the metadata and deletes the files only they
//! reached (unless `gc.enabled=false`), never a file another table of the catalog references.

use std::collections::HashSet;

use iceberg::spec::TableMetadataBuilder;

use super::reachable::{other_tables, Reachable};
use crate::catalog::{Catalog, CommitOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::table::Table;

/// Which snapshots to expire (the Spark procedure's arguments).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ExpireOptions {
    /// Expire snapshots older than this (ms since the epoch; default: now minus
    /// `history.expire.max-snapshot-age-ms`, 5 days).
    pub older_than_ms: Option<i64>,
    /// Keep at least this many of the newest snapshots of `main` (default:
    /// `history.expire.min-snapshots-to-keep`, 1).
    pub retain_last: Option<usize>,
    /// Also expire exactly these snapshots.
    pub snapshot_ids: Vec<i64>,
    /// List what would be deleted without changing anything.
    pub dry_run: bool,
}

impl ExpireOptions {
    /// Expire snapshots older than `ms` (ms since the epoch).
    pub fn with_older_than_ms(mut self, ms: i64) -> Self {
        self.older_than_ms = Some(ms);
        self
    }

    /// Keep at least `n` of the newest snapshots of `main`.
    pub fn with_retain_last(mut self, n: usize) -> Self {
        self.retain_last = Some(n);
        self
    }

    /// Also expire exactly these snapshots.
    pub fn with_snapshot_ids(mut self, ids: Vec<i64>) -> Self {
        self.snapshot_ids = ids;
        self
    }

    /// Only list what would be deleted.
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// What `expire_snapshots` did (the Spark procedure's result columns, plus the snapshots).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct ExpireResult {
    /// Expired snapshot ids.
    pub expired_snapshot_ids: Vec<i64>,
    /// `deleted_data_files_count`.
    pub deleted_data_files_count: usize,
    /// `deleted_position_delete_files_count` + equality delete files.
    pub deleted_delete_files_count: usize,
    /// `deleted_manifest_files_count`.
    pub deleted_manifest_files_count: usize,
    /// `deleted_manifest_lists_count`.
    pub deleted_manifest_lists_count: usize,
    /// A keyed table's tombstone files that only the expired snapshots named (files a
    /// later merge of the tombstones replaced; a rollback could list them again only while
    /// those snapshots were kept).
    pub deleted_tombstone_files_count: usize,
    /// The metadata file the expiry committed (`None` when nothing was committed: a dry run,
    /// or no snapshot to expire).
    pub metadata_location: Option<String>,
    /// What failed after the commit (reading the expired snapshots' manifests, deleting
    /// files): the snapshots are expired all the same, and files only they referenced may
    /// remain (`remove-orphan-files` deletes them). `None` when the cleanup finished.
    pub cleanup_error: Option<String>,
}

/// The snapshot ids to expire from `t`'s metadata.
fn choose(t: &Table, o: &ExpireOptions) -> Result<Vec<i64>> {
    let md = t.metadata();
    let now = chrono::Utc::now().timestamp_millis();
    let props = t.properties()?;
    let older_than = o
        .older_than_ms
        .unwrap_or(now - props.expire_max_snapshot_age_ms);
    let retain_last = o
        .retain_last
        .unwrap_or(props.expire_min_snapshots_to_keep)
        .max(1);
    let mut keep: HashSet<i64> = HashSet::new();
    // Every ref's head; for branches, the newest snapshots of their ancestry: as many as the
    // branch's `min-snapshots-to-keep` (else `retain_last`) and those younger than its
    // `max-snapshot-age-ms` (else `older_than`). Explicit arguments win over the ref's own.
    let refs = crate::spec::refs(md);
    for (_, r) in &refs {
        keep.insert(r.snapshot_id);
        if let iceberg::spec::SnapshotRetention::Branch {
            min_snapshots_to_keep,
            max_snapshot_age_ms,
            ..
        } = &r.retention
        {
            let keep_n = match (o.retain_last, min_snapshots_to_keep) {
                (None, Some(n)) => (*n).max(1) as usize,
                _ => retain_last,
            };
            let cutoff = match (o.older_than_ms, max_snapshot_age_ms) {
                (None, Some(age)) => now - age,
                _ => older_than,
            };
            let mut cur = md.snapshot_by_id(r.snapshot_id);
            let mut n = 0;
            while let Some(s) = cur {
                if n < keep_n || s.timestamp_ms() >= cutoff {
                    keep.insert(s.snapshot_id());
                }
                n += 1;
                cur = s.parent_snapshot_id().and_then(|p| md.snapshot_by_id(p));
            }
        }
    }
    for id in &o.snapshot_ids {
        if md.snapshot_by_id(*id).is_none() {
            return Err(Error::not_found(format!(
                "table {} has no snapshot {id} to expire",
                t.name()
            )));
        }
        if refs.iter().any(|(_, r)| r.snapshot_id == *id) {
            return Err(Error::invalid(format!(
                "snapshot {id} of table {} is the head of a branch or tag; drop the ref first",
                t.name()
            )));
        }
    }
    Ok(md
        .snapshots()
        .filter(|s| {
            o.snapshot_ids.contains(&s.snapshot_id())
                || (!keep.contains(&s.snapshot_id()) && s.timestamp_ms() < older_than)
        })
        .map(|s| s.snapshot_id())
        .collect())
}

/// Expires snapshots of `table` and deletes the files only they referenced.
///
/// An error means nothing was committed. Once the commit is done, a failure of the cleanup
/// (an unreadable manifest of an expired snapshot, a file that cannot be deleted) is no
/// error: it is reported in [`ExpireResult::cleanup_error`], and no file is deleted unless
/// every manifest that decides whether it is still live was read.
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
/// let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
/// let o = floe::maintenance::ExpireOptions::default().with_older_than_ms(now + 1).with_retain_last(1);
/// let r = floe::maintenance::expire_snapshots(&cat, &table, &o).await?;
/// assert_eq!(r.expired_snapshot_ids.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn expire_snapshots(
    catalog: &Catalog,
    table: &Table,
    o: &ExpireOptions,
) -> Result<ExpireResult> {
    let mut base = table.clone();
    let (expired, before, committed) = loop {
        let ids = choose(&base, o)?;
        let before = base.clone();
        if ids.is_empty() || o.dry_run {
            break (ids, before, None);
        }
        let next = TableMetadataBuilder::new_from_metadata(
            base.metadata().clone(),
            Some(base.metadata_location().to_string()),
        )
        .remove_snapshots(&ids)
        .build()
        .map_err(|e| Error::invalid(format!("expiring snapshots of {}: {e}", base.name())))?
        .metadata;
        match catalog.commit(&base, next).await {
            CommitOutcome::Committed(t) => {
                break (ids, before, Some(t.metadata_location().to_string()))
            }
            CommitOutcome::Conflict(_) => base = catalog.load_table(base.ident()).await?,
            CommitOutcome::Failed(e) => {
                return Err(e.context(format!(
                    "expiring snapshots of {}: nothing was committed",
                    base.name()
                )))
            }
            CommitOutcome::Unknown(e) => {
                return Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!(
                        "expiring snapshots of {}: commit state unknown; reload and retry",
                        base.name()
                    ),
                )
                .with_source(e))
            }
        }
    };
    let mut result = ExpireResult {
        expired_snapshot_ids: expired.clone(),
        deleted_data_files_count: 0,
        deleted_delete_files_count: 0,
        deleted_manifest_files_count: 0,
        deleted_manifest_lists_count: 0,
        deleted_tombstone_files_count: 0,
        metadata_location: committed.clone(),
        cleanup_error: None,
    };
    if expired.is_empty() {
        return Ok(result);
    }
    match clean_up(catalog, &before, &expired, o.dry_run, &mut result).await {
        Err(e) if committed.is_some() => {
            result.cleanup_error = Some(format!(
                "snapshots {expired:?} of {} were expired, but deleting the files only they \
                 referenced failed: {e}; run remove-orphan-files once the cause is fixed",
                before.name()
            ));
            Ok(result)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(result),
    }
}

/// Counts (and unless `dry_run` or `gc.enabled=false`, deletes) the files only the `expired`
/// snapshots of `before` referenced.
async fn clean_up(
    catalog: &Catalog,
    before: &Table,
    expired: &[i64],
    dry_run: bool,
    result: &mut ExpireResult,
) -> Result<()> {
    let md = before.metadata();
    let gone: Vec<_> = md
        .snapshots()
        .filter(|s| expired.contains(&s.snapshot_id()))
        .map(|s| s.as_ref())
        .collect();
    let kept: Vec<_> = md
        .snapshots()
        .filter(|s| !expired.contains(&s.snapshot_id()))
        .map(|s| s.as_ref())
        .collect();
    let gone_tombstones = super::reachable::tombstone_files(md, &gone, false, &before.name())?;
    let kept_tombstones = super::reachable::tombstone_files(md, &kept, true, &before.name())?;
    let gone_files = Reachable::of_snapshots(before, gone).await?;
    let mut live = Reachable::of_snapshots(before, kept).await?;
    live.other.extend(kept_tombstones);
    live.extend(Reachable::of_tables(&other_tables(catalog, before).await?).await?);
    let gc = before.properties()?.gc_enabled;
    let storage = before.storage();
    let unreferenced = |paths: &HashSet<String>| -> Vec<String> {
        paths
            .iter()
            .filter(|p| !live.contains(p))
            .cloned()
            .collect()
    };
    let lists = unreferenced(&gone_files.manifest_lists);
    let manifests = unreferenced(&gone_files.manifests);
    let data = unreferenced(&gone_files.data_files);
    let deletes = unreferenced(&gone_files.delete_files);
    let tombstones = unreferenced(&gone_tombstones);
    if !gc || dry_run {
        result.deleted_tombstone_files_count = tombstones.len();
        result.deleted_manifest_lists_count = lists.len();
        result.deleted_manifest_files_count = manifests.len();
        result.deleted_data_files_count = data.len();
        result.deleted_delete_files_count = deletes.len();
        return Ok(());
    }
    let mut failed: Vec<Error> = Vec::new();
    for (paths, count) in [
        (&lists, &mut result.deleted_manifest_lists_count),
        (&manifests, &mut result.deleted_manifest_files_count),
        (&data, &mut result.deleted_data_files_count),
        (&deletes, &mut result.deleted_delete_files_count),
        (&tombstones, &mut result.deleted_tombstone_files_count),
    ] {
        for p in paths {
            match storage.delete(p).await {
                Ok(()) => *count += 1,
                Err(e) => failed.push(e),
            }
        }
    }
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(Error::io(format!(
            "{} of {} files could not be deleted (first: {first})",
            failed.len(),
            lists.len() + manifests.len() + data.len() + deletes.len() + tombstones.len()
        ))),
    }
}
