//! Branches, tags, rollback and the current snapshot: one metadata-only commit each, checked
//! again against the new state after a concurrent commit.

use super::alter::commit_metadata;
use crate::catalog::Catalog;
use crate::error::Result;
use crate::spec::snapshot_refs::{apply_ref_change, RefChange};
use crate::spec::TableIdent;
use crate::table::Table;

/// Applies `change` to the refs of table `ident` and returns the table at its new version.
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
/// # let table = cat.create_table(&ident, floe::TableCreation::new(floe::spec::parse_schema("id long")?)).await?;
/// # let rows = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![1, 2])) as _)])?;
/// # floe::txn::append(&cat, &table, [Ok(rows)]).await?;
/// use floe::spec::snapshot_refs::{RefChange, Retention};
/// let t = floe::txn::manage_refs(&cat, &ident, &RefChange::CreateTag {
///     name: "v1".into(), snapshot: None, retention: Retention::default(),
/// }).await?;
/// assert!(floe::spec::refs(t.metadata()).iter().any(|(n, _)| n == "v1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn manage_refs(
    catalog: &Catalog,
    ident: &TableIdent,
    change: &RefChange,
) -> Result<Table> {
    let table = catalog.load_table(ident).await?;
    let (t, _) = commit_metadata(catalog, table, "changing the refs", |t| {
        apply_ref_change(t.metadata(), change, &t.name(), Some(t.metadata_location()))
    })
    .await?;
    Ok(t)
}
