//! Bad input gets a clear error naming the file/table and what to do, a non-zero exit, and
//! the table unchanged.

use std::path::Path;

use crate::common::{floe, inputs, ok};

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
        &["unknown column 'nope'", "available columns: id"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--where", "id = 'x'"],
        &["'x' is not a valid bigint", "id = 'x'"],
    );
    fails(
        &wh,
        &["scan", "db.t", "--where", "id = 1 AND"],
        &["SQL syntax error", "EOF"],
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
    // A missing file is NotFound (exit 3), not Corrupt; rows streamed to a file are not left
    // behind half-written.
    assert_eq!(floe(&wh, &["scan", "db.t"]).status.code(), Some(3));
    let out = wh.join("out.csv");
    let o = floe(
        &wh,
        &[
            "scan",
            "db.t",
            "--format",
            "csv",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(!out.exists(), "a failed scan left {}", out.display());
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

/// Every file under `dir` whose name ends with `suffix`.
fn find_files(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(find_files(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out
}

#[test]
fn bad_dml_statements_commit_nothing() {
    let (d, wh, _, _) = setup();
    let before = metadata_location(&wh);
    fails(
        &wh,
        &["delete", "db.t", "--where", "nope = 1"],
        &["nope", "db.t"],
    );
    fails(
        &wh,
        &["update", "db.t", "--set", "nope = 1"],
        &["nope", "no such column"],
    );
    fails(
        &wh,
        &["update", "db.t", "--set", "id = 'abc'"],
        &["id", "CAST"],
    );
    fails(&wh, &["update", "db.t", "--set", "id = id +"], &["id"]);
    fails(&wh, &["sql", "DELETE FROM db.t WHERE id = 'x' +"], &[]);
    fails(
        &wh,
        &[
            "sql",
            "MERGE INTO db.t t USING 'x.parquet' s ON t.id > s.id WHEN MATCHED THEN DELETE",
        ],
        &["ON"],
    );
    // A target row matched by two source rows: an error, as in Spark.
    let dup = d.path().join("dup.csv");
    std::fs::write(&dup, "id,name,ts\n1,a,2024-01-01T00:00:00Z\n1,b,2024-01-01T00:00:00Z\n2,c,2024-01-01T00:00:00Z\n").unwrap();
    fails(
        &wh,
        &[
            "merge",
            "db.t",
            "--source",
            dup.to_str().unwrap(),
            "--on",
            "id",
        ],
        &["more than one source row", "db.t"],
    );
    // Key columns that do not exist.
    fails(
        &wh,
        &[
            "merge",
            "db.t",
            "--source",
            dup.to_str().unwrap(),
            "--on",
            "nope",
        ],
        &["nope"],
    );
    assert_eq!(metadata_location(&wh), before, "nothing was committed");
    assert_eq!(snapshot_count(&wh), 1);
    // No data or delete file was left behind by the failed statements.
    assert_eq!(find_files(&wh, "deletes.parquet").len(), 0);
    assert_eq!(find_files(&wh, ".parquet").len(), 1);
}

#[test]
fn corrupt_deletion_vectors_and_delete_files_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, _) = inputs(d.path());
    for (name, fv, suffix) in [("db.v3", "3", ".puffin"), ("db.v2", "2", "deletes.parquet")] {
        ok(
            &wh,
            &[
                "create",
                name,
                "--schema",
                "id long, name string, ts timestamptz",
                "--format-version",
                fv,
                "--property",
                "write.delete.mode=merge-on-read",
            ],
        );
        ok(&wh, &["append", name, &csv]);
        ok(&wh, &["delete", name, "--where", "id % 5 = 0"]);
        assert_eq!(ok(&wh, &["scan", name, "--count"]).trim(), "40");
        let table_dir = wh.join(name.replace('.', "/"));
        let files = find_files(&table_dir, suffix);
        assert_eq!(files.len(), 1, "{name}: one delete file");
        let f = &files[0];
        let good = std::fs::read(f).unwrap();
        let fname = f.file_name().unwrap().to_string_lossy().to_string();
        let mut cases: Vec<(Vec<u8>, &str)> = vec![(good[..12].to_vec(), fname.as_str())];
        if fv == "3" {
            // The blob starts after the 4-byte Puffin magic: length (4), DV magic (4), bitmap.
            let mut bad_magic = good.clone();
            bad_magic[9] ^= 0xff;
            cases.push((bad_magic, "magic"));
            let mut bad_crc = good.clone();
            bad_crc[14] ^= 0x01;
            cases.push((bad_crc, "CRC"));
        }
        let snaps = |wh: &Path| {
            let v: serde_json::Value =
                serde_json::from_str(&ok(wh, &["snapshots", name, "--json"])).unwrap();
            v.as_array().unwrap().len()
        };
        for (bytes, want) in cases {
            std::fs::write(f, &bytes).unwrap();
            fails(&wh, &["scan", name], &[want, name]);
            fails(&wh, &["delete", name, "--where", "id = 1"], &[want]);
            assert_eq!(snaps(&wh), 2, "{name}: nothing committed");
        }
        std::fs::write(f, &good).unwrap();
        assert_eq!(ok(&wh, &["scan", name, "--count"]).trim(), "40");
    }
}

#[test]
fn merge_on_read_on_a_v1_table_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, _) = inputs(d.path());
    ok(
        &wh,
        &[
            "create",
            "db.v1",
            "--schema",
            "id long, name string, ts timestamptz",
            "--format-version",
            "1",
            "--property",
            "write.delete.mode=merge-on-read",
        ],
    );
    ok(&wh, &["append", "db.v1", &csv]);
    fails(
        &wh,
        &["delete", "db.v1", "--where", "id = 1"],
        &["db.v1", "v1", "copy-on-write"],
    );
    assert_eq!(ok(&wh, &["scan", "db.v1", "--count"]).trim(), "50");
}

/// CSV headers: a column named twice is refused (the second was silently dropped), an empty
/// file says it has no header (it reported "column ''"), and a UTF-8 byte order mark is not
/// part of the first column's name (it was refused as an unknown column); nothing is
/// committed by the refused ones.
#[test]
fn csv_headers_are_read_as_written() {
    let (d, wh, _, _) = setup();
    let before = snapshot_count(&wh);
    let dup = d.path().join("dup.csv");
    std::fs::write(&dup, "id,name,id\n1,a,2\n").unwrap();
    fails(
        &wh,
        &["append", "db.t", dup.to_str().unwrap()],
        &["dup.csv", "'id' twice"],
    );
    let empty = d.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    fails(
        &wh,
        &["append", "db.t", empty.to_str().unwrap()],
        &["empty.csv", "no header line"],
    );
    assert_eq!(snapshot_count(&wh), before);
    let bom = d.path().join("bom.csv");
    std::fs::write(&bom, "\u{feff}id,name\n100041,x\n100042,y\n").unwrap();
    ok(&wh, &["append", "db.t", bom.to_str().unwrap()]);
    let out = ok(
        &wh,
        &["scan", "db.t", "--where", "id > 100000", "--format", "json"],
    );
    assert_eq!(
        out.lines().filter(|l| !l.trim().is_empty()).count(),
        2,
        "{out}"
    );
}

#[test]
fn change_files_missing_a_rule_column_or_with_a_bad_json_line_say_so() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.k",
            "--schema",
            "id long not null, v string, ver long, op int",
            "--primary-key",
            "id",
            "--property",
            "floe.merge.version-column=ver",
            "--property",
            "floe.merge.delete-column=op",
        ],
    );
    let file = |name: &str, text: &str| crate::common::write_input(d.path(), name, text);
    let no_ver = file("nover.csv", "id,v,op\n1,a,0\n");
    fails(
        &wh,
        &["upsert", "db.k", &no_ver],
        &[
            "nover.csv",
            "has no column 'ver'",
            "the version column",
            "id, v, op",
        ],
    );
    let no_op = file("noop.csv", "id,v,ver\n1,a,1\n");
    fails(
        &wh,
        &["upsert", "db.k", &no_op],
        &["noop.csv", "has no column 'op'", "the delete column"],
    );
    let null_ver = file("nullver.csv", "id,v,ver,op\n1,a,1,0\n2,b,,0\n");
    fails(
        &wh,
        &["upsert", "db.k", &null_ver],
        &["row 2", "nullver.csv", "version column 'ver' is null"],
    );
    let bad = file(
        "bad.jsonl",
        "{\"id\":1,\"v\":\"a\",\"ver\":1,\"op\":0}\n\n{\"id\":2,\"v\":\"b\",\"ver\":\"x\",\"op\":0}\n",
    );
    fails(&wh, &["upsert", "db.k", &bad], &["bad.jsonl", "line 3"]);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.k", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 0, "nothing was committed");
}
