//! `rewrite_data_files` on tables written by floe, Spark and pyiceberg: the same rows, kept lineage and specs, races, kills and corrupt input.

use super::*;

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

/// A merge-on-read DELETE racing a rewrite: whichever commits second re-validates and either
/// commits or fails with a conflict; the delete is never lost, deleted rows never come back.
#[test]
fn delete_racing_a_rewrite_is_never_lost() {
    use std::process::Stdio;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    for (round, fv) in ["2", "3", "2", "3"].iter().enumerate() {
        let name = format!("db.race{round}");
        small_files_table(&wh, d.path(), &name, 6, fv);
        crate::common::ok(&wh, &["delete", &name, "--where", "id % 10 = 1"]);
        let spawn = |args: &[&str]| {
            crate::common::floe_cmd()
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
    use std::process::Stdio;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let future = (now_ms() + 3_600_000).to_string();
    for (round, delay_ms) in [5u64, 40, 120, 400].iter().enumerate() {
        let name = format!("db.kill{round}");
        small_files_table(&wh, d.path(), &name, 8, "2");
        crate::common::ok(&wh, &["delete", &name, "--where", "id % 7 = 0"]);
        let before = id_sum_and_count(&wh, &name);
        let table_dir = wh.join(format!("db/kill{round}"));
        let files_before: std::collections::BTreeSet<_> =
            files_under(&table_dir).into_iter().collect();
        let mut child = crate::common::floe_cmd()
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
            serde_json::from_str(&crate::common::ok(&wh, &["snapshots", &name, "--json"])).unwrap();
        let committed = snaps.as_array().unwrap().last().unwrap()["operation"] == "replace";
        crate::common::ok(
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

/// `--strategy sort` rewrites files sorted by the given order; bad strategy arguments are
/// refused before anything is written.
#[test]
fn rewrite_with_the_sort_strategy() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = crate::common::inputs(d.path());
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

/// A corrupt data or delete file fails the rewrite with its path; nothing is committed and
/// nothing written is left referenced.
#[test]
fn rewrite_of_corrupt_input_commits_nothing() {
    use crate::common::{floe, ok};
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

/// `--strategy zorder --zorder-by x,y` (and Spark's `sort-order='zorder(x,y)'`): every row is
/// kept (floe, DuckDB, pyiceberg and Spark read the same rows), each new file's rows are in
/// z-order (checked with an independent z-value: the interleaved bits of the sign-flipped
/// values), files record no sort order, a 2-D range reads fewer files than there are, and
/// `max-files-to-rewrite` caps the files rewritten. Bad z-order arguments commit nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zorder_rewrite_clusters_two_columns() {
    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use rand::{Rng, SeedableRng};
    let work = tempfile::tempdir().unwrap();
    let (_dir, cat) = fs_catalog();
    let mut c = TableCreation::new(parse_schema("x long, y long, v long").unwrap());
    c.format_version = FormatVersion::V2;
    let ident = parse_ident("mt.z").unwrap();
    let mut t = cat.create_table(&ident, c).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut rows: Vec<(i64, i64, i64)> = Vec::new();
    for f in 0..8 {
        let n = 2000;
        let chunk: Vec<(i64, i64, i64)> = (0..n)
            .map(|i| (rng.gen_range(-500..500), rng.gen_range(0..1000), f * n + i))
            .collect();
        let b = RecordBatch::try_from_iter([
            (
                "x",
                std::sync::Arc::new(Int64Array::from_iter_values(chunk.iter().map(|r| r.0))) as _,
            ),
            (
                "y",
                std::sync::Arc::new(Int64Array::from_iter_values(chunk.iter().map(|r| r.1))) as _,
            ),
            (
                "v",
                std::sync::Arc::new(Int64Array::from_iter_values(chunk.iter().map(|r| r.2))) as _,
            ),
        ])
        .unwrap();
        rows.extend(chunk);
        t = append(&cat, &t, vec![Ok(b)]).await.unwrap().table;
    }
    let read = |t: floe::Table| async move {
        let mut got: Vec<(i64, i64, i64)> = Vec::new();
        for b in Scan::new(&t).to_batches().await.unwrap() {
            let c = |i: usize| {
                b.column(i)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone()
            };
            let (x, y, v) = (c(0), c(1), c(2));
            got.extend((0..b.num_rows()).map(|r| (x.value(r), y.value(r), v.value(r))));
        }
        got.sort_unstable();
        got
    };
    rows.sort_unstable();
    // Bad arguments first: nothing is committed.
    let before = t.current_snapshot().unwrap().snapshot_id();
    for opts in [
        vec![("strategy", "zorder")],
        vec![("strategy", "zorder"), ("zorder-by", "x,nope")],
        vec![("strategy", "binpack"), ("zorder-by", "x")],
        vec![("strategy", "sort"), ("sort-order", "zorder()")],
    ] {
        let o: HashMap<String, String> = opts
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &o, None).await;
        assert!(r.is_err(), "{opts:?}");
    }
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(t.current_snapshot().unwrap().snapshot_id(), before);
    // max-files-to-rewrite: 3 of the 8 files.
    let o: HashMap<String, String> = [
        ("strategy", "zorder"),
        ("zorder-by", "x,y"),
        ("rewrite-all", "true"),
        ("max-files-to-rewrite", "3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &o, None)
        .await
        .unwrap();
    assert_eq!(r.rewritten_data_files_count, 3);
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(read(t.clone()).await, rows);
    // The z-ordered file (3 x 2,000 rows) has pages of 4,096 rows: the table does not set
    // write.parquet.page-row-limit (whose default, 20,000, would make one page).
    let plan = Scan::new(&t).plan().await.unwrap();
    let z_file = plan
        .files
        .iter()
        .find(|f| f.file.record_count() == 6000)
        .expect("the rewritten file");
    for firsts in crate::common::page_first_rows(z_file.file.file_path()) {
        assert_eq!(firsts, vec![0, 4096]);
    }
    // Everything, into small files (Spark's spelling of the order).
    let o: HashMap<String, String> = [
        ("strategy", "sort"),
        ("sort-order", "zorder(x, y)"),
        ("rewrite-all", "true"),
        ("target-file-size-bytes", "40000"),
        ("min-file-size-bytes", "1"),
        ("max-file-size-bytes", "80000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    floe::maintenance::rewrite_data_files(&cat, &t, None, &o, None)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(read(t.clone()).await, rows);
    let plan = Scan::new(&t).plan().await.unwrap();
    assert!(plan.files.len() >= 3, "{} files", plan.files.len());
    let z = |x: i64, y: i64| -> u128 {
        let (a, b) = ((x ^ i64::MIN) as u64, (y ^ i64::MIN) as u64);
        let mut out = 0u128;
        for bit in (0..64).rev() {
            out = out << 1 | u128::from(a >> bit & 1);
            out = out << 1 | u128::from(b >> bit & 1);
        }
        out
    };
    for f in &plan.files {
        assert_eq!(f.file.sort_order_id(), None, "no sort order recorded");
        let path = f.file.file_path().trim_start_matches("file://");
        let file = std::fs::File::open(path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let mut last = 0u128;
        for b in reader {
            let b = b.unwrap();
            let x = b
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .clone();
            let y = b
                .column(1)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .clone();
            for r in 0..b.num_rows() {
                let zv = z(x.value(r), y.value(r));
                assert!(zv >= last, "rows of {path} in z-order");
                last = zv;
            }
        }
    }
    // A 2-D range: the files' bounds rule some out.
    let box_scan = Scan::new(&t).filter(floe::expr::parse_expr("x < -400 AND y < 100").unwrap());
    let p = box_scan.plan().await.unwrap();
    assert!(
        p.files.len() < plan.files.len(),
        "{} of {} files",
        p.files.len(),
        plan.files.len()
    );
    // The peers read the same rows.
    let Some(py) = peers_python() else { return };
    let expected = work.path().join("z.parquet");
    write_parquet(&expected, &Scan::new(&t).to_batches().await.unwrap());
    peer_check(
        &py,
        work.path(),
        &[Check {
            name: "zorder".into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        }],
    );
}

/// After a partition change, one rewrite lays every old-spec file out in the new spec: the
/// files of other specs are one group (as Iceberg Java plans them), so `day(ts)` files
/// re-partitioned by `bucket(4, id)` and sorted become 4 files, not a set per old day.
/// Spark's `rewrite_data_files` on an identical table makes as many files; the rows stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_after_a_partition_change_lays_out_the_new_spec_in_one_pass() {
    use floe::spec::evolution::TableChange;
    let (dir, cat) = fs_catalog();
    let spark = std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1");
    let py = peers_python();
    let day_ms = 86_400_000_i64;
    let mut tables = Vec::new();
    for name in ["mt.respec_floe", "mt.respec_spark"] {
        let ident = parse_ident(name).unwrap();
        let schema = parse_schema("id long, ts timestamptz, v string").unwrap();
        let spec = floe::spec::parse_partition_spec("day(ts)", &schema).unwrap();
        let c = TableCreation::new(schema).with_partition_spec(spec);
        let mut t = cat.create_table(&ident, c).await.unwrap();
        // 12 days, 3 appends each: 36 files in 12 day partitions.
        for round in 0..3_i64 {
            let n = 12 * 40;
            let ids: Vec<i64> = (0..n).map(|i| round * 10_000 + i).collect();
            let ts: Vec<i64> = (0..n)
                .map(|i| (1_700_000_000_000 + (i % 12) * day_ms) * 1000)
                .collect();
            let b = arrow::array::RecordBatch::try_from_iter([
                (
                    "id",
                    std::sync::Arc::new(arrow::array::Int64Array::from(ids.clone())) as _,
                ),
                (
                    "ts",
                    std::sync::Arc::new(
                        arrow::array::TimestampMicrosecondArray::from(ts).with_timezone("+00:00"),
                    ) as _,
                ),
                (
                    "v",
                    std::sync::Arc::new(arrow::array::StringArray::from_iter_values(
                        ids.iter().map(|i| format!("v{i}")),
                    )) as _,
                ),
            ])
            .unwrap();
            t = append(&cat, &t, vec![Ok(b)]).await.unwrap().table;
        }
        let changes = [
            TableChange::ReplacePartitionSpec("bucket(4, id)".into()),
            TableChange::SetSortOrder("id".into()),
        ];
        let t = floe::txn::alter_table(&cat, &ident, &changes)
            .await
            .unwrap()
            .table;
        let files = Scan::new(&t).plan().await.unwrap().files.len();
        assert_eq!(files, 36);
        tables.push(t);
    }
    let before = dir.path().join("before.parquet");
    assert_eq!(floe_expected(&tables[0], None, &before).await, 3 * 12 * 40);
    let opts: HashMap<String, String> = [
        ("strategy".to_string(), "sort".to_string()),
        ("rewrite-all".to_string(), "true".to_string()),
    ]
    .into();
    let r = floe::maintenance::rewrite_data_files(&cat, &tables[0], None, &opts, None)
        .await
        .unwrap();
    assert_eq!(
        (
            r.rewritten_data_files_count,
            r.file_groups,
            r.added_data_files_count
        ),
        (36, 1, 4),
        "{r:?}"
    );
    let t = r.table.unwrap();
    let plan = Scan::new(&t).plan().await.unwrap();
    let spec_id = t.metadata().default_partition_spec_id();
    assert!(plan.files.iter().all(|f| f.spec.spec_id() == spec_id));
    let after = dir.path().join("after.parquet");
    floe_expected(&t, None, &after).await;
    if let Some(py) = &py {
        assert_same_rows(py, &before, &after, "rows after the rewrite");
    }
    // A second pass has nothing left to do.
    let again = floe::maintenance::rewrite_data_files(
        &cat,
        &t,
        None,
        &[("min-input-files".to_string(), "2".to_string())].into(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(again.rewritten_data_files_count, 0, "{again:?}");
    let (Some(py), true) = (py, spark) else {
        return;
    };
    spark_write(
        &py,
        dir.path(),
        "mt.respec_spark",
        "",
        &[
            "CALL local.system.rewrite_data_files(table => 'mt.respec_spark', strategy => 'sort', \
           options => map('rewrite-all', 'true'))",
        ],
    );
    let s = cat
        .load_table(&parse_ident("mt.respec_spark").unwrap())
        .await
        .unwrap();
    let spark_files = Scan::new(&s).plan().await.unwrap().files.len();
    assert_eq!(
        spark_files,
        plan.files.len(),
        "floe and Spark lay the table out alike"
    );
    let by_spark = dir.path().join("spark.parquet");
    floe_expected(&s, None, &by_spark).await;
    assert_same_rows(&py, &before, &by_spark, "rows after Spark's rewrite");
}

/// With the defaults, two tiny files are not enough for a group (`min-input-files` 5):
/// `rewrite-data-files` says so with its figures and what to pass (text, JSON and the
/// library's `reason`), and the option it names then rewrites them.
#[test]
fn an_empty_rewrite_says_why_and_what_to_pass() {
    use crate::common::ok;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = crate::common::inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.w",
            "--schema",
            "id long, name string, ts timestamptz",
        ],
    );
    ok(&wh, &["append", "db.w", &pq]);
    ok(&wh, &["append", "db.w", &csv]);
    let text = ok(&wh, &["rewrite-data-files", "db.w"]);
    assert!(
        text.contains("nothing to rewrite: 2 data files: 2 under min-file-size-bytes")
            && text.contains("min-input-files 5")
            && text.contains("--option min-input-files=2"),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["rewrite-data-files", "db.w", "--json"])).unwrap();
    assert_eq!(v["file_groups_count"], 0, "{v}");
    assert!(
        v["reason"].as_str().unwrap().contains("0 file groups"),
        "{v}"
    );
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.w",
            "--option",
            "min-input-files=2",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["rewritten_data_files_count"], 2, "{v}");
    assert!(v.get("reason").is_none(), "{v}");
}
