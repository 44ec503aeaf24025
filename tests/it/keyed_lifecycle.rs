//! Keyed tables over their lifetime: tombstones survive compaction, snapshot expiry, orphan
//! removal, clones, a purge of the clone's source and other engines' commits; they go only by
//! `expire-tombstones`; a lost tombstone file is an error, never an empty set; a sink killed
//! mid-batch retries with the same checkpoint.

use std::collections::HashMap;
use std::path::Path;

use crate::common::*;

const DDL: &str = "user_id long not null, plan string, ver long, is_deleted int";

fn create(wh: &Path, name: &str, extra: &[&str]) {
    let mut args = vec![
        "create",
        name,
        "--schema",
        DDL,
        "--primary-key",
        "user_id",
        "--property",
        "floe.merge-engine=replace",
        "--property",
        "floe.merge.version-column=ver",
        "--property",
        "floe.merge.delete-column=is_deleted",
        "--property",
        "write.merge.mode=merge-on-read",
    ];
    args.extend_from_slice(extra);
    ok(wh, &args);
}

/// A CSV batch of `(user_id, plan, ver, is_deleted)` rows.
fn batch(
    dir: &Path,
    name: &str,
    rows: impl IntoIterator<Item = (i64, String, i64, i32)>,
) -> String {
    let mut s = String::from("user_id,plan,ver,is_deleted\n");
    for (k, p, v, d) in rows {
        s.push_str(&format!("{k},{p},{v},{d}\n"));
    }
    let path = dir.join(name);
    std::fs::write(&path, s).unwrap();
    path.to_string_lossy().into_owned()
}

