//! Changes between snapshots: Spark's changelog view (`create_changelog_view`) and the
//! incremental append read (pyiceberg's `incremental_append_scan`, Java's
//! `IncrementalAppendScan`).
//!
//! A snapshot's changes are its rows that were not live before it (`INSERT`) and the rows
//! live before it that are not live after it (`DELETE`), found by comparing the snapshot's
//! files (and each file's deletes) with its parent's: added files, removed files, and files
//! whose deletes changed, these last compared by row position. Unlike Java, which refuses
//! tables with delete files, rows removed by position deletes, deletion vectors and equality
//! deletes are changes too. `replace` snapshots (compaction) change no row and are skipped,
//! as in Java. The rows are then reduced as Spark's procedure does (see [`ChangeType`] and
//! [`Changelog::net_changes`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::StreamExt;
use iceberg::spec::Operation;

mod view;

pub use view::ChangeType;
use view::{reduce, with_change_columns, RawChanges};

use super::{PositionedBatch, Scan, ScanPlan, SnapshotSelector};
use crate::error::{Error, Result};
use crate::spec::snapshot_refs::ancestors;
use crate::spec::Snapshot;
use crate::table::Table;

/// The snapshots a changelog or incremental read covers: after `from` (exclusive) up to
/// `to` (inclusive), along `to`'s ancestry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangelogRange {
    /// Changes after this snapshot (`None`: from the first snapshot `to` descends from).
    pub from_snapshot_exclusive: Option<i64>,
    /// Only changes committed after this time (ms since the epoch; Spark's
    /// `start-timestamp`). Not with `from_snapshot_exclusive`.
    pub from_timestamp_ms: Option<i64>,
    /// Up to this snapshot (`None`: the current snapshot of the table's branch).
    pub to_snapshot: Option<i64>,
    /// Up to the last snapshot committed at or before this time (Spark's `end-timestamp`).
    /// Not with `to_snapshot`.
    pub to_timestamp_ms: Option<i64>,
}

impl ChangelogRange {
    /// The snapshots of the range, oldest first (empty when the table has none).
    pub fn snapshots(&self, table: &Table) -> Result<Vec<Arc<Snapshot>>> {
        let md = table.metadata();
        let name = table.name();
        if self.from_snapshot_exclusive.is_some() && self.from_timestamp_ms.is_some() {
            return Err(Error::invalid(
                "give the start of the changes as a snapshot or as a timestamp, not both",
            ));
        }
        if self.to_snapshot.is_some() && self.to_timestamp_ms.is_some() {
            return Err(Error::invalid(
                "give the end of the changes as a snapshot or as a timestamp, not both",
            ));
        }
        let current = table.current_snapshot().map(|s| s.snapshot_id());
        let to = match (self.to_snapshot, self.to_timestamp_ms) {
            (Some(id), _) => {
                md.snapshot_by_id(id).ok_or_else(|| {
                    Error::not_found(format!(
                        "table {name} has no snapshot {id}; `floe snapshots {name}` lists them"
                    ))
                })?;
                Some(id)
            }
            (None, Some(ts)) => ancestors(md, current)
                .find(|s| s.timestamp_ms() <= ts)
                .map(|s| s.snapshot_id()),
            (None, None) => current,
        };
        let chain: Vec<Arc<Snapshot>> = ancestors(md, to).cloned().collect();
        let mut picked: Vec<Arc<Snapshot>> = match self.from_snapshot_exclusive {
            Some(from) => {
                // The start may have expired: it must be the parent of an ancestor of `to`
                // (or `to` itself).
                let Some(at) = chain
                    .iter()
                    .position(|s| s.snapshot_id() == from)
                    .or_else(|| {
                        chain
                            .iter()
                            .position(|s| s.parent_snapshot_id() == Some(from))
                            .map(|i| i + 1)
                    })
                else {
                    return Err(Error::invalid(format!(
                        "table {name}: snapshot {from} is not an ancestor of the end snapshot {}; \
                         changes are read along one branch's history",
                        to.map_or("(none)".to_string(), |t| t.to_string())
                    )));
                };
                chain[..at].to_vec()
            }
            None => match self.from_timestamp_ms {
                Some(ts) => chain
                    .iter()
                    .take_while(|s| s.timestamp_ms() > ts)
                    .cloned()
                    .collect(),
                None => chain,
            },
        };
        picked.reverse();
        Ok(picked)
    }
}

