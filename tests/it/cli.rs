//! The `floe` binary: every command, exit codes, and two processes appending at once.

use crate::common::*;

#[test]
fn every_command_end_to_end() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.events",
            "--schema",
            "id long, name string, ts timestamptz",
            "--partition-by",
            "day(ts)",
            "--sort-by",
            "id",
            "--property",
            "write.parquet.compression-codec=zstd",
        ],
    );
    let out = ok(&wh, &["append", "db.events", &csv, &pq]);
    assert!(out.contains("appended 80 rows"), "{out}");
    assert_eq!(ok(&wh, &["scan", "db.events", "--count"]).trim(), "80");
    assert_eq!(
        ok(
            &wh,
            &[
                "scan",
                "db.events",
                "--count",
                "--where",
                "id >= 70 OR name = 'n3'"
            ]
        )
        .trim(),
        "11"
    );
    let json = ok(
        &wh,
        &[
            "scan",
            "db.events",
            "--columns",
            "id,name",
            "--where",
            "id < 3",
            "--json",
        ],
    );
    assert_eq!(json.lines().count(), 3, "{json}");
    assert!(json.contains("\"name\":\"n0\""), "{json}");
    let csv_out = ok(
        &wh,
        &["scan", "db.events", "--format", "csv", "--where", "id = 5"],
    );
    assert!(csv_out.starts_with("id,name,ts"), "{csv_out}");
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.events", "--json"])).unwrap();
    let first = snaps[0]["snapshot_id"].as_i64().unwrap();
    assert_eq!(snaps[0]["summary"]["total-records"], "80");
    ok(&wh, &["append", "db.events", &pq]);
    assert_eq!(ok(&wh, &["scan", "db.events", "--count"]).trim(), "110");
    assert_eq!(
        ok(
            &wh,
            &[
                "scan",
                "db.events",
                "--count",
                "--snapshot",
                &first.to_string()
            ]
        )
        .trim(),
        "80"
    );
    // Time travel by timestamp: now is the current state, before the first commit nothing.
    let now = chrono_now_ms();
    assert_eq!(
        ok(
            &wh,
            &["scan", "db.events", "--count", "--as-of", &now.to_string()]
        )
        .trim(),
        "110"
    );
    assert!(!floe(
        &wh,
        &[
            "scan",
            "db.events",
            "--count",
            "--as-of",
            "2001-01-01T00:00:00Z"
        ]
    )
    .status
    .success());
    // A table whose schema comes from a Parquet file.
    ok(&wh, &["create", "db.like", "--schema-from", &pq]);
    ok(&wh, &["append", "db.like", &pq]);
    assert_eq!(ok(&wh, &["scan", "db.like", "--count"]).trim(), "30");
    let desc: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "db.events", "--json"])).unwrap();
    assert_eq!(desc["format_version"], 2);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.events", "--json"])).unwrap();
    assert!(
        files.as_array().unwrap().len() >= 20,
        "one file per day at least: {files}"
    );
    assert!(ok(&wh, &["tables", "--json"]).contains("db.events"));
    assert!(ok(&wh, &["namespaces", "--json"]).contains("db"));
    let pq_out = d.path().join("out.parquet");
    ok(
        &wh,
        &[
            "scan",
            "db.events",
            "--format",
            "parquet",
            "-o",
            pq_out.to_str().unwrap(),
        ],
    );
    assert!(pq_out.exists());
    // Catalog-less read of the metadata file.
    let meta = desc["metadata_location"].as_str().unwrap().to_string();
    assert_eq!(
        ok(&wh, &["scan", "--metadata", &meta, "--count"]).trim(),
        "110"
    );
    ok(&wh, &["rename", "db.events", "db.events2"]);
    ok(&wh, &["drop", "db.events2", "--purge"]);
    assert!(!ok(&wh, &["tables"]).contains("events"));
}

