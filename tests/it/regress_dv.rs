//! Regression (issue 14): DuckDB 1.5.5 returned wrong rows for v3 tables whose Puffin file
//! held several deletion vectors when one blob was at least as long as the blob after it
//! (its file cache hands a later blob the earlier blob's bytes). floe now lays blobs out so
//! that no blob can be misread; DuckDB, pyiceberg and Spark must read every shape below as
//! floe does, and floe as a plain filter over the appended ids.

use std::path::Path;

use floe::catalog::{Catalog, TableCreation};
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;
use floe::Table;

use crate::common::*;

/// A v3 merge-on-read table `dv.<name>` with one data file per range of ids.
async fn table(cat: &Catalog, name: &str, files: &[std::ops::Range<i64>]) -> Table {
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    c.format_version = FormatVersion::V3;
    c.properties = [
        ("write.delete.mode".to_string(), "merge-on-read".to_string()),
        ("write.update.mode".to_string(), "merge-on-read".to_string()),
    ]
    .into();
    let mut t = cat
        .create_table(&parse_ident(&format!("dv.{name}")).unwrap(), c)
        .await
        .unwrap();
    for ids in files {
        t = append(cat, &t, vec![Ok(id_batch(ids.clone()))])
            .await
            .unwrap()
            .table;
    }
    t
}

/// Runs `sql` and checks floe's rows against the ids `live` keeps out of `0..n`; returns the
/// peer check of the new snapshot (its expected rows are floe's scan).
async fn step(
    cat: &Catalog,
    work: &Path,
    name: &str,
    sql: &str,
    n: i64,
    live: impl Fn(i64) -> bool,
) -> Check {
    let t = floe::dml::execute(cat, sql, None).await.unwrap().table;
    let step = t.metadata().snapshots().count();
    let expected = work.join(format!("{name}-{step}.parquet"));
    let rows = floe_expected(&t, None, &expected).await;
    let batches = scan_rows(&t, floe::scan::SnapshotSelector::Current).await;
    let want: Vec<i64> = (0..n).filter(|i| live(*i)).collect();
    assert_eq!(
        (rows, sum_i64(&batches, "id")),
        (want.len(), want.iter().sum::<i64>()),
        "{name} after `{sql}`: floe's rows"
    );
    Check {
        name: format!("{name}@{step}"),
        metadata: t.metadata_location().to_string(),
        snapshot_id: t.current_snapshot().map(|s| s.snapshot_id()),
        expected: expected.to_string_lossy().to_string(),
        engines: None,
        refuse: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_vectors_sharing_a_puffin_file_read_the_same_everywhere() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let w = work.path();
    let mut checks = Vec::new();

    // The repro: one ranged DELETE over two data files (DuckDB read 2,000 of 11,000).
    table(&cat, "range2", &[0..200_000, 200_000..300_000]).await;
    let sql = "DELETE FROM dv.range2 WHERE id >= 1000 AND id < 290000";
    checks.push(
        step(&cat, w, "range2", sql, 300_000, |i| {
            !(1000..290_000).contains(&i)
        })
        .await,
    );

    // Scattered deletes over three files, the longest vector first.
    table(
        &cat,
        "scat3",
        &[0..200_000, 200_000..300_000, 300_000..330_000],
    )
    .await;
    let sql = "DELETE FROM dv.scat3 WHERE id % 3 = 0";
    checks.push(step(&cat, w, "scat3", sql, 330_000, |i| i % 3 != 0).await);

    // Four files, large and small, ranged and scattered vectors; then a second DELETE merges
    // new positions into every file's vector.
    let files = [
        0..120_000,
        120_000..190_000,
        190_000..195_000,
        195_000..235_000,
    ];
    table(&cat, "mixed4", &files).await;
    let first = |i: i64| {
        (i < 120_000 && i % 2 == 0)
            || ((120_000..190_000).contains(&i) && i % 7 == 0)
            || i == 190_001
            || (i >= 195_000 && i % 5 == 1)
    };
    let sql = "DELETE FROM dv.mixed4 WHERE (id < 120000 AND id % 2 = 0) \
               OR (id >= 120000 AND id < 190000 AND id % 7 = 0) OR id = 190001 \
               OR (id >= 195000 AND id % 5 = 1)";
    checks.push(step(&cat, w, "mixed4", sql, 235_000, |i| !first(i)).await);
    let second = |i: i64| (50_000..60_000).contains(&i) || i % 11 == 3;
    let sql = "DELETE FROM dv.mixed4 WHERE (id >= 50000 AND id < 60000) OR id % 11 = 3";
    checks.push(step(&cat, w, "mixed4", sql, 235_000, |i| !first(i) && !second(i)).await);

    // Two vectors of the same length, and an UPDATE (deletes plus new rows) over them.
    table(&cat, "equal2", &[0..70_000, 70_000..140_000]).await;
    let sql = "DELETE FROM dv.equal2 WHERE id % 2 = 0";
    checks.push(step(&cat, w, "equal2", sql, 140_000, |i| i % 2 != 0).await);
    let sql = "UPDATE dv.equal2 SET v = 'u' WHERE id % 3 = 1";
    checks.push(step(&cat, w, "equal2", sql, 140_000, |i| i % 2 != 0).await);

    peer_check(&py, w, &checks);
}