fn json(wh: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(wh, &a)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Rows of `floe scan --format json` (JSON lines).
fn scan_json(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The live rows as (user_id, plan, ver), sorted.
fn live(wh: &Path, name: &str) -> Vec<(i64, String, i64)> {
    let mut out: Vec<(i64, String, i64)> = scan_json(&ok(wh, &["scan", name, "--format", "json"]))
        .iter()
        .map(|r| {
            (
                r["user_id"].as_i64().unwrap(),
                r["plan"].as_str().unwrap_or_default().to_string(),
                r["ver"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn tombstone_count(wh: &Path, name: &str) -> u64 {
    json(wh, &["tombstones", name])["tombstones_count"]
        .as_u64()
        .unwrap()
}

fn current_snapshot(wh: &Path, name: &str) -> Option<i64> {
    json(wh, &["describe", name])["current_snapshot_id"].as_i64()
}

#[test]
fn tombstones_outlive_compaction_expiry_orphan_removal_clone_and_purge() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    create(&wh, "db.users", &["--format-version", "3"]);
    let b1 = batch(
        d.path(),
        "b1.csv",
        (1..=100).map(|k| (k, "free".into(), 1, 0)),
    );
    let b2 = batch(
        d.path(),
        "b2.csv",
        (1..=10).map(|k| (k, String::new(), 5, 1)),
    );
    let replay = batch(
        d.path(),
        "replay.csv",
        (1..=10).map(|k| (k, "old".into(), 3, 0)),
    );
    ok(&wh, &["upsert", "db.users", &b1]);
    ok(&wh, &["upsert", "db.users", &b2]);
    assert_eq!(tombstone_count(&wh, "db.users"), 10);
    assert_eq!(live(&wh, "db.users").len(), 90);

    // Compaction, expiry and orphan removal leave the tombstones alone.
    ok(&wh, &["rewrite-data-files", "db.users"]);
    ok(&wh, &["expire-snapshots", "db.users", "--retain-last", "1"]);
    let future = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    ok(
        &wh,
        &["remove-orphan-files", "db.users", "--older-than", &future],
    );
    assert_eq!(tombstone_count(&wh, "db.users"), 10);
    let r = json(&wh, &["upsert", "db.users", &replay]);
    assert_eq!(r["stale_records_count"], 10, "{r}");
    let rows = live(&wh, "db.users");
    assert_eq!(rows.len(), 90);
    assert!(
        rows.iter().all(|(k, p, _)| *k > 10 && p == "free"),
        "{rows:?}"
    );

    // A clone carries the tombstones; its changes are its own.
    ok(&wh, &["clone", "db.users", "db.copy"]);
    assert_eq!(tombstone_count(&wh, "db.copy"), 10);
    assert_eq!(
        json(&wh, &["upsert", "db.copy", &replay])["stale_records_count"],
        10
    );
    let back = batch(d.path(), "back.csv", [(3, "back".to_string(), 6, 0)]);
    let r = json(&wh, &["upsert", "db.copy", &back]);
    assert_eq!(r["inserted_records_count"], 1, "{r}");
    assert_eq!(live(&wh, "db.copy").len(), 91);
    assert_eq!(live(&wh, "db.users").len(), 90);
    assert_eq!(tombstone_count(&wh, "db.copy"), 9);
    assert_eq!(tombstone_count(&wh, "db.users"), 10);

    // Purging the source keeps the files the clone still lists.
    ok(&wh, &["drop", "db.users", "--purge"]);
    assert_eq!(tombstone_count(&wh, "db.copy"), 9);
    // Key 3 is live again at version 6, so its replay is ignored too.
    assert_eq!(
        json(&wh, &["upsert", "db.copy", &replay])["stale_records_count"],
        10
    );

    // Only expire-tombstones removes them, and says what that means.
    let past = "2000-01-01T00:00:00Z";
    let dry = json(
        &wh,
        &[
            "expire-tombstones",
            "db.copy",
            "--older-than",
            &future,
            "--dry-run",
        ],
    );
    assert_eq!(
        (
            dry["expired_tombstones_count"].as_u64(),
            dry["dry_run"].as_bool()
        ),
        (Some(9), Some(true)),
        "{dry}"
    );
    let none = json(&wh, &["expire-tombstones", "db.copy", "--older-than", past]);
    assert_eq!(none["expired_tombstones_count"], 0, "{none}");
    let o = floe(
        &wh,
        &["expire-tombstones", "db.copy", "--older-than", &future],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bring them back"),
        "{}",
        text(&o)
    );
    assert_eq!(tombstone_count(&wh, "db.copy"), 0);
    // Now a replay of an older version brings the keys back, as the warning said.
    let r = json(&wh, &["upsert", "db.copy", &replay]);
    assert_eq!(r["inserted_records_count"], 9, "{r}");
    assert_eq!(live(&wh, "db.copy").len(), 100);
}

#[test]
fn a_lost_tombstone_file_is_an_error_and_nothing_is_committed() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    create(&wh, "db.users", &["--format-version", "2"]);
    ok(
        &wh,
        &[
            "upsert",
            "db.users",
            &batch(
                d.path(),
                "a.csv",
                [(1, "a".into(), 1, 0), (2, "b".into(), 1, 0)],
            ),
        ],
    );
    ok(
        &wh,
        &[
            "upsert",
            "db.users",
            &batch(d.path(), "b.csv", [(1, String::new(), 2, 1)]),
        ],
    );
    let files: Vec<_> = files_under(&wh)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("tombstones-"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::remove_file(&files[0]).unwrap();
    let before = current_snapshot(&wh, "db.users");
    let o = floe(
        &wh,
        &[
            "upsert",
            "db.users",
            &batch(d.path(), "c.csv", [(1, "old".into(), 1, 0)]),
        ],
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tombstone file") && err.contains("db.users") && err.contains("restore"),
        "{err}"
    );
    assert_eq!(current_snapshot(&wh, "db.users"), before);
    let o = floe(&wh, &["tombstones", "db.users"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_sink_killed_mid_batch_retries_with_the_same_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let n = 200_000i64;
    let first = batch(
        d.path(),
        "first.csv",
        (0..n).map(|k| (k, "free".into(), 1, 0)),
    );
    let at_checkpoint_1 = || {
        create(&wh, "db.users", &["--format-version", "3"]);
        let args = [
            "upsert",
            "db.users",
            &first,
            "--sink-id",
            "s",
            "--checkpoint",
            "1",
        ];
        ok(&wh, &args);
    };
    at_checkpoint_1();
    // Batch 2: every even key upgraded, every key divisible by 7 deleted.
    let second = batch(
        d.path(),
        "second.csv",
        (0..n).filter(|k| k % 2 == 0 || k % 7 == 0).map(|k| {
            if k % 7 == 0 {
                (k, String::new(), 2, 1)
            } else {
                (k, "pro".into(), 2, 0)
            }
        }),
    );
    for delay_ms in [30u64, 150, 400] {
        let mut child = floe_cmd()
            .args(["--warehouse", wh.to_str().unwrap()])
            .args([
                "upsert",
                "db.users",
                &second,
                "--sink-id",
                "s",
                "--checkpoint",
                "2",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        // Whatever the kill left, the table is at checkpoint 1 or 2, never between.
        let rows = live(&wh, "db.users");
        let at2 = rows.len() as i64 == n - (0..n).filter(|k| k % 7 == 0).count() as i64;
        assert!(
            rows.len() as i64 == n || at2,
            "{delay_ms} ms: {} rows",
            rows.len()
        );
        let r = json(
            &wh,
            &[
                "upsert",
                "db.users",
                &second,
                "--sink-id",
                "s",
                "--checkpoint",
                "2",
            ],
        );
        assert_eq!(r["committed_checkpoint"], 2, "{r}");
        assert_eq!(r["already_committed"].as_bool(), Some(at2), "{r}");
        let rows = live(&wh, "db.users");
        let expected: Vec<(i64, String, i64)> = (0..n)
            .filter(|k| k % 7 != 0)
            .map(|k| {
                if k % 2 == 0 {
                    (k, "pro".into(), 2)
                } else {
                    (k, "free".into(), 1)
                }
            })
            .collect();
        assert_eq!(rows, expected, "{delay_ms} ms");
        // Start the next round from checkpoint 1's state again, on a fresh table.
        ok(&wh, &["drop", "db.users", "--purge"]);
        at_checkpoint_1();
    }
}

#[test]
fn spark_writing_compacting_and_computing_stats_keeps_the_tombstones() {
    let Some(py) = peers_python() else { return };
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let cat = format!("file://{}", wh.display());
    let with_cat = |args: &[&str]| {
        let mut a = vec!["--catalog", cat.as_str()];
        a.extend_from_slice(args);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: &[&str]| {
        let a = with_cat(args);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        ok(&wh, &a)
    };
    let mut args = vec![
        "create",
        "db.users",
        "--schema",
        DDL,
        "--primary-key",
        "user_id",
        "--format-version",
        "2",
        "--property",
        "floe.merge.version-column=ver",
        "--property",
        "floe.merge.delete-column=is_deleted",
        "--property",
        "write.merge.mode=merge-on-read",
    ];
    let a = with_cat(&args);
    args.clear();
    ok(&wh, &a.iter().map(String::as_str).collect::<Vec<_>>());
    run(&[
        "upsert",
        "db.users",
        &batch(
            d.path(),
            "a.csv",
            (1..=20).map(|k| (k, "free".into(), 1, 0)),
        ),
    ]);
    run(&[
        "upsert",
        "db.users",
        &batch(d.path(), "b.csv", (1..=5).map(|k| (k, String::new(), 9, 1))),
    ]);
    // Spark appends a row, compacts the table and computes its statistics.
    spark_write(
        &py,
        &wh,
        "db.users",
        "(100, 'spark', 1, 0)",
        &[
            "CALL local.system.rewrite_data_files(table => 'db.users', options => map('rewrite-all', 'true'))",
            "CALL local.system.compute_table_stats(table => 'db.users')",
        ],
    );
    let t: serde_json::Value =
        serde_json::from_str(&run(&["tombstones", "db.users", "--json"])).unwrap();
    assert_eq!(t["tombstones_count"], 5, "{t}");
    let r: serde_json::Value = serde_json::from_str(&run(&[
        "upsert",
        "db.users",
        &batch(
            d.path(),
            "c.csv",
            (1..=5).map(|k| (k, "replayed".into(), 2, 0)),
        ),
        "--json",
    ]))
    .unwrap();
    assert_eq!(r["stale_records_count"], 5, "{r}");
    let rows = scan_json(&run(&["scan", "db.users", "--format", "json"]));
    assert_eq!(rows.len(), 16, "{rows:?}");
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The ReplacingMergeTree rule applied change by change, in arrival order: a change
/// replaces its key's stored state (row or tombstone) when its version is at least the
/// stored one. Live rows are the stored states that are not deletes.
#[derive(Default)]
struct Model(std::collections::BTreeMap<i64, (i64, bool, String)>);

impl Model {
    fn apply(&mut self, changes: &[(i64, String, i64, i32)]) {
        for (k, plan, ver, del) in changes {
            let wins = self.0.get(k).is_none_or(|(v, _, _)| ver >= v);
            if wins {
                self.0.insert(*k, (*ver, *del == 1, plan.clone()));
            }
        }
    }
    fn live(&self) -> Vec<(i64, String, i64)> {
        self.0
            .iter()
            .filter(|(_, (_, d, _))| !d)
            .map(|(k, (v, _, p))| (*k, p.clone(), *v))
            .collect()
    }
}

fn change_batch(changes: &[(i64, String, i64, i32)]) -> arrow_array::RecordBatch {
    use std::sync::Arc;
    arrow_array::RecordBatch::try_from_iter([
        (
            "user_id",
            Arc::new(arrow_array::Int64Array::from_iter_values(
                changes.iter().map(|c| c.0),
            )) as _,
        ),
        (
            "plan",
            Arc::new(arrow_array::StringArray::from_iter_values(
                changes.iter().map(|c| c.1.clone()),
            )) as _,
        ),
        (
            "ver",
            Arc::new(arrow_array::Int64Array::from_iter_values(
                changes.iter().map(|c| c.2),
            )) as _,
        ),
        (
            "is_deleted",
            Arc::new(arrow_array::Int32Array::from_iter_values(
                changes.iter().map(|c| c.3),
            )) as _,
        ),
    ])
    .unwrap()
}

async fn live_rows(cat: &floe::Catalog, name: &str) -> Vec<(i64, String, i64)> {
    use arrow_array::cast::AsArray;
    let t = cat
        .load_table(&floe::table::parse_ident(name).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in floe::scan::Scan::new(&t).to_batches().await.unwrap() {
        let k = b.column(0).as_primitive::<arrow_array::types::Int64Type>();
        let p = b.column(1).as_string::<i32>();
        let v = b.column(2).as_primitive::<arrow_array::types::Int64Type>();
        for r in 0..b.num_rows() {
            out.push((k.value(r), p.value(r).to_string(), v.value(r)));
        }
    }
    out.sort();
    out
}

/// Random batches (updates, inserts, deletes, late replays of older versions, equal-version
/// ties, keys repeated inside a batch) applied through a long-lived [`floe::keyed::KeyedWriter`]
/// (its key index) and through one-shot upserts (a read of the stored keys per batch), in
/// v3 and v2, merge-on-read and copy-on-write, with another writer committing in between:
/// after every batch each table holds exactly the model's live rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_index_and_one_shot_upserts_agree_with_the_model_on_random_batches() {
    let d = tempfile::tempdir().unwrap();
    let cat = floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap();
    let tables = [
        ("db.idx3", "3", "merge-on-read", true),
        ("db.scan3", "3", "merge-on-read", false),
        ("db.idx2", "2", "merge-on-read", true),
        ("db.cow3", "3", "copy-on-write", true),
    ];
    let mut writers = Vec::new();
    for (name, fv, mode, _) in tables {
        let schema = floe::spec::parse_schema(DDL).unwrap();
        let c = floe::TableCreation::new(schema)
            .with_primary_key(&["user_id".to_string()])
            .with_format_version(if fv == "3" {
                floe::spec::FormatVersion::V3
            } else {
                floe::spec::FormatVersion::V2
            })
            .with_property("floe.merge.version-column", "ver")
            .with_property("floe.merge.delete-column", "is_deleted")
            .with_property("write.merge.mode", mode);
        let ident = floe::table::parse_ident(name).unwrap();
        cat.create_table(&ident, c).await.unwrap();
        writers.push(floe::keyed::KeyedWriter::new(&cat, ident));
    }
    let mut model = Model::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next_version = 10i64;
    let keys = 300u64;
    let opts = floe::keyed::UpsertOptions::default();
    let mut compacted: std::collections::HashSet<&str> = Default::default();
    let (mut caught_up, mut refreshed) = (0usize, 0usize);
    for batch_no in 0..25 {
        let mut changes = Vec::new();
        for _ in 0..120 {
            let k = rng.below(keys) as i64;
            let kind = rng.below(100);
            let ver = if kind < 8 {
                // A late replay of an older version (maybe older than a delete).
                next_version - 1 - rng.below(20) as i64
            } else if kind < 14 {
                next_version // ties with other changes of this batch
            } else {
                next_version += 1;
                next_version
            };
            let del = (rng.below(100) < 12) as i32;
            changes.push((k, format!("p{}", rng.below(1000)), ver, del));
        }
        model.apply(&changes);
        let b = change_batch(&changes);
        for ((name, _, _, keyed_writer), w) in tables.iter().zip(&writers) {
            let r = if *keyed_writer {
                w.apply([b.clone()], None).await
            } else {
                let ident = floe::table::parse_ident(name).unwrap();
                let cb = floe::keyed::ChangeBatch::from_batches([b.clone()]);
                floe::keyed::upsert(&cat, &ident, &cb, &opts).await
            };
            let r = r.unwrap_or_else(|e| panic!("{name} batch {batch_no}: {e}"));
            let expected_lookup = match (*keyed_writer, *name) {
                (false, _) => "scan",
                // Copy-on-write moves rows: its index is rebuilt after a commit that
                // rewrote files.
                (true, "db.cow3") if batch_no > 0 => r.lookup,
                // The first batch, and the one after another writer committed, rebuild.
                (true, _) if batch_no == 0 || batch_no % 5 == 3 => "index-built",
                // After a compaction alone, the index follows the moved rows.
                (true, _) if compacted.contains(name) => "index-caught-up",
                (true, _) => "index",
            };
            assert_eq!(r.lookup, expected_lookup, "{name} batch {batch_no}");
            caught_up += usize::from(r.lookup == "index-caught-up");
        }
        // Every fourth batch the tables are compacted (all data files, or those with
        // deletes, or the position deletes) behind the writers' backs: rows move, none change.
        compacted.clear();
        if batch_no % 4 == 1 {
            let all: HashMap<String, String> =
                [("rewrite-all".to_string(), "true".to_string())].into();
            for (name, _, _, _) in tables {
                let t = cat
                    .load_table(&floe::table::parse_ident(name).unwrap())
                    .await
                    .unwrap();
                let with_deletes: HashMap<String, String> = [
                    ("delete-file-threshold".to_string(), "1".to_string()),
                    ("min-input-files".to_string(), "1".to_string()),
                ]
                .into();
                let before = t.current_snapshot().map(|s| s.snapshot_id());
                let after = match batch_no % 12 {
                    1 => {
                        floe::maintenance::rewrite_data_files(&cat, &t, None, &all, None)
                            .await
                            .unwrap()
                            .table
                    }
                    5 => {
                        floe::maintenance::rewrite_data_files(&cat, &t, None, &with_deletes, None)
                            .await
                            .unwrap()
                            .table
                    }
                    _ => {
                        floe::maintenance::rewrite_position_delete_files(&cat, &t, &all)
                            .await
                            .unwrap()
                            .table
                    }
                };
                let after = after.and_then(|t| t.current_snapshot().map(|s| s.snapshot_id()));
                if after.is_some() && after != before {
                    compacted.insert(name);
                }
            }
            // db.idx2's writer follows the compaction between batches (as `floe sink
            // --maintain` does), so its next batch finds the index current.
            let r = writers[2].refresh().await.unwrap();
            let want = if compacted.remove("db.idx2") {
                refreshed += 1;
                floe::keyed::Refreshed::CaughtUp
            } else {
                floe::keyed::Refreshed::Current
            };
            assert_eq!(r, want, "batch {batch_no}");
        }
        // Every fifth batch another writer changes db.idx3 and db.idx2 behind the writers'
        // backs: their indexes must notice and rebuild.
        if batch_no % 5 == 2 {
            next_version += 1;
            let other: Vec<_> = (0..20)
                .map(|i| {
                    (
                        i * 7,
                        "other".to_string(),
                        next_version,
                        (i % 3 == 0) as i32,
                    )
                })
                .collect();
            model.apply(&other);
            let b = change_batch(&other);
            for name in ["db.idx3", "db.scan3", "db.idx2", "db.cow3"] {
                let ident = floe::table::parse_ident(name).unwrap();
                floe::keyed::upsert(
                    &cat,
                    &ident,
                    &floe::keyed::ChangeBatch::from_batches([b.clone()]),
                    &opts,
                )
                .await
                .unwrap();
            }
            // More than rows moved: a refresh drops the index (the next batch builds it).
            let r = writers[2].refresh().await.unwrap();
            assert_eq!(r, floe::keyed::Refreshed::Dropped, "batch {batch_no}");
        }
        let expected = model.live();
        for (name, _, _, _) in tables {
            assert_eq!(
                live_rows(&cat, name).await,
                expected,
                "{name} after batch {batch_no}"
            );
        }
    }
    // The writers followed compactions without rebuilding (three tables, several times).
    assert!(caught_up >= 4, "{caught_up} batches followed a compaction");
    assert!(
        refreshed >= 2,
        "{refreshed} refreshes followed a compaction"
    );
}

/// A long-lived [`floe::keyed::KeyedWriter`] committing back to back with `maintain` looping
/// beside it, whose compactions land in the middle of its batches: a batch whose commit lost to a compaction plans again from its key
/// index caught up to the moved rows, never from an index built again; the rows equal the
/// model's throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_index_survives_compactions_that_win_its_commits() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let d = tempfile::tempdir().unwrap();
    let cat = Arc::new(floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap());
    let schema = floe::spec::parse_schema(DDL).unwrap();
    let c = floe::TableCreation::new(schema)
        .with_primary_key(&["user_id".to_string()])
        .with_property("floe.merge.version-column", "ver")
        .with_property("floe.merge.delete-column", "is_deleted")
        .with_property("write.merge.mode", "merge-on-read")
        .with_property("floe.maintain.rewrite-data-files.min-input-files", "2");
    let ident = floe::table::parse_ident("db.raced").unwrap();
    cat.create_table(&ident, c).await.unwrap();
    let w = floe::keyed::KeyedWriter::new(&cat, ident.clone());
    let stop = Arc::new(AtomicBool::new(false));
    // `maintain` compacts from 2 files; when it loses a carried round it asks the writer to
    // hold, so its compactions land in the middle of the writer's batches.
    let compactor = {
        let (cat, ident, stop) = (cat.clone(), ident.clone(), stop.clone());
        tokio::spawn(async move {
            let mut landed = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = cat.load_table(&ident).await.unwrap();
                let o = floe::maintenance::MaintainOptions::default();
                let r = floe::maintenance::maintain(&cat, &t, &o).await.unwrap();
                assert_eq!(r.failed_steps, 0, "{r:?}");
                landed += usize::from(r.steps[0].action == "done");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            landed
        })
    };
    let mut model = Model::default();
    let mut rng = Rng(0x51_7e_2a);
    let (mut ver, mut retried, mut caught_up) = (0i64, 0, 0);
    for batch_no in 0..120 {
        let changes: Vec<_> = (0..40)
            .map(|_| {
                ver += 1;
                let k = rng.below(400) as i64;
                (k, format!("p{batch_no}"), ver, (rng.below(10) == 0) as i32)
            })
            .collect();
        model.apply(&changes);
        let r = w
            .apply([change_batch(&changes)], None)
            .await
            .unwrap_or_else(|e| panic!("batch {batch_no}: {e}"));
        if batch_no > 0 {
            assert_ne!(
                r.lookup, "index-built",
                "batch {batch_no} (attempts {})",
                r.attempts
            );
        }
        retried += usize::from(r.attempts > 1);
        caught_up += usize::from(r.lookup == "index-caught-up");
    }
    stop.store(true, Ordering::Relaxed);
    let landed = compactor.await.unwrap();
    assert_eq!(live_rows(&cat, "db.raced").await, model.live());
    assert!(
        landed >= 3 && caught_up >= 3 && retried >= 2,
        "{landed} compactions, {caught_up} batches caught up, {retried} retried"
    );
}

/// The keyed API's futures can be spawned on a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_futures_can_be_spawned() {
    let d = tempfile::tempdir().unwrap();
    let cat = floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap();
    let schema = floe::spec::parse_schema(DDL).unwrap();
    let c = floe::TableCreation::new(schema)
        .with_primary_key(&["user_id".to_string()])
        .with_property("floe.merge.version-column", "ver");
    let ident = floe::table::parse_ident("db.t").unwrap();
    cat.create_table(&ident, c).await.unwrap();
    let rows = change_batch(&[(1, "a".into(), 1, 0)]);
    let (c2, i2, r2) = (cat.clone(), ident.clone(), rows.clone());
    let one_shot = tokio::spawn(async move {
        let b = floe::keyed::ChangeBatch::from_batches([r2]);
        floe::keyed::upsert(&c2, &i2, &b, &floe::keyed::UpsertOptions::default()).await
    });
    assert!(one_shot.await.unwrap().is_ok());
    let w = floe::keyed::KeyedWriter::new(&cat, ident.clone());
    let writer = tokio::spawn(async move { w.apply([rows], None).await });
    assert!(writer.await.unwrap().is_ok());
    let c3 = cat.clone();
    let expire = tokio::spawn(async move {
        let i = floe::table::parse_ident("db.t").unwrap();
        floe::keyed::expire_tombstones(&c3, &i, 0, true).await
    });
    assert!(expire.await.unwrap().is_ok());
    let c4 = cat.clone();
    let sql = tokio::spawn(async move {
        floe::dml::execute(&c4, "DELETE FROM db.t WHERE user_id = 1", None).await
    });
    assert_eq!(sql.await.unwrap().unwrap().removed_rows, 1);
}

/// A row another engine appended for a tombstoned key (floe itself never leaves a key both
/// live and tombstoned): a key index built afterwards still weighs the tombstone, so a change
/// between the row's version and the tombstone's is ignored, and one above both replaces
/// the row and clears the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_index_weighs_tombstones_of_keys_another_engine_wrote() {
    let d = tempfile::tempdir().unwrap();
    let cat = floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap();
    let schema = floe::spec::parse_schema(DDL).unwrap();
    let c = floe::TableCreation::new(schema)
        .with_primary_key(&["user_id".to_string()])
        .with_format_version(floe::spec::FormatVersion::V3)
        .with_property("write.merge.mode", "merge-on-read")
        .with_property("floe.merge.version-column", "ver")
        .with_property("floe.merge.delete-column", "is_deleted");
    let ident = floe::table::parse_ident("db.t").unwrap();
    cat.create_table(&ident, c).await.unwrap();
    let w = floe::keyed::KeyedWriter::new(&cat, ident.clone());
    let up = |k: i64, p: &str, v: i64| (k, p.to_string(), v, 0);
    w.apply([change_batch(&[up(1, "a", 1), up(2, "a", 1)])], None)
        .await
        .unwrap();
    // Key 1 deleted at version 5: its tombstone.
    let r = w
        .apply([change_batch(&[(1, String::new(), 5, 1)])], None)
        .await
        .unwrap();
    assert_eq!(r.deleted, 1, "{r:?}");
    // Another engine appends a row for key 1 at version 2 (below the tombstone).
    let t = cat.load_table(&ident).await.unwrap();
    floe::txn::append(&cat, &t, vec![Ok(change_batch(&[up(1, "foreign", 2)]))])
        .await
        .unwrap();
    let foreign = vec![(1, "foreign".to_string(), 2), (2, "a".to_string(), 1)];
    assert_eq!(live_rows(&cat, "db.t").await, foreign);
    // Version 3 is above the row but below the tombstone: ignored, by the index (rebuilt
    // after the foreign commit) as by a one-shot upsert.
    let r = w
        .apply([change_batch(&[up(1, "b", 3), up(2, "b", 3)])], None)
        .await
        .unwrap();
    assert_eq!((r.ignored, r.updated), (1, 1), "{r:?}");
    let after = vec![(1, "foreign".to_string(), 2), (2, "b".to_string(), 3)];
    assert_eq!(live_rows(&cat, "db.t").await, after);
    // The index now follows floe's own batches: still ignored.
    let r = w
        .apply([change_batch(&[up(1, "c", 4)])], None)
        .await
        .unwrap();
    assert_eq!(r.ignored, 1, "{r:?}");
    assert_eq!(live_rows(&cat, "db.t").await, after);
    // Version 6 is above both: it replaces the row and clears the tombstone, so a later
    // version 5 is ignored only because the row's version is higher.
    let r = w
        .apply([change_batch(&[up(1, "d", 6)])], None)
        .await
        .unwrap();
    assert_eq!(r.updated, 1, "{r:?}");
    let r = w
        .apply([change_batch(&[up(1, "e", 5)])], None)
        .await
        .unwrap();
    assert_eq!(r.ignored, 1, "{r:?}");
    assert_eq!(
        live_rows(&cat, "db.t").await,
        vec![(1, "d".to_string(), 6), (2, "b".to_string(), 3)]
    );
    let t = cat.load_table(&ident).await.unwrap();
    let stones = floe::keyed::tombstones(&t, false).await.unwrap();
    assert_eq!(stones.count, 0, "{stones:?}");
}

/// A batch past its row limit is spilled by key and applied in parts, one commit each, the
/// checkpoint with the last: on random batches (updates, deletes, late replays, ties, keys
/// repeated across the input's pieces) the table equals the model and a table that took the
/// same changes in one commit; applying it again changes nothing (what makes re-sending a
/// batch whose later part failed safe); bad input late in the batch commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spilled_upsert_applies_in_parts_like_one_commit() {
    let d = tempfile::tempdir().unwrap();
    let cat = floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap();
    for (name, fv) in [("db.split3", "3"), ("db.split2", "2"), ("db.whole", "3")] {
        let c = floe::TableCreation::new(floe::spec::parse_schema(DDL).unwrap())
            .with_primary_key(&["user_id".to_string()])
            .with_format_version(if fv == "3" {
                floe::spec::FormatVersion::V3
            } else {
                floe::spec::FormatVersion::V2
            })
            .with_property("floe.merge.version-column", "ver")
            .with_property("floe.merge.delete-column", "is_deleted");
        cat.create_table(&floe::table::parse_ident(name).unwrap(), c)
            .await
            .unwrap();
    }
    let spill = d.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut model = Model::default();
    let mut rng = Rng(0x05b1_17ed);
    let mut ver = 100i64;
    for round in 0..4u64 {
        let n = 900 + rng.below(900) as usize;
        let changes: Vec<_> = (0..n)
            .map(|_| {
                let kind = rng.below(100);
                let v = if kind < 10 {
                    ver - 1 - rng.below(30) as i64 // a late replay
                } else if kind < 15 {
                    ver // a tie
                } else {
                    ver += 1;
                    ver
                };
                let k = rng.below(700) as i64;
                (
                    k,
                    format!("r{round}-{}", rng.below(50)),
                    v,
                    (rng.below(8) == 0) as i32,
                )
            })
            .collect();
        model.apply(&changes);
        let limit = 150 + rng.below(250) as usize;
        for name in ["db.split3", "db.split2"] {
            let ident = floe::table::parse_ident(name).unwrap();
            let t = cat.load_table(&ident).await.unwrap();
            let opts = floe::keyed::UpsertOptions::default().with_checkpoint("s", round as i64);
            let mut b = floe::keyed::SpillingBatch::new(&t, &opts, limit, &spill).unwrap();
            // Pieces of random sizes, some from the same source (numbered on).
            let mut at = 0;
            while at < n {
                let len = (1 + rng.below(200) as usize).min(n - at);
                let source = format!("f{}", rng.below(3));
                b.push(source, change_batch(&changes[at..at + len]))
                    .unwrap();
                at += len;
            }
            assert!(b.spilled(), "{n} changes past {limit}");
            let r = floe::keyed::upsert_spilled(&cat, &ident, b).await.unwrap();
            assert_eq!(r.input_rows, n as u64, "{name} round {round}");
            assert!(r.parts > 1, "{name} round {round}: {} parts", r.parts);
            assert_eq!(r.committed_checkpoint, Some(round as i64));
            assert_eq!(
                live_rows(&cat, name).await,
                model.live(),
                "{name} round {round}"
            );
            // Sent again with its checkpoint: nothing is done.
            let mut again =
                floe::keyed::SpillingBatch::new(&r.table, &opts, limit, &spill).unwrap();
            again.push("f0", change_batch(&changes)).unwrap();
            let r2 = floe::keyed::upsert_spilled(&cat, &ident, again)
                .await
                .unwrap();
            assert!(r2.already_committed && r2.snapshot_id.is_none());
        }
        // The same changes in one commit.
        let ident = floe::table::parse_ident("db.whole").unwrap();
        let whole = floe::keyed::ChangeBatch::from_batches([change_batch(&changes)]);
        let opts = floe::keyed::UpsertOptions::default();
        let r = floe::keyed::upsert(&cat, &ident, &whole, &opts)
            .await
            .unwrap();
        assert_eq!(r.parts, 1);
        assert_eq!(live_rows(&cat, "db.whole").await, model.live());
    }
    // Applied twice (no checkpoint): the second application leaves the same rows.
    let ident = floe::table::parse_ident("db.split3").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let last: Vec<_> = (0..600)
        .map(|i| {
            (
                i % 450,
                format!("again{i}"),
                ver + 1 + i / 3,
                (i % 11 == 0) as i32,
            )
        })
        .collect();
    model.apply(&last);
    for _ in 0..2 {
        let opts = floe::keyed::UpsertOptions::default();
        let mut b = floe::keyed::SpillingBatch::new(&t, &opts, 100, &spill).unwrap();
        b.push("last.csv", change_batch(&last)).unwrap();
        floe::keyed::upsert_spilled(&cat, &ident, b).await.unwrap();
        assert_eq!(live_rows(&cat, "db.split3").await, model.live());
    }
    // One key repeated past the limit: one bucket holds every change, one part applies it
    // and records the checkpoint (no empty part takes it).
    let t = cat.load_table(&ident).await.unwrap();
    let one_key: Vec<_> = (0..300)
        .map(|i| (5, format!("same{i}"), ver + 1000 + i, 0))
        .collect();
    model.apply(&one_key);
    let opts = floe::keyed::UpsertOptions::default().with_checkpoint("one", 1);
    let mut b = floe::keyed::SpillingBatch::new(&t, &opts, 50, &spill).unwrap();
    b.push("one.csv", change_batch(&one_key)).unwrap();
    let r = floe::keyed::upsert_spilled(&cat, &ident, b).await.unwrap();
    assert_eq!((r.parts, r.committed_checkpoint), (1, Some(1)));
    assert_eq!(live_rows(&cat, "db.split3").await, model.live());
    // A null key in the third piece, row 57 of source 'bad.csv' (numbered on from its first
    // piece): refused before any part commits.
    let t = cat.load_table(&ident).await.unwrap();
    let before = t.current_snapshot().map(|s| s.snapshot_id());
    let opts = floe::keyed::UpsertOptions::default();
    let mut b = floe::keyed::SpillingBatch::new(&t, &opts, 50, &spill).unwrap();
    b.push("bad.csv", change_batch(&last[..40])).unwrap();
    b.push("other.csv", change_batch(&last[40..140])).unwrap();
    let mut bad = change_batch(&last[140..160]);
    let keys: arrow_array::Int64Array = (0..20).map(|i| (i != 16).then_some(i)).collect();
    let fields: Vec<arrow_schema::Field> = bad
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    bad = arrow_array::RecordBatch::try_new(
        std::sync::Arc::new(arrow_schema::Schema::new(fields)),
        std::iter::once(std::sync::Arc::new(keys) as arrow_array::ArrayRef)
            .chain(bad.columns()[1..].iter().cloned())
            .collect(),
    )
    .unwrap();
    let err = b.push("bad.csv", bad).unwrap_err().to_string();
    assert!(
        err.contains("row 57 of bad.csv") && err.contains("user_id"),
        "{err}"
    );
    drop(b);
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(t.current_snapshot().map(|s| s.snapshot_id()), before);
    // Spill directories are removed with their batch.
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0);
    // An engine that folds rows does not split a batch.
    let c = floe::TableCreation::new(floe::spec::parse_schema("k long not null, n long").unwrap())
        .with_primary_key(&["k".to_string()])
        .with_property("floe.merge-engine", "sum")
        .with_property("floe.aggregate.n", "sum");
    let sum = floe::table::parse_ident("db.sums").unwrap();
    let t = cat.create_table(&sum, c).await.unwrap();
    let mut b = floe::keyed::SpillingBatch::new(&t, &opts, 10, &spill).unwrap();
    let rows = arrow_array::RecordBatch::try_from_iter([
        (
            "k",
            std::sync::Arc::new(arrow_array::Int64Array::from_iter_values(0..20)) as _,
        ),
        (
            "n",
            std::sync::Arc::new(arrow_array::Int64Array::from_iter_values(0..20)) as _,
        ),
    ])
    .unwrap();
    let err = b.push("sums.csv", rows).unwrap_err().to_string();
    assert!(err.contains("merge engine 'sum'"), "{err}");
}

/// `floe upsert --max-rows-per-commit`: random change files past the limit are applied in
/// several commits, the checkpoint with the last; the table equals the model, and DuckDB and
/// pyiceberg read the same rows; the checkpoint re-sent does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_past_max_rows_per_commit_commits_parts_readers_agree() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    create(&wh, "db.big", &["--format-version", "3"]);
    let spill = d.path().join("spill");
    let mut model = Model::default();
    let mut rng = Rng(0xb16b_a7c4);
    let mut files = Vec::new();
    let mut ver = 0i64;
    for f in 0..3 {
        let changes: Vec<_> = (0..700)
            .map(|_| {
                ver += 1;
                let v = if rng.below(10) == 0 { ver - 40 } else { ver };
                let k = rng.below(900) as i64;
                (
                    k,
                    format!("f{f}-{}", rng.below(99)),
                    v,
                    (rng.below(9) == 0) as i32,
                )
            })
            .collect();
        model.apply(&changes);
        files.push(batch(d.path(), &format!("c{f}.csv"), changes));
    }
    let mut args = vec!["upsert", "db.big"];
    args.extend(files.iter().map(String::as_str));
    let spill_s = spill.to_string_lossy().into_owned();
    args.extend([
        "--max-rows-per-commit",
        "250",
        "--spill-dir",
        &spill_s,
        "--sink-id",
        "big",
        "--checkpoint",
        "7",
    ]);
    let r = json(&wh, &args);
    assert_eq!(r["input_records_count"], 2100, "{r}");
    assert!(r["parts_count"].as_u64().unwrap() >= 8, "{r}");
    assert_eq!(r["committed_checkpoint"], 7, "{r}");
    assert_eq!(live(&wh, "db.big"), model.live());
    assert_eq!(
        std::fs::read_dir(&spill).unwrap().count(),
        0,
        "spill left behind"
    );
    let again = json(&wh, &args);
    assert_eq!(again["already_committed"], true, "{again}");
    // Under the limit: one commit, as before.
    let small = batch(d.path(), "small.csv", [(1, "one".to_string(), ver + 1, 0)]);
    model.apply(&[(1, "one".to_string(), ver + 1, 0)]);
    let r = json(&wh, &["upsert", "db.big", &small]);
    assert_eq!(r["parts_count"], 1, "{r}");
    let Some(py) = peers_python() else { return };
    let cat = floe::Catalog::open(None, wh.to_str(), None).unwrap();
    let t = cat
        .load_table(&floe::table::parse_ident("db.big").unwrap())
        .await
        .unwrap();
    let live = model.live();
    let expected = arrow_array::RecordBatch::try_from_iter([
        (
            "user_id",
            std::sync::Arc::new(arrow_array::Int64Array::from_iter_values(
                live.iter().map(|r| r.0),
            )) as arrow_array::ArrayRef,
        ),
        (
            "plan",
            std::sync::Arc::new(arrow_array::StringArray::from_iter_values(
                live.iter().map(|r| r.1.clone()),
            )) as _,
        ),
        (
            "ver",
            std::sync::Arc::new(arrow_array::Int64Array::from_iter_values(
                live.iter().map(|r| r.2),
            )) as _,
        ),
        (
            "is_deleted",
            std::sync::Arc::new(arrow_array::Int32Array::from(vec![0; live.len()])) as _,
        ),
    ])
    .unwrap();
    let path = d.path().join("expected.parquet");
    write_parquet(&path, &[expected]);
    peer_check(
        &py,
        d.path(),
        &[Check {
            name: "upsert-in-parts".into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: path.to_string_lossy().into_owned(),
            engines: Some(vec!["duckdb".into(), "pyiceberg".into()]),
            refuse: None,
        }],
    );
}
