//! CLONE: a table whose metadata references another table's data and delete files without
//! copying them.
//!
//! What is shared and what is copied:
//! * data and delete files are shared (never copied, never rewritten);
//! * manifests are copied byte for byte into the clone's `metadata/` directory, under their
//!   source file name. A manifest holds no path of its own, so the copy is valid as is, and
//!   the clone's expiry may delete its copies without touching the source's. A later clone
//!   onto the same table (`--replace`, the publish step of snapshot ingestion) finds the
//!   copies it made before and copies only the manifests that are new: the cost follows the
//!   change, not the table;
//! * the manifest list is written anew (it names the copied manifests); its entries keep
//!   their sequence numbers, added-snapshot ids and v3 first row ids, so which delete applies
//!   to which file and every row id stay exactly as in the source.
//!
//! A clone records its source in table properties (`floe.clone.source`,
//! `floe.clone.source-snapshot-id`); garbage collection checks every table of the catalog
//! before deleting a shared file, so neither table can delete what the other still reads.

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    ManifestListWriter, Operation, SnapshotReference, SnapshotRetention, Summary,
    TableMetadataBuilder, MAIN_BRANCH,
};
use serde_json::{json, Map, Value};

use super::new_snapshot_id;
use crate::catalog::{Catalog, CommitOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::scan::SnapshotSelector;
use crate::spec::{FormatVersion, ManifestFile, Snapshot, TableIdent, TableMetadata};
use crate::storage::join;
use crate::table::Table;

/// Table property naming the table a clone was made from.
pub const CLONE_SOURCE: &str = "floe.clone.source";
/// Table property naming the source snapshot of the latest clone.
pub const CLONE_SOURCE_SNAPSHOT: &str = "floe.clone.source-snapshot-id";
/// Snapshot summary flag of a clone that replaced a table's contents: operations that started
/// before it must not commit on top of it.
pub const REPLACED_TABLE: &str = "floe.replaced-table";

/// What a clone did.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct CloneResult {
    /// The clone.
    pub target: String,
    /// Its new current snapshot.
    pub snapshot_id: i64,
    /// The source snapshot it references.
    pub source_snapshot_id: i64,
    /// Manifests copied by this clone.
    pub copied_manifests: usize,
    /// Manifests an earlier clone had already copied.
    pub reused_manifests: usize,
    /// Data files the clone references (from the source snapshot's summary).
    pub data_files: u64,
    /// Whether an existing table was replaced.
    pub replaced: bool,
    /// The source's branches and tags the clone copied (`--all-refs`; `main` is not listed).
    pub refs: Vec<ClonedRef>,
}

/// A branch or tag of the source that a clone copied: the clone has a ref of the same name,
/// kind and retention at a snapshot holding the source ref's state.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct ClonedRef {
    /// The ref's name.
    #[serde(rename = "ref")]
    pub name: String,
    /// `branch` or `tag`.
    pub ref_type: String,
    /// The clone's snapshot the ref points at.
    pub snapshot_id: i64,
    /// The source snapshot it holds the state of.
    pub source_snapshot_id: i64,
}

/// Makes `target` a clone of `source` at the selected snapshot.
/// Without `replace`, `target` must not exist; with it, an existing `target` gets a new
/// snapshot holding the source's state (its history stays), in one catalog swap.
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
/// # let table = floe::txn::append(&cat, &table, [rows(0..100)]).await?.table;
/// use floe::scan::SnapshotSelector;
/// let target = floe::table::parse_ident("db.copy")?;
/// let r = floe::txn::clone_table(&cat, &table, &SnapshotSelector::Current, &target, false).await?;
/// assert_eq!(r.data_files, 1); // shared, not copied
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn clone_table(
    catalog: &Catalog,
    source: &Table,
    snapshot: &SnapshotSelector,
    target: &TableIdent,
    replace: bool,
) -> Result<CloneResult> {
    clone_impl(catalog, source, snapshot, target, replace, false).await
}

/// [`clone_table`] to a new table that also gets every branch and tag of `source`: each ref
/// (same name, kind and retention) points at a clone snapshot holding the state of the
/// source snapshot it points at (refs at one source snapshot share it; history is not
/// copied, as for `main`). `main` is the selected snapshot's clone.
pub async fn clone_table_all_refs(
    catalog: &Catalog,
    source: &Table,
    snapshot: &SnapshotSelector,
    target: &TableIdent,
) -> Result<CloneResult> {
    clone_impl(catalog, source, snapshot, target, false, true).await
}

