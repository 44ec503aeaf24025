//! Maintenance jobs on tables written by floe and by Spark: the same rows before and after,
//! for floe and every peer, and the table stays writable.

use std::collections::HashMap;

use floe::catalog::TableCreation;
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;

use crate::common::*;

fn live_delete_files(files: &[floe::scan::PlannedFile]) -> usize {
    files.iter().map(|f| f.deletes.len()).sum()
}

/// Compacts floe's merge-on-read tables (many small files, position deletes / deletion vectors,
/// equality deletes) and Spark's; rows are unchanged for floe and the peers, file-scoped
/// delete files are gone, and Spark keeps writing the compacted table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_data_files_keeps_every_row() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (dir, cat) = fs_catalog();
    let spark = std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1");
    let mut checks = Vec::new();
    let mut tables = Vec::new();
    // floe-written tables: 8 appends of small files, then deletes.
    for (label, fv) in [
        ("floe_v2", FormatVersion::V2),
        ("floe_v3", FormatVersion::V3),
    ] {
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        c.format_version = fv;
        c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
        let ident = parse_ident(&format!("mt.{label}")).unwrap();
        let mut t = cat.create_table(&ident, c).await.unwrap();
        for i in 0..8 {
            t = append(&cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))])
                .await
                .unwrap()
                .table;
        }
        let sql = format!("DELETE FROM mt.{label} WHERE id % 7 = 3");
        t = floe::dml::execute(&cat, &sql, None).await.unwrap().table;
        let keys = id_batch(500..520);
        t = floe::dml::delete_by_key(&cat, &t, &["id"], &keys)
            .await
            .unwrap()
            .table;
        tables.push((label.to_string(), t, !spark));
    }
    // A Spark-written merge-on-read table (position deletes).
    if spark {
        spark_write(
            &py,
            dir.path(),
            "mt.spark_v2",
            "",
            &[
                "CREATE TABLE {t} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='2', \
                 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')",
                "INSERT INTO {t} SELECT id, concat('a', id) FROM range(0, 300)",
                "INSERT INTO {t} SELECT id, concat('b', id) FROM range(300, 600)",
                "INSERT INTO {t} SELECT id, concat('c', id) FROM range(600, 900)",
                "DELETE FROM {t} WHERE id % 5 = 0",
                "UPDATE {t} SET v = 'u' WHERE id % 9 = 1",
            ],
        );
        let t = cat
            .load_table(&parse_ident("mt.spark_v2").unwrap())
            .await
            .unwrap();
        tables.push(("spark_v2".into(), t, false));
    }
    for (label, t, _) in &tables {
        let before_path = work.path().join(format!("{label}-before.parquet"));
        let n = floe_expected(t, None, &before_path).await;
        let plan = Scan::new(t).plan().await.unwrap();
        assert!(
            live_delete_files(&plan.files) > 0,
            "{label}: has deletes to fold"
        );
        let opts: HashMap<String, String> =
            [("min-input-files".to_string(), "2".to_string())].into();
        let r = floe::maintenance::rewrite_data_files(&cat, t, None, &opts, None)
            .await
            .unwrap();
        assert!(r.rewritten_data_files_count >= 3, "{label}: {r:?}");
        assert!(r.added_data_files_count >= 1, "{label}: {r:?}");
        let t2 = r.table.unwrap();
        let snap = t2.current_snapshot().unwrap();
        assert_eq!(snap.summary().operation, floe::spec::Operation::Replace);
        let after = t2.metadata().snapshots().count();
        assert_eq!(after, t.metadata().snapshots().count() + 1);
        // Same rows, from floe...
        let after_path = work.path().join(format!("{label}-after.parquet"));
        assert_eq!(
            floe_expected(&t2, None, &after_path).await,
            n,
            "{label}: row count"
        );
        assert_same_rows(
            &py,
            &before_path,
            &after_path,
            &format!("{label}: rows changed"),
        );
        // ...with no position deletes left for the rewritten files.
        let plan = Scan::new(&t2).plan().await.unwrap();
        let pos_left: usize = plan
            .files
            .iter()
            .flat_map(|f| f.deletes.iter())
            .filter(|d| d.file.content_type() == floe::spec::DataContentType::PositionDeletes)
            .count();
        assert_eq!(
            pos_left, 0,
            "{label}: position deletes left after the rewrite"
        );
        // Time travel to before the rewrite still works.
        let old = Scan::new(&t2)
            .snapshot(SnapshotSelector::Id(
                t.current_snapshot().unwrap().snapshot_id(),
            ))
            .count()
            .await
            .unwrap();
        assert_eq!(old as usize, n);
        let eq = label.starts_with("floe");
        checks.push(Check {
            name: format!("rewrite-{label}"),
            metadata: t2.metadata_location().to_string(),
            snapshot_id: None,
            expected: before_path.to_string_lossy().to_string(),
            // floe's tables keep a global equality delete file (it may apply to later rows).
            engines: Some(if eq {
                vec!["duckdb".into(), "spark".into()]
            } else {
                vec!["duckdb".into(), "pyiceberg".into(), "spark".into()]
            }),
            refuse: None,
        });
    }
    peer_check(&py, work.path(), &checks);
    // Spark keeps writing the compacted Spark table.
    if spark {
        spark_write(
            &py,
            dir.path(),
            "mt.spark_v2",
            "",
            &["DELETE FROM {t} WHERE id < 100"],
        );
        let t = cat
            .load_table(&parse_ident("mt.spark_v2").unwrap())
            .await
            .unwrap();
        let rows = scan_rows(&t, SnapshotSelector::Current).await;
        let want: Vec<i64> = (100..900).filter(|i| i % 5 != 0).collect();
        assert_eq!(count(&rows), want.len());
        assert_eq!(sum_i64(&rows, "id"), want.iter().sum::<i64>());
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// expire_snapshots drops old snapshots and exactly the files only they reached — never a
/// file another table (here a registered copy sharing the files) still references;
/// remove_orphan_files deletes unreferenced files only, and refuses overlapping tables.
#[test]
fn expire_snapshots_and_remove_orphan_files() {
    use crate::cli::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = crate::cli::inputs(d.path());
    let create = |name: &str, extra: &[&str]| {
        let mut a = vec![
            "create",
            name,
            "--schema",
            "id long, name string, ts timestamptz",
        ];
        a.extend(extra);
        ok(&wh, &a);
    };
    create("db.e", &[]);
    ok(&wh, &["append", "db.e", &csv]);
    ok(&wh, &["append", "db.e", &pq]);
    let first_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.e", "--json"])).unwrap();
    // Copy-on-write update: the CSV's data file is rewritten; only old snapshots reach it.
    ok(
        &wh,
        &[
            "update",
            "db.e",
            "--set",
            "name = 'x'",
            "--where",
            "id < 10",
        ],
    );
    ok(&wh, &["delete", "db.e", "--where", "id = 60"]);
    let old_file = first_files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["file_path"]
                .as_str()
                .unwrap()
                .trim_start_matches("file://")
                .to_string()
        })
        .find(|p| {
            let now: serde_json::Value =
                serde_json::from_str(&ok(&wh, &["files", "db.e", "--json"])).unwrap();
            !now.as_array().unwrap().iter().any(|f| {
                f["file_path"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("file://")
                    == p
            })
        })
        .expect("a data file the update replaced");
    assert!(std::path::Path::new(&old_file).exists());
    let count = |name: &str| -> String { ok(&wh, &["scan", name, "--count"]).trim().to_string() };
    assert_eq!(count("db.e"), "79");
    let future = (now_ms() + 60_000).to_string();
    // Dry run: nothing changes.
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.e",
            "--older-than",
            &future,
            "--retain-last",
            "1",
            "--dry-run",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["expired_snapshot_ids"].as_array().unwrap().len(), 3);
    assert!(std::path::Path::new(&old_file).exists());
    // A second table registered on the same metadata shares every file.
    let desc: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "db.e", "--json"])).unwrap();
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.e", "--json"])).unwrap();
    let first_snapshot = snaps[0]["snapshot_id"].as_i64().unwrap();
    ok(
        &wh,
        &[
            "register",
            "db.shared",
            desc["metadata_location"].as_str().unwrap(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.e",
            "--older-than",
            &future,
            "--retain-last",
            "1",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["expired_snapshot_ids"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["deleted_data_files_count"], 0,
        "db.shared still references them: {v}"
    );
    assert!(std::path::Path::new(&old_file).exists());
    assert_eq!(count("db.e"), "79");
    assert_eq!(count("db.shared"), "79");
    let o = floe(
        &wh,
        &[
            "scan",
            "db.e",
            "--count",
            "--snapshot",
            &first_snapshot.to_string(),
        ],
    );
    assert!(!o.status.success(), "an expired snapshot cannot be read");
    // Overlapping locations: remove_orphan_files refuses rather than guess.
    let o = floe(
        &wh,
        &["remove-orphan-files", "db.e", "--older-than", &future],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("overlaps"));
    // Without the shared table the replaced file goes when its last snapshot does.
    ok(&wh, &["drop", "db.shared"]);
    create("db.f", &[]);
    ok(&wh, &["append", "db.f", &csv]);
    let f_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.f", "--json"])).unwrap();
    let f_old = f_files[0]["file_path"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    ok(&wh, &["update", "db.f", "--set", "name = 'y'"]);
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.f",
            "--older-than",
            &future,
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["deleted_data_files_count"], 1, "{v}");
    assert_eq!(v["deleted_manifest_lists_count"], 1, "{v}");
    assert!(!std::path::Path::new(&f_old).exists());
    assert_eq!(count("db.f"), "50");
    // gc.enabled=false: snapshots go, files stay.
    create("db.g", &["--property", "gc.enabled=false"]);
    ok(&wh, &["append", "db.g", &csv]);
    let g_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.g", "--json"])).unwrap();
    let g_old = g_files[0]["file_path"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    ok(&wh, &["update", "db.g", "--set", "name = 'z'"]);
    ok(&wh, &["expire-snapshots", "db.g", "--older-than", &future]);
    assert!(std::path::Path::new(&g_old).exists());
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.g", "--json"])).unwrap();
    assert_eq!(snaps.as_array().unwrap().len(), 1);
    // Orphans: a stray file and a failed write's leftover are found; referenced files and
    // Spark-style .crc sidecars of them are not.
    let table_dir = wh.join("db/f");
    let stray = table_dir.join("data/stray.parquet");
    std::fs::write(&stray, b"junk").unwrap();
    let live: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.f", "--json"])).unwrap();
    let live_path = std::path::PathBuf::from(
        live[0]["file_path"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://"),
    );
    let crc = live_path.with_file_name(format!(
        ".{}.crc",
        live_path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&crc, b"crc").unwrap();
    let before = files_under(&table_dir).len();
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "remove-orphan-files",
            "db.f",
            "--older-than",
            &future,
            "--dry-run",
            "--json",
        ],
    ))
    .unwrap();
    let found: Vec<String> = v["orphan_file_locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert!(
        found.iter().any(|p| p.ends_with("stray.parquet")),
        "{found:?}"
    );
    assert!(!found.iter().any(|p| p.ends_with(".crc")), "{found:?}");
    assert_eq!(
        files_under(&table_dir).len(),
        before,
        "dry run deletes nothing"
    );
    ok(
        &wh,
        &["remove-orphan-files", "db.f", "--older-than", &future],
    );
    assert!(!stray.exists());
    assert!(crc.exists() && live_path.exists());
    assert_eq!(count("db.f"), "50");
    // The default cutoff (3 days) protects files being written right now.
    std::fs::write(&stray, b"junk").unwrap();
    ok(&wh, &["remove-orphan-files", "db.f"]);
    assert!(stray.exists());
}

/// A table of `files` small files (ids 0..files*rows_per_file) with merge-on-read deletes.
fn small_files_table(
    wh: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    files: usize,
    fv: &str,
) {
    use crate::cli::ok;
    ok(
        wh,
        &[
            "create",
            name,
            "--schema",
            "id long, v string",
            "--format-version",
            fv,
            "--property",
            "write.delete.mode=merge-on-read",
        ],
    );
    for f in 0..files {
        let csv = dir.join(format!("{}-{f}.csv", name.replace('.', "_")));
        let mut s = String::from("id,v\n");
        for i in f * 200..(f + 1) * 200 {
            s.push_str(&format!("{i},v{i}\n"));
        }
        std::fs::write(&csv, s).unwrap();
        ok(wh, &["append", name, csv.to_str().unwrap()]);
    }
}

fn id_sum_and_count(wh: &std::path::Path, name: &str) -> (i64, usize) {
    let out = crate::cli::ok(wh, &["scan", name, "--columns", "id", "--format", "csv"]);
    let ids: Vec<i64> = out
        .lines()
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    (ids.iter().sum(), ids.len())
}

/// A merge-on-read DELETE racing a rewrite: whichever commits second re-validates and either
/// commits or fails with a conflict; the delete is never lost, deleted rows never come back.
#[test]
fn delete_racing_a_rewrite_is_never_lost() {
    use std::process::{Command, Stdio};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    for (round, fv) in ["2", "3", "2", "3"].iter().enumerate() {
        let name = format!("db.race{round}");
        small_files_table(&wh, d.path(), &name, 6, fv);
        crate::cli::ok(&wh, &["delete", &name, "--where", "id % 10 = 1"]);
        let spawn = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_floe"))
                .arg("--warehouse")
                .arg(&wh)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let rw = spawn(&["rewrite-data-files", &name, "--option", "rewrite-all=true"]);
        let del = spawn(&["delete", &name, "--where", "id % 10 = 2"]);
        let rw = rw.wait_with_output().unwrap();
        let del = del.wait_with_output().unwrap();
        for o in [&rw, &del] {
            if !o.status.success() {
                let e = String::from_utf8_lossy(&o.stderr);
                assert!(
                    e.contains("concurrent") || e.contains("redo"),
                    "{name}: not a conflict: {e}"
                );
            }
        }
        let want: Vec<i64> = (0..1200)
            .filter(|i| i % 10 != 1 && (!del.status.success() || i % 10 != 2))
            .collect();
        assert_eq!(
            id_sum_and_count(&wh, &name),
            (want.iter().sum(), want.len()),
            "{name}: rewrite ok={}, delete ok={}",
            rw.status.success(),
            del.status.success()
        );
    }
}

/// A rewrite killed part-way leaves the table readable with its old rows; what it left behind
/// is exactly what remove_orphan_files removes.
#[test]
fn a_killed_rewrite_leaves_only_orphans() {
    use std::process::{Command, Stdio};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let future = (now_ms() + 3_600_000).to_string();
    for (round, delay_ms) in [5u64, 40, 120, 400].iter().enumerate() {
        let name = format!("db.kill{round}");
        small_files_table(&wh, d.path(), &name, 8, "2");
        crate::cli::ok(&wh, &["delete", &name, "--where", "id % 7 = 0"]);
        let before = id_sum_and_count(&wh, &name);
        let table_dir = wh.join(format!("db/kill{round}"));
        let files_before: std::collections::BTreeSet<_> =
            files_under(&table_dir).into_iter().collect();
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
            .arg("--warehouse")
            .arg(&wh)
            .args(["rewrite-data-files", &name, "--option", "rewrite-all=true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(*delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            id_sum_and_count(&wh, &name),
            before,
            "{name}: rows after the kill"
        );
        let snaps: serde_json::Value =
            serde_json::from_str(&crate::cli::ok(&wh, &["snapshots", &name, "--json"])).unwrap();
        let committed = snaps.as_array().unwrap().last().unwrap()["operation"] == "replace";
        crate::cli::ok(
            &wh,
            &["remove-orphan-files", &name, "--older-than", &future],
        );
        let files_after: std::collections::BTreeSet<_> =
            files_under(&table_dir).into_iter().collect();
        if !committed {
            assert_eq!(
                files_after, files_before,
                "{name}: leftovers of the killed rewrite remain"
            );
        }
        assert_eq!(
            id_sum_and_count(&wh, &name),
            before,
            "{name}: rows after orphan removal"
        );
    }
}

/// A table pyiceberg wrote (several small appends, partitioned by day(ts)) compacted by floe:
/// the same rows for floe and every peer, and pyiceberg keeps appending to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_a_pyiceberg_table() {
    use crate::catalog::pyice;
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("py.db");
    let uri = format!("sqlite:///{}", db.display());
    let wh = format!("file://{}", d.path().display());
    let Some(_) = pyice(&["create", &uri, &wh, "py.events"]) else {
        return;
    };
    for _ in 0..3 {
        pyice(&["append", &uri, &wh, "py.events", "40"]).unwrap();
    }
    let py = peers_python().unwrap();
    let cat = floe::Catalog::open(
        Some(&format!("sqlite:{}", db.display())),
        Some(d.path().to_str().unwrap()),
        None,
    )
    .unwrap();
    let ident = parse_ident("py.events").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let before = d.path().join("before.parquet");
    let n = floe_expected(&t, None, &before).await;
    assert_eq!(n, 220);
    let opts: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts, None)
        .await
        .unwrap();
    assert!(
        r.rewritten_data_files_count > r.added_data_files_count,
        "{r:?}"
    );
    let t2 = r.table.unwrap();
    peer_check(
        &py,
        d.path(),
        &[Check {
            name: "pyiceberg-table-rewritten".into(),
            metadata: t2.metadata_location().to_string(),
            snapshot_id: None,
            expected: before.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        }],
    );
    let after = pyice(&["append", &uri, &wh, "py.events", "5"]).unwrap();
    assert_eq!(after["rows"].as_u64(), Some(225));
}

/// rewrite_position_delete_files merges a partition's position delete files and drops the
/// ones left dangling by a compaction; rows stay the same for floe and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_position_delete_files_merges_and_drops_dangling() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("id long, v string, cat string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = floe::spec::parse_partition_spec("cat", &schema).unwrap();
    c.properties = [
        ("write.delete.mode", "merge-on-read"),
        ("write.delete.granularity", "partition"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let t = cat
        .create_table(&parse_ident("mt.pd").unwrap(), c)
        .await
        .unwrap();
    let batch = |a: i64, b: i64| {
        use arrow::array::{Int64Array, RecordBatch, StringArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from((a..b).collect::<Vec<_>>())) as _,
            ),
            (
                "v",
                Arc::new(StringArray::from(
                    (a..b).map(|i| format!("v{i}")).collect::<Vec<_>>(),
                )) as _,
            ),
            (
                "cat",
                Arc::new(StringArray::from(
                    (a..b)
                        .map(|i| if i % 2 == 0 { "a" } else { "b" })
                        .collect::<Vec<_>>(),
                )) as _,
            ),
        ])
        .unwrap()
    };
    let mut t = t;
    for i in 0..3 {
        t = append(&cat, &t, vec![Ok(batch(i * 100, i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    for w in ["id % 7 = 0", "id % 11 = 0"] {
        t = floe::dml::execute(&cat, &format!("DELETE FROM mt.pd WHERE {w}"), None)
            .await
            .unwrap()
            .table;
    }
    let live_deletes = |plan: &floe::scan::ScanPlan| -> std::collections::HashSet<String> {
        plan.files
            .iter()
            .flat_map(|f| f.deletes.iter().map(|d| d.file.file_path().to_string()))
            .collect()
    };
    assert_eq!(
        live_deletes(&Scan::new(&t).plan().await.unwrap()).len(),
        4,
        "2 per partition"
    );
    // Compacting partition a leaves its partition-scoped delete files dangling.
    let opts: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    let pred = floe::expr::file_selection("cat = 'a'", t.metadata().current_schema()).unwrap();
    t = floe::maintenance::rewrite_data_files(&cat, &t, Some(pred), &opts, None)
        .await
        .unwrap()
        .table
        .unwrap();
    let expected = work.path().join("pd.parquet");
    let n = floe_expected(&t, None, &expected).await;
    let want = (0..300).filter(|i| i % 7 != 0 && i % 11 != 0).count();
    assert_eq!(n, want);
    let r = floe::maintenance::rewrite_position_delete_files(&cat, &t, &HashMap::new())
        .await
        .unwrap();
    assert_eq!(r.rewritten_delete_files_count, 4, "{r:?}");
    assert_eq!(r.added_delete_files_count, 1, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(
        t.current_snapshot().unwrap().summary().operation,
        floe::spec::Operation::Replace
    );
    assert_eq!(live_deletes(&Scan::new(&t).plan().await.unwrap()).len(), 1);
    let after = work.path().join("pd-after.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, want);
    peer_check(
        &py,
        work.path(),
        &[Check {
            name: "rewrite-position-deletes".into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        }],
    );
}

/// rewrite_manifests replaces many small manifests by one per spec and content; the rows, the
/// data files and v3 row ids are unchanged, the peers read it, and writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_manifests_keeps_rows_and_files() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut checks = Vec::new();
    for (label, fv) in [("man_v2", FormatVersion::V2), ("man_v3", FormatVersion::V3)] {
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        c.format_version = fv;
        c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
        let ident = parse_ident(&format!("mt.{label}")).unwrap();
        let mut t = cat.create_table(&ident, c).await.unwrap();
        for i in 0..6 {
            t = append(&cat, &t, vec![Ok(id_batch(i * 50..i * 50 + 50))])
                .await
                .unwrap()
                .table;
        }
        t = floe::dml::execute(
            &cat,
            &format!("DELETE FROM mt.{label} WHERE id % 4 = 0"),
            None,
        )
        .await
        .unwrap()
        .table;
        let before = work.path().join(format!("{label}.parquet"));
        let n = floe_expected(&t, None, &before).await;
        let files_before: Vec<(String, Option<i64>)> = {
            let mut v: Vec<_> = Scan::new(&t)
                .plan()
                .await
                .unwrap()
                .files
                .iter()
                .map(|f| (f.file.file_path().to_string(), f.sequence_number.into()))
                .collect();
            v.sort();
            v
        };
        let r = floe::maintenance::rewrite_manifests(&cat, &t, None)
            .await
            .unwrap();
        assert_eq!(r.rewritten_manifests_count, 7, "{label}: {r:?}");
        assert_eq!(
            r.added_manifests_count, 2,
            "{label}: one data and one delete manifest"
        );
        let t2 = r.table.unwrap();
        let list = t2
            .manifest_list(t2.current_snapshot().unwrap())
            .await
            .unwrap();
        assert_eq!(list.len(), 2);
        let mut files_after: Vec<(String, Option<i64>)> = Scan::new(&t2)
            .plan()
            .await
            .unwrap()
            .files
            .iter()
            .map(|f| (f.file.file_path().to_string(), f.sequence_number.into()))
            .collect();
        files_after.sort();
        assert_eq!(
            files_after, files_before,
            "{label}: same files, same sequence numbers"
        );
        let after = work.path().join(format!("{label}-after.parquet"));
        assert_eq!(floe_expected(&t2, None, &after).await, n);
        let t3 = floe::dml::execute(
            &cat,
            &format!("DELETE FROM mt.{label} WHERE id % 4 = 1"),
            None,
        )
        .await
        .unwrap()
        .table;
        let want = (0..300).filter(|i| i % 4 > 1).count();
        assert_eq!(Scan::new(&t3).count().await.unwrap() as usize, want);
        checks.push(Check {
            name: format!("rewrite-manifests-{label}"),
            metadata: t2.metadata_location().to_string(),
            snapshot_id: None,
            expected: before.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    peer_check(&py, work.path(), &checks);
}

/// `--strategy sort` rewrites files sorted by the given order; bad strategy arguments are
/// refused before anything is written.
#[test]
fn rewrite_with_the_sort_strategy() {
    use crate::cli::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = crate::cli::inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.s",
            "--schema",
            "id long, name string, ts timestamptz",
        ],
    );
    ok(&wh, &["append", "db.s", &pq]);
    ok(&wh, &["append", "db.s", &csv]);
    let o = floe(&wh, &["rewrite-data-files", "db.s", "--strategy", "sort"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("sort order"));
    let o = floe(&wh, &["rewrite-data-files", "db.s", "--strategy", "zorder"]);
    assert!(!o.status.success());
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.s",
            "--strategy",
            "sort",
            "--sort-by",
            "id desc",
            "--option",
            "rewrite-all=true",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["rewritten_data_files_count"], 2);
    assert_eq!(v["added_data_files_count"], 1);
    let ids: Vec<i64> = ok(&wh, &["scan", "db.s", "--columns", "id", "--format", "csv"])
        .lines()
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "one file, rows in id descending order");
    assert_eq!(ids.len(), 80);
}

/// The rewrite split across processes: plan once, run each file group in its own process,
/// commit all results at once; a partial or repeated commit is refused.
#[test]
fn rewrite_as_plan_tasks_and_commit_in_separate_processes() {
    use crate::cli::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.dist",
            "--schema",
            "id long, cat string",
            "--partition-by",
            "cat",
            "--property",
            "write.delete.mode=merge-on-read",
        ],
    );
    for f in 0..4 {
        let csv = d.path().join(format!("d{f}.csv"));
        let mut s = String::from("id,cat\n");
        for i in f * 100..(f + 1) * 100 {
            s.push_str(&format!("{i},{}\n", if i % 2 == 0 { "a" } else { "b" }));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.dist", csv.to_str().unwrap()]);
    }
    ok(&wh, &["delete", "db.dist", "--where", "id % 9 = 0"]);
    let before = id_sum_and_count(&wh, "db.dist");
    let plan = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.dist",
            "--plan-only",
            "--option",
            "min-input-files=2",
        ],
    );
    let plan_file = d.path().join("plan.json");
    std::fs::write(&plan_file, &plan).unwrap();
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let groups = v["tasks"].as_array().unwrap().len();
    assert_eq!(groups, 2, "one group per partition: {plan}");
    // Each task in its own process, at the same time.
    let children: Vec<_> = (0..groups)
        .map(|g| {
            std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
                .arg("--warehouse")
                .arg(&wh)
                .args([
                    "rewrite-data-files",
                    "db.dist",
                    "--execute-task",
                    plan_file.to_str().unwrap(),
                    "--group",
                    &g.to_string(),
                ])
                .output()
                .unwrap()
        })
        .collect();
    let mut results = Vec::new();
    for (g, o) in children.into_iter().enumerate() {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let f = d.path().join(format!("result-{g}.json"));
        std::fs::write(&f, &o.stdout).unwrap();
        results.push(f.to_string_lossy().to_string());
    }
    assert_eq!(
        id_sum_and_count(&wh, "db.dist"),
        before,
        "tasks commit nothing"
    );
    let o = floe(
        &wh,
        &["rewrite-data-files", "db.dist", "--commit", &results[0]],
    );
    assert!(!o.status.success(), "a partial commit is refused");
    let mut args = vec!["rewrite-data-files", "db.dist", "--commit"];
    args.extend(results.iter().map(String::as_str));
    let v: serde_json::Value = serde_json::from_str(&ok(&wh, &args)).unwrap();
    assert_eq!(v["rewritten_data_files_count"], 8, "{v}");
    assert_eq!(v["added_data_files_count"], 2, "{v}");
    assert_eq!(id_sum_and_count(&wh, "db.dist"), before);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.dist", "--json"])).unwrap();
    assert_eq!(files.as_array().unwrap().len(), 2);
    assert!(files
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["deletes"].as_array().unwrap().is_empty()));
    let o = floe(&wh, &args);
    assert!(
        !o.status.success(),
        "the same results cannot be committed twice"
    );
}

/// With partial progress the groups land in several `replace` commits.
#[test]
fn rewrite_with_partial_progress_commits_in_batches() {
    use crate::cli::ok;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.pp",
            "--schema",
            "id long, cat string",
            "--partition-by",
            "cat",
        ],
    );
    for f in 0..3 {
        let csv = d.path().join(format!("p{f}.csv"));
        let mut s = String::from("id,cat\n");
        for i in f * 90..(f + 1) * 90 {
            s.push_str(&format!("{i},{}\n", ["a", "b", "c"][i % 3]));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.pp", csv.to_str().unwrap()]);
    }
    let before = id_sum_and_count(&wh, "db.pp");
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.pp",
            "--option",
            "min-input-files=2",
            "--option",
            "partial-progress.enabled=true",
            "--option",
            "partial-progress.max-commits=3",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["file_groups_count"], 3, "{v}");
    assert_eq!(v["rewritten_data_files_count"], 9, "{v}");
    assert_eq!(v["failed_data_files_count"], 0, "{v}");
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.pp", "--json"])).unwrap();
    let replaces = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["operation"] == "replace")
        .count();
    assert_eq!(replaces, 3);
    assert_eq!(id_sum_and_count(&wh, "db.pp"), before);
}

