//! floe's merge-engine benchmark: an `aggregate` keyed table (hits = sum, mx = max,
//! avg_ms = avg:ms, users = count_distinct:user_id) of 1M keys, then 50 batches of 100k partial
//! rows (80% existing keys, 20% new), against ClickHouse's AggregatingMergeTree (chdb,
//! in-process; `-State` on insert, `-Merge` on read) and against what pyiceberg users do today
//! (read the table, fold in pyarrow, `overwrite`); ratios printed in the same run.
//!
//! Settings (environment):
//! * `FLOE_BENCH_KEYS` — keys of the starting table (default 1,000,000);
//! * `FLOE_BENCH_BATCHES` / `FLOE_BENCH_BATCH_ROWS` — batches and their rows (50 x 100,000);
//! * `FLOE_BENCH_PYI_BATCHES` — batches pyiceberg folds (default 2);
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only;
//! * `FLOE_BENCH_DIR` — data and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python.
//!
//! Baselines: `tools/bench/baseline_merge.py`.
//!
//! Run: `CARGO_TARGET_DIR=~/.cache/floe-target-bench cargo bench --bench merge`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use floe::keyed::KeyedWriter;
use floe::scan::Scan;
use floe::{Catalog, TableCreation};
use parquet::arrow::ArrowWriter;

use common::{cpu_seconds, load_parquet, mb, python, run_json, settle, status_kb, verdict};

fn num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Rows k, hits, mx, ms, user_id for `keys`.
fn rows(keys: Vec<i64>, rng: &mut Rng) -> RecordBatch {
    let n = keys.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("hits", DataType::Int64, true),
        Field::new("mx", DataType::Float64, true),
        Field::new("ms", DataType::Float64, true),
        Field::new("user_id", DataType::Int64, true),
    ]));
    let hits = Int64Array::from_iter_values((0..n).map(|_| 1 + rng.below(5) as i64));
    let mx = Float64Array::from_iter_values((0..n).map(|_| rng.below(100_000) as f64 / 100.0));
    let ms = Float64Array::from_iter((0..n).map(|_| {
        let v = rng.below(1000);
        (v % 10 != 0).then_some(v as f64)
    }));
    let users = Int64Array::from_iter_values((0..n).map(|_| rng.below(10_000) as i64));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(hits),
            Arc::new(mx),
            Arc::new(ms),
            Arc::new(users),
        ],
    )
    .unwrap()
}

fn write(path: &Path, b: &RecordBatch) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
}

/// Writes base.parquet and batch-NNNNN.parquet into `dir` (once; cached by name).
fn generate(dir: &Path, keys: usize, batches: usize, batch_rows: usize) {
    if dir.join("done").exists() {
        return;
    }
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    write(
        &dir.join("base.parquet"),
        &rows((0..keys as i64).collect(), &mut rng),
    );
    let mut next_key = keys as i64;
    for b in 1..=batches {
        let ks: Vec<i64> = (0..batch_rows)
            .map(|_| {
                if rng.below(10) < 8 {
                    rng.below(next_key as u64) as i64
                } else {
                    next_key += 1;
                    next_key - 1
                }
            })
            .collect();
        write(
            &dir.join(format!("batch-{b:05}.parquet")),
            &rows(ks, &mut rng),
        );
    }
    std::fs::write(dir.join("done"), b"").unwrap();
}