/// Files of one snapshot read for its changes: (plan index, file path).
struct ChangedFiles {
    /// In the parent: removed files and files whose deletes changed.
    before: Vec<usize>,
    /// In the snapshot: added files and files whose deletes changed.
    after: Vec<usize>,
}

/// The files of `after` that differ from `before` (added, removed, or with other deletes).
fn changed_files(before: &ScanPlan, after: &ScanPlan) -> ChangedFiles {
    let signature = |plan: &ScanPlan| -> HashMap<String, (usize, Vec<String>)> {
        plan.files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut deletes: Vec<String> = f
                    .deletes
                    .iter()
                    .map(|d| d.file.file_path().to_string())
                    .collect();
                deletes.sort();
                (f.file.file_path().to_string(), (i, deletes))
            })
            .collect()
    };
    let (b, a) = (signature(before), signature(after));
    let mut out = ChangedFiles {
        before: Vec::new(),
        after: Vec::new(),
    };
    for (path, (i, deletes)) in &b {
        match a.get(path) {
            Some((j, d)) if d != deletes => {
                out.before.push(*i);
                out.after.push(*j);
            }
            Some(_) => {}
            None => out.before.push(*i),
        }
    }
    for (path, (j, _)) in &a {
        if !b.contains_key(path) {
            out.after.push(*j);
        }
    }
    out.before.sort_unstable();
    out.after.sort_unstable();
    out
}

/// An error when snapshot `id` (the parent of a snapshot whose changes are read) was expired:
/// what was live before that snapshot can no longer be told.
fn expired_parent(table: &Table, id: i64) -> Result<()> {
    if table.metadata().snapshot_by_id(id).is_some() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "table {}: snapshot {id} was expired, so the changes of the snapshot after it cannot be \
         computed; start the range at a snapshot that still exists (`floe snapshots {}`)",
        table.name(),
        table.name()
    )))
}

/// The rows of the planned files `indexes`, with positions, by file path.
async fn read_rows(
    scan: &Scan,
    plan: &ScanPlan,
    indexes: &[usize],
) -> Result<HashMap<String, Vec<PositionedBatch>>> {
    let sub = plan.subset(indexes);
    let paths: Vec<String> = sub
        .files
        .iter()
        .map(|f| f.file.file_path().to_string())
        .collect();
    let mut out: HashMap<String, Vec<PositionedBatch>> = HashMap::new();
    let mut stream = scan.read_positioned(sub, true)?;
    while let Some(item) = stream.next().await {
        let (i, batch) = item?;
        let path = paths
            .get(i)
            .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
        out.entry(path.clone()).or_default().push(batch);
    }
    Ok(out)
}

/// The positions of a file's rows.
fn positions_of(batches: &[PositionedBatch]) -> Result<std::collections::HashSet<u64>> {
    let mut set = std::collections::HashSet::new();
    for (_, p) in batches {
        let p = p
            .as_ref()
            .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        set.extend(p.values().iter().copied());
    }
    Ok(set)
}

/// Rows of `batches` whose position `keep` accepts.
fn rows_where(batches: &[PositionedBatch], keep: impl Fn(u64) -> bool) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for (b, p) in batches {
        let p = p
            .as_ref()
            .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        let mask = arrow_array::BooleanArray::from_iter(p.values().iter().map(|&x| Some(keep(x))));
        let f = arrow_select::filter::filter_record_batch(b, &mask)?;
        if f.num_rows() > 0 {
            out.push(f);
        }
    }
    Ok(out)
}

