//! Append and scan throughput on S3 (SeaweedFS on loopback) against the same on local disk,
//! and the object-store requests of one append commit and one scan, by kind.
//!
//! `cargo bench --bench s3`. The S3 server is the one named by `FLOE_TEST_S3_ENDPOINT`,
//! `FLOE_TEST_S3_BUCKET`, `FLOE_TEST_S3_ACCESS_KEY_ID`, `FLOE_TEST_S3_SECRET_ACCESS_KEY`,
//! `FLOE_TEST_S3_REGION` (what `eval "$(bash tools/servers/seaweedfs.sh start)"` exports);
//! without them the bench starts a private SeaweedFS through that script and stops it at
//! the end. Env: `FLOE_BENCH_S3_ROWS` (default 2,000,000 rows of the core benchmark's
//! 8 columns, generated here), `FLOE_BENCH_RUNS` (default 3; means are printed),
//! `FLOE_BENCH_DIR` (default `~/.cache/floe/bench`).
//!
//! Both sides use a SQLite catalog on local disk; only the table files move. Requests are
//! counted by `Storage::request_stats` (above `object_store`: retries count once).

mod common;
use common::*;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::Scan;
use floe::spec::parse_schema;
use floe::storage::{RequestStats, S3Options, Storage};
use floe::table::parse_ident;
use futures::StreamExt;

/// splitmix64: deterministic pseudo-random values from a row index.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Rows `[start, start + n)` of the core benchmark's shape (`common::DDL`).
fn batch(start: u64, n: usize) -> RecordBatch {
    let ids: Vec<u64> = (start..start + n as u64).collect();
    let col = |c: u64| -> Vec<u64> {
        ids.iter()
            .map(|i| mix(i.wrapping_mul(8).wrapping_add(c)))
            .collect()
    };
    let (k, a, b, s1, s2, ts, d) = (col(1), col(2), col(3), col(4), col(5), col(6), col(7));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| *i as i64))),
        Arc::new(Int64Array::from_iter_values(
            k.iter().map(|v| (v % 1_000_000) as i64),
        )),
        Arc::new(Float64Array::from_iter_values(
            a.iter().map(|v| (v % 1_000_000) as f64 / 1000.0),
        )),
        Arc::new(Float64Array::from_iter_values(
            b.iter().map(|v| (v % 2_000_000) as f64 / 1e6 - 1.0),
        )),
        Arc::new(StringArray::from_iter_values(
            s1.iter().map(|v| format!("{:x}", v >> (4 * (v % 8)))),
        )),
        Arc::new(StringArray::from_iter_values(
            s2.iter().map(|v| format!("value-{}", v % 100)),
        )),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            ts.iter()
                .map(|v| 1_704_067_200_000_000 + (v % 2_592_000_000_000) as i64),
        )),
        Arc::new(Date32Array::from_iter_values(
            d.iter().map(|v| 19_723 + (v % 30) as i32),
        )),
    ];
    let fields = [
        ("id", DataType::Int64),
        ("k", DataType::Int64),
        ("a", DataType::Float64),
        ("b", DataType::Float64),
        ("s1", DataType::Utf8),
        ("s2", DataType::Utf8),
        ("ts", DataType::Timestamp(TimeUnit::Microsecond, None)),
        ("d", DataType::Date32),
    ]
    .into_iter()
    .map(|(n, t)| Field::new(n, t, true))
    .collect::<Vec<_>>();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

/// The S3 server: from the environment, or a private one started (and stopped on drop)
/// through tools/servers/seaweedfs.sh.
struct Server {
    options: S3Options,
    bucket: String,
    run: Option<PathBuf>,
}

fn script(run: &std::path::Path, cmd: &str) -> std::process::Output {
    Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/servers/seaweedfs.sh"))
        .arg(cmd)
        .env("FLOE_SEAWEEDFS_RUN", run)
        .output()
        .expect("run tools/servers/seaweedfs.sh")
}

impl Server {
    fn get() -> Server {
        let mut vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, v)| k.starts_with("FLOE_TEST_S3_") && !v.is_empty())
            .collect();
        let mut run = None;
        if !vars.iter().any(|(k, _)| k == "FLOE_TEST_S3_ENDPOINT") {
            let dir = std::env::temp_dir().join(format!("floe-bench-s3-{}", std::process::id()));
            eprintln!(
                "no FLOE_TEST_S3_ENDPOINT: starting SeaweedFS in {}",
                dir.display()
            );
            let o = script(&dir, "start");
            assert!(
                o.status.success(),
                "tools/servers/seaweedfs.sh start failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            vars = String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.strip_prefix("export "))
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            run = Some(dir);
        }
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} is not set (tools/servers/seaweedfs.sh prints it)"))
        };
        Server {
            options: S3Options::static_credentials(
                get("FLOE_TEST_S3_ENDPOINT"),
                get("FLOE_TEST_S3_REGION"),
                get("FLOE_TEST_S3_ACCESS_KEY_ID"),
                get("FLOE_TEST_S3_SECRET_ACCESS_KEY"),
            ),
            bucket: get("FLOE_TEST_S3_BUCKET"),
            run,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(run) = &self.run {
            let _ = script(run, "stop");
        }
    }
}

