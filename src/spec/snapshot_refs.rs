//! Branches, tags and the current snapshot (pure): the changes Iceberg Java's
//! `ManageSnapshots` makes, with its rules — `main` cannot be dropped or made a tag, a
//! fast-forward only moves a branch to a descendant, a rollback only to an ancestor.

use std::collections::HashMap;

use iceberg::spec::{
    SnapshotReference, SnapshotRetention, TableMetadata, TableMetadataBuilder, MAIN_BRANCH,
};

use crate::error::{Error, Result};

/// How long a ref and (for a branch) its snapshots are kept by `expire-snapshots`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// `max-ref-age-ms`: the ref itself expires after this (never `main`).
    pub max_ref_age_ms: Option<i64>,
    /// Branches: `min-snapshots-to-keep`.
    pub min_snapshots_to_keep: Option<i32>,
    /// Branches: `max-snapshot-age-ms`.
    pub max_snapshot_age_ms: Option<i64>,
}

/// One change to the table's refs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefChange {
    /// A new branch at `snapshot` (default: the current snapshot).
    CreateBranch {
        /// Its name.
        name: String,
        /// Where it points.
        snapshot: Option<i64>,
        /// Its retention.
        retention: Retention,
    },
    /// An existing branch moved to `snapshot` (any snapshot of the table).
    ReplaceBranch {
        /// Its name.
        name: String,
        /// Where it points now.
        snapshot: i64,
        /// Its retention (`None`: unchanged).
        retention: Option<Retention>,
    },
    /// A branch removed (not `main`).
    DropBranch(String),
    /// Branch `name` moved to the snapshot of ref `to`, which must descend from it.
    FastForward {
        /// The branch moved.
        name: String,
        /// The ref whose snapshot it takes.
        to: String,
    },
    /// A new tag at `snapshot` (default: the current snapshot).
    CreateTag {
        /// Its name.
        name: String,
        /// Where it points.
        snapshot: Option<i64>,
        /// Its retention (`max_ref_age_ms` only).
        retention: Retention,
    },
    /// An existing tag moved.
    ReplaceTag {
        /// Its name.
        name: String,
        /// Where it points now.
        snapshot: i64,
        /// Its retention (`None`: unchanged).
        retention: Option<Retention>,
    },
    /// A tag removed.
    DropTag(String),
    /// `main` moved back to an ancestor of its current snapshot.
    RollbackTo(i64),
    /// `main` moved back to the latest ancestor committed at or before this time (ms).
    RollbackToTime(i64),
    /// `main` set to any snapshot of the table.
    SetCurrentSnapshot(i64),
}

fn find(md: &TableMetadata, name: &str) -> Option<SnapshotReference> {
    super::refs(md)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, r)| r)
}

/// `head` and its parents, newest first; it ends at a missing parent, and after as many
/// steps as the table has snapshots (so corrupt metadata with a cycle cannot loop).
pub fn ancestors(
    md: &TableMetadata,
    head: Option<i64>,
) -> impl Iterator<Item = &std::sync::Arc<iceberg::spec::Snapshot>> + '_ {
    let mut at = head.and_then(|h| md.snapshot_by_id(h));
    std::iter::from_fn(move || {
        let s = at?;
        at = s.parent_snapshot_id().and_then(|p| md.snapshot_by_id(p));
        Some(s)
    })
    .take(md.snapshots().count())
}

/// Whether `ancestor` is `snapshot` or one of its parents.
pub fn is_ancestor(md: &TableMetadata, ancestor: i64, snapshot: i64) -> bool {
    ancestors(md, Some(snapshot)).any(|s| s.snapshot_id() == ancestor)
}

fn branch_retention(r: Retention) -> SnapshotRetention {
    SnapshotRetention::branch(
        r.min_snapshots_to_keep,
        r.max_snapshot_age_ms,
        r.max_ref_age_ms,
    )
}

fn tag_retention(r: Retention) -> Result<SnapshotRetention> {
    if r.min_snapshots_to_keep.is_some() || r.max_snapshot_age_ms.is_some() {
        return Err(Error::invalid(
            "a tag keeps one snapshot: only its own age (max-ref-age-ms, --retain-days) applies",
        ));
    }
    Ok(SnapshotRetention::Tag {
        max_ref_age_ms: r.max_ref_age_ms,
    })
}

