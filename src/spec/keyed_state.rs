//! A keyed table's sink checkpoints and tombstone list follow its current snapshot. Each
//! keyed commit records in its snapshot summary the checkpoint it commits and how it changed
//! the tombstone list; when `main` moves to another snapshot (rollback, set-current-snapshot,
//! a replace or fast-forward of `main`), [`follow_main`] gives the properties' values at that
//! snapshot, so the move and the rewound properties commit together. Pure.

use std::collections::HashSet;

use super::keyed::{TombstoneFile, TombstoneList, TOMBSTONES};
use crate::error::{Error, Result};
use crate::spec::{Snapshot, TableMetadata};

/// Snapshot summary key: the tombstone files a commit added to the list (JSON array).
pub const TOMBSTONES_ADDED: &str = "floe.tombstones.added";
/// Snapshot summary key: the tombstone files a commit took off the list (JSON array).
pub const TOMBSTONES_REMOVED: &str = "floe.tombstones.removed";

const SINK_PREFIX: &str = "floe.sink.";
const SINK_SUFFIX: &str = ".checkpoint";

/// The summary entries recording how a commit changes the tombstone list from `before` to
/// `after` (none when it does not).
pub fn tombstone_changes(before: &TombstoneList, after: &TombstoneList) -> Vec<(String, String)> {
    let paths =
        |l: &TombstoneList| -> HashSet<String> { l.files.iter().map(|f| f.path.clone()).collect() };
    let (b, a) = (paths(before), paths(after));
    let added: Vec<&TombstoneFile> = after
        .files
        .iter()
        .filter(|f| !b.contains(&f.path))
        .collect();
    let removed: Vec<&TombstoneFile> = before
        .files
        .iter()
        .filter(|f| !a.contains(&f.path))
        .collect();
    let mut out = Vec::new();
    for (key, files) in [(TOMBSTONES_ADDED, added), (TOMBSTONES_REMOVED, removed)] {
        if !files.is_empty() {
            out.push((
                key.to_string(),
                serde_json::to_string(&files).unwrap_or_default(),
            ));
        }
    }
    out
}

/// The tombstone files a snapshot's summary names under `key`.
fn files_in(s: &Snapshot, key: &str, table: &str) -> Result<Vec<TombstoneFile>> {
    match s.summary().additional_properties.get(key) {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_str(v).map_err(|e| {
            Error::corrupt(format!(
                "table {table}: snapshot {} has a summary entry {key} that is not a list of \
                 tombstone files ({e})",
                s.snapshot_id()
            ))
        }),
    }
}

/// Every tombstone file a snapshot's summary names (added or removed): files a move of
/// `main` may list again.
pub fn files_named(s: &Snapshot, table: &str) -> Result<Vec<TombstoneFile>> {
    let mut out = files_in(s, TOMBSTONES_ADDED, table)?;
    out.extend(files_in(s, TOMBSTONES_REMOVED, table)?);
    Ok(out)
}

/// Whether a summary key is a sink checkpoint's.
fn is_sink_key(k: &str) -> bool {
    k.starts_with(SINK_PREFIX) && k.ends_with(SINK_SUFFIX)
}

/// Whether a snapshot carries keyed state (a checkpoint or a tombstone change).
fn carries_state(s: &Snapshot) -> bool {
    s.summary()
        .additional_properties
        .keys()
        .any(|k| is_sink_key(k) || k == TOMBSTONES_ADDED || k == TOMBSTONES_REMOVED)
}

/// `id` and its ancestors, newest first, and whether the walk reached the first snapshot
/// (`false`: an ancestor has expired).
fn lineage(md: &TableMetadata, id: i64) -> (Vec<&Snapshot>, bool) {
    let mut out = Vec::new();
    let mut cur = md.snapshot_by_id(id);
    while let Some(s) = cur {
        out.push(s.as_ref());
        match s.parent_snapshot_id() {
            None => return (out, true),
            Some(p) => cur = md.snapshot_by_id(p),
        }
    }
    (out, false)
}