async fn clone_impl(
    catalog: &Catalog,
    source: &Table,
    snapshot: &SnapshotSelector,
    target: &TableIdent,
    replace: bool,
    all_refs: bool,
) -> Result<CloneResult> {
    let src_md = source.metadata();
    let snap = snapshot.resolve(source)?.ok_or_else(|| {
        Error::invalid(format!(
            "table {} has no snapshot yet; there is nothing to clone",
            source.name()
        ))
    })?;
    let exists = catalog.table_exists(target).await?;
    if exists && !replace {
        return Err(Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "table {} already exists; clone with replace to make its next snapshot a clone of {}",
                crate::table::ident_name(target),
                source.name()
            ),
        ));
    }
    if exists && catalog.load_table(target).await?.ident() == source.ident() {
        return Err(Error::invalid("a table cannot be cloned onto itself"));
    }
    let source_name = source.name();
    let mut attempt = 0;
    loop {
        let base = if exists {
            Some(catalog.load_table(target).await?)
        } else {
            None
        };
        let location = match &base {
            Some(b) => b.metadata().location().to_string(),
            None => catalog.default_location(target),
        };
        let (manifests, copied, reused) = copy_manifests(source, &snap, &location, catalog).await?;
        let staged = match &base {
            Some(b) => replace_definition(b.metadata(), src_md, &source_name, &snap)?,
            None => new_definition(src_md, &location, &source_name, &snap)?,
        };
        let snapshot_id = new_snapshot_id();
        let parent = staged.current_snapshot().map(|s| s.snapshot_id());
        let seq = (staged.last_sequence_number() + 1).max(snap.sequence_number());
        let list_path = join(
            &location,
            &format!(
                "metadata/snap-{snapshot_id}-clone-{}.avro",
                uuid::Uuid::new_v4()
            ),
        );
        let first_row_id = staged.next_row_id();
        let next_row_id = write_manifest_list(
            catalog,
            &staged,
            &list_path,
            snapshot_id,
            parent,
            seq,
            manifests,
        )
        .await?;
        let summary = clone_summary(&snap, base.as_ref().map(|b| b.metadata()), &source_name);
        let builder = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(seq)
            .with_timestamp_ms(
                chrono::Utc::now()
                    .timestamp_millis()
                    .max(staged.last_updated_ms() + 1),
            )
            .with_manifest_list(list_path.clone())
            .with_summary(Summary {
                operation: if base.is_some() {
                    Operation::Overwrite
                } else {
                    Operation::Append
                },
                additional_properties: summary,
            })
            .with_schema_id(staged.current_schema_id());
        // Rows keep their ids; only manifests without a first row id (written before an
        // upgrade to v3) get new ones.
        let built = if staged.format_version() == FormatVersion::V3 {
            let added = next_row_id.unwrap_or(first_row_id) - first_row_id;
            builder.with_row_range(first_row_id, added).build()
        } else {
            builder.build()
        };
        let prev = base.as_ref().map(|b| b.metadata_location().to_string());
        let md = TableMetadataBuilder::new_from_metadata(staged, prev)
            .add_snapshot(built)
            .and_then(|b| {
                b.set_ref(
                    MAIN_BRANCH,
                    SnapshotReference::new(
                        snapshot_id,
                        SnapshotRetention::branch(None, None, None),
                    ),
                )
            })
            .and_then(|b| b.build())
            .map_err(|e| {
                Error::invalid(format!(
                    "cloning {source_name} to {}: {e}",
                    crate::table::ident_name(target)
                ))
            })?
            .metadata;
        let mut lists = vec![list_path.clone()];
        let (md, refs, copied, reused) = if all_refs && base.is_none() {
            let mut clone = RefClone {
                md,
                lists: &mut lists,
                copied,
                reused,
            };
            let refs = clone
                .add_refs(
                    catalog,
                    source,
                    &location,
                    (snap.snapshot_id(), snapshot_id),
                )
                .await;
            let (md, copied, reused) = (clone.md, clone.copied, clone.reused);
            match refs {
                Ok(r) => (md, r, copied, reused),
                Err(e) => {
                    for l in &lists {
                        let _ = catalog.storage().delete(l).await;
                    }
                    return Err(e);
                }
            }
        } else {
            (md, vec![], copied, reused)
        };
        let result = CloneResult {
            target: crate::table::ident_name(target),
            snapshot_id,
            source_snapshot_id: snap.snapshot_id(),
            copied_manifests: copied,
            reused_manifests: reused,
            data_files: summary_number(&snap, "total-data-files"),
            replaced: base.is_some(),
            refs,
        };
        let outcome = match &base {
            None => catalog.create_table_from_metadata(target, md).await.map(|_| ()),
            Some(b) => match catalog.commit(b, md).await {
                CommitOutcome::Committed(_) => Ok(()),
                CommitOutcome::Conflict(_) if attempt < 3 => {
                    let _ = catalog.storage().delete(&list_path).await;
                    // Another writer committed to the target meanwhile: rebuild on its new
                    // metadata (the manifests copied so far are reused).
                    attempt += 1;
                    continue;
                }
                CommitOutcome::Conflict(msg) => Err(Error::new(ErrorKind::Conflict, msg)),
                CommitOutcome::Failed(e) => Err(e.context(format!(
                    "clone onto {} failed and nothing was committed",
                    result.target
                ))),
                CommitOutcome::Unknown(e) => Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!(
                        "clone onto {} may or may not have happened; reload it and check for snapshot {snapshot_id}",
                        result.target
                    ),
                )
                .with_source(e)),
            },
        };
        if let Err(e) = outcome {
            if e.kind() != ErrorKind::CommitStateUnknown {
                for l in &lists {
                    let _ = catalog.storage().delete(l).await;
                }
            }
            return Err(e);
        }
        return Ok(result);
    }
}

