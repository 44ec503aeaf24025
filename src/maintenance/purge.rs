//! `DROP TABLE … PURGE` that is safe with clones: the table's files are deleted except those
//! a live snapshot of another table of the catalog still references.

use futures::{StreamExt, TryStreamExt};

use super::reachable::{locations_overlap, other_tables, Reachable};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::scan::canonical_path;
use crate::spec::TableIdent;

/// What dropping a table did.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct DropResult {
    /// Files deleted.
    pub deleted_files: usize,
    /// Files kept because another table still references them.
    pub kept_shared_files: usize,
}

/// Drops `ident` from the catalog; with `purge` (and `gc.enabled` not false) deletes the
/// files its metadata references and everything else under its location, except files
/// another table of the catalog still references (a clone's shared data and delete files).
/// Files outside the location are deleted too when only this table referenced them, so a
/// clone dropped after its source leaves nothing behind.
pub async fn drop_table(catalog: &Catalog, ident: &TableIdent, purge: bool) -> Result<DropResult> {
    let table = catalog.load_table(ident).await?;
    let gc = table.properties().map(|p| p.gc_enabled).unwrap_or(true);
    if !(purge && gc) {
        catalog.drop_table(ident).await?;
        return Ok(DropResult::default());
    }
    let mine = Reachable::of_table(&table).await?;
    let others = other_tables(catalog, &table).await?;
    let theirs = Reachable::of_tables(&others).await?;
    let location = table
        .metadata()
        .location()
        .trim_end_matches('/')
        .to_string();
    let nested = others.iter().any(|o| locations_overlap(o, &table));
    // Everything under the location (unless another table lives there too), and what the
    // metadata references elsewhere.
    let mut candidates: Vec<String> = Vec::new();
    if !nested {
        candidates.extend(
            table
                .storage()
                .list(&location)
                .await?
                .into_iter()
                .map(|o| o.location),
        );
    }
    for set in [
        &mine.data_files,
        &mine.delete_files,
        &mine.manifests,
        &mine.manifest_lists,
        &mine.other,
    ] {
        candidates.extend(set.iter().cloned());
    }
    candidates.sort();
    candidates.dedup_by(|a, b| canonical_path(a) == canonical_path(b));
    let (keep, delete): (Vec<String>, Vec<String>) =
        candidates.into_iter().partition(|p| theirs.contains(p));
    catalog.drop_table(ident).await?;
    let storage = table.storage().clone();
    futures::stream::iter(delete.clone())
        .map(|p| {
            let storage = storage.clone();
            async move { storage.delete(&p).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    if !nested && keep.is_empty() {
        storage.delete_prefix(&location).await?;
    }
    Ok(DropResult {
        deleted_files: delete.len(),
        kept_shared_files: keep.len(),
    })
}