/// The property changes (`None`: unset) that make the sink checkpoints and the tombstone list
/// of `md` what they were at snapshot `to`, which `main` is about to point at. An error
/// when that state cannot be known: it names the property to unset to move `main` anyway.
pub fn follow_main(
    md: &TableMetadata,
    to: i64,
    table: &str,
) -> Result<Vec<(String, Option<String>)>> {
    let Some(from) = md.current_snapshot_id() else {
        return Ok(Vec::new());
    };
    if from == to {
        return Ok(Vec::new());
    }
    let (to_line, to_complete) = lineage(md, to);
    let on_to: HashSet<i64> = to_line.iter().map(|s| s.snapshot_id()).collect();
    // Snapshots leaving main (newest first), then the common ancestor.
    let (from_line, _) = lineage(md, from);
    let meet = from_line
        .iter()
        .position(|s| on_to.contains(&s.snapshot_id()));
    let undo: &[&Snapshot] = &from_line[..meet.unwrap_or(from_line.len())];
    let redo: Vec<&Snapshot> = match meet {
        Some(i) => {
            let lca = from_line[i].snapshot_id();
            let at = to_line
                .iter()
                .position(|s| s.snapshot_id() == lca)
                .unwrap_or(to_line.len());
            to_line[..at].iter().rev().copied().collect()
        }
        None => to_line.iter().rev().copied().collect(),
    };
    if !undo.iter().chain(&redo).any(|s| carries_state(s)) {
        return Ok(Vec::new());
    }
    if meet.is_none() {
        return Err(Error::invalid(format!(
            "table {table}: snapshots {from} and {to} share no ancestor that has not expired, so \
             the sink checkpoints and tombstones at {to} cannot be known; nothing was committed"
        )));
    }
    let props = md.properties();
    let mut out = Vec::new();

    // Sink checkpoints: the value the nearest ancestor of `to` recorded.
    let mut keys: Vec<&String> = props.keys().filter(|k| is_sink_key(k)).collect();
    for s in undo.iter().chain(&redo) {
        keys.extend(
            s.summary()
                .additional_properties
                .keys()
                .filter(|k| is_sink_key(k)),
        );
    }
    keys.sort();
    keys.dedup();
    for key in keys {
        let at_to = to_line
            .iter()
            .find_map(|s| s.summary().additional_properties.get(key));
        let value = match at_to {
            Some(v) => Some(v.clone()),
            None if to_complete => None,
            None if undo
                .iter()
                .any(|s| s.summary().additional_properties.contains_key(key)) =>
            {
                return Err(Error::invalid(format!(
                    "table {table}: the checkpoint of sink {key} at snapshot {to} is not known \
                     (the snapshot that recorded it has expired), and snapshots with a later \
                     checkpoint would leave main; to move main anyway, unset it first (`floe \
                     alter {table} --unset {key}`), then set the checkpoint to resume from; \
                     nothing was committed"
                )))
            }
            None => props.get(key).cloned(),
        };
        if value.as_ref() != props.get(key) {
            out.push((key.clone(), value));
        }
    }

    // Tombstones: undo what the leaving snapshots changed, redo what the arriving ones did.
    // An empty list whose history does not fit was emptied on purpose (unset, or every
    // tombstone expired): it stays empty.
    let current = TombstoneList::of(md, table)?;
    let mut list = current.clone();
    let steps = undo
        .iter()
        .map(|s| (*s, TOMBSTONES_ADDED, TOMBSTONES_REMOVED))
        .chain(
            redo.iter()
                .map(|s| (*s, TOMBSTONES_REMOVED, TOMBSTONES_ADDED)),
        );
    for (s, off, on) in steps {
        let (off, on) = (files_in(s, off, table)?, files_in(s, on, table)?);
        if swap_suffix(&mut list, &off, on) {
            continue;
        }
        if current.files.is_empty() {
            list = current.clone();
            break;
        }
        return Err(Error::invalid(format!(
            "table {table}: the tombstone files were rewritten (by expire-tombstones or an \
             ALTER) after snapshot {}, so the tombstones at snapshot {to} cannot be restored; \
             to move main anyway, unset them first (`floe alter {table} --unset {TOMBSTONES}`: \
             replays of older versions of deleted keys then bring them back); nothing was \
             committed",
            s.snapshot_id()
        )));
    }
    if list != current {
        let value = (!list.files.is_empty()).then(|| list.to_property());
        out.push((TOMBSTONES.to_string(), value));
    }
    Ok(out)
}

