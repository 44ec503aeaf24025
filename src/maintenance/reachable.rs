//! The files a table's metadata references: metadata files, manifest lists, manifests, data
//! and delete files, statistics, tombstones. Expiry and orphan removal never delete what a live snapshot
//! of any table in the catalog references.

use std::collections::HashSet;

use futures::{StreamExt, TryStreamExt};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::scan::canonical_path;
use crate::spec::{DataContentType, Snapshot};
use crate::table::Table;

/// Canonical paths of referenced files.
#[derive(Debug, Default, Clone)]
pub(super) struct Reachable {
    /// Manifest lists.
    pub manifest_lists: HashSet<String>,
    /// Manifests.
    pub manifests: HashSet<String>,
    /// Data files.
    pub data_files: HashSet<String>,
    /// Position, equality and deletion-vector delete files.
    pub delete_files: HashSet<String>,
    /// Metadata JSON files, `version-hint.text`, statistics and partition statistics files.
    pub other: HashSet<String>,
}

fn canon(p: &str) -> String {
    canonical_path(p).to_string()
}

impl Reachable {
    /// Whether `path` is referenced.
    pub(super) fn contains(&self, path: &str) -> bool {
        let p = canonical_path(path);
        self.data_files.contains(p)
            || self.delete_files.contains(p)
            || self.manifests.contains(p)
            || self.manifest_lists.contains(p)
            || self.other.contains(p)
    }

    /// Adds everything `other` references.
    pub(super) fn extend(&mut self, other: Reachable) {
        self.manifest_lists.extend(other.manifest_lists);
        self.manifests.extend(other.manifests);
        self.data_files.extend(other.data_files);
        self.delete_files.extend(other.delete_files);
        self.other.extend(other.other);
    }

    /// What `snapshots` of `table` reference: their lists, manifests, and the files of live
    /// (added or existing) manifest entries. A DELETED entry only records that a file left at
    /// that snapshot; the snapshots that still see the file list it as live.
    pub(super) async fn of_snapshots<'a>(
        table: &Table,
        snapshots: impl IntoIterator<Item = &'a Snapshot>,
    ) -> Result<Reachable> {
        let mut r = Reachable::default();
        let mut manifests = Vec::new();
        for s in snapshots {
            if !r.manifest_lists.insert(canon(s.manifest_list())) {
                continue;
            }
            for mf in table.manifest_list(s).await? {
                if r.manifests.insert(canon(&mf.manifest_path)) {
                    manifests.push(mf);
                }
            }
        }
        let files: Vec<Vec<(bool, String)>> = futures::stream::iter(manifests)
            .map(|mf| {
                let table = table.clone();
                async move {
                    let m = table.load_manifest(&mf).await?;
                    Ok::<_, crate::Error>(
                        m.entries()
                            .iter()
                            .filter(|e| e.is_alive())
                            .map(|e| {
                                let f = e.data_file();
                                (
                                    f.content_type() == DataContentType::Data,
                                    canon(f.file_path()),
                                )
                            })
                            .collect(),
                    )
                }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
        for (data, p) in files.into_iter().flatten() {
            if data {
                r.data_files.insert(p);
            } else {
                r.delete_files.insert(p);
            }
        }
        Ok(r)
    }

    /// Everything the table's current metadata references: every snapshot, the metadata log,
    /// the current metadata file, `version-hint.text`, statistics files, tombstone files.
    pub(super) async fn of_table(table: &Table) -> Result<Reachable> {
        let md = table.metadata();
        let snapshots: Vec<&Snapshot> = md.snapshots().map(|s| s.as_ref()).collect();
        let mut r = Reachable::of_snapshots(table, snapshots).await?;
        r.other.insert(canon(table.metadata_location()));
        for l in md.metadata_log() {
            r.other.insert(canon(&l.metadata_file));
        }
        r.other.insert(canon(&format!(
            "{}/metadata/version-hint.text",
            md.location().trim_end_matches('/')
        )));
        for s in md.statistics_iter() {
            r.other.insert(canon(&s.statistics_path));
        }
        for s in md.partition_statistics_iter() {
            r.other.insert(canon(&s.statistics_path));
        }
        // A keyed table's tombstone files: listed in a property, and named by the snapshots
        // a move of main could list again.
        let snapshots: Vec<&Snapshot> = md.snapshots().map(|s| s.as_ref()).collect();
        r.other
            .extend(tombstone_files(md, &snapshots, true, &table.name())?);
        Ok(r)
    }

    /// What `tables` reference (tables can share files, as clones do).
    pub(super) async fn of_tables(tables: &[Table]) -> Result<Reachable> {
        let mut r = Reachable::default();
        for t in tables {
            r.extend(Reachable::of_table(t).await?);
        }
        Ok(r)
    }
}

/// The tombstone files `snapshots` name in their summaries (what they added to or removed
/// from the list), and with `listed` those the table's list holds now; canonical paths.
pub(super) fn tombstone_files(
    md: &crate::spec::TableMetadata,
    snapshots: &[&Snapshot],
    listed: bool,
    table: &str,
) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    if listed {
        for f in crate::spec::keyed::TombstoneList::of(md, table)?.files {
            out.insert(canon(&f.path));
        }
    }
    for s in snapshots {
        for f in crate::spec::keyed_state::files_named(s, table)? {
            out.insert(canon(&f.path));
        }
    }
    Ok(out)
}

/// Whether two tables' locations are the same or one holds the other.
pub(crate) fn locations_overlap(a: &Table, b: &Table) -> bool {
    let a = canonical_path(a.metadata().location().trim_end_matches('/')).to_string();
    let b = canonical_path(b.metadata().location().trim_end_matches('/')).to_string();
    a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
}

/// Every table of `catalog` other than `except`. One that cannot be loaded is an error:
/// deleting files without knowing what it references is not safe.
pub(super) async fn other_tables(catalog: &Catalog, except: &Table) -> Result<Vec<Table>> {
    let mut out = Vec::new();
    for ns in catalog.list_namespaces().await? {
        for ident in catalog.list_tables(&ns).await? {
            if &ident != except.ident() {
                out.push(catalog.load_table(&ident).await?);
            }
        }
    }
    Ok(out)
}
