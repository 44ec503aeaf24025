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