/// Replaces the files `off` at the end of `list` by `on` (a commit changes the list's
/// newest files only); `false` when the list does not end with `off`.
fn swap_suffix(list: &mut TombstoneList, off: &[TombstoneFile], on: Vec<TombstoneFile>) -> bool {
    let n = list.files.len();
    if off.len() > n
        || list.files[n - off.len()..]
            .iter()
            .zip(off)
            .any(|(a, b)| a.path != b.path)
    {
        return false;
    }
    list.files.truncate(n - off.len());
    list.files.extend(on);
    true
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use iceberg::spec::{
        FormatVersion, Operation, SnapshotReference, SnapshotRetention, SortOrder, Summary,
        TableMetadataBuilder, MAIN_BRANCH,
    };

    fn file(n: u32) -> TombstoneFile {
        TombstoneFile {
            path: format!("/t/metadata/tombstones-{n}.parquet"),
            records: u64::from(n),
            file_size_in_bytes: 10,
        }
    }

    fn list(ns: &[u32]) -> TombstoneList {
        TombstoneList {
            files: ns.iter().map(|n| file(*n)).collect(),
        }
    }

    /// A snapshot: id, parent, the checkpoint of sink `s` it records, its tombstone list.
    type Link<'a> = (i64, Option<i64>, Option<i64>, &'a [u32]);

    /// A table of snapshots, main at the last; a parent that is not in the chain has
    /// expired.
    fn table(chain: &[Link<'_>]) -> TableMetadata {
        let schema = crate::spec::parse_schema("id long not null").unwrap();
        let mut b = TableMetadataBuilder::new(
            schema,
            iceberg::spec::UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap();
        let mut lists: HashMap<i64, TombstoneList> = HashMap::new();
        let mut last = None;
        for (seq, (id, parent, cp, files)) in chain.iter().enumerate() {
            let before = parent
                .and_then(|p| lists.get(&p).cloned())
                .unwrap_or_default();
            let after = list(files);
            let mut summary: HashMap<String, String> =
                tombstone_changes(&before, &after).into_iter().collect();
            if let Some(cp) = cp {
                summary.insert("floe.sink.s.checkpoint".into(), cp.to_string());
            }
            let s = Snapshot::builder()
                .with_snapshot_id(*id)
                .with_parent_snapshot_id(*parent)
                .with_sequence_number(seq as i64 + 1)
                .with_timestamp_ms(1_000 * *id)
                .with_manifest_list(format!("file:///t/m{id}.avro"))
                .with_summary(Summary {
                    operation: Operation::Append,
                    additional_properties: summary,
                })
                .with_schema_id(0)
                .build();
            b = b
                .add_snapshot(s)
                .unwrap()
                .set_ref(
                    MAIN_BRANCH,
                    SnapshotReference::new(*id, SnapshotRetention::branch(None, None, None)),
                )
                .unwrap();
            lists.insert(*id, after);
            last = Some((*id, *cp));
        }
        let (id, cp) = last.unwrap();
        let mut props = HashMap::new();
        let l = &lists[&id];
        if !l.files.is_empty() {
            props.insert(TOMBSTONES.to_string(), l.to_property());
        }
        if let Some(cp) = chain.iter().rev().find_map(|c| c.2).or(cp) {
            props.insert("floe.sink.s.checkpoint".into(), cp.to_string());
        }
        b.set_properties(props).unwrap().build().unwrap().metadata
    }

    fn value(changes: &[(String, Option<String>)], key: &str) -> Option<Option<String>> {
        changes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn rollbacks_rewind_and_moves_forward_replay() {
        // 1 → 2 → 3 (merges 1 and 2 into 3) → 4, and 5 off 2.
        let md = table(&[
            (1, None, Some(1), &[1]),
            (2, Some(1), Some(2), &[1, 2]),
            (3, Some(2), Some(3), &[3]),
            (4, Some(3), None, &[3]),
            (5, Some(2), Some(9), &[1, 2, 5]),
        ]);
        // main is at 5 (the last added): to 4 undoes 5, redoes 3 and 4.
        let c = follow_main(&md, 4, "t").unwrap();
        assert_eq!(value(&c, "floe.sink.s.checkpoint"), Some(Some("3".into())));
        assert_eq!(value(&c, TOMBSTONES), Some(Some(list(&[3]).to_property())));
        // To 1: the list of snapshot 1, checkpoint 1.
        let c = follow_main(&md, 1, "t").unwrap();
        assert_eq!(value(&c, TOMBSTONES), Some(Some(list(&[1]).to_property())));
        assert_eq!(value(&c, "floe.sink.s.checkpoint"), Some(Some("1".into())));
        // A list rewritten outside snapshots (expire-tombstones) cannot be rewound.
        let mut props = md.properties().clone();
        props.insert(TOMBSTONES.into(), list(&[7]).to_property());
        let rewritten = TableMetadataBuilder::new_from_metadata(md.clone(), None)
            .set_properties(props)
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        let e = follow_main(&rewritten, 4, "t").unwrap_err();
        assert!(e.to_string().contains("--unset floe.tombstones"), "{e}");
        // An emptied list stays empty.
        let emptied = TableMetadataBuilder::new_from_metadata(md.clone(), None)
            .remove_properties(&[TOMBSTONES.to_string()])
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        assert_eq!(
            value(&follow_main(&emptied, 4, "t").unwrap(), TOMBSTONES),
            None
        );
    }

    #[test]
    fn a_checkpoint_behind_an_expired_snapshot_is_refused_not_guessed() {
        // Snapshot 1's parent (0) expired; 2 carries no checkpoint; 3 recorded checkpoint 5.
        let md = table(&[
            (1, Some(0), None, &[]),
            (2, Some(1), None, &[]),
            (3, Some(2), Some(5), &[]),
        ]);
        let e = follow_main(&md, 2, "t").unwrap_err();
        assert!(
            e.to_string().contains("--unset floe.sink.s.checkpoint"),
            "{e}"
        );
        // With a complete history the checkpoint before the sink's first commit is none.
        let md = table(&[
            (1, None, None, &[]),
            (2, Some(1), None, &[]),
            (3, Some(2), Some(5), &[]),
        ]);
        let c = follow_main(&md, 2, "t").unwrap();
        assert_eq!(value(&c, "floe.sink.s.checkpoint"), Some(None));
        // Nothing keyed changed between: nothing to rewind.
        assert!(follow_main(&md, 1, "t").unwrap().len() == 1);
        assert!(tombstone_changes(&list(&[1]), &list(&[1])).is_empty());
    }
}