/// A corrupt data or delete file fails the rewrite with its path; nothing is committed and
/// nothing written is left referenced.
#[test]
fn rewrite_of_corrupt_input_commits_nothing() {
    use crate::cli::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    small_files_table(&wh, d.path(), "db.bad", 4, "2");
    ok(&wh, &["delete", "db.bad", "--where", "id % 5 = 0"]);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.bad", "--json"])).unwrap();
    let victims = [
        files[1]["file_path"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://")
            .to_string(),
        files[2]["deletes"][0]["file_path"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://")
            .to_string(),
    ];
    let snaps = |wh: &std::path::Path| {
        let v: serde_json::Value =
            serde_json::from_str(&ok(wh, &["snapshots", "db.bad", "--json"])).unwrap();
        v.as_array().unwrap().len()
    };
    let before = snaps(&wh);
    for victim in victims {
        let good = std::fs::read(&victim).unwrap();
        std::fs::write(&victim, &good[..good.len() / 2]).unwrap();
        let o = floe(
            &wh,
            &[
                "rewrite-data-files",
                "db.bad",
                "--option",
                "rewrite-all=true",
            ],
        );
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        let name = std::path::Path::new(&victim)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(err.contains(&name), "the error names {name}: {err}");
        assert_eq!(snaps(&wh), before, "nothing committed");
        std::fs::write(&victim, &good).unwrap();
    }
    let want: Vec<i64> = (0..800).filter(|i| i % 5 != 0).collect();
    assert_eq!(
        id_sum_and_count(&wh, "db.bad"),
        (want.iter().sum(), want.len())
    );
}

/// Compacting a v3 table keeps every row's `_row_id` and `_last_updated_sequence_number`, as
/// floe and Spark read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_keeps_v3_row_lineage() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    c.format_version = FormatVersion::V3;
    c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
    let mut t = cat
        .create_table(&parse_ident("mt.lineage").unwrap(), c)
        .await
        .unwrap();
    for i in 0..4 {
        t = append(&cat, &t, vec![Ok(id_batch(i * 50..i * 50 + 50))])
            .await
            .unwrap()
            .table;
    }
    t = floe::dml::execute(&cat, "DELETE FROM mt.lineage WHERE id % 6 = 1", None)
        .await
        .unwrap()
        .table;
    let lineage = |t: &floe::Table| {
        let t = t.clone();
        async move {
            Scan::new(&t)
                .select(["id"])
                .with_row_lineage()
                .to_batches()
                .await
                .unwrap()
        }
    };
    let before = work.path().join("lineage-before.parquet");
    write_parquet(&before, &lineage(&t).await);
    let before_snapshot = t.current_snapshot().unwrap().snapshot_id();
    let opts: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    let t2 = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts, None)
        .await
        .unwrap()
        .table
        .unwrap();
    let after = work.path().join("lineage-after.parquet");
    write_parquet(&after, &lineage(&t2).await);
    assert_same_rows(&py, &before, &after, "lineage changed");
    let check = |name: &str, snap: i64| Check {
        name: name.into(),
        metadata: t2.metadata_location().to_string(),
        snapshot_id: Some(snap),
        expected: before.to_string_lossy().to_string(),
        engines: Some(vec!["spark".into()]),
        refuse: None,
    };
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1") {
        peer_check(
            &py,
            work.path(),
            &[
                check("lineage-before-rewrite", before_snapshot),
                check(
                    "lineage-after-rewrite",
                    t2.current_snapshot().unwrap().snapshot_id(),
                ),
            ],
        );
    }
}

