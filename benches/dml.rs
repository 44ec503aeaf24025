//! Row-level changes (DELETE / MERGE, copy-on-write and merge-on-read) against pyiceberg, and
//! the scan cost of deletion vectors; ratios printed in the same run (issue 3).
//!
//! `cargo bench --bench dml`. Env:
//! * `FLOE_BENCH_QUICK=1` — smoke run: 1,000,000 rows unless `FLOE_BENCH_ROWS` says otherwise;
//! * `FLOE_BENCH_ROWS` — rows (default 10,000,000), always written as 20 files;
//! * `FLOE_BENCH_DIR` — data, cache and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python (default `~/.cache/floe/peers/venv/bin/python`);
//! * `FLOE_BENCH_REBASE=1` — re-run the (slow, cached) pyiceberg upsert baseline;
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only (no pyiceberg at all);
//! * `FLOE_BENCH_ONLY=delete,scan,merge` — run only these parts (profiling aid);
//! * `FLOE_BENCH_SCAN_LOOPS` — timed scans of each kind (alternating: before and after the
//!   delete), best reported (default 5).
//!
//! Data: `tools/bench/gen_data.py --files 20` (the core benchmark's rows, 20 files of 500k
//! rows); every table gets its 20 files in ONE append snapshot (each file written by its own
//! single-lane `DataWriter`, then `txn::append_files`). MERGE source:
//! `tools/bench/gen_dml_source.py` (rows/20 updates of ids spread over every file + as many
//! new ids). Baselines: `tools/bench/baseline_pyiceberg_dml.py` (pyiceberg 0.12, CoW only).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use arrow::array::RecordBatch;
use floe::catalog::{Catalog, TableCreation};
use floe::dml::RowLevelResult;
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Table;
use futures::StreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const FILES: usize = 20;

fn load(file: &Path) -> Vec<RecordBatch> {
    ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap())
        .unwrap()
        .with_batch_size(65536)
        .build()
        .unwrap()
        .map(|b| b.unwrap())
        .collect()
}

/// `name: X s, B MB written (baseline: Y s, C MB) = ratio× (target ≥ T×) ok/NOT MET`;
/// ratio = baseline time / floe time.
fn line(
    name: &str,
    secs: f64,
    bytes: Option<u64>,
    base_name: &str,
    base: Option<(f64, Option<u64>)>,
    target: Option<f64>,
) {
    let b = |x: Option<u64>| {
        x.map(|x| format!(", {:.2} MB written", mb(x)))
            .unwrap_or_default()
    };
    let head = format!("{name}: {secs:.3} s{}", b(bytes));
    match base {
        Some((bs, bb)) => {
            let ratio = bs / secs;
            let tail = match target {
                Some(t) => format!("(target >= {t}x) {}", verdict(ratio >= t)),
                None => "(no target)".to_string(),
            };
            println!(
                "{head:<62} | {base_name}: {bs:.3} s{} = {ratio:.2}x {tail}",
                b(bb)
            );
        }
        None => println!("{head:<62} | {base_name}: n/a"),
    }
}

/// Sizes of the files under `dir` (recursively).
fn files_under(dir: &Path, out: &mut std::collections::HashMap<PathBuf, u64>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match e.metadata() {
            Ok(m) if m.is_dir() => files_under(&p, out),
            Ok(m) => {
                out.insert(p, m.len());
            }
            Err(_) => {}
        }
    }
}

struct Setup<'a> {
    rt: &'a tokio::runtime::Runtime,
    cat: &'a Catalog,
    parts: &'a [Vec<RecordBatch>],
    warehouse: PathBuf,
}