#[test]
fn quickstart_builds_readable_tables() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("qs");
    // A relative "./dir", as the README runs it.
    let o = crate::common::floe_cmd()
        .current_dir(d.path())
        .args(["quickstart", "--dir", "./qs", "--rows", "20000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("demo.events") && out.contains("iceberg_scan"),
        "{out}"
    );
    assert_eq!(ok(&wh, &["scan", "demo.events", "--count"]).trim(), "20000");
    assert_eq!(
        ok(&wh, &["scan", "demo.events_clone", "--count"]).trim(),
        "20000"
    );
    // demo.events_v3 holds the same rows less the carts its merge-on-read DELETE removed.
    let not_carts = ok(
        &wh,
        &[
            "scan",
            "demo.events",
            "--count",
            "--where",
            "kind != 'cart'",
        ],
    );
    assert_eq!(
        ok(&wh, &["scan", "demo.events_v3", "--count"]).trim(),
        not_carts.trim()
    );
    assert!(
        out.contains("deletion vectors") && out.contains("compacted"),
        "{out}"
    );
    let files = ok(&wh, &["files", "demo.events_v3", "--json"]);
    assert!(
        files.contains(".puffin"),
        "the DELETE wrote deletion vectors: {files}"
    );
    // A second run starts over and builds the same tables.
    let o = crate::common::floe_cmd()
        .current_dir(d.path())
        .args(["quickstart", "--dir", "./qs", "--rows", "20000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        ok(&wh, &["scan", "demo.events_clone", "--count"]).trim(),
        "20000"
    );
    let d3: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "demo.events_v3", "--json"])).unwrap();
    assert_eq!(d3["format_version"], 3);
    assert_eq!(d3["next_row_id"], 20000);
}

