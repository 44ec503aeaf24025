//! Manifest merging on commit (`commit.manifest-merge.enabled`, Java's defaults and rules):
//! random appends, deletes, updates and merges in both write modes keep the manifest count
//! bounded; every entry a commit carries keeps its snapshot id and sequence numbers exactly,
//! new files are ADDED by the new snapshot, removed ones DELETED by it; the rows equal a twin
//! table that never merges; DuckDB, pyiceberg and Spark read the merged table.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Int32Type, Int64Type};
use floe::catalog::TableCreation;
use floe::scan::{read_metadata_table, MetadataTable};
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::{Catalog, Table};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

/// A live or deleted entry: status, snapshot id, data and file sequence numbers.
type Entry = (i32, Option<i64>, Option<i64>, Option<i64>);

/// The entries of the current snapshot by file path (status 0 existing, 1 added, 2 deleted).
async fn entries(t: &Table) -> HashMap<String, Vec<Entry>> {
    let b = read_metadata_table(t, MetadataTable::Entries, None)
        .await
        .unwrap();
    let status = b
        .column_by_name("status")
        .unwrap()
        .as_primitive::<Int32Type>();
    let snap = b
        .column_by_name("snapshot_id")
        .unwrap()
        .as_primitive::<Int64Type>();
    let seq = b
        .column_by_name("sequence_number")
        .unwrap()
        .as_primitive::<Int64Type>();
    let fseq = b
        .column_by_name("file_sequence_number")
        .unwrap()
        .as_primitive::<Int64Type>();
    let df = b.column_by_name("data_file").unwrap().as_struct();
    let path = df.column_by_name("file_path").unwrap().as_string::<i32>();
    let opt = |a: &arrow::array::Int64Array, i: usize| a.is_valid(i).then(|| a.value(i));
    let mut out: HashMap<String, Vec<Entry>> = HashMap::new();
    for i in 0..b.num_rows() {
        out.entry(path.value(i).to_string()).or_default().push((
            status.value(i),
            opt(snap, i),
            opt(seq, i),
            opt(fseq, i),
        ));
    }
    out
}

/// Manifests of the current snapshot per (content, spec id).
async fn manifest_counts(t: &Table) -> HashMap<(i32, i32), usize> {
    let b = read_metadata_table(t, MetadataTable::Manifests, None)
        .await
        .unwrap();
    let content = b
        .column_by_name("content")
        .unwrap()
        .as_primitive::<Int32Type>();
    let spec = b
        .column_by_name("partition_spec_id")
        .unwrap()
        .as_primitive::<Int32Type>();
    let mut out = HashMap::new();
    for i in 0..b.num_rows() {
        *out.entry((content.value(i), spec.value(i))).or_default() += 1;
    }
    out
}

fn rows(ids: &[i64], tag: &str) -> RecordBatch {
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.to_vec())) as _),
        (
            "v",
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("{tag}{i}")),
            )) as _,
        ),
    ])
    .unwrap()
}

async fn sorted_rows(t: &Table) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for b in scan_rows(t, floe::scan::SnapshotSelector::default()).await {
        let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let v = b.column_by_name("v").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            out.push((id.value(i), v.value(i).to_string()));
        }
    }
    out.sort();
    out
}