/// Means over the runs of one side.
#[derive(Default)]
struct Side {
    append_s: Vec<f64>,
    scan_s: Vec<f64>,
    bytes: u64,
    append_req: RequestStats,
    small_append_req: RequestStats,
    load_req: RequestStats,
    scan_req: RequestStats,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn measure(
    rt: &tokio::runtime::Runtime,
    cat: &Catalog,
    batches: &[RecordBatch],
    runs: usize,
) -> Side {
    let schema = parse_schema(DDL).unwrap();
    let st = cat.storage();
    let mut side = Side::default();
    for run in 0..runs {
        let name = parse_ident(&format!("bench.t{run}")).unwrap();
        let t = rt
            .block_on(cat.create_table(&name, TableCreation::new(schema.clone())))
            .unwrap();
        let input: Vec<_> = batches.iter().cloned().map(Ok).collect();
        settle();
        let before = st.request_stats();
        let start = Instant::now();
        let r = rt.block_on(floe::txn::append(cat, &t, input)).unwrap();
        side.append_s.push(start.elapsed().as_secs_f64());
        side.append_req = st.request_stats().since(&before);
        let t = r.table;
        side.bytes = t
            .current_snapshot()
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("total-files-size")
                    .cloned()
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);

        // Loading the table through the catalog (what a new process does first).
        let before = st.request_stats();
        let t = rt.block_on(cat.load_table(&name)).unwrap();
        side.load_req = st.request_stats().since(&before);

        // A small append commit (1,000 rows) onto the table: the per-commit overhead.
        let before = st.request_stats();
        let r = rt
            .block_on(floe::txn::append(cat, &t, vec![Ok(batch(1 << 40, 1_000))]))
            .unwrap();
        side.small_append_req = st.request_stats().since(&before);
        let t = r.table;

        let before = st.request_stats();
        let start = Instant::now();
        let rows = rt.block_on(async {
            let mut s = Scan::new(&t).concurrency(2).to_stream().await.unwrap();
            let mut n = 0usize;
            while let Some(b) = s.next().await {
                n += b.unwrap().num_rows();
            }
            n
        });
        side.scan_s.push(start.elapsed().as_secs_f64());
        side.scan_req = st.request_stats().since(&before);
        let want: usize = batches.iter().map(|b| b.num_rows()).sum::<usize>() + 1_000;
        assert_eq!(rows, want, "scan returned the wrong number of rows");
    }
    side
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe S3 benchmark: run with `cargo bench --bench s3`");
        return;
    }
    let rows: usize = std::env::var("FLOE_BENCH_S3_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let runs: usize = std::env::var("FLOE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    let server = Server::get();
    let batches: Vec<RecordBatch> = (0..rows)
        .step_by(65_536)
        .map(|s| batch(s as u64, 65_536.min(rows - s)))
        .collect();
    println!(
        "floe S3 benchmark: {rows} rows x 8 columns, {runs} runs each, S3 at {}",
        server.options.endpoint.as_deref().unwrap_or("?")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = base.join("s3-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    let local_cat = Catalog::open_with_storage(
        Some(&format!("sqlite:///{}", work.join("local.db").display())),
        Some(work.join("wh").to_str().unwrap()),
        None,
        Storage::with_s3(server.options.clone()),
    )
    .unwrap();
    let wh = format!("s3://{}/bench-{}", server.bucket, uuid::Uuid::new_v4());
    let s3_cat = Catalog::open_with_storage(
        Some(&format!("sqlite:///{}", work.join("s3.db").display())),
        Some(&wh),
        None,
        Storage::with_s3(server.options.clone()),
    )
    .unwrap();
    let local = measure(&rt, &local_cat, &batches, runs);
    let s3 = measure(&rt, &s3_cat, &batches, runs);
    // Leave the bucket as it was.
    let _ = rt.block_on(s3_cat.storage().delete_prefix(&wh));

    let mb = local.bytes as f64 / 1e6;
    println!("table size: {mb:.1} MB of Parquet ({rows} rows)");
    let report = |what: &str, l: &[f64], s: &[f64]| {
        let (l, s) = (mean(l), mean(s));
        println!(
            "{what:<8} local {l:>6.2}s ({:>6.1} MB/s, {:>5.2} M rows/s)   S3 {s:>6.2}s ({:>6.1} MB/s, {:>5.2} M rows/s)   S3/local time {:.2}x",
            mb / l,
            rows as f64 / l / 1e6,
            mb / s,
            rows as f64 / s / 1e6,
            s / l
        );
    };
    report("append", &local.append_s, &s3.append_s);
    report("scan", &local.scan_s, &s3.scan_s);
    println!(
        "runs: append local {:?} S3 {:?}; scan local {:?} S3 {:?}",
        local.append_s, s3.append_s, local.scan_s, s3.scan_s
    );
    println!("requests (S3):");
    println!("  append commit of {rows} rows:         {}", s3.append_req);
    println!(
        "  append commit of 1,000 rows:          {}",
        s3.small_append_req
    );
    println!("  full scan:                            {}", s3.scan_req);
    println!("  loading the table (catalog + S3):     {}", s3.load_req);
    println!(
        "  local disk (a scan reads data files directly, uncounted): append {} | small append {} | scan {}",
        local.append_req, local.small_append_req, local.scan_req
    );
    drop(server);
}
