//! Compaction (`rewrite_data_files`) of a small-files table with merge-on-read deletes, against
//! Spark 3.5.8 + Iceberg 1.10.2's `rewrite_data_files` in the same run (issue 4).
//!
//! `cargo bench --bench maintenance`. Env:
//! * `FLOE_BENCH_QUICK=1` — smoke run: 200 files (1,400,000 rows) unless `FLOE_BENCH_FILES`;
//! * `FLOE_BENCH_FILES` — data files before compaction (default 2,000), 7,000 rows each;
//! * `FLOE_BENCH_DIR` — data, cache and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python (default `~/.cache/floe/peers/venv/bin/python`);
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only (no Spark);
//! * `FLOE_BENCH_NO_DANGLING=1` — skip the second Spark run with `remove-dangling-deletes=true`;
//! * `FLOE_BENCH_REBUILD=1` — rebuild the cached input tables;
//! * `FLOE_BENCH_SCAN_LOOPS` — timed scans per table, best reported (default 3).
//!
//! Data: `tools/bench/gen_data.py --rows 7000×files --files files` (the core benchmark's rows
//! as files of 7,000 rows). floe builds `bench.small` (format v2,
//! `write.delete.mode=merge-on-read`) in a filesystem (Hadoop layout) catalog: one single-lane
//! `DataWriter` per input file (→ one data file each), committed as appends of 100 files, then
//! `DELETE FROM bench.small WHERE id % 10 = 3` through `floe::dml::execute` (one file-scoped
//! position-delete file per data file). The table is built TWICE, in two warehouses
//! (`wh-floe` for floe, `wh-sprk` for Spark: Hadoop-layout metadata holds absolute paths),
//! from the same deterministic rows, so both copies hold the same data in files of the same
//! sizes. The built warehouses are cached as pristine copies and restored (data files
//! hard-linked, metadata copied) to the same absolute path before every measured run.

mod common;
use common::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use floe::catalog::{Catalog, TableCreation};
use floe::scan::Scan;
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Table;
use futures::StreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const ROWS_PER_FILE: usize = 7_000;
const FILES_PER_APPEND: usize = 100;
const TABLE: &str = "bench.small";
const DELETE_SQL: &str = "DELETE FROM bench.small WHERE id % 10 = 3";
const TARGET: u64 = 134_217_728;
/// Bump when the way the input tables are built changes (invalidates the cache).
const BUILD_VERSION: u32 = 1;

fn sh(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd).args(args).status().unwrap();
    assert!(st.success(), "{cmd} {args:?} failed");
}

/// Reads every file under `dir` once (puts both engines' inputs in the page cache).
fn warm(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            warm(&p);
        } else {
            let _ = std::fs::read(&p);
        }
    }
}

/// `dst` := a copy of `src` (data files hard-linked, metadata directories copied, so that a
/// commit rewriting `version-hint.text` in place cannot touch the pristine copy).
fn restore(src: &Path, dst: &Path) {
    let _ = std::fs::remove_dir_all(dst);
    sh("cp", &["-al", src.to_str().unwrap(), dst.to_str().unwrap()]);
    let md = dst.join("bench/small/metadata");
    std::fs::remove_dir_all(&md).unwrap();
    sh(
        "cp",
        &[
            "-a",
            src.join("bench/small/metadata").to_str().unwrap(),
            md.to_str().unwrap(),
        ],
    );
}

fn catalog(wh: &Path) -> Catalog {
    Catalog::open(Some(&format!("file://{}", wh.display())), None, None).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    data_files: usize,
    data_bytes: u64,
    delete_files: usize,
    delete_bytes: u64,
    /// Data files with at least one delete file applying.
    files_with_deletes: usize,
}

