//! Cherry-picking a snapshot onto `main`, as Iceberg Java's `CherryPickOperation` does: the
//! publish step of write-audit-publish.
//!
//! * A snapshot whose parent is main's current snapshot (or that has no parent, on a table
//!   without one) is fast-forwarded to: main points at it, no snapshot is written.
//! * Otherwise an `append` snapshot is re-applied: a new snapshot on main adds the same data
//!   files, with `source-snapshot-id` (and `published-wap-id` for a staged WAP snapshot).
//! * A dynamic partition overwrite (`overwrite` with `replace-partitions=true`) is re-applied
//!   when its parent is an ancestor of main and none of the partitions it replaces changed
//!   since; its removed files must still be live.
//! * Anything else (deletes, row-level overwrites, replaces) is refused unless it is a
//!   fast-forward, as Java refuses it.
//! * A snapshot already on main's history, or already picked into it, is refused; so is a
//!   second publish of the same WAP id (Java's `DuplicateWAPCommitException`).

use std::collections::{BTreeMap, HashSet};

use iceberg::spec::Operation;

use super::commit::{commit, load_changes, snapshots_since};
use super::producer::{FileKey, SnapshotProducer};
use super::validate::{CommittedChange, Validation};
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::spec::snapshot_refs::{ancestors, apply_ref_change, is_ancestor, RefChange};
use crate::spec::{data_file_builder, DataContentType, Snapshot, TableIdent, TableMetadata};
use crate::table::{Table, STAGED_WAP_ID};

/// The summary property naming the snapshot a cherry-picked snapshot was copied from.
pub const SOURCE_SNAPSHOT_ID: &str = "source-snapshot-id";
/// The summary property recording the WAP id a cherry-pick published.
pub const PUBLISHED_WAP_ID: &str = "published-wap-id";
/// The summary property of a dynamic partition overwrite.
const REPLACE_PARTITIONS: &str = "replace-partitions";

/// What a cherry-pick committed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CherrypickResult {
    /// The table at the new version.
    pub table: Table,
    /// The snapshot picked.
    pub source_snapshot_id: i64,
    /// Main's current snapshot now: the picked one after a fast-forward, else a new one.
    pub snapshot_id: i64,
    /// Main was moved to the picked snapshot (no new snapshot).
    pub fast_forward: bool,
    /// The WAP id published (the picked snapshot's `wap.id`), if any.
    pub published_wap_id: Option<String>,
    /// Data files added to main by the new snapshot (0 after a fast-forward).
    pub added_files: usize,
    /// Data files removed from main by the new snapshot (a dynamic overwrite).
    pub removed_files: usize,
}