/// A new clone's metadata being given the source's other refs.
struct RefClone<'a> {
    md: TableMetadata,
    /// Manifest lists written (deleted if nothing is committed).
    lists: &'a mut Vec<String>,
    copied: usize,
    reused: usize,
}

impl RefClone<'_> {
    /// Adds a snapshot per source snapshot the source's refs (but `main`) point at, and the
    /// refs; `main` maps the selected source snapshot to the clone's main snapshot.
    async fn add_refs(
        &mut self,
        catalog: &Catalog,
        source: &Table,
        location: &str,
        main: (i64, i64),
    ) -> Result<Vec<ClonedRef>> {
        let src_md = source.metadata();
        let source_name = source.name();
        let mut made: HashMap<i64, i64> = HashMap::from([main]);
        let mut out = Vec::new();
        for (name, r) in crate::spec::refs(src_md) {
            if name == MAIN_BRANCH {
                continue;
            }
            let src_id = r.snapshot_id;
            let id = match made.get(&src_id) {
                Some(id) => *id,
                None => {
                    let snap = src_md.snapshot_by_id(src_id).cloned().ok_or_else(|| {
                        Error::corrupt(format!(
                            "table {source_name}: ref '{name}' points at snapshot {src_id}, \
                             which the table does not have"
                        ))
                    })?;
                    let id = self.add_snapshot(catalog, source, location, &snap).await?;
                    made.insert(src_id, id);
                    id
                }
            };
            let b = TableMetadataBuilder::new_from_metadata(self.md.clone(), None)
                .set_ref(&name, SnapshotReference::new(id, r.retention.clone()))
                .and_then(|b| b.build())
                .map_err(|e| {
                    Error::invalid(format!("cloning ref '{name}' of {source_name}: {e}"))
                })?;
            self.md = b.metadata;
            out.push(ClonedRef {
                name,
                ref_type: if r.is_branch() { "branch" } else { "tag" }.into(),
                snapshot_id: id,
                source_snapshot_id: src_id,
            });
        }
        Ok(out)
    }

    /// Adds a parentless clone snapshot of `snap`; returns its id.
    async fn add_snapshot(
        &mut self,
        catalog: &Catalog,
        source: &Table,
        location: &str,
        snap: &Snapshot,
    ) -> Result<i64> {
        let (manifests, copied, reused) = copy_manifests(source, snap, location, catalog).await?;
        self.copied += copied;
        self.reused += reused;
        let md = &self.md;
        let snapshot_id = new_snapshot_id();
        let seq = (md.last_sequence_number() + 1).max(snap.sequence_number());
        let list_path = join(
            location,
            &format!(
                "metadata/snap-{snapshot_id}-clone-{}.avro",
                uuid::Uuid::new_v4()
            ),
        );
        self.lists.push(list_path.clone());
        let first_row_id = md.next_row_id();
        let next_row_id =
            write_manifest_list(catalog, md, &list_path, snapshot_id, None, seq, manifests).await?;
        let builder = Snapshot::builder()
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(None)
            .with_sequence_number(seq)
            .with_timestamp_ms(
                chrono::Utc::now()
                    .timestamp_millis()
                    .max(md.last_updated_ms() + 1),
            )
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: clone_summary(snap, None, &source.name()),
            })
            .with_schema_id(snap.schema_id().unwrap_or(md.current_schema_id()));
        let built = if md.format_version() == FormatVersion::V3 {
            let added = next_row_id.unwrap_or(first_row_id) - first_row_id;
            builder.with_row_range(first_row_id, added).build()
        } else {
            builder.build()
        };
        self.md = TableMetadataBuilder::new_from_metadata(self.md.clone(), None)
            .add_snapshot(built)
            .and_then(|b| b.build())
            .map_err(|e| Error::invalid(format!("cloning {}: {e}", source.name())))?
            .metadata;
        Ok(snapshot_id)
    }
}

