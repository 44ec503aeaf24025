//! Snapshot-dedup ingestion: after several full snapshots with every kind of change, the
//! published target equals DuckDB's `QUALIFY ROW_NUMBER() … = 1` over all raw snapshot files,
//! row for row, in both strategies and both write modes; the peers read it the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use arrow_array::RecordBatch;
use floe::catalog::{Catalog, TableCreation};
use floe::ingest::{ingest_snapshot, IngestOptions, Strategy};
use floe::scan::SnapshotSelector;
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;

use crate::common::*;

const DDL: &str = "date date, product_id long, store_id long, attribute_id long, attr_value string, update_id long";
const KEY: [&str; 4] = ["date", "product_id", "store_id", "attribute_id"];

fn key() -> Vec<String> {
    KEY.iter().map(|s| s.to_string()).collect()
}

/// Generates `snapshots` tiny full snapshots (3 days × 200 rows, 10% changes, every edge
/// case) starting `start` days ago; returns each snapshot's files in arrival order.
fn generate(py: &Path, dir: &Path, start_days_ago: i64) -> Vec<Vec<PathBuf>> {
    let start = (chrono::Utc::now().date_naive() - chrono::Days::new(start_days_ago as u64))
        .format("%Y-%m-%d")
        .to_string();
    let out = Command::new(py)
        .arg(repo().join("tools/bench/gen_snapshots.py"))
        .arg(dir)
        .args([
            "--days",
            "3",
            "--rows-per-day",
            "200",
            "--change-rate",
            "0.1",
        ])
        .args(["--snapshots", "4", "--files-per-day", "2", "--edge-cases"])
        .args(["--start-date", &start])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| dir.join(f["path"].as_str().unwrap()))
                .collect()
        })
        .collect()
}

/// DuckDB's answer over `files` (in arrival order), written to `out`.
fn reference(py: &Path, out: &Path, files: &[PathBuf]) {
    let o = Command::new(py)
        .arg(repo().join("tools/bench/dedup_reference.py"))
        .arg(out)
        .args(["--key", &KEY.join(","), "--version", "update_id"])
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn read(files: &[PathBuf]) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for f in files {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        out.extend(r.map(|b| b.unwrap()));
    }
    out
}

async fn staging(cat: &Catalog, name: &str, fv: FormatVersion, mode: &str) -> floe::Table {
    sorted_staging(cat, name, fv, mode, false).await
}

/// With `sorted`, files are sorted by the rest of the key, so the comparison is a streaming
/// merge rather than a hash join.
async fn sorted_staging(
    cat: &Catalog,
    name: &str,
    fv: FormatVersion,
    mode: &str,
    sorted: bool,
) -> floe::Table {
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    if sorted {
        c.sort_order = Some(
            floe::spec::parse_sort_order("product_id, store_id, attribute_id", &schema).unwrap(),
        );
    }
    c.format_version = fv;
    c.partition_spec = parse_partition_spec("day(date)", &schema).unwrap();
    c.properties = [("write.merge.mode".to_string(), mode.to_string())].into();
    cat.create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap()
}