fn prop<'a>(s: &'a Snapshot, key: &str) -> Option<&'a str> {
    s.summary()
        .additional_properties
        .get(key)
        .map(|v| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The picked snapshot's WAP id, refused if main's history already published it (Java's
/// `WapUtil.validateWapPublish`).
fn check_wap(md: &TableMetadata, picked: &Snapshot, table: &str) -> Result<Option<String>> {
    let Some(wap_id) = prop(picked, STAGED_WAP_ID) else {
        return Ok(None);
    };
    let published = ancestors(md, md.current_snapshot_id()).find(|s| {
        prop(s, STAGED_WAP_ID) == Some(wap_id) || prop(s, PUBLISHED_WAP_ID) == Some(wap_id)
    });
    if let Some(s) = published {
        return Err(Error::invalid(format!(
            "table {table}: WAP id '{wap_id}' was already published (snapshot {} on main); a \
             WAP id is published once; nothing was committed",
            s.snapshot_id()
        )));
    }
    Ok(Some(wap_id.to_string()))
}

/// Refuses a snapshot that main already has: as an ancestor, or picked into one (Java's
/// `CherrypickAncestorCommitException`).
fn check_not_ancestor(md: &TableMetadata, id: i64, table: &str) -> Result<()> {
    if let Some(cur) = md.current_snapshot_id() {
        if is_ancestor(md, id, cur) {
            return Err(Error::invalid(format!(
                "table {table}: snapshot {id} is already on main's history (an ancestor of the \
                 current snapshot {cur}); nothing to cherry-pick"
            )));
        }
    }
    let picked = id.to_string();
    if let Some(s) = ancestors(md, md.current_snapshot_id())
        .find(|s| prop(s, SOURCE_SNAPSHOT_ID) == Some(picked.as_str()))
    {
        return Err(Error::invalid(format!(
            "table {table}: snapshot {id} was already cherry-picked into main as snapshot {}",
            s.snapshot_id()
        )));
    }
    Ok(())
}

fn is_fast_forward(md: &TableMetadata, picked: &Snapshot) -> bool {
    picked.parent_snapshot_id() == md.current_snapshot_id()
}

/// What the picked snapshot needs done.
enum Plan {
    FastForward,
    /// Re-apply: the files to add (per partition spec) and remove.
    Apply {
        added: BTreeMap<i32, Vec<crate::spec::DataFile>>,
        removed: Vec<FileKey>,
        /// Dynamic overwrite: the partitions it replaces.
        replaced: Option<Partitions>,
    },
}

/// Partitions, as (spec id, partition value).
type Partitions = HashSet<(i32, String)>;

/// Re-checks a re-applied cherry-pick against what main committed meanwhile.
struct CherrypickValidation {
    picked: i64,
    table: String,
    replaced: Option<Partitions>,
}

fn partition_key(spec_id: i32, f: &crate::spec::DataFile) -> (i32, String) {
    (spec_id, format!("{:?}", f.partition()))
}

impl Validation for CherrypickValidation {
    fn validate(&self, current: &TableMetadata, since: &[CommittedChange]) -> Result<()> {
        let conflict = |e: Error| Error::new(ErrorKind::Conflict, e.to_string());
        check_not_ancestor(current, self.picked, &self.table).map_err(conflict)?;
        let picked = current.snapshot_by_id(self.picked).ok_or_else(|| {
            Error::new(
                ErrorKind::Conflict,
                format!(
                    "table {}: snapshot {} was expired by a concurrent commit",
                    self.table, self.picked
                ),
            )
        })?;
        check_wap(current, picked, &self.table).map_err(conflict)?;
        if let Some(replaced) = &self.replaced {
            for c in since {
                for f in &c.added {
                    if f.file.content_type() == DataContentType::Data
                        && replaced.contains(&partition_key(f.spec.spec_id(), &f.file))
                    {
                        return Err(Error::new(
                            ErrorKind::Conflict,
                            format!(
                                "table {}: cannot cherry-pick the partition overwrite {}: \
                                 partition {:?} was changed by snapshot {} since",
                                self.table,
                                self.picked,
                                f.file.partition(),
                                c.snapshot_id
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

async fn plan(table: &Table, picked: &Snapshot) -> Result<Plan> {
    let md = table.metadata();
    let name = table.name();
    let id = picked.snapshot_id();
    let operation = &picked.summary().operation;
    let dynamic_overwrite = *operation == Operation::Overwrite
        && prop(picked, REPLACE_PARTITIONS).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if *operation != Operation::Append && !dynamic_overwrite {
        if is_fast_forward(md, picked) {
            return Ok(Plan::FastForward);
        }
        return Err(Error::invalid(format!(
            "table {name}: cannot cherry-pick snapshot {id}: it is a{} `{}` snapshot, which is \
             only published by a fast-forward, and its parent {} is not main's current snapshot \
             {} (as in Iceberg Java: only appends and dynamic partition overwrites are \
             re-applied); nothing was committed",
            if operation.as_str().starts_with(['a', 'e', 'i', 'o', 'u']) {
                "n"
            } else {
                ""
            },
            operation.as_str(),
            picked
                .parent_snapshot_id()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "(none)".into()),
            md.current_snapshot_id()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "(none)".into()),
        )));
    }
    if is_fast_forward(md, picked) {
        return Ok(Plan::FastForward);
    }
    check_not_ancestor(md, id, &name)?;
    if dynamic_overwrite {
        if let Some(p) = picked.parent_snapshot_id() {
            if !md
                .current_snapshot_id()
                .is_some_and(|cur| is_ancestor(md, p, cur))
            {
                return Err(Error::invalid(format!(
                    "table {name}: cannot cherry-pick overwrite {id}: its parent {p} is not an \
                     ancestor of main's current snapshot; nothing was committed"
                )));
            }
        }
    }
    let change = load_changes(table, &[picked])
        .await?
        .pop()
        .ok_or_else(|| Error::corrupt(format!("table {name}: snapshot {id} has no changes")))?;
    let v3 = md.format_version() == crate::spec::FormatVersion::V3;
    let mut added: BTreeMap<i32, Vec<crate::spec::DataFile>> = BTreeMap::new();
    let mut replaced = HashSet::new();
    for f in change.added {
        if f.file.content_type() != DataContentType::Data {
            return Err(Error::invalid(format!(
                "table {name}: cannot cherry-pick snapshot {id}: it adds delete files; nothing \
                 was committed"
            )));
        }
        replaced.insert(partition_key(f.spec.spec_id(), &f.file));
        // v3: the published snapshot assigns the rows their own row ids.
        let file = if v3 && f.file.first_row_id().is_some() {
            data_file_builder(&f.file)
                .first_row_id(None)
                .build()
                .map_err(|e| Error::io(format!("copying '{}': {e}", f.file.file_path())))?
        } else {
            f.file
        };
        added.entry(f.spec.spec_id()).or_default().push(file);
    }
    let removed: Vec<FileKey> = if dynamic_overwrite {
        change
            .removed
            .iter()
            .map(|f| FileKey::of(&f.file))
            .collect()
    } else {
        vec![]
    };
    let replaced = if dynamic_overwrite {
        // Java's rule: nothing committed since the overwrite's parent may touch a partition
        // it replaces.
        let since = snapshots_since(md, md.current_snapshot_id(), picked.parent_snapshot_id())?;
        let changes = load_changes(table, &since).await?;
        CherrypickValidation {
            picked: id,
            table: name.clone(),
            replaced: Some(replaced.clone()),
        }
        .validate(md, &changes)
        .map_err(|e| Error::invalid(format!("{e}; nothing was committed")))?;
        Some(replaced)
    } else {
        None
    };
    Ok(Plan::Apply {
        added,
        removed,
        replaced,
    })
}

/// Publishes snapshot `snapshot_id` of table `ident` onto `main` (see the module docs for the
/// rules). A refused pick commits nothing. Returns what was committed; an error keeps its
/// kind (a conflict after `commit.retry.*`, an unknown commit state).
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
/// let creation = floe::TableCreation::new(floe::spec::parse_schema("id long")?)
///     .with_property("write.wap.enabled", "true");
/// let table = cat.create_table(&ident, creation).await?;
/// # let rows = |v: Vec<i64>| RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(v)) as _)]);
/// // Stage a write: main does not see it.
/// let staged = table.with_wap_id("audit-1")?;
/// let r = floe::txn::append(&cat, &staged, [Ok(rows(vec![1, 2])?)]).await?;
/// assert_eq!(r.table.metadata().current_snapshot_id(), None);
/// // Publish it.
/// let p = floe::txn::cherrypick(&cat, &ident, r.snapshot_id.unwrap()).await?;
/// assert!(p.fast_forward);
/// assert_eq!(p.table.metadata().current_snapshot_id(), r.snapshot_id);
/// // The same WAP id is published once.
/// let again = floe::txn::append(&cat, &p.table.with_wap_id("audit-1")?, [Ok(rows(vec![3])?)]).await?;
/// assert!(floe::txn::cherrypick(&cat, &ident, again.snapshot_id.unwrap()).await.is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn cherrypick(
    catalog: &Catalog,
    ident: &TableIdent,
    snapshot_id: i64,
) -> Result<CherrypickResult> {
    let table = catalog.load_table(ident).await?;
    let name = table.name();
    let md = table.metadata();
    let picked = md.snapshot_by_id(snapshot_id).cloned().ok_or_else(|| {
        Error::not_found(format!(
            "table {name} has no snapshot {snapshot_id} to cherry-pick (`floe snapshots \
                 {name}` lists them); nothing was committed"
        ))
    })?;
    let wap_id = check_wap(md, &picked, &name)?;
    match plan(&table, &picked).await? {
        Plan::FastForward => {
            let (t, _) = super::alter::commit_metadata(catalog, table, "cherry-pick", |t| {
                let md = t.metadata();
                let picked = md.snapshot_by_id(snapshot_id).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Conflict,
                        format!("table {name}: snapshot {snapshot_id} was expired meanwhile"),
                    )
                })?;
                if !is_fast_forward(md, picked) {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "table {name}: main moved while snapshot {snapshot_id} was being \
                             fast-forwarded to; nothing was committed; run the cherry-pick again"
                        ),
                    ));
                }
                check_wap(md, picked, &name)?;
                apply_ref_change(
                    md,
                    &RefChange::SetCurrentSnapshot(snapshot_id),
                    &name,
                    Some(t.metadata_location()),
                )
            })
            .await?;
            Ok(CherrypickResult {
                table: t,
                source_snapshot_id: snapshot_id,
                snapshot_id,
                fast_forward: true,
                published_wap_id: wap_id,
                added_files: 0,
                removed_files: 0,
            })
        }
        Plan::Apply {
            added,
            removed,
            replaced,
        } => {
            let added_files = added.values().map(|v| v.len()).sum();
            let removed_files = removed.len();
            let mut producer = SnapshotProducer::new(picked.summary().operation.clone(), vec![])
                .with_summary_property(SOURCE_SNAPSHOT_ID, snapshot_id.to_string());
            if let Some(w) = &wap_id {
                producer = producer.with_summary_property(PUBLISHED_WAP_ID, w.clone());
            }
            for (spec_id, files) in added {
                producer = producer.add_files(spec_id, files);
            }
            producer = producer.remove_files(removed);
            let validation = CherrypickValidation {
                picked: snapshot_id,
                table: name,
                replaced,
            };
            let t = commit(catalog, &table, &mut producer, &validation).await?;
            Ok(CherrypickResult {
                table: t,
                source_snapshot_id: snapshot_id,
                snapshot_id: producer.snapshot_id(),
                fast_forward: false,
                published_wap_id: wap_id,
                added_files,
                removed_files,
            })
        }
    }
}