async fn layout(t: &Table) -> Layout {
    let plan = Scan::new(t).plan().await.unwrap();
    let mut deletes = HashMap::new();
    let mut l = Layout {
        data_files: plan.files.len(),
        data_bytes: plan.files.iter().map(|f| f.file.file_size_in_bytes()).sum(),
        delete_files: 0,
        delete_bytes: 0,
        files_with_deletes: plan.files.iter().filter(|f| !f.deletes.is_empty()).count(),
    };
    for f in &plan.files {
        for d in &f.deletes {
            deletes.insert(d.file.file_path().to_string(), d.file.file_size_in_bytes());
        }
    }
    l.delete_files = deletes.len();
    l.delete_bytes = deletes.values().sum();
    l
}

/// Builds `bench.small` in the filesystem catalog at `wh` from the input files.
fn build(rt: &tokio::runtime::Runtime, wh: &Path, inputs: &[PathBuf]) -> Layout {
    let t0 = Instant::now();
    let _ = std::fs::remove_dir_all(wh);
    std::fs::create_dir_all(wh).unwrap();
    let cat = catalog(wh);
    let mut c = TableCreation::new(parse_schema(DDL).unwrap());
    c.format_version = FormatVersion::V2;
    for op in ["delete", "update", "merge"] {
        c.properties
            .insert(format!("write.{op}.mode"), "merge-on-read".to_string());
    }
    let ident = parse_ident(TABLE).unwrap();
    rt.block_on(async {
        let mut t = cat.create_table(&ident, c).await.unwrap();
        for chunk in inputs.chunks(FILES_PER_APPEND) {
            let written: Vec<_> = futures::stream::iter(chunk.iter().map(|p| {
                let t = &t;
                async move {
                    let batches: Vec<_> = ParquetRecordBatchReaderBuilder::try_new(
                        std::fs::File::open(p).unwrap(),
                    )
                    .unwrap()
                    .with_batch_size(65536)
                    .build()
                    .unwrap()
                    .map(|b| b.unwrap())
                    .collect();
                    let mut w = floe::write::DataWriter::with_lanes(t, 1).unwrap();
                    for b in batches {
                        w.write(b).await.unwrap();
                    }
                    w.close().await.unwrap()
                }
            }))
            .buffered(4)
            .collect()
            .await;
            let mut files = Vec::new();
            for f in written {
                assert_eq!(f.len(), 1, "one data file per input file");
                files.extend(f);
            }
            t = floe::txn::append_files(&cat, &t, files)
                .await
                .unwrap()
                .table;
        }
        let appended = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let r = floe::dml::execute(&cat, DELETE_SQL, None).await.unwrap();
        eprintln!(
            "[maint bench] built {} ({} appends in {appended:.1}s; delete {:.1}s: removed {} rows, +{} delete files, {} bytes)",
            wh.display(),
            inputs.len().div_ceil(FILES_PER_APPEND),
            t1.elapsed().as_secs_f64(),
            r.removed_rows,
            r.added_delete_files,
            r.written_bytes
        );
        let t = cat.load_table(&ident).await.unwrap();
        layout(&t).await
    })
}

struct Spark {
    seconds: f64,
    v: serde_json::Value,
}

