//! Bad input gets a clear error naming the file/table and what to do, a non-zero exit, and
//! the table unchanged.

use std::path::Path;

use crate::cli::{floe, inputs, ok};

fn fails(wh: &Path, args: &[&str], want: &[&str]) -> String {
    let o = floe(wh, args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "floe {args:?} should fail");
    for w in want {
        assert!(
            err.contains(w),
            "floe {args:?}: error should mention '{w}':\n{err}"
        );
    }
    err
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, String, String) {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.t",
            "--schema",
            "id long, name string, ts timestamptz",
        ],
    );
    ok(&wh, &["append", "db.t", &csv]);
    (d, wh, csv, pq)
}

fn metadata_location(wh: &Path) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&ok(wh, &["describe", "db.t", "--json"])).unwrap();
    v["metadata_location"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string()
}

fn snapshot_count(wh: &Path) -> usize {
    let v: serde_json::Value =
        serde_json::from_str(&ok(wh, &["snapshots", "db.t", "--json"])).unwrap();
    v.as_array().unwrap().len()
}

#[test]
fn bad_where_clauses_point_at_the_token() {
    let (_d, wh, _, _) = setup();
    fails(
        &wh,
        &["scan", "db.t", "--where", "nope = 1"],
        &["unknown column 'nope'", "position 0"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--where", "id = 'x'"],
        &["type mismatch", "'id'"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--where", "id = 1 AND"],
        &["unexpected end"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--where", "ts > 'yesterday'"],
        &["not a valid timestamptz"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--columns", "zzz"],
        &["unknown column 'zzz'", "db.t"],
    );
}

#[test]
fn parquet_that_does_not_fit_the_schema_commits_nothing() {
    let (d, wh, _, _) = setup();
    let before = snapshot_count(&wh);
    let bad = d.path().join("bad.parquet");
    let b = {
        use arrow::array::{RecordBatch, StringArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![(
            "id",
            Arc::new(StringArray::from(vec!["not-a-number"])) as _,
        )])
        .unwrap()
    };
    crate::common::write_parquet(&bad, &[b]);
    fails(
        &wh,
        &["append", "db.t", bad.to_str().unwrap()],
        &["column 'id'", "db.t"],
    );
    let extra = d.path().join("extra.parquet");
    let b = {
        use arrow::array::{Int64Array, RecordBatch};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int64Array::from(vec![1])) as _),
            ("surprise", Arc::new(Int64Array::from(vec![1])) as _),
        ])
        .unwrap()
    };
    crate::common::write_parquet(&extra, &[b]);
    fails(
        &wh,
        &["append", "db.t", extra.to_str().unwrap()],
        &["'surprise'", "not in the schema"],
    );
    let notpq = d.path().join("junk.parquet");
    std::fs::write(&notpq, b"definitely not parquet").unwrap();
    fails(
        &wh,
        &["append", "db.t", notpq.to_str().unwrap()],
        &["junk.parquet", "not a readable Parquet"],
    );
    fails(
        &wh,
        &["append", "db.t", "/nonexistent/x.parquet"],
        &["/nonexistent/x.parquet"],
    );
    assert_eq!(snapshot_count(&wh), before, "nothing committed");
}

#[test]
fn malformed_or_missing_metadata_is_reported_with_the_file() {
    let (_d, wh, _, _) = setup();
    let loc = metadata_location(&wh);
    let good = std::fs::read(&loc).unwrap();
    std::fs::write(&loc, &good[..good.len() / 2]).unwrap();
    let e = fails(
        &wh,
        &["scan", "db.t", "--count"],
        &["malformed or truncated", &loc],
    );
    assert!(e.contains("db.t"), "{e}");
    fails(&wh, &["scan", "--metadata", &loc], &["malformed"]);
    std::fs::remove_file(&loc).unwrap();
    fails(
        &wh,
        &["scan", "db.t", "--count"],
        &["does not exist", &loc, "re-register"],
    );
    // Appending to a table whose metadata is gone commits nothing and says why.
    fails(&wh, &["append", "db.t", "/dev/null"], &["does not exist"]);
    std::fs::write(&loc, &good).unwrap();
    assert_eq!(ok(&wh, &["scan", "db.t", "--count"]).trim(), "50");
}

#[test]
fn truncated_manifest_and_missing_data_file() {
    let (_d, wh, _, _) = setup();
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.t", "--json"])).unwrap();
    let data = files[0]["file_path"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    let meta_dir = Path::new(&metadata_location(&wh))
        .parent()
        .unwrap()
        .to_path_buf();
    let manifest = std::fs::read_dir(&meta_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-m0.avro"))
        .expect("a manifest");
    let good = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &good[..good.len() / 3]).unwrap();
    fails(&wh, &["scan", "db.t", "--count"], &["manifest", "db.t"]);
    std::fs::write(&manifest, &good).unwrap();
    let data_bytes = std::fs::read(&data).unwrap();
    std::fs::remove_file(&data).unwrap();
    fails(&wh, &["scan", "db.t"], &["db.t"]);
    std::fs::write(&data, data_bytes).unwrap();
    assert_eq!(
        ok(&wh, &["scan", "db.t", "--count", "--where", "id >= 0"]).trim(),
        "50"
    );
}

#[test]
fn bad_table_definitions() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    fails(
        &wh,
        &["create", "db.x", "--schema", "id lng"],
        &["unknown type 'lng'"],
    );
    fails(
        &wh,
        &[
            "create",
            "db.x",
            "--schema",
            "id long",
            "--partition-by",
            "bucket(id)",
        ],
        &["bucket(id)"],
    );
    fails(
        &wh,
        &[
            "create",
            "db.x",
            "--schema",
            "id long",
            "--partition-by",
            "day(id)",
        ],
        &["day(id)"],
    );
    fails(
        &wh,
        &[
            "create",
            "db.x",
            "--schema",
            "id long",
            "--format-version",
            "4",
        ],
        &["format-version"],
    );
    fails(
        &wh,
        &[
            "create",
            "db.x",
            "--schema",
            "id long",
            "--property",
            "write.delete.mode=sometimes",
        ],
        &["write.delete.mode"],
    );
    // v3-only types are refused in a v2 table.
    fails(
        &wh,
        &["create", "db.x", "--schema", "id long, t timestamp_ns"],
        &["db.x"],
    );
    assert!(!ok(&wh, &["tables"]).contains("db.x"), "nothing created");
}