/// A changelog read of a table (Spark's `create_changelog_view`).
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
/// let table = floe::txn::append(&cat, &table, [rows(0..10)]).await?.table;
/// let first = table.current_snapshot().map(|s| s.snapshot_id());
/// let table = floe::txn::append(&cat, &table, [rows(10..15)]).await?.table;
/// let range = floe::scan::ChangelogRange { from_snapshot_exclusive: first, ..Default::default() };
/// let changes = floe::scan::Changelog::new(&table, range).read().await?;
/// assert_eq!(changes.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Changelog {
    table: Table,
    range: ChangelogRange,
    identifier_columns: Option<Vec<String>>,
    compute_updates: Option<bool>,
    net_changes: bool,
}

impl Changelog {
    /// The changes of `table` over `range`.
    pub fn new(table: &Table, range: ChangelogRange) -> Self {
        Self {
            table: table.clone(),
            range,
            identifier_columns: None,
            compute_updates: None,
            net_changes: false,
        }
    }

    /// Columns identifying a row: a delete and an insert of the same identifier in one
    /// snapshot become `UPDATE_BEFORE` and `UPDATE_AFTER` (Spark's `identifier_columns`;
    /// giving them turns update images on unless [`Changelog::compute_updates`] says no).
    pub fn identifier_columns(mut self, columns: Vec<String>) -> Self {
        self.identifier_columns = Some(columns);
        self
    }

    /// Computes update images (with the given identifier columns, else the table's
    /// identifier fields). Spark's `compute_updates`.
    pub fn compute_updates(mut self, on: bool) -> Self {
        self.compute_updates = Some(on);
        self
    }

    /// Only net changes over the whole range: a row inserted then deleted again is not
    /// returned, nor a row deleted then inserted again (Spark's `net_changes`; not with
    /// update images).
    pub fn net_changes(mut self, on: bool) -> Self {
        self.net_changes = on;
        self
    }

    /// The schema of the change rows: the table's columns, then `_change_type` (string),
    /// `_change_ordinal` (int: the snapshot's place in the range, from 0) and
    /// `_commit_snapshot_id` (long).
    pub fn schema(&self) -> Result<SchemaRef> {
        Ok(with_change_columns(self.table.arrow_schema()?.as_ref()))
    }

    /// The identifier columns update images are computed with (`None`: no update images).
    fn update_identifiers(&self) -> Result<Option<Vec<String>>> {
        let on = self
            .compute_updates
            .unwrap_or(self.identifier_columns.is_some());
        if !on {
            return Ok(None);
        }
        if self.net_changes {
            return Err(Error::invalid(
                "net changes cannot be computed with update images (as in Spark); drop \
                 --net-changes or the identifier columns",
            ));
        }
        let cols = match &self.identifier_columns {
            Some(c) => c.clone(),
            None => {
                let schema = self.table.metadata().current_schema();
                schema
                    .identifier_field_ids()
                    .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
                    .collect()
            }
        };
        if cols.is_empty() {
            return Err(Error::invalid(format!(
                "table {} has no identifier fields: give --identifier-columns to compute updates",
                self.table.name()
            )));
        }
        Ok(Some(cols))
    }

