//! floe's clustering benchmark: the same rows (the core shape plus a random 64-bit `key`)
//! written twice — unclustered (unpartitioned, unsorted) and clustered (`bucket(64, key)`
//! partitions, sorted by `key`, a bloom filter on `key`) — then point lookups (`key = X`) and
//! `key IN (100 values)` on both: time, data files, row groups, pages and bytes read (the
//! scan's own counters), and DuckDB `iceberg_scan` with the same filter on the same tables;
//! the tables' sizes. Then the same rows sorted by `a` and z-ordered on `a, b` (a
//! `rewrite_data_files` with `strategy=zorder`) under a 2-D range query on `a` and `b`. Ratios
//! in the same run. Last, a MERGE of 1M source rows (half existing keys, half new) into
//! clones of the clustered table, partition-aligned vs in one pass
//! (`floe.merge.partition-aligned=false`), merge-on-read and copy-on-write: time and peak RSS
//! (each MERGE in a child process of its own, the source streamed from a Parquet file).
//!
//! Settings (environment):
//! * `FLOE_BENCH_ROWS` — rows (default 20,000,000);
//! * `FLOE_BENCH_LOOKUPS` — point lookups timed (default 10);
//! * `FLOE_BENCH_MERGE_ROWS` — MERGE source rows (default 1,000,000; 0 skips the MERGE);
//!   `FLOE_BENCH_MERGE_ONLY=1` runs only the MERGE section, `FLOE_BENCH_MERGE_SOURCE_MEMORY`
//!   sets `floe.merge.source-memory-bytes` on both tables;
//! * `FLOE_BENCH_PAGE_ROWS` — `write.parquet.page-row-limit` of the two 2-D tables (sorted by
//!   `a`, z-ordered; tables of their own);
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only;
//! * `FLOE_BENCH_DIR` — scratch (default `~/.cache/floe/bench`);
//! * `FLOE_BENCH_REUSE=1` — read the tables a previous run with the same row count left;
//! * `FLOE_BENCH_PROFILE_LOOKUPS=N` — only N clustered point lookups (for a profiler);
//! * `FLOE_PEERS_PYTHON` — the peers venv python.
//!
//! Baseline: `tools/bench/baseline_duckdb.py --where`.
//!
//! Run: `CARGO_TARGET_DIR=~/.cache/floe-target-bench cargo bench --bench cluster`.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    Date32Array, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use futures::StreamExt;
use rand::{Rng, SeedableRng};

use common::{mb, python, run_json, settle, verdict};
use floe::expr::parse_expr;
use floe::scan::Scan;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order};
use floe::table::parse_ident;
use floe::{Catalog, Table, TableCreation};

const DDL: &str = "id long, k long, a double, b double, s1 string, s2 string, ts timestamp, \
                   d date, key long not null";
const BATCH_ROWS: usize = 500_000;
const SEED: u64 = 0x5eed_c1a5;

fn num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `key` of every row, in row order (random, distinct with overwhelming probability).
fn keys(rows: usize) -> Vec<i64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    (0..rows).map(|_| rng.gen::<i64>()).collect()
}

/// Rows `from..from + n` of the data set: the core benchmark's distributions
/// (`tools/bench/gen_data.py`: `id` sequential, `k` uniform below 1M, `a` in [0, 1000), `b` in
/// [-1, 1), `s1` 9–15 random alphanumerics, `s2` one of 100 values, `ts` and `d` uniform over
/// 30 days), generated here, plus the random `key`.
fn batch(from: usize, n: usize, key: &[i64]) -> RecordBatch {
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED ^ from as u64);
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let s1: Vec<String> = (0..n)
        .map(|_| {
            let len = rng.gen_range(9..=15);
            (0..len)
                .map(|_| ALNUM[rng.gen_range(0..ALNUM.len())] as char)
                .collect()
        })
        .collect();
    let day0_us = 1_704_067_200_000_000i64;
    let span_us = 30 * 86_400 * 1_000_000i64;
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(from as i64..(from + n) as i64)) as _,
        ),
        (
            "k",
            Arc::new(Int64Array::from_iter_values(
                (0..n).map(|_| rng.gen_range(0..1_000_000)),
            )) as _,
        ),
        (
            "a",
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|_| rng.gen_range(0.0..1000.0)),
            )) as _,
        ),
        (
            "b",
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|_| rng.gen_range(-1.0..1.0)),
            )) as _,
        ),
        ("s1", Arc::new(StringArray::from_iter_values(s1)) as _),
        (
            "s2",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|_| format!("category-{:02}", rng.gen_range(0..100))),
            )) as _,
        ),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                (0..n).map(|_| day0_us + rng.gen_range(0..span_us)),
            )) as _,
        ),
        (
            "d",
            Arc::new(Date32Array::from_iter_values(
                (0..n).map(|_| 19723 + rng.gen_range(0..30)),
            )) as _,
        ),
        (
            "key",
            Arc::new(Int64Array::from(key[from..from + n].to_vec())) as _,
        ),
    ])
    .unwrap()
}