fn spark_rewrite(py: &Path, script: &Path, wh: &Path, extra: &[&str]) -> Option<Spark> {
    let mut args = vec![
        script.to_str().unwrap().to_string(),
        "--warehouse".into(),
        wh.to_str().unwrap().into(),
        "--table".into(),
        TABLE.into(),
        "--option".into(),
        "rewrite-all=true".into(),
        "--option".into(),
        format!("target-file-size-bytes={TARGET}"),
    ];
    for e in extra {
        args.push("--option".into());
        args.push(e.to_string());
    }
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let v = run_json(py, &args)?;
    Some(Spark {
        seconds: v.get("seconds")?.as_f64()?,
        v,
    })
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe maintenance benchmark: run with `cargo bench --bench maintenance`");
        return;
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && v != "0");
    let quick = env("FLOE_BENCH_QUICK").is_some();
    let nfiles: usize = env("FLOE_BENCH_FILES")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 200 } else { 2_000 });
    let rows = nfiles * ROWS_PER_FILE;
    let no_baseline = env("FLOE_BENCH_NO_BASELINE").is_some();
    let loops: usize = env("FLOE_BENCH_SCAN_LOOPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    let py = python().expect("peers python: run tools/peers/setup.sh first");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = |s: &str| repo.join("tools/bench").join(s);
    let data = base.join(format!("data-{rows}-f{nfiles}"));
    run_json(
        &py,
        &[
            script("gen_data.py").to_str().unwrap(),
            data.to_str().unwrap(),
            "--rows",
            &rows.to_string(),
            "--files",
            &nfiles.to_string(),
        ],
    )
    .expect("generate data");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    inputs.sort();
    assert_eq!(inputs.len(), nfiles);
    let deleted_rows = (0..rows).filter(|i| i % 10 == 3).count() as u64;
    let expected_rows = rows as u64 - deleted_rows;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // ---- input tables: built once per (rows, files, builder), kept pristine ----
    let key = fnv1a(
        fnv1a(
            0xcbf29ce484222325,
            &std::fs::read(script("gen_data.py")).unwrap(),
        ),
        format!("{BUILD_VERSION}/{DELETE_SQL}/{FILES_PER_APPEND}").as_bytes(),
    );
    let work = base.join("work-maint");
    let pristine = base.join(format!("maint-{rows}-f{nfiles}-{key:016x}"));
    let stamp = pristine.join("layout.json");
    std::fs::create_dir_all(&work).unwrap();
    let cached = env("FLOE_BENCH_REBUILD").is_none() && stamp.exists();
    // Names of equal length: position-delete files hold data file paths, so the two copies
    // have delete files of equal size only if their paths are equally long.
    let (floe_wh, spark_wh) = (work.join("wh-floe"), work.join("wh-sprk"));
    let layout0 = if cached {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stamp).unwrap()).unwrap();
        eprintln!(
            "[maint bench] input tables cached in {}",
            pristine.display()
        );
        v
    } else {
        let _ = std::fs::remove_dir_all(&pristine);
        let lf = build(&rt, &floe_wh, &inputs);
        let ls = build(&rt, &spark_wh, &inputs);
        // Same data files (same bytes); delete files hold random-UUID paths, so their
        // compressed size varies a little from build to build.
        let same = |a: &Layout| {
            (
                a.data_files,
                a.data_bytes,
                a.delete_files,
                a.files_with_deletes,
            )
        };
        assert_eq!(
            same(&lf),
            same(&ls),
            "the two builds must have the same layout"
        );
        assert!(
            lf.delete_bytes.abs_diff(ls.delete_bytes) * 50 < lf.delete_bytes,
            "{lf:?} {ls:?}"
        );
        assert_eq!(lf.data_files, nfiles);
        std::fs::create_dir_all(&pristine).unwrap();
        for (w, n) in [(&floe_wh, "wh-floe"), (&spark_wh, "wh-sprk")] {
            sh(
                "cp",
                &[
                    "-al",
                    w.to_str().unwrap(),
                    pristine.join(n).to_str().unwrap(),
                ],
            );
        }
        let v = serde_json::json!({
            "data_files": lf.data_files, "data_bytes": lf.data_bytes,
            "delete_files": lf.delete_files, "delete_bytes": lf.delete_bytes,
            "files_with_deletes": lf.files_with_deletes,
        });
        std::fs::write(&stamp, v.to_string()).unwrap();
        v
    };
    let g = |k: &str| layout0[k].as_u64().unwrap();
    println!(
        "floe maintenance benchmark: {rows} rows x 8 columns in {} data files ({:.1} MB), \
         {} position-delete files ({:.2} MB, {deleted_rows} rows deleted by MoR, v2), \
         {cores} cores{}",
        g("data_files"),
        mb(g("data_bytes")),
        g("delete_files"),
        mb(g("delete_bytes")),
        if quick { ", QUICK" } else { "" }
    );
    let opts: HashMap<String, String> = [
        ("rewrite-all".to_string(), "true".to_string()),
        ("target-file-size-bytes".to_string(), TARGET.to_string()),
    ]
    .into();

    // ---- 1. floe rewrite_data_files (in process), 4. scans before / after ----
    restore(&pristine.join("wh-floe"), &floe_wh);
    warm(&floe_wh);
    let cat = catalog(&floe_wh);
    let ident = parse_ident(TABLE).unwrap();
    let scan = |t: &Table| -> (f64, u64) {
        let mut best = f64::MAX;
        let mut n = 0;
        for _ in 0..loops {
            let t0 = Instant::now();
            n = rt.block_on(async {
                let mut s = Scan::new(t).concurrency(2).to_stream().await.unwrap();
                let mut n = 0u64;
                while let Some(b) = s.next().await {
                    n += b.unwrap().num_rows() as u64;
                }
                n
            });
            best = best.min(t0.elapsed().as_secs_f64());
        }
        (best, n)
    };
    let t_before = rt.block_on(cat.load_table(&ident)).unwrap();
    let (scan_before, n) = scan(&t_before);
    assert_eq!(n, expected_rows, "rows before compaction");
    settle();
    // Reset the peak-RSS counter (Linux: 5 > clear_refs), so VmHWM covers the rewrite only.
    let rss_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let rss_start = status_kb("VmRSS:").unwrap_or(0);
    let t0 = Instant::now();
    let r = rt
        .block_on(floe::maintenance::rewrite_data_files(
            &cat, &t_before, None, &opts, None,
        ))
        .unwrap();
    let floe_s = t0.elapsed().as_secs_f64();
    let hwm = status_kb("VmHWM:").unwrap_or(0);
    eprintln!(
        "[maint bench] floe rewrite {floe_s:.3}s: snapshot {:?}, {} groups, -{} +{} data files, -{} delete files",
        r.snapshot_id,
        r.file_groups,
        r.rewritten_data_files_count,
        r.added_data_files_count,
        r.removed_delete_files_count
    );
    let t_after = rt.block_on(cat.load_table(&ident)).unwrap();
    let after = rt.block_on(layout(&t_after));
    let rows_after = rt.block_on(Scan::new(&t_after).count()).unwrap();
    assert_eq!(rows_after, expected_rows, "rows after compaction");
    assert_eq!(
        after.files_with_deletes, 0,
        "no delete file may apply after the rewrite: {after:?}"
    );
    let (scan_after, n) = scan(&t_after);
    assert_eq!(n, expected_rows);

    // ---- 3. peak RSS of the CLI doing the same rewrite (child process) ----
    restore(&pristine.join("wh-floe"), &floe_wh);
    warm(&floe_wh);
    settle();
    let t0 = Instant::now();
    let run = floe_cli(
        &[
            "--catalog",
            &format!("file://{}", floe_wh.display()),
            "rewrite-data-files",
            TABLE,
            "--option",
            "rewrite-all=true",
            "--option",
            &format!("target-file-size-bytes={TARGET}"),
            "--json",
        ],
        &work,
    );
    let cli_wall = t0.elapsed().as_secs_f64();
    let (cli_rss_kb, cli_cpu) = (run.peak_rss_kb, run.cpu_s);

    // ---- 2. Spark baseline(s) on the identical copy ----
    let spark = |extra: &[&str]| {
        restore(&pristine.join("wh-sprk"), &spark_wh);
        warm(&spark_wh);
        settle();
        spark_rewrite(&py, &script("baseline_spark_rewrite.py"), &spark_wh, extra)
    };
    let spark_plain = (!no_baseline).then(|| spark(&[])).flatten();
    let spark_dangling = (!no_baseline && env("FLOE_BENCH_NO_DANGLING").is_none())
        .then(|| spark(&["remove-dangling-deletes=true"]))
        .flatten();

    // ---- report ----
    println!(
        "floe rewrite: {} data files ({:.1} MB) -> {} files ({:.1} MB) in {} file group(s); \
         removed {} delete files; rows {rows_after} (expected {expected_rows}); \
         live delete files after: {} (files with deletes: {})",
        r.rewritten_data_files_count,
        mb(r.rewritten_bytes_count),
        r.added_data_files_count,
        mb(after.data_bytes),
        r.file_groups,
        r.removed_delete_files_count,
        after.delete_files,
        after.files_with_deletes,
    );
    let sv = |s: &Option<Spark>, k: &str| {
        s.as_ref()
            .and_then(|s| s.v.get(k))
            .map(|v| v.to_string())
            .unwrap_or_else(|| "n/a".into())
    };
    for (name, s) in [
        ("spark rewrite_data_files", &spark_plain),
        (
            "spark rewrite_data_files + remove-dangling-deletes",
            &spark_dangling,
        ),
    ] {
        if s.is_some() {
            println!(
                "{name}: {} data files -> {} files ({} bytes), removed delete files {}, \
                 live delete files after {}, rows after {} (session start {} s, not timed)",
                sv(s, "rewritten_data_files_count"),
                sv(s, "added_data_files_count"),
                sv(s, "data_bytes_after"),
                sv(s, "removed_delete_files_count"),
                sv(s, "live_delete_files_after"),
                sv(s, "rows_after"),
                sv(s, "session_s"),
            );
        }
    }
    let head = format!("floe rewrite_data_files ({nfiles} files): {floe_s:.3} s");
    for (name, s, target) in [
        ("spark rewrite_data_files", &spark_plain, Some(3.0)),
        (
            "spark + remove-dangling-deletes",
            &spark_dangling,
            Some(3.0),
        ),
    ] {
        match s {
            Some(s) => {
                let ratio = s.seconds / floe_s;
                println!(
                    "{head:<52} | {name}: {:.3} s = {ratio:.2}x (target >= {}x) {}",
                    s.seconds,
                    target.unwrap(),
                    verdict(ratio >= target.unwrap())
                );
            }
            None if !no_baseline => println!("{head:<52} | {name}: n/a"),
            None => {}
        }
    }
    if no_baseline {
        println!("{head:<52} | spark: skipped (FLOE_BENCH_NO_BASELINE)");
    }
    let conc = 5u64;
    let groups = r.file_groups as u64;
    let bound = 2 * TARGET * conc;
    let bound_eff = 2 * TARGET * conc.min(groups.max(1));
    println!(
        "floe CLI rewrite-data-files peak RSS: {:.0} MB (wall {cli_wall:.2} s, cpu {cli_cpu:.2} s) \
         | bound 2 x target x concurrency = 2 x 128 MiB x {conc} = {:.0} MB: {} \
         ({} file group(s): 2 x 128 MiB x {} = {:.0} MB: {})",
        cli_rss_kb as f64 * 1024.0 / 1e6,
        mb(bound),
        verdict(cli_rss_kb * 1024 <= bound),
        groups,
        conc.min(groups.max(1)),
        mb(bound_eff),
        verdict(cli_rss_kb * 1024 <= bound_eff),
    );
    if rss_reset {
        println!(
            "floe in-process rewrite peak RSS (VmHWM after reset): {:.0} MB (RSS at start {:.0} MB)",
            hwm as f64 / 1e3 * 1.024,
            rss_start as f64 / 1e3 * 1.024
        );
    }
    println!(
        "floe scan, all columns, 2 threads: before compaction {scan_before:.3} s ({} files + {} delete files) \
         | after {scan_after:.3} s ({} files) = {:.2}x faster",
        g("data_files"),
        g("delete_files"),
        after.data_files,
        scan_before / scan_after
    );
}
