//! The `floe` binary: every command, exit codes, and two processes appending at once.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

pub fn floe(wh: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .arg("--warehouse")
        .arg(wh)
        .args(args)
        .output()
        .expect("run floe")
}

pub fn ok(wh: &Path, args: &[&str]) -> String {
    let o = floe(wh, args);
    assert!(
        o.status.success(),
        "floe {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// A CSV and a Parquet input file for `id long, name string, ts timestamptz`.
pub fn inputs(dir: &Path) -> (String, String) {
    let csv = dir.join("in.csv");
    let mut s = String::from("id,name,ts\n");
    for i in 0..50 {
        s.push_str(&format!("{i},n{i},2024-01-{:02}T10:00:00Z\n", 1 + i % 20));
    }
    std::fs::write(&csv, s).unwrap();
    let pq = dir.join("in.parquet");
    let b = {
        use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from((50..80).collect::<Vec<i64>>())) as _,
            ),
            (
                "name",
                Arc::new(StringArray::from(
                    (50..80).map(|i| format!("n{i}")).collect::<Vec<_>>(),
                )) as _,
            ),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from(
                        (50..80)
                            .map(|i| 1_706_000_000_000_000 + i * 1_000_000)
                            .collect::<Vec<i64>>(),
                    )
                    .with_timezone("UTC"),
                ) as _,
            ),
        ])
        .unwrap()
    };
    write_parquet(&pq, &[b]);
    (
        csv.to_string_lossy().to_string(),
        pq.to_string_lossy().to_string(),
    )
}

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
    let o = Command::new(env!("CARGO_BIN_EXE_floe"))
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
        ok(&wh, &["scan", "demo.events_v3", "--count"]).trim(),
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
                    Command::new(env!("CARGO_BIN_EXE_floe"))
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
