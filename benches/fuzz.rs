//! The long fuzz run: `cargo bench --bench fuzz` runs every target for `FLOE_FUZZ_CASES`
//! cases (default 1,000,000) in release mode; see `tests/it/fuzz` for the targets.
//!
//! Env: `FLOE_FUZZ_TARGET` (comma-separated names, default all; `deep` probes nesting
//! depth), `FLOE_FUZZ_SEED` (default fixed), `FLOE_FUZZ_SECONDS` (time budget per target),
//! `FLOE_FUZZ_START` (first case index), `FLOE_FUZZ_OUT` (where failing inputs are written,
//! default `$TMPDIR/floe-fuzz-failures`). Failing inputs replay with
//! `FLOE_FUZZ_START=<case> FLOE_FUZZ_CASES=1`; keep them under
//! `spec-fixtures/fuzz-regressions/<target>/` once fixed.

#[path = "../tests/it/fuzz/engine.rs"]
mod engine;
#[path = "../tests/it/files.rs"]
mod files;

use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: engine::CappedAlloc = engine::CappedAlloc;

fn env<T: std::str::FromStr>(k: &str) -> Option<T> {
    std::env::var(k)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
}

/// Each deep input runs in a child process (a stack overflow aborts it) on an 8 MiB stack.
fn deep() -> bool {
    let exe = std::env::current_exe().expect("bench binary");
    let mut ok = true;
    for n in [1_000usize, 2_000, 5_000, 10_000, 100_000] {
        for (what, _) in engine::deep_inputs(n) {
            let t = Instant::now();
            let out = std::process::Command::new(&exe)
                .env("FLOE_FUZZ_DEEP_CHILD", format!("{what}:{n}"))
                .output()
                .expect("child");
            let res = if out.status.success() {
                "ok".to_string()
            } else {
                ok = false;
                let err = String::from_utf8_lossy(&out.stderr);
                let why = err
                    .lines()
                    .find(|l| l.contains("overflow") || l.contains("panicked"))
                    .unwrap_or("")
                    .to_string();
                format!("FAILED {:?} {why}", out.status)
            };
            println!(
                "deep {what:>10} x{n:<7} {:>6.2}s {res}",
                t.elapsed().as_secs_f64()
            );
        }
    }
    ok
}

fn main() {
    if let Ok(spec) = std::env::var("FLOE_FUZZ_DEEP_CHILD") {
        let (what, n) = spec.split_once(':').expect("kind:n");
        let n: usize = n.parse().expect("n");
        let text = engine::deep_inputs(n)
            .into_iter()
            .find(|(w, _)| *w == what)
            .expect("kind")
            .1;
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || engine::run_deep(&text))
            .expect("spawn")
            .join()
            .expect("no panic");
        return;
    }
    let wanted: Option<Vec<String>> = std::env::var("FLOE_FUZZ_TARGET")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let cases: u64 = env("FLOE_FUZZ_CASES").unwrap_or(1_000_000);
    let start: u64 = env("FLOE_FUZZ_START").unwrap_or(0);
    let seconds: Option<u64> = env("FLOE_FUZZ_SECONDS");
    let cfg = engine::Config {
        seed: env("FLOE_FUZZ_SEED").unwrap_or(engine::Config::default().seed),
        max_failures: 20,
        ..engine::Config::default()
    };
    let out = std::env::var("FLOE_FUZZ_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("floe-fuzz-failures"));
    let mut failed = false;
    if wanted
        .as_ref()
        .is_some_and(|w| w.iter().any(|n| n == "deep"))
    {
        failed |= !deep();
    }
    for t in engine::targets() {
        if wanted
            .as_ref()
            .is_some_and(|w| !w.iter().any(|n| n == t.name))
        {
            continue;
        }
        let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
        let begun = Instant::now();
        let (mut done, mut found) = (0u64, Vec::new());
        let step = 100_000;
        let mut at = start;
        while at < start + cases && deadline.is_none_or(|d| Instant::now() < d) {
            let end = (at + step).min(start + cases);
            let rep = engine::run(&t, &cfg, at..end, deadline);
            done += rep.cases;
            for p in engine::save(&t, &rep, &out) {
                eprintln!("{}: failure, input {}", t.name, p.display());
            }
            for f in &rep.found {
                eprintln!("{}: case {:?}: {:?}", t.name, f.case, f.failure);
            }
            found.extend(rep.found);
            at = end;
            let s = begun.elapsed().as_secs_f64();
            eprintln!(
                "{}: {done} cases, {s:.0} s, {:.0}/s, {} failures",
                t.name,
                done as f64 / s,
                found.len()
            );
            if found.len() >= cfg.max_failures {
                break;
            }
        }
        let s = begun.elapsed().as_secs_f64();
        println!(
            "fuzz {:<17} seeds {:>4}  cases {done:>10}  {s:>8.1} s  {:>8.0} cases/s  failures {}",
            t.name,
            t.seeds.len(),
            done as f64 / s.max(1e-9),
            found.len()
        );
        failed |= !found.is_empty();
    }
    if failed {
        std::process::exit(1);
    }
}