impl Setup<'_> {
    /// A fresh table holding the 20 files, committed as one append.
    fn table(&self, name: &str, v: FormatVersion, mode: &str) -> Table {
        let t0 = Instant::now();
        let mut c = TableCreation::new(parse_schema(DDL).unwrap());
        c.format_version = v;
        for op in ["delete", "update", "merge"] {
            c.properties
                .insert(format!("write.{op}.mode"), mode.to_string());
        }
        let ident = parse_ident(&format!("bench.{name}")).unwrap();
        let t = self.rt.block_on(async {
            let t = self.cat.create_table(&ident, c).await.unwrap();
            append_each_as_one_file(self.cat, &t, self.parts, |b| b.clone()).await
        });
        eprintln!(
            "[dml bench] created {name} ({v:?}, {mode}, {FILES} files) in {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        t
    }

    /// Runs `sql` on table `name`; also returns the bytes of the new files in its data
    /// directory (data + delete files as found on disk, each file once).
    fn execute(
        &self,
        name: &str,
        sql: &str,
        source: Option<Vec<RecordBatch>>,
    ) -> (f64, RowLevelResult, u64) {
        let dir = self.warehouse.join("bench").join(name).join("data");
        let mut before = std::collections::HashMap::new();
        files_under(&dir, &mut before);
        settle();
        let t0 = Instant::now();
        let r = self
            .rt
            .block_on(floe::dml::execute(self.cat, sql, source))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "[dml bench] {secs:.3}s  {sql}  -> mode {:?}, removed {} rows, wrote {} rows, files -{} +{} data +{} delete, {} bytes",
            r.mode,
            r.removed_rows,
            r.written_rows,
            r.removed_data_files,
            r.added_data_files,
            r.added_delete_files,
            r.written_bytes
        );
        let mut after = std::collections::HashMap::new();
        files_under(&dir, &mut after);
        let disk: u64 = after
            .iter()
            .filter(|(p, _)| !before.contains_key(*p))
            .map(|(_, n)| n)
            .sum();
        if disk != r.written_bytes {
            eprintln!(
                "[dml bench] NOTE {name}: RowLevelResult.written_bytes = {} but the new files on disk hold {disk} bytes",
                r.written_bytes
            );
        }
        (secs, r, disk)
    }

    /// Best time of `loops` full scans (all columns, 2 threads) of `t` at `at`.
    fn scan(&self, t: &Table, at: SnapshotSelector, loops: usize) -> (f64, u64) {
        best(loops, || {
            self.rt.block_on(async {
                let mut s = Scan::new(t)
                    .snapshot(at.clone())
                    .concurrency(2)
                    .to_stream()
                    .await
                    .unwrap();
                let mut n = 0u64;
                while let Some(b) = s.next().await {
                    n += b.unwrap().num_rows() as u64;
                }
                n
            })
        })
    }
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe dml benchmark: run with `cargo bench --bench dml`");
        return;
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && v != "0");
    let quick = env("FLOE_BENCH_QUICK").is_some();
    let rows: usize = env("FLOE_BENCH_ROWS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1_000_000 } else { 10_000_000 });
    let only = env("FLOE_BENCH_ONLY");
    let part = |p: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == p));
    let no_baseline = env("FLOE_BENCH_NO_BASELINE").is_some();
    let loops: usize = env("FLOE_BENCH_SCAN_LOOPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    let data = base.join(format!("data-{rows}-f{FILES}"));
    let source_file = base.join(format!("dml-source-{rows}.parquet"));
    let py = python().expect("peers python: run tools/peers/setup.sh first");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = |s: &str| repo.join("tools/bench").join(s);
    run_json(
        &py,
        &[
            script("gen_data.py").to_str().unwrap(),
            data.to_str().unwrap(),
            "--rows",
            &rows.to_string(),
            "--files",
            &FILES.to_string(),
        ],
    )
    .expect("generate data");
    run_json(
        &py,
        &[
            script("gen_dml_source.py").to_str().unwrap(),
            data.to_str().unwrap(),
            source_file.to_str().unwrap(),
        ],
    )
    .expect("generate MERGE source");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    assert_eq!(files.len(), FILES);
    let parts: Vec<Vec<RecordBatch>> = files.iter().map(|f| load(f)).collect();
    let n: usize = parts.iter().flatten().map(|b| b.num_rows()).sum();
    assert_eq!(n, rows);
    let source = load(&source_file);
    let source_rows: usize = source.iter().map(|b| b.num_rows()).sum();
    let updates = (3..rows).step_by(20).count(); // ids 3, 23, 43, ... (gen_dml_source.py)
    assert_eq!(source_rows, 2 * updates);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "floe dml benchmark: {n} rows x 8 columns in {FILES} files of {} rows (one append), {cores} cores{}",
        rows / FILES,
        if quick { ", QUICK" } else { "" }
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = base.join("work-dml");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let cat = Catalog::open(None, Some(work.join("wh").to_str().unwrap()), None).unwrap();
    let s = Setup {
        rt: &rt,
        cat: &cat,
        parts: &parts,
        warehouse: work.join("wh"),
    };
    const COW: &str = "copy-on-write";
    const MOR: &str = "merge-on-read";

    // ---- pyiceberg: delete every run (cheap); upsert cached (minutes) ----
    let f = |v: &Option<serde_json::Value>, op: &str, k: &str| {
        v.as_ref()
            .and_then(|v| v.get(op))
            .and_then(|v| v.get(k))
            .and_then(|x| x.as_f64())
    };
    let base_of = |v: &Option<serde_json::Value>, op: &str| {
        f(v, op, "seconds").map(|s| (s, f(v, op, "bytes").map(|b| b as u64)))
    };
    let pyi_delete = (!no_baseline && part("delete"))
        .then(|| {
            settle();
            run_json(
                &py,
                &[
                    script("baseline_pyiceberg_dml.py").to_str().unwrap(),
                    "--data",
                    data.to_str().unwrap(),
                    "--work",
                    work.join("pyiceberg").to_str().unwrap(),
                    "--ops",
                    "delete",
                ],
            )
        })
        .flatten();
    let mut upsert_note = String::new();
    let pyi_upsert = (!no_baseline && part("merge"))
        .then(|| {
            let ver = Command::new(&py)
                .args(["-c", "import pyiceberg; print(pyiceberg.__version__)"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            let mut h = fnv1a(0xcbf29ce484222325, ver.as_bytes());
            for sc in ["baseline_pyiceberg_dml.py", "gen_dml_source.py", "gen_data.py"] {
                h = fnv1a(h, &std::fs::read(script(sc)).unwrap());
            }
            let cache = base.join(format!(
                "baseline-pyiceberg-upsert-{rows}-pyiceberg{ver}-{h:016x}.json"
            ));
            if env("FLOE_BENCH_REBASE").is_none() {
                if let Some(v) = std::fs::read_to_string(&cache)
                    .ok()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                {
                    upsert_note = format!("cached {}", cache.display());
                    return Some(v);
                }
            }
            eprintln!("[dml bench] running the pyiceberg upsert baseline (minutes at 10M rows; cached afterwards)");
            settle();
            let v = run_json(
                &py,
                &[
                    script("baseline_pyiceberg_dml.py").to_str().unwrap(),
                    "--data",
                    data.to_str().unwrap(),
                    "--work",
                    work.join("pyiceberg").to_str().unwrap(),
                    "--ops",
                    "upsert",
                    "--source",
                    source_file.to_str().unwrap(),
                ],
            )?;
            let _ = std::fs::write(&cache, v.to_string());
            upsert_note = format!("measured now, cached in {}", cache.display());
            Some(v)
        })
        .flatten();
    let _ = std::fs::remove_dir_all(work.join("pyiceberg"));

    // ---- 1. DELETE 0.1% scattered rows ----
    let deleted = (7..rows).step_by(1000).count() as u64;
    let mut del = Vec::new();
    if part("delete") {
        for (name, v, mode) in [
            ("del_cow", FormatVersion::V2, COW),
            ("del_mor2", FormatVersion::V2, MOR),
            ("del_mor3", FormatVersion::V3, MOR),
        ] {
            s.table(name, v, mode);
            let (secs, r, disk) = s.execute(
                name,
                &format!("DELETE FROM bench.{name} WHERE id % 1000 = 7"),
                None,
            );
            assert_eq!(r.removed_rows, deleted, "{name}");
            del.push((secs, r.written_bytes, disk));
        }
    }

    // ---- 2. scan with 1% of rows deleted by DVs vs no deletes ----
    let mut scan = None;
    if part("scan") {
        let t = s.table("scan_v3", FormatVersion::V3, MOR);
        let before = SnapshotSelector::Id(t.metadata().current_snapshot_id().unwrap());
        let (_, n0) = s.scan(&t, before.clone(), 1);
        assert_eq!(n0 as usize, rows);
        let (_, r, _) = s.execute(
            "scan_v3",
            "DELETE FROM bench.scan_v3 WHERE id % 100 = 7",
            None,
        );
        assert!(r.added_delete_files > 0, "DVs written");
        // The same files before and after the delete, scanned alternately so that drift in
        // the machine's speed affects both alike.
        let (mut plain, mut with_dv) = (f64::MAX, f64::MAX);
        for _ in 0..loops {
            let (p, n) = s.scan(&r.table, before.clone(), 1);
            assert_eq!(n as usize, rows);
            let (d, n1) = s.scan(&r.table, SnapshotSelector::Current, 1);
            assert_eq!(n1, rows as u64 - (7..rows).step_by(100).count() as u64);
            plain = plain.min(p);
            with_dv = with_dv.min(d);
        }
        scan = Some((plain, with_dv));
    }

    // ---- 3. MERGE (keyed upsert) ----
    let merge_sql = |name: &str| {
        format!(
            "MERGE INTO bench.{name} AS t USING src AS s ON t.id = s.id \
             WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    };
    let mut merges = Vec::new();
    if part("merge") {
        for (name, v, mode, label) in [
            ("merge_mor3", FormatVersion::V3, MOR, "MoR v3 (DV)"),
            ("merge_mor2", FormatVersion::V2, MOR, "MoR v2 (pos deletes)"),
            ("merge_cow", FormatVersion::V2, COW, "CoW v2"),
        ] {
            s.table(name, v, mode);
            let (secs, r, disk) = s.execute(name, &merge_sql(name), Some(source.clone()));
            assert_eq!(r.removed_rows as usize, updates, "{name}: updated rows");
            // Updated + inserted rows; CoW also copies the kept rows of rewritten files.
            assert_eq!(r.written_rows as usize, source_rows, "{name}: written rows");
            if mode != MOR {
                assert_eq!(
                    r.rewritten_rows as usize,
                    rows - updates,
                    "{name}: rewritten rows"
                );
            }
            merges.push((label, secs, r.written_bytes, disk));
        }
    }

    // ---- report ----
    println!();
    if let Some(v) = pyi_delete.as_ref().or(pyi_upsert.as_ref()) {
        println!(
            "baseline: pyiceberg {} (pyarrow {}), format v2, copy-on-write, same 20 files in one transaction",
            v["versions"]["pyiceberg"].as_str().unwrap_or("?"),
            v["versions"]["pyarrow"].as_str().unwrap_or("?")
        );
    }
    if del.len() == 3 {
        let bd = base_of(&pyi_delete, "delete");
        if let Some(c) = f(&pyi_delete, "delete", "cpu_seconds") {
            println!("  (pyiceberg delete: process CPU time {c:.2} s)");
        }
        let name = |m: &str| format!("delete {deleted} rows (id % 1000 = 7), {m}");
        let labels = [
            "floe CoW v2",
            "floe MoR v2 (pos deletes)",
            "floe MoR v3 (DV)",
        ];
        let targets = [None, Some(10.0), Some(10.0)];
        for i in 0..3 {
            line(
                &name(labels[i]),
                del[i].0,
                Some(del[i].1),
                "pyiceberg delete(In(id, ...))",
                bd,
                targets[i],
            );
        }
        for i in 1..3 {
            let pct = 100.0 * del[i].1 as f64 / del[0].1.max(1) as f64;
            let disk_pct = 100.0 * del[i].2 as f64 / del[0].2.max(1) as f64;
            let disk = if del[i].1 != del[i].2 || del[0].1 != del[0].2 {
                format!(
                    "   [new files on disk: {:.3} MB / {:.2} MB = {disk_pct:.3}%]",
                    mb(del[i].2),
                    mb(del[0].2)
                )
            } else {
                String::new()
            };
            println!(
                "delete bytes, {} / floe CoW: {:.3} MB / {:.2} MB = {pct:.3}% (target <= 1%) {}{disk}",
                labels[i],
                mb(del[i].1),
                mb(del[0].1),
                verdict(pct <= 1.0)
            );
        }
    }
    if let Some((plain, with_dv)) = scan {
        let ratio = plain / with_dv;
        println!(
            "scan all columns, 2 threads, 1% rows deleted by DVs: {with_dv:.3} s | no deletes: {plain:.3} s = {ratio:.2}x (target >= 0.95x) {}",
            verdict(ratio >= 0.95)
        );
    }
    if !merges.is_empty() {
        let bu = base_of(&pyi_upsert, "upsert");
        let src_desc = format!("{source_rows} rows ({updates} upd + {updates} ins)");
        // The 50x goal is for merge-on-read; CoW rewrites every file (reference only).
        for (label, secs, bytes, disk) in &merges {
            line(
                &format!("merge {src_desc}, floe {label}"),
                *secs,
                Some(*bytes),
                "pyiceberg upsert(join_cols=[id])",
                bu,
                (!label.starts_with("CoW")).then_some(50.0),
            );
            if bytes != disk {
                println!("  (floe {label}: new files on disk {:.2} MB)", mb(*disk));
            }
        }
        if !upsert_note.is_empty() {
            println!(
                "  (pyiceberg upsert baseline {upsert_note}; its process CPU time {:.1} s)",
                f(&pyi_upsert, "upsert", "cpu_seconds").unwrap_or(f64::NAN)
            );
        }
    }
}
