//! `rewrite_manifests`: rewrites the current snapshot's manifests clustered by partition to
//! `commit.manifest.target-size-bytes` (8 MB). Metadata only; no data file changes.

use crate::catalog::Catalog;
use crate::error::Result;
use crate::table::Table;
use crate::txn::{commit, NoValidation, SnapshotProducer};

/// What `rewrite_manifests` did (the Spark procedure's result columns).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RewriteManifestsResult {
    /// The table at the new version.
    #[serde(skip)]
    pub table: Option<Table>,
    /// The `replace` snapshot (`None`: the table has no snapshot).
    pub snapshot_id: Option<i64>,
    /// Manifests replaced.
    pub rewritten_manifests_count: u64,
    /// Manifests written.
    pub added_manifests_count: u64,
}

/// Rewrites the manifests of `table` (target size: `target_bytes`, else the table's
/// `commit.manifest.target-size-bytes`, 8 MB).
pub async fn rewrite_manifests(
    catalog: &Catalog,
    table: &Table,
    target_bytes: Option<u64>,
) -> Result<RewriteManifestsResult> {
    if table.current_snapshot().is_none() {
        return Ok(RewriteManifestsResult {
            table: Some(table.clone()),
            snapshot_id: None,
            rewritten_manifests_count: 0,
            added_manifests_count: 0,
        });
    }
    let target = match target_bytes {
        Some(t) => t,
        None => table.properties()?.manifest_target_size_bytes,
    };
    let mut producer = SnapshotProducer::rewrite_manifests(target);
    let t = commit(catalog, table, &mut producer, &NoValidation).await?;
    let summary = t
        .current_snapshot()
        .map(|s| s.summary().additional_properties.clone())
        .unwrap_or_default();
    let count = |k: &str| summary.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(RewriteManifestsResult {
        snapshot_id: Some(producer.snapshot_id()),
        rewritten_manifests_count: count("manifests-replaced"),
        added_manifests_count: count("manifests-created"),
        table: Some(t),
    })
}
