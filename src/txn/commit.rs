//! The commit loop: produce against the latest base, swap, and on conflict reload,
//! re-validate against every snapshot committed since, and retry within `commit.retry.*`.

use std::time::{Duration, Instant};

use crate::catalog::{Catalog, CommitOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::spec::{Snapshot, TableMetadata};
use crate::table::Table;

use iceberg::spec::ManifestStatus;

use super::producer::SnapshotProducer;
use super::validate::{ChangedFile, CommittedChange, Validation};

/// Loads what each snapshot in `since` added and removed (from the manifests it wrote).
pub(super) async fn load_changes(
    table: &Table,
    since: &[&Snapshot],
) -> Result<Vec<CommittedChange>> {
    let md = table.metadata();
    let mut out = Vec::with_capacity(since.len());
    for s in since {
        let list = table.manifest_list(s).await?;
        let mut change = CommittedChange {
            snapshot_id: s.snapshot_id(),
            operation: s.summary().operation.clone(),
            added: vec![],
            removed: vec![],
            replaced_table: s
                .summary()
                .additional_properties
                .get(super::clone::REPLACED_TABLE)
                .is_some_and(|v| v == "true"),
        };
        for mf in &list {
            if mf.added_snapshot_id != s.snapshot_id() {
                continue;
            }
            let spec = md
                .partition_spec_by_id(mf.partition_spec_id)
                .cloned()
                .ok_or_else(|| {
                    Error::corrupt(format!(
                        "manifest '{}' of table {} uses unknown partition spec {}",
                        mf.manifest_path,
                        table.name(),
                        mf.partition_spec_id
                    ))
                })?;
            let m = table.load_manifest(mf).await?;
            for e in m.entries() {
                if e.snapshot_id() != Some(s.snapshot_id()) {
                    continue;
                }
                let f = ChangedFile {
                    file: e.data_file().clone(),
                    spec: spec.clone(),
                };
                match e.status() {
                    ManifestStatus::Added => change.added.push(f),
                    ManifestStatus::Deleted => change.removed.push(f),
                    ManifestStatus::Existing => {}
                }
            }
        }
        out.push(change);
    }
    Ok(out)
}

/// Snapshots on the branch whose head is `head` committed after `start` (exclusive), oldest
/// first.
pub(super) fn snapshots_since(
    md: &TableMetadata,
    head: Option<i64>,
    start: Option<i64>,
) -> Result<Vec<&Snapshot>> {
    let mut out = Vec::new();
    let mut cur = head.and_then(|h| md.snapshot_by_id(h)).map(|s| s.as_ref());
    while let Some(s) = cur {
        if Some(s.snapshot_id()) == start {
            out.reverse();
            return Ok(out);
        }
        out.push(s);
        cur = s
            .parent_snapshot_id()
            .and_then(|p| md.snapshot_by_id(p))
            .map(|s| s.as_ref());
    }
    if start.is_some() {
        return Err(Error::new(
            ErrorKind::Conflict,
            "the snapshot this change started from is no longer an ancestor of the branch (rolled back or expired); redo the operation",
        ));
    }
    out.reverse();
    Ok(out)
}

/// Commits `producer` onto `table` through `catalog`, retrying conflicts per the table's
/// `commit.retry.*` properties. Returns the table at the committed version.
pub(crate) async fn commit(
    catalog: &Catalog,
    table: &Table,
    producer: &mut SnapshotProducer,
    validation: &dyn Validation,
) -> Result<Table> {
    let start = table.current_snapshot().map(|s| s.snapshot_id());
    commit_since(catalog, table, start, producer, validation).await
}

/// [`commit`] onto `table` (a fresh load) of a change that read the table at snapshot
/// `start_snapshot`, an ancestor of `table`'s current one: `validation` sees every snapshot
/// committed since `start_snapshot`, including those `table` already holds (a change planned
/// in one process and committed by another).
///
/// A patient (maintenance) commit that lost two swaps asks floe writers to hold their
/// commits ([`super::ask_writers_to_hold`], `floe.maintain.max-writer-pause-ms`) and removes
/// the request in its own commit, or afterwards when it fails.
pub(crate) async fn commit_since(
    catalog: &Catalog,
    table: &Table,
    start_snapshot: Option<i64>,
    producer: &mut SnapshotProducer,
    validation: &dyn Validation,
) -> Result<Table> {
    let mut asked = None;
    let r = commit_loop(
        catalog,
        table,
        start_snapshot,
        producer,
        validation,
        &mut asked,
    )
    .await;
    if let (Some(v), Err(_)) = (&asked, &r) {
        let _ = super::intent::withdraw(catalog, table, v).await;
    }
    r
}

async fn commit_loop(
    catalog: &Catalog,
    table: &Table,
    start_snapshot: Option<i64>,
    producer: &mut SnapshotProducer,
    validation: &dyn Validation,
    asked: &mut Option<String>,
) -> Result<Table> {
    let mut props = table.properties()?;
    let pause_ms = super::intent::writer_pause_ms(table);
    if table.is_patient() {
        props.commit_num_retries = props.commit_num_retries.max(40);
        props.commit_max_wait_ms = props.commit_max_wait_ms.min(2_000);
    }
    let started = Instant::now();
    let mut base = table.clone();
    let mut attempt = 0u32;
    let storage = table.storage().clone();
    loop {
        // A maintainer that keeps losing to writers may ask them to hold for a moment.
        if let Err(e) =
            super::intent::hold_for_maintainer(catalog, table, &mut base, producer.own_intent())
                .await
        {
            producer.abort(&storage).await;
            return Err(e);
        }
        let attempt_result = async {
            let head = base.current_snapshot().map(|s| s.snapshot_id());
            let since = snapshots_since(base.metadata(), head, start_snapshot)?;
            if !since.is_empty() {
                let changes = if validation.needs_changes() {
                    load_changes(&base, &since).await?
                } else {
                    since
                        .iter()
                        .map(|s| CommittedChange::of_snapshot(s))
                        .collect()
                };
                validation.validate(base.metadata(), &changes)?;
            }
            producer.produce(&base).await
        }
        .await;
        let next = match attempt_result {
            Ok(n) => n,
            Err(e) => {
                producer.abort(&storage).await;
                return Err(e);
            }
        };
        match catalog.commit(&base, next).await {
            CommitOutcome::Committed(t) => {
                for f in producer.unused_after_commit() {
                    let _ = storage.delete(f).await;
                }
                let props = t.properties()?;
                if props.metadata_delete_after_commit {
                    for f in producer.expired_metadata_files() {
                        let _ = storage.delete(f).await;
                    }
                }
                // The committed table on the handle's branch (and WAP id), as it was given.
                return Ok(table.same_branch(t.clone()).unwrap_or(t));
            }
            CommitOutcome::Failed(e) => {
                producer.abort(&storage).await;
                return Err(e.context(format!(
                    "commit to table {} failed and nothing was committed (the table is unchanged)",
                    table.name()
                )));
            }
            CommitOutcome::Unknown(e) => {
                return Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!(
                        "commit to table {} may or may not have happened; reload the table and check snapshot {} before retrying",
                        table.name(),
                        producer.snapshot_id()
                    ),
                )
                .with_source(e))
            }
            CommitOutcome::Conflict(msg) => {
                producer.discard_attempt(&storage).await;
                attempt += 1;
                let elapsed = started.elapsed().as_millis() as u64;
                if attempt > props.commit_num_retries || elapsed > props.commit_total_timeout_ms {
                    producer.abort(&storage).await;
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!("{msg}; gave up after {attempt} attempts (commit.retry.num-retries={})", props.commit_num_retries),
                    ));
                }
                let mut wait = (props.commit_min_wait_ms.saturating_mul(1 << (attempt - 1).min(20))).min(props.commit_max_wait_ms);
                if attempt >= 2 && pause_ms > 0 && producer.own_intent().is_none() {
                    // Starved: writers hold while this commit goes through (at once).
                    let holder = super::intent::process_name();
                    if let Ok(v) =
                        super::intent::ask_writers_to_hold(catalog, table, &holder, pause_ms).await
                    {
                        producer.clear_intent(&v);
                        *asked = Some(v);
                        wait = 0;
                    }
                }
                let jitter = rand::random::<u64>() % (wait / 10 + 1);
                tokio::time::sleep(Duration::from_millis(wait + jitter)).await;
                base = match catalog
                    .load_table(table.ident())
                    .await
                    .and_then(|t| table.same_branch(t))
                {
                    Ok(b) => b,
                    Err(e) => {
                        producer.abort(&storage).await;
                        return Err(e);
                    }
                };
            }
        }
    }
}