/// Random operations on a merging and a non-merging twin, checked after every commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_manifests_keep_every_entry_and_stay_few() {
    let (dir, cat) = fs_catalog();
    let mut checks = Vec::new();
    for (fv, mode, seed) in [
        (FormatVersion::V3, "merge-on-read", 3u64),
        (FormatVersion::V2, "merge-on-read", 5),
        (FormatVersion::V2, "copy-on-write", 9),
    ] {
        let mut tables: Vec<Table> = Vec::new();
        for merge in [true, false] {
            let name = format!("mm.t{}_{}_{}", fv as u8, &mode[..4], merge);
            let schema = parse_schema("id long, v string").unwrap();
            let spec = parse_partition_spec("bucket(2, id)", &schema).unwrap();
            let c = TableCreation::new(schema)
                .with_partition_spec(spec)
                .with_format_version(fv)
                .with_property("write.delete.mode", mode)
                .with_property("write.update.mode", mode)
                .with_property("write.merge.mode", mode)
                .with_property("commit.manifest.min-count-to-merge", "4")
                .with_property("commit.manifest-merge.enabled", merge.to_string());
            tables.push(
                cat.create_table(&parse_ident(&name).unwrap(), c)
                    .await
                    .unwrap(),
            );
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut rnd = |n: u64| rng.gen_range(0..n);
        for op in 0..28 {
            let kind = if op < 6 { 0 } else { rnd(4) };
            let ids: Vec<i64> = (0..(1 + rnd(40))).map(|_| rnd(400) as i64).collect();
            let (k, r) = (2 + rnd(9), rnd(3));
            let before = entries(&tables[0]).await;
            for t in tables.iter_mut() {
                let name = t.name();
                *t = match kind {
                    0 => {
                        floe::txn::append(&cat, t, [Ok(rows(&ids, &format!("a{op}-")))])
                            .await
                            .unwrap()
                            .table
                    }
                    1 => {
                        let sql = format!("DELETE FROM {name} WHERE id % {k} = {r}");
                        floe::dml::execute(&cat, &sql, None).await.unwrap().table
                    }
                    2 => {
                        let sql = format!("UPDATE {name} SET v = 'u{op}' WHERE id % {k} = {r}");
                        floe::dml::execute(&cat, &sql, None).await.unwrap().table
                    }
                    _ => {
                        let mut uniq = ids.clone();
                        uniq.sort_unstable();
                        uniq.dedup();
                        let sql = format!(
                            "MERGE INTO {name} t USING source s ON t.id = s.id \
                             WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                        );
                        let src = vec![rows(&uniq, &format!("m{op}-"))];
                        floe::dml::execute(&cat, &sql, Some(src))
                            .await
                            .unwrap()
                            .table
                    }
                };
            }
            assert_eq!(
                sorted_rows(&tables[0]).await,
                sorted_rows(&tables[1]).await,
                "{fv:?} {mode} op {op} (kind {kind})"
            );
            // Entries: carried ones unchanged, new ones ADDED by the new snapshot, removed
            // ones DELETED by it.
            let t = &tables[0];
            let Some(snap) = t.current_snapshot() else {
                continue;
            };
            let (sid, seq) = (snap.snapshot_id(), snap.sequence_number());
            let after = entries(t).await;
            let live = |m: &HashMap<String, Vec<Entry>>, p: &str| {
                m.get(p)
                    .and_then(|es| es.iter().find(|e| e.0 != 2).copied())
            };
            for (p, es) in &after {
                let Some(now) = live(&after, p) else { continue };
                match live(&before, p) {
                    Some(was) => assert_eq!(
                        (was.1, was.2, was.3),
                        (now.1, now.2, now.3),
                        "{fv:?} {mode} op {op}: {p} changed ({es:?})"
                    ),
                    None => assert_eq!(now, (1, Some(sid), Some(seq), Some(seq)), "{p}"),
                }
            }
            for p in before.keys().filter(|p| live(&before, p).is_some()) {
                if live(&after, p).is_none() {
                    assert!(
                        after[p].iter().any(|e| e.0 == 2 && e.1 == Some(sid)),
                        "{fv:?} {mode} op {op}: {p} removed without a DELETED entry: {:?}",
                        after.get(p)
                    );
                }
            }
            let counts = manifest_counts(t).await;
            for (group, n) in &counts {
                // At most min-count - 1 unmerged manifests, the merged one, this commit's own.
                assert!(*n <= 5, "{fv:?} {mode} op {op}: {n} manifests in {group:?}");
            }
        }
        let plain: usize = manifest_counts(&tables[1]).await.values().sum();
        let merged: usize = manifest_counts(&tables[0]).await.values().sum();
        assert!(
            merged <= plain,
            "{fv:?} {mode}: {plain} vs {merged} manifests"
        );
        if mode == "merge-on-read" {
            // Delete manifests pile up without merging.
            assert!(
                plain > merged + 5,
                "{fv:?} {mode}: {plain} vs {merged} manifests"
            );
        }
        let expected = dir.path().join(format!("mm-{}-{mode}.parquet", fv as u8));
        floe_expected(&tables[0], None, &expected).await;
        checks.push(Check {
            name: format!("merged-manifests-v{}-{mode}", fv as u8),
            metadata: tables[0].metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().into_owned(),
            engines: None,
            refuse: None,
        });
        // The new manifests merged away are gone; every manifest file on disk is listed by
        // some snapshot (the producer leaves none behind).
        let listed = listed_manifests(&cat, &tables[0]).await;
        let meta = dir
            .path()
            .join(format!("mm/t{}_{}_true/metadata", fv as u8, &mode[..4]));
        for e in std::fs::read_dir(&meta).unwrap() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            if n.ends_with(".avro") && !n.starts_with("snap-") {
                assert!(listed.contains(&n), "{n} is listed by no snapshot");
            }
        }
    }
    let Some(py) = peers_python() else { return };
    peer_check(&py, dir.path(), &checks);
}

/// The manifest file names every snapshot of `t` lists.
async fn listed_manifests(_cat: &Catalog, t: &Table) -> std::collections::HashSet<String> {
    let b = read_metadata_table(t, MetadataTable::AllManifests, None)
        .await
        .unwrap();
    let path = b.column_by_name("path").unwrap().as_string::<i32>();
    (0..b.num_rows())
        .map(|i| path.value(i).rsplit('/').next().unwrap().to_string())
        .collect()
}