/// Creates table `name` and appends every row (untimed set-up); returns it and its data
/// bytes.
async fn write(cat: &Catalog, name: &str, layout: Layout, key: &[i64]) -> (Table, u64) {
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    match layout {
        Layout::Clustered => {
            c.partition_spec = parse_partition_spec("bucket(64, key)", &schema).unwrap();
            c.sort_order = Some(parse_sort_order("key", &schema).unwrap());
            c = c.with_property("write.parquet.bloom-filter-enabled.column.key", "true");
        }
        Layout::SortedByA => c.sort_order = Some(parse_sort_order("a", &schema).unwrap()),
        Layout::Plain | Layout::ZOrder => {}
    }
    if let (Layout::SortedByA | Layout::ZOrder, Some(n)) = (layout, page_rows()) {
        c = c.with_property("write.parquet.page-row-limit", n.to_string());
    }
    let t = cat
        .create_table(&parse_ident(&format!("bench.{name}")).unwrap(), c)
        .await
        .unwrap();
    let rows = key.len();
    let batches = (0..rows)
        .step_by(BATCH_ROWS)
        .map(|from| Ok(batch(from, BATCH_ROWS.min(rows - from), key)));
    let r = floe::txn::append(cat, &t, batches).await.unwrap();
    if layout != Layout::ZOrder {
        return (r.table, r.added_bytes);
    }
    let options = [
        ("strategy", "zorder"),
        ("zorder-by", ZORDER_BY),
        ("rewrite-all", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let z = floe::maintenance::rewrite_data_files(cat, &r.table, None, &options, None)
        .await
        .unwrap();
    let t = z.table.expect("the z-order rewrite commits");
    let bytes = data_bytes(&t).await;
    (t, bytes)
}

/// The bytes of a table's live data files.
async fn data_bytes(t: &Table) -> u64 {
    let plan = Scan::new(t).plan().await.unwrap();
    plan.files.iter().map(|f| f.file.file_size_in_bytes()).sum()
}

/// How a bench table is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Unpartitioned, unsorted.
    Plain,
    /// `bucket(64, key)`, sorted by `key`, a bloom filter on `key`.
    Clustered,
    /// Unpartitioned, sorted by `a` (the first z-order column).
    SortedByA,
    /// Unpartitioned, z-ordered on `a, b` by `rewrite_data_files`.
    ZOrder,
}

/// The z-order columns, and the 2-D range query over them (5% of each range: 0.25% of rows).
/// Spark's z-order interleaves the columns' order-preserving bytes, so a column whose high
/// bits are constant (`k`, a long below 1M) adds nothing until its low bits: z-ordering
/// `k, a` is close to sorting by `a`. The two doubles (`a` in [0, 1000), `b` in [-1, 1))
/// vary from their sign and exponent bits on.
const ZORDER_BY: &str = "a,b";
const BOX_FILTER: &str = "a >= 600 AND a < 650 AND b >= 0.2 AND b < 0.3";

/// `FLOE_BENCH_PAGE_ROWS`: `write.parquet.page-row-limit` of the sorted-by-`a` and z-ordered
/// tables (default: unset, so 20,000 rows, Iceberg's default, for the sort and 4,096 for the
/// z-order rewrite).
fn page_rows() -> Option<usize> {
    std::env::var("FLOE_BENCH_PAGE_ROWS").ok()?.parse().ok()
}

/// Table `name` as a previous run left it (`FLOE_BENCH_REUSE=1`), with its data bytes.
async fn existing(cat: &Catalog, name: &str, reuse: bool) -> Option<(Table, u64)> {
    if !reuse {
        return None;
    }
    let t = cat
        .load_table(&parse_ident(&format!("bench.{name}")).unwrap())
        .await
        .ok()?;
    let bytes = data_bytes(&t).await;
    Some((t, bytes))
}

/// What one filtered read cost.
#[derive(Default, Clone, Copy)]
struct Read {
    secs: f64,
    /// Of `secs`, planning (manifests, partition and metrics pruning).
    plan_secs: f64,
    rows: u64,
    files: usize,
    row_groups: u64,
    pages: u64,
    bytes: u64,
}

/// Reads the rows of `t` matching `filter` (all columns), best of two, with that read's
/// counters.
async fn read(t: &Table, filter: &str) -> Read {
    let mut best = Read {
        secs: f64::MAX,
        ..Read::default()
    };
    for _ in 0..2 {
        let t0 = Instant::now();
        let scan = Scan::new(t).filter(parse_expr(filter).unwrap());
        let plan = scan.plan().await.unwrap();
        let plan_secs = t0.elapsed().as_secs_f64();
        let files = plan.files.len();
        let counters = plan.read_counters();
        let mut stream = scan.read(plan).unwrap();
        let mut rows = 0;
        while let Some(b) = stream.next().await {
            rows += b.unwrap().num_rows() as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        let s = counters.stats();
        let r = Read {
            secs,
            plan_secs,
            rows,
            files,
            row_groups: s.row_groups - s.row_groups_pruned,
            pages: s.pages - s.pages_pruned,
            bytes: s.row_group_bytes_read,
        };
        if secs < best.secs {
            best = r;
        }
    }
    best
}

/// DuckDB's best time for the same filter, and its row count.
fn duckdb(py: &Option<PathBuf>, t: &Table, filter: &str) -> Option<(f64, u64)> {
    let py = py.as_ref()?;
    let metadata = t
        .metadata_location()
        .trim_start_matches("file://")
        .to_string();
    let v = run_json(
        py,
        &[
            "tools/bench/baseline_duckdb.py",
            "--metadata",
            &metadata,
            "--where",
            filter,
            "--threads",
            "2",
        ],
    )?;
    Some((v["duckdb_scan_s"].as_f64()?, v["rows"].as_u64()?))
}

/// Sums of the per-lookup reads.
fn total(rs: &[Read]) -> Read {
    rs.iter().fold(Read::default(), |a, r| Read {
        secs: a.secs + r.secs,
        plan_secs: a.plan_secs + r.plan_secs,
        rows: a.rows + r.rows,
        files: a.files + r.files,
        row_groups: a.row_groups + r.row_groups,
        pages: a.pages + r.pages,
        bytes: a.bytes + r.bytes,
    })
}

/// The MERGE each child process runs.
const MERGE_SQL: &str = "MERGE INTO {t} t USING s ON t.key = s.key \
                         WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *";

/// One MERGE's cost, as its child process reports it.
struct MergeRun {
    secs: f64,
    peak_rss_mb: f64,
    removed: u64,
    written: u64,
    aligned: bool,
}

/// In a child process (`FLOE_BENCH_MERGE_CHILD=<warehouse>|<table>|<source.parquet>`): runs
/// the MERGE with the source streamed from the file and prints its time, peak RSS and counts.
fn merge_child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let (wh, table, source) = (parts[0], parts[1], parts[2]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cat = Catalog::open(None, Some(wh), None).unwrap();
    let t0 = Instant::now();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(source).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let rows = floe::dml::SourceRows::new(reader.map(|b| Ok(b.unwrap())));
    let sql = MERGE_SQL.replace("{t}", table);
    let r = rt
        .block_on(floe::dml::execute_with(&cat, &sql, Some(rows), None))
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let hwm = common::status_kb("VmHWM:").unwrap_or(0);
    println!(
        "{}",
        serde_json::json!({
            "secs": secs,
            "peak_rss_kb": hwm,
            "removed": r.removed_rows,
            "written": r.written_rows,
            "aligned": r.aligned.is_some(),
        })
    );
}

/// Clones `from` as `name` with `properties`, then runs the MERGE on it in a child process.
async fn merge_run(
    cat: &Catalog,
    wh: &std::path::Path,
    from: &Table,
    name: &str,
    properties: &[(&str, &str)],
    source: &std::path::Path,
) -> MergeRun {
    let ident = parse_ident(&format!("bench.{name}")).unwrap();
    floe::txn::clone_table(cat, from, &Default::default(), &ident, true)
        .await
        .unwrap();
    // `FLOE_BENCH_MERGE_SOURCE_MEMORY`: the source memory budget of both MERGEs.
    let budget = std::env::var("FLOE_BENCH_MERGE_SOURCE_MEMORY").ok();
    let set = properties
        .iter()
        .map(|(k, v)| (*k, *v))
        .chain(
            budget
                .as_deref()
                .map(|b| (floe::spec::MERGE_SOURCE_MEMORY_BYTES, b)),
        )
        .map(|(k, v)| format!("'{k}'='{v}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let changes = floe::spec::parse_alter_clause(&format!("SET TBLPROPERTIES ({set})")).unwrap();
    floe::txn::alter_table(cat, &ident, &changes).await.unwrap();
    settle();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(
            "FLOE_BENCH_MERGE_CHILD",
            format!("{}|bench.{name}|{}", wh.display(), source.display()),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "MERGE child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the MERGE child prints its result");
    MergeRun {
        secs: v["secs"].as_f64().unwrap(),
        peak_rss_mb: v["peak_rss_kb"].as_f64().unwrap() / 1024.0,
        removed: v["removed"].as_u64().unwrap(),
        written: v["written"].as_u64().unwrap(),
        aligned: v["aligned"].as_bool().unwrap(),
    }
}

/// The MERGE source: `n` rows of the data set's shape, half of them keys of the table (spread
/// over it), half new keys.
fn merge_source(dir: &std::path::Path, key: &[i64], n: usize) -> PathBuf {
    let path = dir.join(format!("merge-source-{n}.parquet"));
    if path.exists() {
        return path; // the same rows (generated from fixed seeds)
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED ^ 0x3e7);
    let src_keys: Vec<i64> = (0..n)
        .map(|i| match i % 2 {
            0 => key[(i / 2 * 7919) % key.len()],
            _ => rng.gen(),
        })
        .collect();
    let f = std::fs::File::create(&path).unwrap();
    let first = batch(0, BATCH_ROWS.min(n), &src_keys);
    let mut w = parquet::arrow::ArrowWriter::try_new(f, first.schema(), None).unwrap();
    w.write(&first).unwrap();
    for from in (BATCH_ROWS..n).step_by(BATCH_ROWS) {
        w.write(&batch(from, BATCH_ROWS.min(n - from), &src_keys))
            .unwrap();
    }
    w.close().unwrap();
    path
}

/// The MERGE section: 1M source rows into clones of the clustered table, aligned and in one
/// pass, under merge-on-read and copy-on-write.
async fn merge_section(
    cat: &Catalog,
    wh: &std::path::Path,
    dir: &std::path::Path,
    clustered: &Table,
    key: &[i64],
) {
    let merge_rows = num("FLOE_BENCH_MERGE_ROWS", 1_000_000).min(key.len());
    if merge_rows == 0 {
        return;
    }
    let source = merge_source(dir, key, merge_rows);
    for mode in ["merge-on-read", "copy-on-write"] {
        let short = &mode[..1];
        let aligned = merge_run(
            cat,
            wh,
            clustered,
            &format!("merge_{short}_aligned"),
            &[("write.merge.mode", mode)],
            &source,
        )
        .await;
        let one_pass = merge_run(
            cat,
            wh,
            clustered,
            &format!("merge_{short}_one_pass"),
            &[
                ("write.merge.mode", mode),
                ("floe.merge.partition-aligned", "false"),
            ],
            &source,
        )
        .await;
        assert!(aligned.aligned && !one_pass.aligned);
        assert_eq!(
            (aligned.removed, aligned.written),
            (one_pass.removed, one_pass.written),
            "both MERGEs change the same rows"
        );
        let rss_x = one_pass.peak_rss_mb / aligned.peak_rss_mb.max(1e-9);
        println!(
            "MERGE of {merge_rows} rows ({} matched) into the clustered table, {mode}: aligned {:.1} s, peak RSS {:.0} MB | one pass {:.1} s, peak RSS {:.0} MB | peak RSS {rss_x:.1}x lower (target >= 4x) {}, {:.2}x the time",
            aligned.removed,
            aligned.secs,
            aligned.peak_rss_mb,
            one_pass.secs,
            one_pass.peak_rss_mb,
            verdict(rss_x >= 4.0),
            aligned.secs / one_pass.secs.max(1e-9)
        );
    }
}

fn main() {
    if let Ok(spec) = std::env::var("FLOE_BENCH_MERGE_CHILD") {
        return merge_child(&spec);
    }
    let rows = num("FLOE_BENCH_ROWS", 20_000_000);
    let lookups = num("FLOE_BENCH_LOOKUPS", 10).max(1);
    let py = if std::env::var("FLOE_BENCH_NO_BASELINE").as_deref() == Ok("1") {
        None
    } else {
        python()
    };
    let dir = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench"))
        .join(format!("cluster-{rows}"));
    let reuse = std::env::var("FLOE_BENCH_REUSE").as_deref() == Ok("1");
    if !reuse {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let wh = dir.join("wh");
        let cat = Catalog::open(None, wh.to_str(), None).unwrap();
        let key = keys(rows);
        eprintln!("[cluster bench] writing {rows} rows twice (untimed)");
        let t0 = Instant::now();
        let (plain, plain_bytes) = match existing(&cat, "plain", reuse).await {
            Some(t) => t,
            None => write(&cat, "plain", Layout::Plain, &key).await,
        };
        let plain_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let (clustered, clustered_bytes) = match existing(&cat, "clustered", reuse).await {
            Some(t) => t,
            None => write(&cat, "clustered", Layout::Clustered, &key).await,
        };
        let clustered_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        // Both 2-D tables with `FLOE_BENCH_PAGE_ROWS` pages get names of their own.
        let suffix = page_rows().map(|n| format!("_p{n}")).unwrap_or_default();
        let (sorted_name, zorder_name) = (format!("sorted_a{suffix}"), format!("zorder_ab{suffix}"));
        let (sorted_a, sorted_bytes) = match existing(&cat, &sorted_name, reuse).await {
            Some(t) => t,
            None => write(&cat, &sorted_name, Layout::SortedByA, &key).await,
        };
        let sorted_s = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let (zorder, zorder_bytes) = match existing(&cat, &zorder_name, reuse).await {
            Some(t) => t,
            None => write(&cat, &zorder_name, Layout::ZOrder, &key).await,
        };
        let zorder_s = t0.elapsed().as_secs_f64();
        settle();
        if std::env::var("FLOE_BENCH_MERGE_ONLY").as_deref() == Ok("1") {
            return merge_section(&cat, &wh, &dir, &clustered, &key).await;
        }
        if let Some(n) = std::env::var("FLOE_BENCH_PROFILE_LOOKUPS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            // Only clustered point lookups, for a profiler.
            let t0 = Instant::now();
            for i in 0..n {
                let k = key[(i * 7919) % rows];
                let r = read(&clustered, &format!("key = {k}")).await;
                assert_eq!(r.rows, 1, "clustered: key = {k}");
            }
            let per = t0.elapsed().as_secs_f64() * 1000.0 / (2 * n) as f64;
            println!("{n} clustered point lookups: {per:.2} ms per read");
            return;
        }
        // The 2-D range query on both, and DuckDB's answer on the z-ordered table.
        let by_a = read(&sorted_a, BOX_FILTER).await;
        let by_z = read(&zorder, BOX_FILTER).await;
        assert_eq!(by_a.rows, by_z.rows, "the 2-D query on both tables");
        // What finer pages cost (z-ordered files have 4,096-row pages unless the table sets
        // `write.parquet.page-row-limit`): the tables' sizes and a full scan.
        let (full_a, full_z) = (read(&sorted_a, "true").await, read(&zorder, "true").await);
        let duck_box = duckdb(&py, &zorder, BOX_FILTER);
        if let Some((_, n)) = duck_box {
            assert_eq!(n, by_z.rows, "DuckDB: the 2-D query");
        }
        // Lookups of keys spread over the rows; the IN list: 100 of them.
        let point: Vec<i64> = (0..lookups).map(|i| key[i * rows / lookups]).collect();
        let in_keys: Vec<String> = (0..100)
            .map(|i| key[(i * rows / 100 + 7) % rows].to_string())
            .collect();
        let in_filter = format!("key IN ({})", in_keys.join(", "));
        let mut out = Vec::new();
        for (what, t) in [("unclustered", &plain), ("clustered", &clustered)] {
            let mut reads = Vec::new();
            for k in &point {
                let r = read(t, &format!("key = {k}")).await;
                assert_eq!(r.rows, 1, "{what}: key = {k}");
                reads.push(r);
            }
            let point_r = total(&reads);
            let in_r = read(t, &in_filter).await;
            assert_eq!(in_r.rows, 100, "{what}: IN");
            let duck_point = duckdb(&py, t, &format!("key = {}", point[0]));
            let duck_in = duckdb(&py, t, &in_filter);
            if let Some((_, n)) = duck_point {
                assert_eq!(n, 1, "DuckDB {what}: key = {}", point[0]);
            }
            if let Some((_, n)) = duck_in {
                assert_eq!(n, 100, "DuckDB {what}: IN");
            }
            out.push((what, point_r, in_r, duck_point, duck_in));
        }
        let n = lookups as f64;
        let show = |r: &Read, per: f64| {
            format!(
                "{:.1} ms (planning {:.1} ms), {:.1} files, {:.1} row groups, {:.1} pages, {:.3} MB read",
                r.secs * 1000.0 / per,
                r.plan_secs * 1000.0 / per,
                r.files as f64 / per,
                r.row_groups as f64 / per,
                r.pages as f64 / per,
                mb(r.bytes) / per
            )
        };
        println!("\n==== summary: clustering, {rows} rows, 2 cores ====");
        println!(
            "tables: unclustered {:.1} MB (written in {plain_s:.1} s) | clustered (bucket(64, key), sorted by key, bloom on key) {:.1} MB ({clustered_s:.1} s) = {:.1}% smaller (target >= 10%) {}",
            mb(plain_bytes),
            mb(clustered_bytes),
            100.0 * (1.0 - clustered_bytes as f64 / plain_bytes as f64),
            verdict(clustered_bytes as f64 <= 0.9 * plain_bytes as f64)
        );
        for (what, p, i, dp, di) in &out {
            println!("{what}: key = X (per lookup, {lookups}): {}", show(p, n));
            println!("{what}: key IN (100): {}", show(i, 1.0));
            if let (Some(dp), Some(di)) = (dp, di) {
                println!(
                    "{what}: DuckDB iceberg_scan: key = X {:.1} ms, IN {:.1} ms",
                    dp.0 * 1000.0,
                    di.0 * 1000.0
                );
            }
        }
        let (u, c) = (&out[0], &out[1]);
        let ratio = |a: f64, b: f64| a / b.max(1e-9);
        let bytes_x = ratio(u.1.bytes as f64, c.1.bytes as f64);
        let time_x = ratio(u.1.secs, c.1.secs);
        println!(
            "point lookup clustered vs unclustered: {bytes_x:.0}x fewer bytes (target >= 50x) {}, {time_x:.1}x faster (target >= 10x) {}",
            verdict(bytes_x >= 50.0),
            verdict(time_x >= 10.0)
        );
        println!(
            "IN (100) clustered vs unclustered: {:.0}x fewer bytes, {:.1}x faster",
            ratio(u.2.bytes as f64, c.2.bytes as f64),
            ratio(u.2.secs, c.2.secs)
        );
        if let (Some(dp), Some(di)) = (c.3, c.4) {
            println!(
                "clustered table, floe vs DuckDB iceberg_scan: key = X {:.1}x, IN {:.1}x (DuckDB time / floe time)",
                ratio(dp.0, c.1.secs / n),
                ratio(di.0, c.2.secs)
            );
        }
        println!(
            "2-D range `{BOX_FILTER}` ({} rows): sorted by a (written in {sorted_s:.1} s): {} | z-ordered on {ZORDER_BY} (written and rewritten in {zorder_s:.1} s): {}",
            by_z.rows,
            show(&by_a, 1.0),
            show(&by_z, 1.0)
        );
        if let Some(d) = duck_box {
            println!("2-D range, DuckDB iceberg_scan on the z-ordered table: {:.1} ms", d.0 * 1000.0);
        }
        println!(
            "2-D tables: sorted by a {:.1} MB, full scan {:.0} ms | z-ordered {:.1} MB, full scan {:.0} ms",
            mb(sorted_bytes),
            full_a.secs * 1000.0,
            mb(zorder_bytes),
            full_z.secs * 1000.0
        );
        let box_x = ratio(by_a.bytes as f64, by_z.bytes as f64);
        println!(
            "z-order vs sort by the first column: {box_x:.1}x fewer bytes (target >= 5x) {}, {:.1}x faster",
            verdict(box_x >= 5.0),
            ratio(by_a.secs, by_z.secs)
        );
        merge_section(&cat, &wh, &dir, &clustered, &key).await;
    });
}