/// [`commit`], then, if nothing was committed, deletes `written` (the data and delete files the
/// change wrote). When the outcome is unknown they are kept: they may be live.
pub(crate) async fn commit_or_discard(
    catalog: &Catalog,
    table: &Table,
    producer: &mut SnapshotProducer,
    validation: &dyn Validation,
    written: &[String],
) -> Result<Table> {
    let r = commit(catalog, table, producer, validation).await;
    if let Err(e) = &r {
        if e.kind() != ErrorKind::CommitStateUnknown {
            for p in written {
                let _ = table.storage().delete(p).await;
            }
        }
    }
    r
}

/// Commits table property changes (no snapshot) onto `table`, once: a base whose values
/// differ from the updates' expected ones, or a concurrent commit, is a conflict for the
/// caller to plan again.
pub(crate) async fn commit_properties(
    catalog: &Catalog,
    table: &Table,
    updates: &[super::PropertyUpdate],
) -> Result<Table> {
    let md = table.metadata();
    for u in updates {
        if md.properties().get(&u.key) != u.expected.as_ref() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "table {}: property {} was changed by a concurrent commit",
                    table.name(),
                    u.key
                ),
            ));
        }
    }
    let building = |e: iceberg::Error| {
        Error::invalid(format!("building metadata for table {}: {e}", table.name()))
    };
    let mut b = iceberg::spec::TableMetadataBuilder::new_from_metadata(
        md.clone(),
        Some(table.metadata_location().to_string()),
    );
    let set: std::collections::HashMap<String, String> = updates
        .iter()
        .filter_map(|u| Some((u.key.clone(), u.value.clone()?)))
        .collect();
    let unset: Vec<String> = updates
        .iter()
        .filter(|u| u.value.is_none())
        .map(|u| u.key.clone())
        .collect();
    if !set.is_empty() {
        b = b.set_properties(set).map_err(building)?;
    }
    if !unset.is_empty() {
        b = b.remove_properties(&unset).map_err(building)?;
    }
    let next = b.build().map_err(building)?.metadata;
    match catalog.commit(table, next).await {
        CommitOutcome::Committed(t) => Ok(t),
        CommitOutcome::Conflict(msg) => Err(Error::new(ErrorKind::Conflict, msg)),
        CommitOutcome::Failed(e) => Err(e.context(format!(
            "commit to table {} failed and nothing was committed",
            table.name()
        ))),
        CommitOutcome::Unknown(e) => Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!("commit to table {} may or may not have happened; reload the table and check its properties", table.name()),
        )
        .with_source(e)),
    }
}