/// The table's metadata after `change`; `table` names it in errors; `location` is `md`'s
/// metadata file, which the new metadata's log records.
pub fn apply_ref_change(
    md: &TableMetadata,
    change: &RefChange,
    table: &str,
    location: Option<&str>,
) -> Result<TableMetadata> {
    let invalid = |m: String| Error::invalid(format!("table {table}: {m}"));
    let snapshot = |id: i64| -> Result<i64> {
        md.snapshot_by_id(id).map(|_| id).ok_or_else(|| {
            invalid(format!(
                "no snapshot {id} (`floe snapshots {table}` lists them)"
            ))
        })
    };
    let current = || {
        md.current_snapshot_id()
            .ok_or_else(|| invalid("the table has no snapshot yet to point a ref at".into()))
    };
    // A new ref's snapshot: the one given, else the current one.
    let at = |s: Option<i64>| match s {
        Some(id) => snapshot(id),
        None => current(),
    };
    let existing = |name: &str, branch: bool| -> Result<SnapshotReference> {
        let r = find(md, name).ok_or_else(|| {
            invalid(format!(
                "no {} '{name}'",
                if branch { "branch" } else { "tag" }
            ))
        })?;
        if r.is_branch() != branch {
            return Err(invalid(format!(
                "'{name}' is a {}, not a {}",
                if r.is_branch() { "branch" } else { "tag" },
                if branch { "branch" } else { "tag" }
            )));
        }
        Ok(r)
    };
    let fresh = |name: &str| -> Result<()> {
        if name.is_empty() {
            return Err(invalid("a ref needs a name".into()));
        }
        if let Some(r) = find(md, name) {
            return Err(invalid(format!(
                "a {} named '{name}' exists (replace it, or drop it first)",
                if r.is_branch() { "branch" } else { "tag" }
            )));
        }
        Ok(())
    };
    let (name, reference) = match change {
        RefChange::CreateBranch {
            name,
            snapshot: s,
            retention,
        } => {
            fresh(name)?;
            let r = SnapshotReference::new(at(*s)?, branch_retention(*retention));
            (name.clone(), Some(r))
        }
        RefChange::ReplaceBranch {
            name,
            snapshot: s,
            retention,
        } => {
            let old = existing(name, true)?;
            let id = snapshot(*s)?;
            let retention = match retention {
                Some(r) => branch_retention(*r),
                None => old.retention.clone(),
            };
            (name.clone(), Some(SnapshotReference::new(id, retention)))
        }
        RefChange::DropBranch(name) => {
            if name == MAIN_BRANCH {
                return Err(invalid("the main branch cannot be dropped".into()));
            }
            existing(name, true)?;
            (name.clone(), None)
        }
        RefChange::FastForward { name, to } => {
            let old = existing(name, true)?;
            let target = find(md, to)
                .ok_or_else(|| invalid(format!("no branch or tag '{to}' to fast-forward to")))?;
            if !is_ancestor(md, old.snapshot_id, target.snapshot_id) {
                return Err(invalid(format!(
                    "cannot fast-forward '{name}' to '{to}': snapshot {} of '{name}' is not an \
                     ancestor of {} ('{to}'); use `floe branch replace` to move it anyway",
                    old.snapshot_id, target.snapshot_id
                )));
            }
            (
                name.clone(),
                Some(SnapshotReference::new(target.snapshot_id, old.retention)),
            )
        }
        RefChange::CreateTag {
            name,
            snapshot: s,
            retention,
        } => {
            fresh(name)?;
            let r = SnapshotReference::new(at(*s)?, tag_retention(*retention)?);
            (name.clone(), Some(r))
        }
        RefChange::ReplaceTag {
            name,
            snapshot: s,
            retention,
        } => {
            let old = existing(name, false)?;
            let id = snapshot(*s)?;
            let retention = match retention {
                Some(r) => tag_retention(*r)?,
                None => old.retention.clone(),
            };
            (name.clone(), Some(SnapshotReference::new(id, retention)))
        }
        RefChange::DropTag(name) => {
            existing(name, false)?;
            (name.clone(), None)
        }
        RefChange::RollbackTo(id) => {
            let cur = current()?;
            snapshot(*id)?;
            if !is_ancestor(md, *id, cur) {
                return Err(invalid(format!(
                    "snapshot {id} is not an ancestor of the current snapshot {cur}; \
                     `floe set-current-snapshot` moves main to any snapshot"
                )));
            }
            (MAIN_BRANCH.to_string(), Some(main_at(md, *id)))
        }
        RefChange::RollbackToTime(ms) => {
            let found = ancestors(md, Some(current()?))
                .find(|s| s.timestamp_ms() <= *ms)
                .map(|s| s.snapshot_id());
            let id = found.ok_or_else(|| {
                invalid(format!(
                    "no ancestor of the current snapshot was committed at or before {ms} ms"
                ))
            })?;
            (MAIN_BRANCH.to_string(), Some(main_at(md, id)))
        }
        RefChange::SetCurrentSnapshot(id) => {
            snapshot(*id)?;
            (MAIN_BRANCH.to_string(), Some(main_at(md, *id)))
        }
    };
    let err = |e: iceberg::Error| invalid(e.message().to_string());
    // A keyed table's sink checkpoints and tombstones move with main.
    let follow = match &reference {
        Some(r) if name == MAIN_BRANCH => {
            super::keyed_state::follow_main(md, r.snapshot_id, table)?
        }
        _ => Vec::new(),
    };
    let mut b = TableMetadataBuilder::new_from_metadata(md.clone(), location.map(String::from));
    b = match reference {
        Some(r) => b.set_ref(&name, r).map_err(err)?,
        None => b.remove_ref(&name),
    };
    let set: HashMap<String, String> = follow
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    let unset: Vec<String> = follow
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    if !set.is_empty() {
        b = b.set_properties(set).map_err(err)?;
    }
    if !unset.is_empty() {
        b = b.remove_properties(&unset).map_err(err)?;
    }
    Ok(b.build().map_err(err)?.metadata)
}