    /// Reads the changes: raw rows per snapshot, reduced as Spark's procedure reduces them.
    pub async fn read(&self) -> Result<Vec<RecordBatch>> {
        let identifiers = self.update_identifiers()?;
        let snapshots = self.range.snapshots(&self.table)?;
        let mut raw = RawChanges {
            batches: Vec::new(),
            kinds: Vec::new(),
            ordinals: Vec::new(),
            snapshots: Vec::new(),
        };
        let mut plans: HashMap<i64, Arc<ScanPlan>> = HashMap::new();
        let mut ordinal = 0i32;
        for s in &snapshots {
            if matches!(s.summary().operation, Operation::Replace) {
                continue;
            }
            let (scan, after) = self.plan_at(&mut plans, Some(s.snapshot_id())).await?;
            let (_, before) = self.plan_at(&mut plans, s.parent_snapshot_id()).await?;
            let changed = changed_files(&before, &after);
            let old = read_rows(&scan, &before, &changed.before).await?;
            let new = read_rows(&scan, &after, &changed.after).await?;
            let mut push = |batches: Vec<RecordBatch>, kind: ChangeType| {
                for b in batches {
                    raw.kinds.extend(std::iter::repeat_n(kind, b.num_rows()));
                    raw.ordinals
                        .extend(std::iter::repeat_n(ordinal, b.num_rows()));
                    raw.snapshots
                        .extend(std::iter::repeat_n(s.snapshot_id(), b.num_rows()));
                    raw.batches.push(b);
                }
            };
            for (path, batches) in &old {
                let kept = match new.get(path) {
                    Some(n) => positions_of(n)?,
                    None => Default::default(),
                };
                push(
                    rows_where(batches, |p| !kept.contains(&p))?,
                    ChangeType::Delete,
                );
            }
            for (path, batches) in &new {
                let had = match old.get(path) {
                    Some(o) => positions_of(o)?,
                    None => Default::default(),
                };
                push(
                    rows_where(batches, |p| !had.contains(&p))?,
                    ChangeType::Insert,
                );
            }
            ordinal += 1;
        }
        reduce(
            &self.table.name(),
            raw,
            identifiers.as_deref(),
            self.net_changes,
        )
    }

    /// The plan of snapshot `id` (cached; `None`: the empty table before the first snapshot).
    async fn plan_at(
        &self,
        plans: &mut HashMap<i64, Arc<ScanPlan>>,
        id: Option<i64>,
    ) -> Result<(Scan, Arc<ScanPlan>)> {
        let scan = Scan::new(&self.table).in_current_schema();
        let Some(id) = id else {
            // No parent: nothing was live before.
            let mut empty = scan
                .clone()
                .snapshot(SnapshotSelector::Current)
                .plan_without_deletes()
                .await?;
            empty.retain(|_| false);
            return Ok((scan, Arc::new(empty)));
        };
        expired_parent(&self.table, id)?;
        let scan = scan.snapshot(SnapshotSelector::Id(id));
        if let Some(p) = plans.get(&id) {
            return Ok((scan, p.clone()));
        }
        let p = Arc::new(scan.plan().await?);
        plans.insert(id, p.clone());
        Ok((scan, p))
    }
}

/// The rows appended between two snapshots: every row of the data files that `append`
/// snapshots in `range` added, as written (later deletes do not apply), as pyiceberg's
/// `incremental_append_scan` and Java's `IncrementalAppendScan` read them. Other operations
/// in the range are skipped. `scan` gives the columns and the row filter.
pub async fn appended_between(scan: &Scan, range: &ChangelogRange) -> Result<Vec<RecordBatch>> {
    let table = scan.table.clone();
    let snapshots = range.snapshots(&table)?;
    let mut out = Vec::new();
    for s in snapshots
        .iter()
        .filter(|s| matches!(s.summary().operation, Operation::Append))
    {
        let at = scan
            .clone()
            .in_current_schema()
            .snapshot(SnapshotSelector::Id(s.snapshot_id()));
        let after = at.plan_without_deletes().await?;
        let before: std::collections::HashSet<String> = match s.parent_snapshot_id() {
            Some(p) => {
                expired_parent(&table, p)?;
                at.clone()
                    .snapshot(SnapshotSelector::Id(p))
                    .plan_without_deletes()
                    .await?
                    .files
                    .iter()
                    .map(|f| f.file.file_path().to_string())
                    .collect()
            }
            None => Default::default(),
        };
        let mut plan = after.ignoring_deletes();
        plan.retain(|f| !before.contains(f.file.file_path()));
        let mut stream = at.read(plan)?;
        while let Some(b) = stream.next().await {
            let b = b?;
            if b.num_rows() > 0 {
                out.push(b);
            }
        }
    }
    Ok(out)
}
