//! Tables floe writes are read by DuckDB, pyiceberg and Spark exactly as floe reads them
//! (row-for-row checksums of sorted rows, at every snapshot).

use std::collections::HashMap;

use floe::catalog::{Catalog, TableCreation};
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;
use floe::Table;

use crate::common::*;

/// Builds a table with two appends; returns it and its snapshot ids.
async fn build(
    cat: &Catalog,
    name: &str,
    ddl: &str,
    partition: Option<&str>,
    sort: Option<&str>,
    fv: FormatVersion,
    props: &[(&str, &str)],
) -> (Table, Vec<i64>) {
    let schema = parse_schema(ddl).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = fv;
    if let Some(p) = partition {
        c.partition_spec = parse_partition_spec(p, &schema).unwrap();
    }
    if let Some(s) = sort {
        c.sort_order = Some(parse_sort_order(s, &schema).unwrap());
    }
    c.properties = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<HashMap<_, _>>();
    let t = cat
        .create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap();
    let r1 = append(cat, &t, vec![Ok(wide_batch(0, 700))]).await.unwrap();
    let r2 = append(
        cat,
        &r1.table,
        vec![Ok(wide_batch(700, 400)), Ok(wide_batch(1100, 250))],
    )
    .await
    .unwrap();
    (
        r2.table,
        vec![r1.snapshot_id.unwrap(), r2.snapshot_id.unwrap()],
    )
}

async fn checks_for(t: &Table, snaps: &[i64], work: &std::path::Path, label: &str) -> Vec<Check> {
    let mut out = Vec::new();
    for (i, s) in snaps.iter().enumerate() {
        let p = work.join(format!("{label}-{i}.parquet"));
        let n = floe_expected(t, Some(*s), &p).await;
        assert!(n > 0);
        out.push(Check {
            name: format!("{label}@{i}"),
            metadata: t.metadata_location().to_string(),
            snapshot_id: Some(*s),
            expected: p.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_read_floe_tables_row_for_row() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d1, sql) = sqlite_catalog();
    let (_d2, fs) = fs_catalog();
    let mut checks = Vec::new();
    // Every transform, v2, SQLite catalog.
    let (t, s) = build(
        &sql,
        "db.transforms",
        WIDE_DDL,
        Some("day(ts), bucket(8, id), truncate(3, name), cat"),
        None,
        FormatVersion::V2,
        &[],
    )
    .await;
    checks.extend(checks_for(&t, &s, work.path(), "transforms").await);
    let (t, s) = build(
        &sql,
        "db.time",
        WIDE_DDL,
        Some("year(d), hour(ts)"),
        Some("k desc nulls last"),
        FormatVersion::V2,
        &[("write.parquet.compression-codec", "snappy")],
    )
    .await;
    checks.extend(checks_for(&t, &s, work.path(), "time").await);
    // v3 with row lineage, Hadoop layout (Spark reads the directory layout it knows).
    let (t, s) = build(
        &fs,
        "db.v3",
        WIDE_DDL,
        Some("bucket(4, k)"),
        Some("id"),
        FormatVersion::V3,
        &[("write.target-file-size-bytes", "30000")],
    )
    .await;
    checks.extend(checks_for(&t, &s, work.path(), "v3").await);
    // Unpartitioned, void transform, small row groups.
    let (t, s) = build(
        &fs,
        "db.plain",
        WIDE_DDL,
        Some("void(cat), month(d)"),
        None,
        FormatVersion::V2,
        &[("write.parquet.row-group-size-bytes", "4096")],
    )
    .await;
    checks.extend(checks_for(&t, &s, work.path(), "plain").await);
    peer_check(&py, work.path(), &checks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_keeps_writing_a_floe_hadoop_table_and_duckdb_reads_the_directory() {
    let Some(py) = peers_python() else { return };
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() == Ok("1") {
        eprintln!("FLOE_PEERS_NO_SPARK=1: skipped");
        return;
    }
    let (dir, fs) = fs_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("bucket(4, id)", &schema).unwrap();
    let t = fs
        .create_table(&parse_ident("db.shared").unwrap(), c)
        .await
        .unwrap();
    append(&fs, &t, vec![Ok(id_batch(0..20))]).await.unwrap();
    spark_write(
        &py,
        dir.path(),
        "db.shared",
        "(100, 'spark-a'), (101, 'spark-b')",
        &[],
    );
    // floe sees Spark's commit (v3.metadata.json via version-hint) and appends after it.
    let t = fs
        .load_table(&parse_ident("db.shared").unwrap())
        .await
        .unwrap();
    assert_eq!(t.metadata().snapshots().len(), 2);
    let r = append(&fs, &t, vec![Ok(id_batch(20..25))]).await.unwrap();
    let rows = scan_rows(&r.table, floe::scan::SnapshotSelector::Current).await;
    assert_eq!(count(&rows), 27);
    assert_eq!(sum_i64(&rows, "id"), (0..25).sum::<i64>() + 201);
    // DuckDB and Spark read the table directory (version-hint.text), pyiceberg the metadata file.
    let work = tempfile::tempdir().unwrap();
    let exp = work.path().join("shared.parquet");
    floe_expected(&r.table, None, &exp).await;
    let table_dir = dir.path().join("db/shared");
    peer_check(
        &py,
        work.path(),
        &[Check {
            name: "hadoop-dir".into(),
            metadata: r.table.metadata_location().to_string(),
            snapshot_id: None,
            expected: exp.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        }],
    );
    let checks = serde_json::json!([{ "name": "dir", "table_dir": table_dir, "expected": exp, "engines": ["duckdb", "spark"] }]);
    let f = work.path().join("dir.json");
    std::fs::write(&f, checks.to_string()).unwrap();
    let o = std::process::Command::new(&py)
        .arg(repo().join("tools/peers/peer_check.py"))
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Spark writes a merge-on-read delete (a position delete file): floe applies it, and
    // still reads the snapshot before it.
    let before = r.snapshot_id.unwrap();
    spark_write(
        &py,
        dir.path(),
        "db.shared",
        "",
        &[
            "ALTER TABLE {t} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')",
            "DELETE FROM {t} WHERE id = 5",
        ],
    );
    let t = fs
        .load_table(&parse_ident("db.shared").unwrap())
        .await
        .unwrap();
    let rows = scan_rows(&t, floe::scan::SnapshotSelector::Current).await;
    assert_eq!(count(&rows), 26);
    assert_eq!(sum_i64(&rows, "id"), (0..25).sum::<i64>() + 201 - 5);
    assert_eq!(
        count(&scan_rows(&t, floe::scan::SnapshotSelector::Id(before)).await),
        27
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_read_the_quickstart_warehouse() {
    let Some(py) = peers_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("qs");
    let o = crate::common::floe_cmd()
        .args(["quickstart", "--rows", "30000", "--dir"])
        .arg(&wh)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let mut checks = Vec::new();
    for name in ["demo.events", "demo.events_v3"] {
        let t = cat.load_table(&parse_ident(name).unwrap()).await.unwrap();
        let snaps: Vec<i64> = t.metadata().snapshots().map(|s| s.snapshot_id()).collect();
        checks.extend(checks_for(&t, &snaps, dir.path(), name).await);
    }
    peer_check(&py, dir.path(), &checks);
}