#[test]
fn two_processes_append_concurrently_and_both_land() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = inputs(d.path());
    for (uri, name) in [
        (None, "db.c"),
        (
            Some(format!("file://{}", d.path().join("hadoop").display())),
            "db.c",
        ),
    ] {
        let mut base: Vec<String> = vec![];
        if let Some(u) = &uri {
            base = vec!["--catalog".into(), u.clone()];
        }
        let args = |rest: &[&str]| -> Vec<String> {
            base.iter()
                .cloned()
                .chain(rest.iter().map(|s| s.to_string()))
                .collect()
        };
        let a = args(&[
            "create",
            name,
            "--schema",
            "id long, name string, ts timestamptz",
        ]);
        ok(&wh, &a.iter().map(String::as_str).collect::<Vec<_>>());
        // Many rounds of two racing writers each.
        let rounds = 6;
        for _ in 0..rounds {
            let children: Vec<_> = [&csv, &pq]
                .into_iter()
                .map(|file| {
                    let a = args(&["append", name, file]);
                    crate::common::floe_cmd()
                        .arg("--warehouse")
                        .arg(&wh)
                        .args(&a)
                        .spawn()
                        .unwrap()
                })
                .collect();
            for mut c in children {
                assert!(
                    c.wait().unwrap().success(),
                    "a concurrent append failed ({uri:?})"
                );
            }
        }
        let a = args(&["scan", name, "--count"]);
        let n: usize = ok(&wh, &a.iter().map(String::as_str).collect::<Vec<_>>())
            .trim()
            .parse()
            .unwrap();
        assert_eq!(n, rounds * (50 + 30), "every append landed ({uri:?})");
        let a = args(&["snapshots", name, "--json"]);
        let snaps: serde_json::Value =
            serde_json::from_str(&ok(&wh, &a.iter().map(String::as_str).collect::<Vec<_>>()))
                .unwrap();
        assert_eq!(snaps.as_array().unwrap().len(), rounds * 2);
    }
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn dml_commands_end_to_end() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.m",
            "--schema",
            "id long, name string, ts timestamptz",
            "--property",
            "write.delete.mode=merge-on-read",
            "--property",
            "write.merge.mode=merge-on-read",
            "--format-version",
            "3",
        ],
    );
    ok(&wh, &["append", "db.m", &csv]);
    ok(&wh, &["append", "db.m", &pq]);
    let count = |filter: Option<&str>| -> usize {
        let mut a = vec!["scan", "db.m", "--count"];
        if let Some(f) = filter {
            a.extend(["--where", f]);
        }
        ok(&wh, &a).trim().parse().unwrap()
    };
    assert_eq!(count(None), 80);
    let out = ok(&wh, &["delete", "db.m", "--where", "id % 10 = 3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["deleted_records_count"], 8);
    assert_eq!(v["mode"], "merge-on-read");
    assert_eq!(
        v["added_delete_files_count"], 2,
        "one deletion vector per data file"
    );
    assert_eq!(count(None), 72);
    let out = ok(
        &wh,
        &[
            "update",
            "db.m",
            "--set",
            "name = 'x' || name",
            "--where",
            "id < 5",
        ],
    );
    assert!(out.contains("copy-on-write"), "{out}");
    assert_eq!(count(Some("name = 'xn0'")), 1);
    assert_eq!(count(Some("id = 3")), 0);
    // Upsert: ids 70..89, 73 was deleted, so 9 updates and 11 inserts.
    let upd = d.path().join("upd.csv");
    let mut s = String::from("id,name,ts\n");
    for i in 70..90 {
        s.push_str(&format!("{i},m,2024-02-01T00:00:00Z\n"));
    }
    std::fs::write(&upd, s).unwrap();
    let out = ok(
        &wh,
        &[
            "merge",
            "db.m",
            "--source",
            upd.to_str().unwrap(),
            "--on",
            "id",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["deleted_records_count"], 9);
    assert_eq!(v["added_records_count"], 20);
    assert_eq!(count(None), 83);
    assert_eq!(count(Some("name = 'm'")), 20);
    let stmt = format!(
        "MERGE INTO db.m AS t USING '{}' AS s ON t.id = s.id WHEN MATCHED THEN DELETE",
        upd.display()
    );
    ok(&wh, &["sql", &stmt]);
    assert_eq!(count(None), 63);
    ok(&wh, &["sql", "DELETE FROM db.m WHERE id >= 60"]);
    assert_eq!(count(None), 63 - 9);
    let out = ok(&wh, &["delete", "db.m", "--where", "id > 1000"]);
    assert!(out.contains("no rows matched"), "{out}");
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.m", "--json"])).unwrap();
    let ops: Vec<&str> = snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["operation"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        ops,
        [
            "append",
            "append",
            "delete",
            "overwrite",
            "overwrite",
            "delete",
            "delete"
        ]
    );
}

/// Two processes delete from the same data file at once, in every mode: one commits; the
/// other either commits a correct result or fails with a conflict. Rows are never lost and
/// deleted rows never come back.
#[test]
fn two_processes_delete_from_the_same_file() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let csv = d.path().join("one.csv");
    let mut s = String::from("id,name\n");
    for i in 0..600 {
        s.push_str(&format!("{i},n{i}\n"));
    }
    std::fs::write(&csv, s).unwrap();
    let modes: &[(&str, &[&str])] = &[
        ("cow", &["--format-version", "2"]),
        (
            "mor2",
            &[
                "--format-version",
                "2",
                "--property",
                "write.delete.mode=merge-on-read",
            ],
        ),
        (
            "mor3",
            &[
                "--format-version",
                "3",
                "--property",
                "write.delete.mode=merge-on-read",
            ],
        ),
    ];
    for (label, props) in modes {
        for round in 0..3 {
            let name = format!("db.{label}{round}");
            let mut a = vec!["create", name.as_str(), "--schema", "id long, name string"];
            a.extend(props.iter());
            ok(&wh, &a);
            ok(&wh, &["append", &name, csv.to_str().unwrap()]);
            let filters = ["id % 2 = 0", "id % 3 = 0"];
            let children: Vec<_> = filters
                .iter()
                .map(|f| {
                    crate::common::floe_cmd()
                        .arg("--warehouse")
                        .arg(&wh)
                        .args(["delete", &name, "--where", f])
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let mut landed = Vec::new();
            for (c, f) in children.into_iter().zip(filters) {
                let o = c.wait_with_output().unwrap();
                if o.status.success() {
                    landed.push(f);
                } else {
                    let err = String::from_utf8_lossy(&o.stderr);
                    assert!(
                        err.contains("concurrent") || err.contains("redo the operation"),
                        "{label}: a failed concurrent delete must be a conflict: {err}"
                    );
                }
            }
            assert!(!landed.is_empty(), "{label}: neither delete committed");
            let expected: Vec<i64> = (0..600)
                .filter(|i| {
                    !landed.iter().any(|f| {
                        (f.contains("% 2") && i % 2 == 0) || (f.contains("% 3") && i % 3 == 0)
                    })
                })
                .collect();
            let n: usize = ok(&wh, &["scan", &name, "--count"]).trim().parse().unwrap();
            assert_eq!(n, expected.len(), "{label}: rows after {landed:?}");
            let sum: i64 = ok(&wh, &["scan", &name, "--columns", "id", "--format", "csv"])
                .lines()
                .skip(1)
                .map(|l| l.trim().parse::<i64>().unwrap())
                .sum();
            assert_eq!(
                sum,
                expected.iter().sum::<i64>(),
                "{label}: which rows remain"
            );
        }
    }
}

/// A DELETE whose predicate covers whole partitions drops their files by metadata alone (no
/// data file is read: they are unreadable here) as a `delete` snapshot.
#[test]
fn delete_of_whole_partitions_reads_no_data() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let csv = d.path().join("p.csv");
    let mut s = String::from("id,cat\n");
    for i in 0..90 {
        s.push_str(&format!("{i},{}\n", ["a", "b", "c"][i % 3]));
    }
    std::fs::write(&csv, s).unwrap();
    ok(
        &wh,
        &[
            "create",
            "db.p",
            "--schema",
            "id long, cat string",
            "--partition-by",
            "cat",
        ],
    );
    ok(&wh, &["append", "db.p", csv.to_str().unwrap()]);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.p", "--json"])).unwrap();
    // Make every data file of partitions a and b unreadable: the delete must not open them.
    for f in files.as_array().unwrap() {
        let p = f["file_path"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://");
        if !p.contains("cat=c") {
            std::fs::write(p, b"not parquet").unwrap();
        }
    }
    let out = ok(
        &wh,
        &["delete", "db.p", "--where", "cat IN ('a', 'b')", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["deleted_records_count"], 60);
    assert_eq!(v["removed_data_files_count"], 2);
    assert_eq!(v["added_data_files_count"], 0);
    assert_eq!(ok(&wh, &["scan", "db.p", "--count"]).trim(), "30");
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.p", "--json"])).unwrap();
    assert_eq!(
        snaps.as_array().unwrap().last().unwrap()["operation"],
        "delete"
    );
}

/// `clone` and `ingest-snapshot` from the command line: CSV snapshots, `--json` results,
/// `--publish`, and the exit code of a clone onto an existing table without `--replace`.
#[test]
fn clone_and_ingest_snapshot_commands() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.staging",
            "--schema",
            "day date, id long, v string, ver long",
            "--partition-by",
            "day(day)",
            "--property",
            "write.merge.mode=merge-on-read",
            "--format-version",
            "3",
        ],
    );
    let snap = |name: &str, rows: &[(&str, i64, &str, i64)]| {
        let p = d.path().join(name);
        let mut s = String::from("day,id,v,ver\n");
        for (day, id, v, ver) in rows {
            s.push_str(&format!("{day},{id},{v},{ver}\n"));
        }
        std::fs::write(&p, s).unwrap();
        p.to_string_lossy().to_string()
    };
    let s1 = snap(
        "s1.csv",
        &[
            ("2026-01-01", 1, "a", 1),
            ("2026-01-01", 2, "b", 1),
            ("2026-01-02", 3, "c", 1),
        ],
    );
    // id 1 changes, id 2 vanishes (kept), id 4 is new, id 3 repeats unchanged; id 4 twice
    // with the same version: the later row wins.
    let s2 = snap(
        "s2.csv",
        &[
            ("2026-01-01", 1, "a2", 2),
            ("2026-01-02", 3, "c", 1),
            ("2026-01-02", 4, "x", 2),
            ("2026-01-02", 4, "d", 2),
        ],
    );
    let args = |f: &str| -> Vec<String> {
        [
            "ingest-snapshot",
            "db.staging",
            f,
            "--key",
            "day,id",
            "--version",
            "ver",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(
            ["--publish", "db.target", "--json"]
                .iter()
                .map(|s| s.to_string()),
        )
        .collect()
    };
    let run = |f: &str| -> serde_json::Value {
        let a = args(f);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        serde_json::from_str(&ok(&wh, &a)).unwrap()
    };
    let r1 = run(&s1);
    assert_eq!(r1["inserted_records_count"], 3, "{r1}");
    let r2 = run(&s2);
    assert_eq!(r2["updated_records_count"], 1, "{r2}");
    assert_eq!(r2["unchanged_records_count"], 1, "{r2}");
    assert_eq!(r2["inserted_records_count"], 1, "{r2}");
    assert_eq!(r2["duplicate_records_count"], 1, "{r2}");
    assert!(r2["published"]["replaced"].as_bool().unwrap(), "{r2}");
    // The same snapshot again changes nothing: the target is not published again.
    let target_snapshots = || ok(&wh, &["snapshots", "db.target", "--ids"]);
    let before = target_snapshots();
    let r3 = run(&s2);
    assert_eq!(r3["updated_records_count"], 0, "{r3}");
    assert_eq!(r3["inserted_records_count"], 0, "{r3}");
    assert!(r3["published"].is_null(), "{r3}");
    assert_eq!(target_snapshots(), before);
    let a = args(&s2);
    let a: Vec<&str> = a
        .iter()
        .map(String::as_str)
        .filter(|x| *x != "--json")
        .collect();
    assert!(ok(&wh, &a).contains("db.target not published again"));
    // A commit to the target since its clone: the same ingest publishes again (the target
    // becomes the staging state once more).
    let extra = d.path().join("extra.csv");
    std::fs::write(&extra, "day,id,v,ver\n2026-01-03,9,z,1\n").unwrap();
    ok(&wh, &["append", "db.target", extra.to_str().unwrap()]);
    let r4 = run(&s2);
    assert!(r4["published"]["replaced"].as_bool().unwrap(), "{r4}");
    let rows = ok(
        &wh,
        &["scan", "db.target", "--format", "csv", "--columns", "id"],
    );
    assert!(!rows.lines().any(|l| l == "9"), "{rows}");
    let rows = ok(
        &wh,
        &["scan", "db.target", "--format", "csv", "--columns", "id,v"],
    );
    let mut got: Vec<&str> = rows.lines().skip(1).collect();
    got.sort();
    assert_eq!(got, vec!["1,a2", "2,b", "3,c", "4,d"]);
    // clone: a new table; onto an existing one only with --replace.
    let c: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["clone", "db.target", "db.copy", "--json"])).unwrap();
    assert_eq!(c["replaced"], false, "{c}");
    let o = floe(&wh, &["clone", "db.target", "db.copy"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--replace"));
    ok(&wh, &["clone", "db.staging", "db.copy", "--replace"]);
    assert_eq!(ok(&wh, &["scan", "db.copy", "--count"]).trim(), "4");
    // A bad key is refused before anything is written.
    let o = floe(
        &wh,
        &[
            "ingest-snapshot",
            "db.staging",
            &s1,
            "--key",
            "id",
            "--version",
            "ver",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("partition column 'day'"));
}