/// The partition spec id of every live data file of `t`'s current snapshot (the id of the
/// manifest listing it), with its partition tuple.
async fn live_spec_ids(t: &floe::Table) -> Vec<(i32, String)> {
    Scan::new(t)
        .plan()
        .await
        .unwrap()
        .files
        .iter()
        .map(|f| (f.spec.spec_id(), format!("{:?}", f.partition)))
        .collect()
}

fn spark_engines(with_pyiceberg: bool) -> Vec<String> {
    let mut e = vec!["duckdb".to_string()];
    if with_pyiceberg {
        e.push("pyiceberg".into());
    }
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1") {
        e.push("spark".into());
    }
    e
}

/// Partition evolution: files written under the first spec (unpartitioned) and under the
/// evolved one (bucket(4, id)) are rewritten with `output-spec-id`; every live data file then
/// has the chosen spec, rows are unchanged for floe and the peers, and partition pruning still
/// finds every row. A spec id the table lacks is refused, naming the table and its spec ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_with_output_spec_id_after_partition_evolution() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let ident = parse_ident("mt.evolve").unwrap();
    let c = TableCreation::new(parse_schema("id long, v string").unwrap());
    let mut t = cat.create_table(&ident, c).await.unwrap();
    for i in 0..3 {
        t = append(&cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    // floe has no DDL for partition evolution: commit the evolved metadata directly.
    let md = t.metadata().clone();
    let bucket = floe::spec::parse_partition_spec("bucket(4, id)", md.current_schema()).unwrap();
    let evolved = iceberg::spec::TableMetadataBuilder::new_from_metadata(
        md,
        Some(t.metadata_location().to_string()),
    )
    .add_partition_spec(bucket)
    .unwrap()
    .set_default_partition_spec(-1)
    .unwrap()
    .build()
    .unwrap()
    .metadata;
    t = match cat.commit(&t, evolved).await {
        floe::catalog::CommitOutcome::Committed(t) => t,
        other => panic!("evolving the spec: {other:?}"),
    };
    let (old_spec, new_spec) = (0, t.metadata().default_partition_spec_id());
    assert_ne!(old_spec, new_spec);
    for i in 3..5 {
        t = append(&cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    let specs = live_spec_ids(&t).await;
    assert!(specs.iter().any(|s| s.0 == old_spec) && specs.iter().any(|s| s.0 == new_spec));
    let before = work.path().join("evolve-before.parquet");
    let n = floe_expected(&t, None, &before).await;
    assert_eq!(n, 500);
    let mut live = specs.len();
    let opts = |spec: i32| -> HashMap<String, String> {
        [
            ("rewrite-all".to_string(), "true".to_string()),
            ("output-spec-id".to_string(), spec.to_string()),
        ]
        .into()
    };
    // An unknown spec id: nothing is written or committed.
    let err = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(7), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mt.evolve") && err.contains("0, 1") && err.contains("output-spec-id=7"),
        "{err}"
    );
    let mut checks = Vec::new();
    // To the new spec (the old spec's files are re-partitioned), then back to the old one.
    for (round, spec) in [(0, new_spec), (1, old_spec)] {
        let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(spec), None)
            .await
            .unwrap();
        assert_eq!(r.rewritten_data_files_count, live, "round {round}: {r:?}");
        t = r.table.unwrap();
        let specs = live_spec_ids(&t).await;
        live = specs.len();
        assert!(
            !specs.is_empty() && specs.iter().all(|s| s.0 == spec),
            "round {round}: live files have specs {specs:?}, want {spec}"
        );
        let partitions: std::collections::HashSet<&String> = specs.iter().map(|s| &s.1).collect();
        // 500 ids hash into every one of the 4 buckets.
        let want = if spec == new_spec { 4 } else { 1 };
        assert_eq!(partitions.len(), want, "round {round}: {specs:?}");
        let after = work.path().join(format!("evolve-after-{round}.parquet"));
        assert_eq!(floe_expected(&t, None, &after).await, n);
        assert_same_rows(
            &py,
            &before,
            &after,
            &format!("round {round}: rows changed"),
        );
        // Partition pruning by the new files' partition values loses no row.
        for id in [0i64, 42, 333, 499] {
            let pred = floe::expr::parse_expr(&format!("id = {id}")).unwrap();
            let c = Scan::new(&t).filter(pred).count().await.unwrap();
            assert_eq!(c, 1, "round {round}: id {id}");
        }
        checks.push(Check {
            name: format!("output-spec-id-{spec}"),
            metadata: t.metadata_location().to_string(),
            snapshot_id: Some(t.current_snapshot().unwrap().snapshot_id()),
            expected: before.to_string_lossy().to_string(),
            engines: Some(spark_engines(true)),
            refuse: None,
        });
    }
    // Checked at the last metadata, which holds both snapshots.
    for c in &mut checks {
        c.metadata = t.metadata_location().to_string();
    }
    peer_check(&py, work.path(), &checks);
}

/// A v2 merge-on-read table partitioned by truncate(200, id): 8 files in partitions 0, 200,
/// 400, 600, partition-scoped position deletes in each, an equality delete file in partition
/// 400, then an append to partition 800 (so that a rewrite's starting sequence number is newer
/// than every delete file).
async fn dangling_table(cat: &floe::catalog::Catalog, name: &str) -> floe::Table {
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = floe::spec::parse_partition_spec("truncate(200, id)", &schema).unwrap();
    c.properties = [
        ("write.delete.mode", "merge-on-read"),
        ("write.delete.granularity", "partition"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut t = cat
        .create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap();
    for i in 0..8 {
        t = append(cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    t = floe::dml::execute(cat, &format!("DELETE FROM {name} WHERE id % 7 = 3"), None)
        .await
        .unwrap()
        .table;
    t = floe::dml::delete_by_key(cat, &t, &["id"], &id_batch(500..520))
        .await
        .unwrap()
        .table;
    append(cat, &t, vec![Ok(id_batch(800..850))])
        .await
        .unwrap()
        .table
}

/// Live delete files of the current snapshot (the summary's running total).
fn total_delete_files(t: &floe::Table) -> usize {
    t.current_snapshot()
        .unwrap()
        .summary()
        .additional_properties["total-delete-files"]
        .parse()
        .unwrap()
}

/// `remove-dangling-deletes`: off (the default), partition-scoped position deletes and
/// equality deletes stay in the table after every data file they applied to was rewritten;
/// on, one more commit removes exactly those whose partition has no older data left, and
/// counts them. Rows are unchanged throughout, for floe and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_removes_dangling_deletes_when_asked() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let opts = |dangling: bool| -> HashMap<String, String> {
        [
            ("rewrite-all".to_string(), "true".to_string()),
            ("remove-dangling-deletes".to_string(), dangling.to_string()),
        ]
        .into()
    };
    let mut checks = Vec::new();
    let mut expect_same = |t: &floe::Table, before: &std::path::Path, what: &str| {
        checks.push(Check {
            name: what.to_string(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: before.to_string_lossy().to_string(),
            engines: Some(spark_engines(total_delete_files(t) == 0)),
            refuse: None,
        });
    };
    // Off: nothing but the rewrite commit; the 5 delete files stay.
    let t = dangling_table(&cat, "mt.dangling_off").await;
    assert_eq!(total_delete_files(&t), 5);
    let before_off = work.path().join("off-before.parquet");
    let n = floe_expected(&t, None, &before_off).await;
    let want = (0..800)
        .filter(|i| i % 7 != 3 && !(500..520).contains(i))
        .count()
        + 50;
    assert_eq!(n, want);
    let snaps = t.metadata().snapshots().count();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(false), None)
        .await
        .unwrap();
    assert_eq!(r.removed_delete_files_count, 0, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(t.metadata().snapshots().count(), snaps + 1);
    assert_eq!(total_delete_files(&t), 5);
    let after = work.path().join("off-after.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before_off, &after, "off: rows changed");
    expect_same(&t, &before_off, "dangling-off");

    // On, for partitions 0 and 200 only: their two position delete files go, in a second
    // commit; partitions 400 and 600 keep theirs (and the equality delete file).
    let t = dangling_table(&cat, "mt.dangling_on").await;
    let before = work.path().join("on-before.parquet");
    assert_eq!(floe_expected(&t, None, &before).await, n);
    let snaps = t.metadata().snapshots().count();
    let lt_400 = floe::expr::file_selection("id < 400", t.metadata().current_schema()).unwrap();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, Some(lt_400), &opts(true), None)
        .await
        .unwrap();
    assert_eq!(r.rewritten_data_files_count, 4, "{r:?}");
    assert_eq!(r.removed_delete_files_count, 2, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(t.metadata().snapshots().count(), snaps + 2);
    assert_eq!(total_delete_files(&t), 3);
    let after = work.path().join("on-after-1.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before, &after, "on, partial: rows changed");
    expect_same(&t, &before, "dangling-on-partial");
    // On, everywhere: the other three go too.
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(true), None)
        .await
        .unwrap();
    assert_eq!(r.removed_delete_files_count, 3, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(total_delete_files(&t), 0);
    let after = work.path().join("on-after-2.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before, &after, "on: rows changed");
    expect_same(&t, &before, "dangling-on");
    // Nothing left to rewrite or remove.
    let r = floe::maintenance::rewrite_data_files(
        &cat,
        &t,
        None,
        &[("remove-dangling-deletes".to_string(), "true".to_string())].into(),
        None,
    )
    .await
    .unwrap();
    assert_eq!((r.file_groups, r.removed_delete_files_count), (0, 0));
    peer_check(&py, work.path(), &checks);
}

/// The three options through the CLI (`--option k=v`): bad values are refused with what to
/// use instead; a plan carries them to its tasks and its commit, which then also removes the
/// dangling partition-scoped delete file.
#[test]
fn rewrite_options_through_the_cli_and_a_distributed_plan() {
    use crate::cli::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.opts",
            "--schema",
            "id long, v string",
            "--property",
            "write.delete.mode=merge-on-read",
            "--property",
            "write.delete.granularity=partition",
        ],
    );
    let add = |f: usize| {
        let csv = d.path().join(format!("o{f}.csv"));
        let mut s = String::from("id,v\n");
        for i in f * 100..(f + 1) * 100 {
            s.push_str(&format!("{i},v{i}\n"));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.opts", csv.to_str().unwrap()]);
    };
    for f in 0..3 {
        add(f);
    }
    // One position delete file for the (only) partition, over the three files.
    ok(&wh, &["delete", "db.opts", "--where", "id % 5 = 0"]);
    add(3);
    let before = id_sum_and_count(&wh, "db.opts");
    let fails = |opt: &str, wants: &[&str]| {
        let o = floe(&wh, &["rewrite-data-files", "db.opts", "--option", opt]);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{opt} accepted");
        for w in wants {
            assert!(err.contains(w), "{opt}: error lacks '{w}':\n{err}");
        }
    };
    fails(
        "rewrite-job-order=largest",
        &[
            "largest",
            "none, bytes-asc, bytes-desc, files-asc, files-desc",
        ],
    );
    fails("output-spec-id=3", &["db.opts", "spec ids: 0"]);
    fails("output-spec-id=x", &["output-spec-id", "whole number"]);
    fails("remove-dangling-deletes=maybe", &["true or false"]);
    let plan = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--plan-only",
            "--option",
            "rewrite-all=true",
            "--option",
            "rewrite-job-order=files-desc",
            "--option",
            "output-spec-id=0",
            "--option",
            "remove-dangling-deletes=true",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(v["remove_dangling_deletes"], true, "{plan}");
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{plan}");
    assert_eq!(tasks[0]["output_spec_id"], 0, "{plan}");
    let plan_file = d.path().join("plan.json");
    std::fs::write(&plan_file, &plan).unwrap();
    let result = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--execute-task",
            plan_file.to_str().unwrap(),
            "--group",
            "0",
        ],
    );
    let result_file = d.path().join("result.json");
    std::fs::write(&result_file, &result).unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--commit",
            result_file.to_str().unwrap(),
        ],
    ))
    .unwrap();
    assert_eq!(v["rewritten_data_files_count"], 4, "{v}");
    assert_eq!(v["removed_delete_files_count"], 1, "{v}");
    assert_eq!(id_sum_and_count(&wh, "db.opts"), before);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.opts", "--json"])).unwrap();
    assert!(files
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["deletes"].as_array().unwrap().is_empty()));
}

