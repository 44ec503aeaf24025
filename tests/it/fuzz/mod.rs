//! Fuzzing floe's decoders (bounded here; `cargo bench --bench fuzz` for a long run): table
//! metadata JSON, manifest lists and manifests (Avro), Puffin files and deletion vectors,
//! position delete Parquet, the `--where` and SQL parsers and catalog URIs. Every input must
//! give an error or a value: no panic, no case over 2 s, no allocation over 1 GiB. The
//! inputs that once failed are kept under `spec-fixtures/fuzz-regressions/<target>/` and
//! replayed first.

pub mod engine;

use std::time::Duration;

use engine::{Config, Found, Target};

/// Cases per target in the suite (`FLOE_FUZZ_CASES` overrides).
fn cases(target: &str) -> u64 {
    if let Some(n) = std::env::var("FLOE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    // Sized for a debug build on 2 cores: the Avro and Parquet decoders are the slow ones.
    match target {
        "metadata" => 400,
        "manifest-list" | "manifest" | "position-deletes" => 1500,
        _ => 4000,
    }
}

fn target(name: &str) -> Target {
    engine::targets()
        .into_iter()
        .find(|t| t.name == name)
        .expect("known target")
}

fn describe(t: &Target, found: &[Found]) -> String {
    let dir = std::env::temp_dir().join("floe-fuzz-failures");
    let rep = engine::Report {
        found: found
            .iter()
            .map(|f| Found {
                case: f.case,
                failure: f.failure.clone(),
                input: f.input.clone(),
            })
            .collect(),
        ..Default::default()
    };
    let paths = engine::save(t, &rep, &dir);
    found
        .iter()
        .zip(paths)
        .map(|(f, p)| format!("{:?} (case {:?}) input: {}", f.failure, f.case, p.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replays the target's regression inputs, then runs its bounded number of cases.
fn fuzz(name: &str) {
    let t = target(name);
    assert!(
        !t.seeds.is_empty() || ["where", "sql", "uri"].contains(&name),
        "{name}: no seeds"
    );
    let cfg = Config {
        // A debug build is slower; a hang is still a case far over this.
        limit: Duration::from_secs(10),
        ..Config::default()
    };
    let regressions = engine::regressions(name);
    let rep = engine::replay(
        &t,
        &cfg,
        regressions.iter().map(|(_, d)| d.clone()).collect(),
    );
    assert!(
        rep.found.is_empty(),
        "{name}: a regression input fails again:\n{}",
        describe(&t, &rep.found)
    );
    assert_eq!(rep.cases as usize, regressions.len());
    let n = cases(name);
    let rep = engine::run(&t, &cfg, 0..n, None);
    assert!(rep.found.is_empty(), "{name}: {}", describe(&t, &rep.found));
    assert_eq!(rep.cases, n);
}

#[test]
fn metadata_json() {
    fuzz("metadata");
}

#[test]
fn manifest_list_avro() {
    fuzz("manifest-list");
}

#[test]
fn manifest_avro() {
    fuzz("manifest");
}

#[test]
fn puffin_deletion_vectors() {
    fuzz("puffin");
}

#[test]
fn deletion_vector_blobs() {
    fuzz("dv");
}

#[test]
fn position_delete_parquet() {
    fuzz("position-deletes");
}

#[test]
fn where_parser() {
    fuzz("where");
}

#[test]
fn sql_parser() {
    fuzz("sql");
}

#[test]
fn catalog_uri() {
    fuzz("uri");
}

/// The harness itself: a panicking decoder, a hanging one and one allocating by a declared
/// length are each reported (so a clean run means something).
#[test]
fn harness_catches_panics_hangs_and_huge_allocations() {
    fn gen(_: &mut rand::rngs::StdRng, _: &[Vec<u8>]) -> Vec<u8> {
        vec![1]
    }
    // A generous limit for the cases that must not be reported as hangs: on a loaded CI
    // machine (two cores, Spark alongside) even a panic can take a few hundred milliseconds.
    let cfg = Config {
        limit: Duration::from_secs(30),
        alloc_cap: 64 << 20,
        max_failures: 1,
        ..Config::default()
    };
    let mk = |run: fn(&[u8])| Target {
        name: "self-test",
        seeds: vec![vec![0]],
        generate: gen,
        run,
        alloc_cap: None,
    };
    let panics = engine::run(&mk(|d| assert!(d.is_empty(), "boom")), &cfg, 0..3, None);
    assert!(
        matches!(&panics.found[..], [f] if matches!(&f.failure, engine::Failure::Panic(m) if m.contains("boom"))),
        "{:?}",
        panics.found
    );
    // The hang: the case sleeps far longer than a short limit (the abandoned worker sleeps on).
    let short = Config {
        limit: Duration::from_millis(500),
        ..cfg.clone()
    };
    let hangs = engine::run(
        &mk(|_| std::thread::sleep(Duration::from_secs(120))),
        &short,
        0..3,
        None,
    );
    assert!(
        matches!(&hangs.found[..], [f] if matches!(f.failure, engine::Failure::Hang)),
        "{:?}",
        hangs.found
    );
    let allocs = engine::run(
        &mk(|d| {
            let declared = u32::MAX as usize * d.len();
            std::hint::black_box(Vec::<u8>::with_capacity(declared));
        }),
        &cfg,
        0..3,
        None,
    );
    assert!(
        matches!(&allocs.found[..], [f] if matches!(f.failure, engine::Failure::Alloc(n) if n >= u32::MAX as usize)),
        "{:?}",
        allocs.found
    );
    let fine = engine::run(&mk(|d| assert!(!d.is_empty())), &cfg, 0..3, None);
    assert!(fine.found.is_empty());
    // The same case index gives the same input.
    let t = target("where");
    assert_eq!(engine::input_of(&t, 7, 42), engine::input_of(&t, 7, 42));
}

/// Deep nesting (100k parentheses, 10k OR terms...) gives an error or a value, never a
/// stack overflow. Each input runs in a child process (an overflow aborts the process) on
/// an 8 MiB stack, as the CLI's main thread has.
#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let exe = std::env::current_exe().expect("test binary");
    let mut failed = Vec::new();
    for n in [10_000usize, 100_000] {
        for (what, _) in engine::deep_inputs(n) {
            let out = std::process::Command::new(&exe)
                .args([
                    "fuzz::deep_nesting_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("FLOE_FUZZ_DEEP", format!("{what}:{n}"))
                .output()
                .expect("run child");
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let why = err
                    .lines()
                    .find(|l| l.contains("overflow") || l.contains("panicked"))
                    .unwrap_or("")
                    .to_string();
                failed.push(format!("{what} x{n}: {:?} {why}", out.status));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "deep inputs crash the parsers:\n{}",
        failed.join("\n")
    );
}

/// The child of [`deep_nesting_does_not_overflow_the_stack`] (does nothing without
/// `FLOE_FUZZ_DEEP=<kind>:<n>`).
#[test]
#[ignore = "run by deep_nesting_does_not_overflow_the_stack"]
fn deep_nesting_child() {
    let Ok(spec) = std::env::var("FLOE_FUZZ_DEEP") else {
        return;
    };
    let (what, n) = spec.split_once(':').expect("kind:n");
    let n: usize = n.parse().expect("n");
    let text = engine::deep_inputs(n)
        .into_iter()
        .find(|(w, _)| *w == what)
        .expect("known kind")
        .1;
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || engine::run_deep(&text))
        .expect("spawn")
        .join()
        .expect("no panic");
}

/// Times one input through a target's decoder: `FLOE_FUZZ_REPLAY=<target>:<file>` (for a
/// long run's failure files; does nothing without it).
#[test]
#[ignore = "a tool: FLOE_FUZZ_REPLAY=<target>:<file>"]
fn replay_one() {
    let Ok(spec) = std::env::var("FLOE_FUZZ_REPLAY") else {
        return;
    };
    let (name, file) = spec.split_once(':').expect("target:file");
    let t = target(name);
    let data = std::fs::read(file).expect("read input");
    let start = std::time::Instant::now();
    (t.run)(&data);
    eprintln!("{name}: {file}: {:.3?}", start.elapsed());
}
