//! Helpers shared by the benchmarks: settling the page cache, best-of-n timing, and running
//! the peers' Python baselines.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The 8-column shape of the benchmark data (tools/bench/gen_data.py).
pub const DDL: &str =
    "id long, k long, a double, b double, s1 string, s2 string, ts timestamp, d date";

/// Flushes dirty pages so one measurement's writes do not throttle the next one's.
pub fn settle() {
    let _ = Command::new("sync").status();
}

/// The best wall time of `n` runs of `f` (each after `settle`), and the last result.
pub fn best<T>(n: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::MAX;
    let mut last = None;
    for _ in 0..n {
        settle();
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(r);
    }
    (best, last.expect("n > 0"))
}

/// CPU seconds (user + system, all threads) this process has used so far (Linux; 0 elsewhere).
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// The peers' Python (`FLOE_PEERS_PYTHON`, else the pinned venv), if installed.
pub fn python() -> Option<PathBuf> {
    std::env::var("FLOE_PEERS_PYTHON")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            let p = PathBuf::from(std::env::var("HOME").ok()?)
                .join(".cache/floe/peers/venv/bin/python");
            p.exists().then_some(p)
        })
}

/// Runs a Python baseline and parses the last JSON line it prints.
pub fn run_json(py: &Path, args: &[&str]) -> Option<serde_json::Value> {
    let out = Command::new(py).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!(
            "baseline {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().rev().find_map(|l| serde_json::from_str(l).ok())
}

/// What `/usr/bin/time` measured of one `floe` CLI run.
pub struct CliRun {
    /// Peak resident set size, KiB.
    pub peak_rss_kb: u64,
    /// User + system CPU seconds.
    pub cpu_s: f64,
}

/// Runs the `floe` CLI with `args` under `/usr/bin/time` (its report written into `dir`);
/// panics with the CLI's stderr when it fails.
pub fn floe_cli(args: &[&str], dir: &Path) -> CliRun {
    let report = dir.join("time.txt");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M %U %S", "-o", report.to_str().unwrap()])
        .arg(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("run /usr/bin/time floe");
    assert!(
        out.status.success(),
        "floe {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<f64> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(v.len(), 3, "/usr/bin/time report: {v:?}");
    CliRun {
        peak_rss_kb: v[0] as u64,
        cpu_s: v[1] + v[2],
    }
}

/// FNV-1a over `bytes`, continuing from `h` (cache keys of generated inputs).
pub fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// The rows of a Parquet file, in batches of 128k rows.
pub fn load_parquet(path: &Path) -> Vec<arrow_array::RecordBatch> {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .with_batch_size(1 << 17)
    .build()
    .unwrap()
    .map(|b| b.unwrap())
    .collect()
}

/// Bytes as MB.
pub fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// How a measurement compares with its target.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "NOT MET"
    }
}

/// A `/proc/self/status` field in kB (`VmHWM:`, `VmRSS:`).
pub fn status_kb(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Writes each input (`load` gives its batches) as one data file with its own single-lane
/// writer, two inputs at a time, then commits them all as one append; returns the table.
pub async fn append_each_as_one_file<P>(
    cat: &floe::Catalog,
    t: &floe::Table,
    inputs: &[P],
    load: impl Fn(&P) -> Vec<arrow::array::RecordBatch>,
) -> floe::Table {
    let mut files = Vec::new();
    for pair in inputs.chunks(2) {
        let parts: Vec<_> = pair.iter().map(&load).collect();
        let written = futures::future::join_all(parts.iter().map(|batches| async move {
            let mut w = floe::write::DataWriter::with_lanes(t, 1).unwrap();
            for b in batches {
                w.write(b.clone()).await.unwrap();
            }
            w.close().await.unwrap()
        }))
        .await;
        for f in written {
            assert_eq!(f.len(), 1, "one data file per input");
            files.extend(f);
        }
    }
    floe::txn::append_files(cat, t, files).await.unwrap().table
}
