//! Maintenance jobs on tables written by floe and by Spark: the same rows before and after,
//! for floe and every peer, and the table stays writable.

mod distributed;
mod expire_orphans;
mod maintain;
mod rewrite_data_files;
mod rewrite_deletes;
mod rewrite_manifests;

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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A table of `files` small files (ids 0..files*rows_per_file) with merge-on-read deletes.
fn small_files_table(
    wh: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    files: usize,
    fv: &str,
) {
    use crate::common::ok;
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
    let out = crate::common::ok(wh, &["scan", name, "--columns", "id", "--format", "csv"]);
    let ids: Vec<i64> = out
        .lines()
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    (ids.iter().sum(), ids.len())
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