/// `main` at `id`, keeping its retention.
fn main_at(md: &TableMetadata, id: i64) -> SnapshotReference {
    let retention = find(md, MAIN_BRANCH)
        .map(|r| r.retention)
        .unwrap_or_else(|| SnapshotRetention::branch(None, None, None));
    SnapshotReference::new(id, retention)
}

/// The retention branch `name` has in `md` (what a new snapshot on it keeps).
pub(crate) fn branch_retention_of(md: &TableMetadata, name: &str) -> SnapshotRetention {
    find(md, name)
        .map(|r| r.retention)
        .unwrap_or_else(|| SnapshotRetention::branch(None, None, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{FormatVersion, Operation, Snapshot, SortOrder, Summary};
    use std::collections::HashMap;

    /// A table with a chain of snapshots 1 → 2 → 3 on main and 4 (parent 1) off it.
    fn table() -> TableMetadata {
        let schema = crate::spec::parse_schema("id long").unwrap();
        let mut b = TableMetadataBuilder::new(
            schema,
            iceberg::spec::UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap();
        for (id, parent, seq) in [
            (1, None, 1),
            (2, Some(1), 2),
            (3, Some(2), 3),
            (4, Some(1), 4),
        ] {
            let s = Snapshot::builder()
                .with_snapshot_id(id)
                .with_parent_snapshot_id(parent)
                .with_sequence_number(seq)
                .with_timestamp_ms(1_000 * id)
                .with_manifest_list(format!("file:///t/m{id}.avro"))
                .with_summary(Summary {
                    operation: Operation::Append,
                    additional_properties: HashMap::new(),
                })
                .with_schema_id(0)
                .build();
            b = b.add_snapshot(s).unwrap();
            if id != 4 {
                b = b
                    .set_ref(
                        MAIN_BRANCH,
                        SnapshotReference::new(id, SnapshotRetention::branch(Some(3), None, None)),
                    )
                    .unwrap();
            }
        }
        b.build().unwrap().metadata
    }

    #[test]
    fn refs_follow_java_rules() {
        let md = table();
        let a = |md: &TableMetadata, c: RefChange| apply_ref_change(md, &c, "db.t", None);
        let md = a(
            &md,
            RefChange::CreateBranch {
                name: "dev".into(),
                snapshot: Some(1),
                retention: Retention::default(),
            },
        )
        .unwrap();
        assert_eq!(find(&md, "dev").unwrap().snapshot_id, 1);
        // Exists already; a tag cannot take a branch's name.
        assert!(a(
            &md,
            RefChange::CreateTag {
                name: "dev".into(),
                snapshot: None,
                retention: Retention::default()
            }
        )
        .is_err());
        // Fast-forward to a descendant only.
        let ff = a(
            &md,
            RefChange::FastForward {
                name: "dev".into(),
                to: "main".into(),
            },
        )
        .unwrap();
        assert_eq!(find(&ff, "dev").unwrap().snapshot_id, 3);
        let md4 = a(
            &md,
            RefChange::CreateTag {
                name: "side".into(),
                snapshot: Some(4),
                retention: Retention::default(),
            },
        )
        .unwrap();
        let ff4 = a(
            &md4,
            RefChange::FastForward {
                name: "dev".into(),
                to: "side".into(),
            },
        )
        .unwrap();
        assert_eq!(find(&ff4, "dev").unwrap().snapshot_id, 4);
        assert!(a(
            &ff,
            RefChange::FastForward {
                name: "dev".into(),
                to: "side".into()
            }
        )
        .is_err());
        // Rollback: ancestors only; main keeps its retention.
        let rb = a(&md, RefChange::RollbackTo(2)).unwrap();
        assert_eq!(rb.current_snapshot_id(), Some(2));
        assert_eq!(
            branch_retention_of(&rb, MAIN_BRANCH),
            SnapshotRetention::branch(Some(3), None, None)
        );
        assert!(a(&md, RefChange::RollbackTo(4)).is_err());
        assert_eq!(
            a(&md, RefChange::RollbackToTime(2_500))
                .unwrap()
                .current_snapshot_id(),
            Some(2)
        );
        assert_eq!(
            a(&md, RefChange::SetCurrentSnapshot(4))
                .unwrap()
                .current_snapshot_id(),
            Some(4)
        );
        assert!(a(&md, RefChange::DropBranch("main".into())).is_err());
        assert!(a(&md, RefChange::DropTag("dev".into())).is_err());
        let dropped = a(&md, RefChange::DropBranch("dev".into())).unwrap();
        assert!(find(&dropped, "dev").is_none());
        assert!(a(
            &md,
            RefChange::CreateTag {
                name: "t".into(),
                snapshot: Some(9),
                retention: Retention::default()
            }
        )
        .is_err());
        assert!(a(
            &md,
            RefChange::CreateTag {
                name: "t".into(),
                snapshot: None,
                retention: Retention {
                    min_snapshots_to_keep: Some(1),
                    ..Default::default()
                }
            }
        )
        .is_err());
    }
}