/// Every strategy × write mode (× format) ingests the same four snapshots; each published
/// target equals DuckDB's dedup of all raw files, for floe and for DuckDB, pyiceberg and Spark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingested_target_equals_duckdb_dedup() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let snapshots = generate(&py, &work.path().join("data"), 10);
    let (_dir, cat) = sqlite_catalog();
    let expected = work.path().join("expected.parquet");
    reference(&py, &expected, &snapshots.concat());
    let mut checks = Vec::new();
    for (label, strategy, fv, mode, sorted) in [
        (
            "aware_mor_v3",
            Strategy::ChangeAware,
            FormatVersion::V3,
            "merge-on-read",
            false,
        ),
        (
            "aware_mor_v3_sorted",
            Strategy::ChangeAware,
            FormatVersion::V3,
            "merge-on-read",
            true,
        ),
        (
            "aware_mor_v2_sorted",
            Strategy::ChangeAware,
            FormatVersion::V2,
            "merge-on-read",
            true,
        ),
        (
            "aware_cow_v2",
            Strategy::ChangeAware,
            FormatVersion::V2,
            "copy-on-write",
            false,
        ),
        (
            "rewrite_v3",
            Strategy::Rewrite,
            FormatVersion::V3,
            "merge-on-read",
            false,
        ),
        (
            "rewrite_v2",
            Strategy::Rewrite,
            FormatVersion::V2,
            "copy-on-write",
            true,
        ),
    ] {
        let mut t = sorted_staging(&cat, &format!("ing.{label}_staging"), fv, mode, sorted).await;
        let target = parse_ident(&format!("ing.{label}_target")).unwrap();
        let mut o = IngestOptions::new(key(), "update_id");
        o.strategy = strategy;
        o.publish = Some(target.clone());
        // A tiny budget: the snapshot is spilled to disk and read back per partition.
        o.memory_budget_bytes = 4096;
        for (k, files) in snapshots.iter().enumerate() {
            let r = ingest_snapshot(&cat, &t, read(files).into_iter().map(Ok), &o)
                .await
                .unwrap();
            if k > 0 && strategy == Strategy::ChangeAware {
                // Only what changed is written: never the whole snapshot.
                assert!(r.changes.unchanged > 0, "{label}: {:?}", r.changes);
                assert!(
                    r.changes.updated + r.changes.inserted < r.snapshot_rows / 4,
                    "{label}: {:?}",
                    r.changes
                );
                if mode == "merge-on-read" {
                    assert!(
                        r.added_delete_files > 0 && r.removed_data_files == 0,
                        "{label}: {r:?}"
                    );
                } else {
                    assert!(
                        r.added_delete_files == 0 && r.removed_data_files > 0,
                        "{label}: {r:?}"
                    );
                }
            }
            if k > 0 && strategy == Strategy::ChangeAware {
                let c = r.changes;
                if sorted {
                    assert!(
                        c.merged_partitions > 0 && c.hashed_partitions == 0,
                        "{label}: {c:?}"
                    );
                } else {
                    assert!(
                        c.merged_partitions == 0 && c.hashed_partitions > 0,
                        "{label}: {c:?}"
                    );
                }
            }
            if k == snapshots.len() - 1 && strategy == Strategy::ChangeAware {
                assert_eq!(r.changes.duplicates, 1, "{label}: the duplicate key");
                assert_eq!(r.changes.stale, 1, "{label}: the late replay");
            }
            assert!(r.published.is_some());
            t = r.staging;
        }
        let target = cat.load_table(&target).await.unwrap();
        let got = work.path().join(format!("{label}.parquet"));
        floe_expected(&target, None, &got).await;
        assert_same_rows(
            &py,
            &expected,
            &got,
            &format!("{label}: floe vs DuckDB dedup"),
        );
        // The target's history is one snapshot per publish; staging stays independent.
        assert_eq!(
            target.metadata().snapshots().count(),
            snapshots.len(),
            "{label}"
        );
        checks.push(Check {
            name: format!("ingest-{label}"),
            metadata: target.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    peer_check(&py, work.path(), &checks);
}

/// `--retain-days` drops old day partitions by metadata alone; readers of the target keep
/// seeing a whole state while a new one is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_old_partitions_by_metadata() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    // Days 10, 9 and 8 ago; keep 9 days: the oldest partition goes.
    let snapshots = generate(&py, &work.path().join("data"), 10);
    let (_dir, cat) = sqlite_catalog();
    let t = staging(&cat, "ret.staging", FormatVersion::V3, "merge-on-read").await;
    let mut o = IngestOptions::new(key(), "update_id");
    o.publish = Some(parse_ident("ret.target").unwrap());
    let r = ingest_snapshot(&cat, &t, read(&snapshots[0]).into_iter().map(Ok), &o)
        .await
        .unwrap();
    assert_eq!(r.expired_data_files, 0);
    let before = cat
        .load_table(&parse_ident("ret.target").unwrap())
        .await
        .unwrap();
    o.retain_days = Some(9);
    let r = ingest_snapshot(
        &cat,
        &r.staging,
        read(&snapshots[1]).into_iter().map(Ok),
        &o,
    )
    .await
    .unwrap();
    assert!(r.expired_data_files > 0, "{r:?}");
    let last = r.staging.current_snapshot().unwrap();
    assert_eq!(last.summary().operation, floe::spec::Operation::Delete);
    assert_eq!(
        last.summary()
            .additional_properties
            .get("added-data-files")
            .map(String::as_str),
        None,
        "metadata only: nothing written"
    );
    let target = cat
        .load_table(&parse_ident("ret.target").unwrap())
        .await
        .unwrap();
    let batches = scan_rows(&target, SnapshotSelector::Current).await;
    let oldest = (chrono::Utc::now().date_naive() - chrono::Days::new(10))
        - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
    for b in &batches {
        let d = b
            .column_by_name("date")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Date32Array>()
            .unwrap();
        assert!(d.iter().all(|v| v.unwrap() as i64 > oldest.num_days()));
    }
    let expected = work.path().join("expected.parquet");
    reference(
        &py,
        &expected,
        &[snapshots[0].clone(), snapshots[1].clone()].concat(),
    );
    let kept: usize = read(&[expected])
        .iter()
        .map(|b| {
            let d = b
                .column_by_name("date")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::Date32Array>()
                .unwrap()
                .clone();
            d.iter()
                .filter(|v| v.unwrap() as i64 > oldest.num_days())
                .count()
        })
        .sum();
    assert!(kept > 0);
    assert_eq!(
        count(&batches),
        kept,
        "DuckDB's dedup without the expired day"
    );
    // The earlier publish is still readable as it was.
    assert_eq!(
        count(&scan_rows(&before, SnapshotSelector::Current).await),
        600
    );
}

/// Bad input gets a clear error and nothing is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshots_are_refused() {
    use arrow_array::{Date32Array, Int64Array, StringArray};
    use std::sync::Arc;
    let (_dir, cat) = sqlite_catalog();
    let t = staging(&cat, "bad.staging", FormatVersion::V3, "merge-on-read").await;
    let batch = |pid: Vec<Option<i64>>, extra: bool| {
        let n = pid.len();
        let mut cols: Vec<(&str, arrow_array::ArrayRef)> = vec![
            ("date", Arc::new(Date32Array::from(vec![20_000; n]))),
            ("product_id", Arc::new(Int64Array::from(pid))),
            ("store_id", Arc::new(Int64Array::from(vec![1; n]))),
            ("attribute_id", Arc::new(Int64Array::from(vec![1; n]))),
            ("attr_value", Arc::new(StringArray::from(vec!["x"; n]))),
            ("update_id", Arc::new(Int64Array::from(vec![1; n]))),
        ];
        if extra {
            cols.push(("surprise", Arc::new(Int64Array::from(vec![1; n]))));
        }
        RecordBatch::try_from_iter(cols).unwrap()
    };
    let o = IngestOptions::new(key(), "update_id");
    let before = t.metadata_location().to_string();
    let cases: Vec<(RecordBatch, IngestOptions, &str)> = vec![
        (
            batch(vec![Some(1), None], false),
            o.clone(),
            "key column 'product_id' is null",
        ),
        (
            batch(vec![Some(1)], true),
            o.clone(),
            "'surprise' is not in the schema",
        ),
        (
            batch(vec![Some(1)], false)
                .project(&[0, 1, 2, 3, 5])
                .unwrap(),
            o.clone(),
            "has no column 'attr_value'",
        ),
        (
            batch(vec![Some(1)], false),
            IngestOptions::new(vec!["date".into(), "nope".into()], "update_id"),
            "column 'nope' is not in the table",
        ),
        (
            batch(vec![Some(1)], false),
            IngestOptions::new(vec!["product_id".into()], "update_id"),
            "partition column 'date' is not part of the key",
        ),
        (
            batch(vec![Some(1)], false),
            IngestOptions::new(key(), "missing_version"),
            "column 'missing_version' is not in the table",
        ),
    ];
    for (b, o, msg) in cases {
        let e = ingest_snapshot(&cat, &t, vec![Ok(b)], &o)
            .await
            .unwrap_err();
        assert!(e.to_string().contains(msg), "expected '{msg}' in: {e}");
        assert!(
            e.to_string().contains("bad.staging"),
            "names the table: {e}"
        );
        let now = cat.load_table(t.ident()).await.unwrap();
        assert_eq!(
            now.metadata_location(),
            before,
            "nothing committed for: {msg}"
        );
    }
    // Key and version names are found as every user-written name is (case-insensitively).
    let upper = IngestOptions::new(
        key().iter().map(|k| k.to_uppercase()).collect(),
        "Update_Id",
    );
    let r = ingest_snapshot(&cat, &t, vec![Ok(batch(vec![Some(1)], false))], &upper)
        .await
        .unwrap();
    assert_eq!(r.snapshot_rows, 1);
    assert_eq!(
        count(&scan_rows(&r.staging, SnapshotSelector::Current).await),
        1
    );
}