fn summary_number(s: &Snapshot, key: &str) -> u64 {
    s.summary()
        .additional_properties
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Copies the manifests of `snap` into `location/metadata/` (keeping their names); returns
/// the manifest-list entries pointing at the copies, and how many were copied and reused.
async fn copy_manifests(
    source: &Table,
    snap: &Snapshot,
    location: &str,
    catalog: &Catalog,
) -> Result<(Vec<ManifestFile>, usize, usize)> {
    let list = source.manifest_list(snap).await?;
    let storage = catalog.storage().clone();
    let done: Vec<(ManifestFile, bool)> = futures::stream::iter(list)
        .map(|mut mf| {
            let storage = storage.clone();
            let src_storage = source.storage().clone();
            let location = location.to_string();
            async move {
                let name = mf.manifest_path.rsplit('/').next().unwrap_or_default().to_string();
                let to = join(&location, &format!("metadata/{name}"));
                if to == mf.manifest_path {
                    return Ok::<_, Error>((mf, false));
                }
                let copied = match storage.size(&to).await {
                    Ok(n) if n == mf.manifest_length as u64 => false,
                    Ok(_) => {
                        return Err(Error::new(
                            ErrorKind::AlreadyExists,
                            format!(
                                "'{to}' exists but is not a copy of manifest '{}'; remove it or clone to another table",
                                mf.manifest_path
                            ),
                        ))
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        let bytes = src_storage.get(&mf.manifest_path).await?;
                        // Same name, same content: a unique-name write is enough.
                        match storage.put_unique(&to, bytes).await {
                            Ok(()) => true,
                            Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
                            Err(e) => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                };
                mf.manifest_path = to;
                Ok((mf, copied))
            }
        })
        .buffered(16)
        .try_collect()
        .await?;
    let copied = done.iter().filter(|(_, c)| *c).count();
    let reused = done.len() - copied;
    Ok((done.into_iter().map(|(m, _)| m).collect(), copied, reused))
}

async fn write_manifest_list(
    catalog: &Catalog,
    md: &TableMetadata,
    path: &str,
    snapshot_id: i64,
    parent: Option<i64>,
    seq: i64,
    manifests: Vec<ManifestFile>,
) -> Result<Option<u64>> {
    let writer = catalog
        .storage()
        .file_io()
        .new_output(path)?
        .writer()
        .await?;
    let mut lw = match md.format_version() {
        FormatVersion::V1 => ManifestListWriter::v1(writer, snapshot_id, parent),
        FormatVersion::V2 => ManifestListWriter::v2(writer, snapshot_id, parent, seq),
        FormatVersion::V3 => {
            ManifestListWriter::v3(writer, snapshot_id, parent, seq, Some(md.next_row_id()))
        }
    };
    lw.add_manifests(manifests.into_iter())?;
    let next_row_id = lw.next_row_id();
    lw.close().await?;
    Ok(next_row_id)
}

/// The summary of a clone snapshot: the source's totals, where it came from, and (replacing)
/// that everything before was removed.
fn clone_summary(
    snap: &Snapshot,
    replaced: Option<&TableMetadata>,
    source: &str,
) -> HashMap<String, String> {
    let src = &snap.summary().additional_properties;
    let mut out = HashMap::new();
    for (total, added) in [
        ("total-records", "added-records"),
        ("total-data-files", "added-data-files"),
        ("total-delete-files", "added-delete-files"),
        ("total-position-deletes", "added-position-deletes"),
        ("total-equality-deletes", "added-equality-deletes"),
        ("total-files-size", "added-files-size"),
    ] {
        let v = src.get(total).cloned().unwrap_or_else(|| "0".into());
        out.insert(total.to_string(), v.clone());
        out.insert(added.to_string(), v);
    }
    if let Some(old) = replaced.and_then(|m| m.current_snapshot()) {
        let old = &old.summary().additional_properties;
        for (total, removed) in [
            ("total-records", "deleted-records"),
            ("total-data-files", "deleted-data-files"),
            ("total-delete-files", "removed-delete-files"),
            ("total-position-deletes", "removed-position-deletes"),
            ("total-equality-deletes", "removed-equality-deletes"),
            ("total-files-size", "removed-files-size"),
        ] {
            out.insert(
                removed.to_string(),
                old.get(total).cloned().unwrap_or_else(|| "0".into()),
            );
        }
        out.insert(REPLACED_TABLE.to_string(), "true".into());
    }
    out.insert(CLONE_SOURCE.to_string(), source.to_string());
    out.insert(
        CLONE_SOURCE_SNAPSHOT.to_string(),
        snap.snapshot_id().to_string(),
    );
    out
}

fn to_json(md: &TableMetadata) -> Result<Map<String, Value>> {
    match serde_json::to_value(md)? {
        Value::Object(m) => Ok(m),
        _ => Err(Error::corrupt(
            "table metadata did not serialize to an object",
        )),
    }
}

fn from_json(m: Map<String, Value>) -> Result<TableMetadata> {
    serde_json::from_value(Value::Object(m))
        .map_err(|e| Error::invalid(format!("clone metadata is not valid: {e}")))
}

fn set_lineage(m: &mut Map<String, Value>, source: &str, snap: &Snapshot) {
    let props = m
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(p) = props {
        p.insert(CLONE_SOURCE.into(), json!(source));
        p.insert(
            CLONE_SOURCE_SNAPSHOT.into(),
            json!(snap.snapshot_id().to_string()),
        );
    }
}

/// A new table's definition: the source's schemas, partition specs, sort orders (ids kept:
/// the manifests name them) and properties, at `location`, with no snapshot yet. Its sequence
/// numbers and v3 row ids continue the source's, so the shared files keep their meaning.
fn new_definition(
    src: &TableMetadata,
    location: &str,
    source: &str,
    snap: &Snapshot,
) -> Result<TableMetadata> {
    let mut m = to_json(src)?;
    m.insert("table-uuid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("location".into(), json!(location));
    m.insert("last-sequence-number".into(), json!(snap.sequence_number()));
    for key in [
        "snapshots",
        "snapshot-log",
        "metadata-log",
        "statistics",
        "partition-statistics",
    ] {
        m.insert(key.into(), json!([]));
    }
    m.insert("refs".into(), json!({}));
    m.remove("current-snapshot-id");
    set_lineage(&mut m, source, snap);
    from_json(m)
}

/// An existing table's definition with the source's schemas, specs and sort orders added
/// (same ids) and made current. An id both tables use for different definitions means the
/// target has diverged from the source; that is refused.
fn replace_definition(
    dst: &TableMetadata,
    src: &TableMetadata,
    source: &str,
    snap: &Snapshot,
) -> Result<TableMetadata> {
    if dst.format_version() != src.format_version() {
        return Err(Error::invalid(format!(
            "cannot replace a format v{} table with a clone of {source} (format v{}); drop it and clone again",
            dst.format_version() as u8,
            src.format_version() as u8
        )));
    }
    let s = to_json(src)?;
    let mut m = to_json(dst)?;
    for (list, id) in [
        ("schemas", "schema-id"),
        ("partition-specs", "spec-id"),
        ("sort-orders", "order-id"),
    ] {
        let theirs = s
            .get(list)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let ours = m
            .entry(list)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or_else(|| Error::corrupt(format!("'{list}' of the target is not a list")))?;
        for t in theirs {
            match ours.iter().find(|o| o.get(id) == t.get(id)) {
                Some(o) if same_definition(o, &t, id) => {}
                Some(_) => {
                    return Err(Error::invalid(format!(
                        "the target's {list} entry {} differs from {source}'s; the tables have diverged — drop the target and clone again",
                        t.get(id).cloned().unwrap_or(Value::Null)
                    )))
                }
                None => ours.push(t),
            }
        }
    }
    for (key, pick_max) in [
        ("last-column-id", true),
        ("last-partition-id", true),
        ("next-row-id", true),
        ("current-schema-id", false),
        ("default-spec-id", false),
        ("default-sort-order-id", false),
    ] {
        let Some(v) = s.get(key).cloned() else {
            continue;
        };
        let merged = match (pick_max, m.get(key).and_then(Value::as_i64), v.as_i64()) {
            (true, Some(a), Some(b)) => json!(a.max(b)),
            _ => v,
        };
        m.insert(key.into(), merged);
    }
    set_lineage(&mut m, source, snap);
    from_json(m)
}

/// Whether two schema / spec / sort-order JSON objects define the same thing (a schema's
/// `identifier-field-ids` absent and empty are the same).
fn same_definition(a: &Value, b: &Value, _id: &str) -> bool {
    let norm = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            if o.get("identifier-field-ids")
                .and_then(Value::as_array)
                .is_some_and(|a| a.is_empty())
            {
                o.remove("identifier-field-ids");
            }
        }
        v
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_definition_ignores_empty_identifier_fields() {
        let a = json!({"schema-id": 0, "type": "struct", "fields": []});
        let b = json!({"schema-id": 0, "type": "struct", "fields": [], "identifier-field-ids": []});
        assert!(same_definition(&a, &b, "schema-id"));
        let c = json!({"schema-id": 0, "type": "struct", "fields": [{"id": 1}]});
        assert!(!same_definition(&a, &c, "schema-id"));
    }

    fn table(ddl: &str, fv: FormatVersion, location: &str) -> TableMetadata {
        let schema = crate::spec::parse_schema(ddl).unwrap();
        let spec = match schema.field_by_name("id") {
            Some(_) => crate::spec::parse_partition_spec("bucket(4, id)", &schema).unwrap(),
            None => iceberg::spec::UnboundPartitionSpec::builder().build(),
        };
        TableMetadataBuilder::new(
            schema,
            spec,
            iceberg::spec::SortOrder::unsorted_order(),
            location.into(),
            fv,
            [("write.merge.mode".to_string(), "merge-on-read".to_string())].into(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn snapshot(seq: i64) -> Snapshot {
        Snapshot::builder()
            .with_snapshot_id(7)
            .with_sequence_number(seq)
            .with_timestamp_ms(1)
            .with_manifest_list("/src/metadata/snap-7.avro")
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::new(),
            })
            .build()
    }

    #[test]
    fn a_new_clone_keeps_ids_and_sequence_numbers_at_its_own_location() {
        let src = table("id long, v string", FormatVersion::V3, "/src");
        let md = new_definition(&src, "/dst", "db.src", &snapshot(41)).unwrap();
        assert_eq!(md.location(), "/dst");
        assert_ne!(md.uuid(), src.uuid());
        assert_eq!(md.snapshots().count(), 0);
        assert_eq!(md.last_sequence_number(), 41);
        assert_eq!(md.current_schema(), src.current_schema());
        assert_eq!(md.default_partition_spec(), src.default_partition_spec());
        assert_eq!(md.next_row_id(), src.next_row_id());
        assert_eq!(
            md.properties().get(CLONE_SOURCE).map(String::as_str),
            Some("db.src")
        );
        assert_eq!(
            md.properties().get("write.merge.mode").map(String::as_str),
            Some("merge-on-read"),
            "the source's properties come along"
        );
    }

    #[test]
    fn replacing_merges_definitions_and_refuses_divergence() {
        let src = table("id long, v string", FormatVersion::V2, "/src");
        let dst = new_definition(&src, "/dst", "db.src", &snapshot(3)).unwrap();
        // Same definitions: accepted, the target keeps its location and properties.
        let md = replace_definition(&dst, &src, "db.src", &snapshot(9)).unwrap();
        assert_eq!(md.location(), "/dst");
        assert_eq!(md.schemas_iter().count(), 1);
        assert_eq!(
            md.properties()
                .get(CLONE_SOURCE_SNAPSHOT)
                .map(String::as_str),
            Some("7")
        );
        // A target whose schema 0 means something else has diverged.
        let other = table("x string, y long", FormatVersion::V2, "/other");
        let e = replace_definition(&other, &src, "db.src", &snapshot(9)).unwrap_err();
        assert!(e.to_string().contains("diverged"), "{e}");
        // Format versions must match.
        let v3 = table("id long, v string", FormatVersion::V3, "/v3");
        let e = replace_definition(&v3, &src, "db.src", &snapshot(9)).unwrap_err();
        assert!(e.to_string().contains("format v3"), "{e}");
    }
}