/// A writer killed mid-upload leaves object_store's `<name>#<n>` staging file, which listings
/// skip; remove_orphan_files still finds and deletes it (once older than the cutoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_orphan_files_deletes_half_written_uploads() {
    let (_dir, cat) = sqlite_catalog();
    let c = TableCreation::new(parse_schema("id long, v string").unwrap());
    let t = cat
        .create_table(&parse_ident("o.t").unwrap(), c)
        .await
        .unwrap();
    let t = append(&cat, &t, vec![Ok(id_batch(0..10))])
        .await
        .unwrap()
        .table;
    let dir = std::path::PathBuf::from(t.metadata().location().trim_start_matches("file://"));
    let partial = dir.join("data/00000-killed.parquet#1");
    std::fs::create_dir_all(partial.parent().unwrap()).unwrap();
    std::fs::write(&partial, b"PAR1 half").unwrap();
    let future = chrono::Utc::now().timestamp_millis() + 60_000;
    let dry = floe::maintenance::remove_orphan_files(&cat, &t, Some(future), true)
        .await
        .unwrap();
    assert!(
        dry.orphan_file_locations
            .iter()
            .any(|p| p.ends_with("00000-killed.parquet#1")),
        "{dry:?}"
    );
    assert!(partial.exists(), "a dry run deletes nothing");
    floe::maintenance::remove_orphan_files(&cat, &t, Some(future), false)
        .await
        .unwrap();
    assert!(!partial.exists());
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 10);
}