/// rows, sum(hits), sum(users) of the table's current state, and the scan time.
fn state(rt: &tokio::runtime::Runtime, t: &floe::Table) -> (f64, (u64, i64, i64)) {
    settle();
    let t0 = Instant::now();
    let batches = rt
        .block_on(
            Scan::new(t)
                .select(
                    ["k", "hits", "mx", "avg_ms", "users"]
                        .map(String::from)
                        .to_vec(),
                )
                .to_batches(),
        )
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let mut s = (0u64, 0i64, 0i64);
    for b in &batches {
        s.0 += b.num_rows() as u64;
        let sum = |c: &str| {
            let a = b.column_by_name(c).unwrap();
            let a = a.as_any().downcast_ref::<Int64Array>().unwrap();
            (0..a.len())
                .filter(|&i| a.is_valid(i))
                .map(|i| a.value(i))
                .sum::<i64>()
        };
        s.1 += sum("hits");
        s.2 += sum("users");
    }
    (secs, s)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let keys = num("FLOE_BENCH_KEYS", 1_000_000);
    let n_batches = num("FLOE_BENCH_BATCHES", 50);
    let batch_rows = num("FLOE_BENCH_BATCH_ROWS", 100_000);
    let n_pyi = num("FLOE_BENCH_PYI_BATCHES", 2).min(n_batches);
    let no_baseline = std::env::var("FLOE_BENCH_NO_BASELINE").is_ok();
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    let data = base.join(format!("merge-{keys}-{n_batches}x{batch_rows}-g1"));
    eprintln!("[merge bench] generating batches in {}", data.display());
    generate(&data, keys, n_batches, batch_rows);
    let work = base.join("work-merge");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cat = Catalog::open(None, Some(work.join("wh").to_str().unwrap()), None).unwrap();
    let ident = floe::table::parse_ident("db.daily").unwrap();
    let creation = TableCreation::new(
        floe::spec::parse_schema(
            "k long not null, hits long, mx double, avg_ms double, users long",
        )
        .unwrap(),
    )
    .with_primary_key(&["k".to_string()])
    .with_property("format-version", "3")
    .with_property("write.merge.mode", "merge-on-read")
    .with_property("floe.merge-engine", "aggregate")
    .with_property("floe.aggregate.hits", "sum")
    .with_property("floe.aggregate.mx", "max")
    .with_property("floe.aggregate.avg_ms", "avg:ms")
    .with_property("floe.aggregate.users", "count_distinct:user_id");
    rt.block_on(cat.create_table(&ident, creation)).unwrap();
    let w = KeyedWriter::new(&cat, ident.clone());
    let t0 = Instant::now();
    rt.block_on(w.apply(load_parquet(&data.join("base.parquet")), None))
        .unwrap();
    eprintln!(
        "[merge bench] base of {keys} keys loaded in {:.1}s (untimed)",
        t0.elapsed().as_secs_f64()
    );
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (mut apply_s, mut bytes, mut cpu) = (Vec::new(), 0u64, 0.0);
    for b in 1..=n_batches {
        let batch = load_parquet(&data.join(format!("batch-{b:05}.parquet")));
        let c0 = cpu_seconds();
        let t0 = Instant::now();
        let r = rt.block_on(w.apply(batch, None)).unwrap();
        apply_s.push(t0.elapsed().as_secs_f64());
        cpu += cpu_seconds() - c0;
        bytes += r.written_bytes;
        if b <= 3 || b % 10 == 0 {
            eprintln!(
                "[merge bench] batch {b}/{n_batches}: {:.3}s, {} inserted {} updated, {:.1} MB",
                apply_s[b - 1],
                r.inserted,
                r.updated,
                mb(r.written_bytes)
            );
        }
    }
    let hwm = status_kb("VmHWM:").unwrap_or(0);
    let table = rt.block_on(cat.load_table(&ident)).unwrap();
    let mut query = f64::MAX;
    let mut floe_state = (0, 0, 0);
    for _ in 0..3 {
        let (s, st) = state(&rt, &table);
        query = query.min(s);
        floe_state = st;
    }
    let total: f64 = apply_s.iter().sum();
    let rows_total = (n_batches * batch_rows) as f64;
    let floe_rate = rows_total / total;
    let py = python();
    let chdb = (!no_baseline)
        .then_some(py.as_ref())
        .flatten()
        .and_then(|py| {
            eprintln!("[merge bench] running the chdb AggregatingMergeTree baseline");
            run_json(
                py,
                &[
                    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join("tools/bench/baseline_merge.py")
                        .to_str()
                        .unwrap(),
                    "chdb",
                    "--batches",
                    data.to_str().unwrap(),
                ],
            )
        });
    let pyi = (!no_baseline && n_pyi > 0)
        .then_some(py.as_ref())
        .flatten()
        .and_then(|py| {
            eprintln!("[merge bench] running the pyiceberg read-fold-overwrite baseline ({n_pyi} batches)");
            run_json(
                py,
                &[
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/bench/baseline_merge.py").to_str().unwrap(),
                    "pyiceberg",
                    "--batches",
                    data.to_str().unwrap(),
                    "--count",
                    &n_pyi.to_string(),
                ],
            )
        });
    println!(
        "floe merge-engine benchmark: aggregate (sum, max, avg, count_distinct), {keys} keys, {n_batches} batches x {batch_rows} rows (80% existing keys), v3 merge-on-read, 2 cores"
    );
    println!(
        "1. floe folds {:.0} rows/s ({n_batches} batches in {total:.2} s, cpu {cpu:.2} s; per batch p50 {:.3} s, max {:.3} s)",
        floe_rate,
        {
            let mut v = apply_s.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        },
        apply_s.iter().cloned().fold(0.0, f64::max)
    );
    let mut ok = true;
    if let Some(c) = &chdb {
        let ins: f64 = c["insert_s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .sum();
        let ratio = total / ins;
        println!(
            "   vs chdb {} (ClickHouse {}) AggregatingMergeTree insert of the same batches: {ins:.2} s = {:.0} rows/s; floe/chdb = {ratio:.2}x (target <= 3x) {}",
            c["versions"]["chdb"].as_str().unwrap_or("?"),
            c["versions"]["clickhouse"].as_str().unwrap_or("?"),
            rows_total / ins,
            verdict(ratio <= 3.0)
        );
        let q = c["query_s"].as_f64().unwrap_or(f64::NAN);
        println!(
            "2. final values: floe plain scan {query:.3} s vs ClickHouse GROUP BY ... -Merge {q:.3} s ({} parts) = {:.2}x faster (target >= 2x) {}",
            c["parts"],
            q / query,
            verdict(q / query >= 2.0)
        );
        let cs = &c["state"];
        let same = cs["rows"].as_u64() == Some(floe_state.0)
            && cs["sum_hits"].as_i64() == Some(floe_state.1)
            && cs["sum_users"].as_i64() == Some(floe_state.2);
        ok &= same;
        println!(
            "   state: floe {} rows, sum(hits) {}, sum(users) {}; chdb {} rows, sum(hits) {}, sum(users) {} -> {}",
            floe_state.0, floe_state.1, floe_state.2, cs["rows"], cs["sum_hits"], cs["sum_users"],
            if same { "agree" } else { "DISAGREE" }
        );
    } else {
        println!("2. final values: floe plain scan {query:.3} s (no chdb baseline)");
    }
    if let Some(p) = &pyi {
        let f: Vec<f64> = p["fold_s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        let per = f.iter().sum::<f64>() / f.len().max(1) as f64;
        let ours =
            apply_s[..f.len().min(apply_s.len())].iter().sum::<f64>() / f.len().max(1) as f64;
        println!(
            "3. vs pyiceberg {} read + pyarrow fold + overwrite: {per:.2} s per batch vs floe {ours:.3} s = {:.0}x (target >= 50x) {}",
            p["versions"]["pyiceberg"].as_str().unwrap_or("?"),
            per / ours,
            verdict(per / ours >= 50.0)
        );
    }
    println!(
        "4. bytes written: {:.1} MB per batch ({:.1} B per row); peak RSS during the batches {:.0} MB",
        mb(bytes) / n_batches as f64,
        bytes as f64 / rows_total,
        hwm as f64 / 1024.0
    );
    println!(
        "correctness: {}",
        if ok {
            "ok"
        } else {
            "floe and ClickHouse DISAGREE"
        }
    );
}
