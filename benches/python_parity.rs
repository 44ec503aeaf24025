//! The Rust side of the Python API benchmark (`tools/bench/python_api.py --rust-bin`): the
//! same scan / DELETE / upsert the Python binding runs (`src/python/table.rs`), called
//! directly on the library, so the script can print the ratio python/rust on the same data.
//!
//! Not a stand-alone benchmark: `cargo bench` runs it without arguments and it only prints
//! its usage. Build it with `cargo bench --bench python_parity --no-run` (which prints its
//! path) and pass that path as `--rust-bin`; the script creates the tables and runs:
//!
//! ```text
//! python_parity scan   WAREHOUSE TABLE REPEAT        # REPEAT full scans of TABLE
//! python_parity delete WAREHOUSE WHERE TABLE...      # DELETE FROM t WHERE .. on each TABLE
//! python_parity upsert WAREHOUSE CHANGES.parquet TABLE...  # upsert of the file's rows, each TABLE
//! ```
//!
//! It prints one JSON object on stdout: `{"op", "seconds": [...], "cpu_seconds": [...],
//! "rows": [...]}` (wall and process CPU time), one entry per scan / per table, in order (the caller drops the first as a warm-up, as it does on the
//! Python side). Each timing covers exactly what the Python call covers once its arguments
//! are in Rust: the catalog is opened and (for the scan) the table loaded before the clock
//! starts; the work runs as the binding runs it — spawned on a default multi-thread tokio
//! runtime, the calling thread blocking on its handle.

use std::future::Future;
use std::time::Instant;

use arrow::array::RecordBatch;
use floe::catalog::Catalog;
use floe::scan::{Scan, SnapshotSelector};
use floe::table::parse_ident;
use futures::TryStreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const USAGE: &str = "usage: python_parity scan WAREHOUSE TABLE REPEAT | \
                     delete WAREHOUSE WHERE TABLE... | upsert WAREHOUSE CHANGES.parquet TABLE... \
                     (driven by tools/bench/python_api.py --rust-bin)";

/// CPU seconds (user + system, all threads) this process has used: `CLOCK_PROCESS_CPUTIME_ID`,
/// the clock of Python's `time.process_time()`. NaN off Linux.
fn cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        #[repr(C)]
        struct Timespec {
            tv_sec: i64,
            tv_nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
        }
        const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
        let mut t = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec (64-bit Linux layout).
        if unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0 {
            return t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9;
        }
    }
    f64::NAN
}

/// Runs `fut` as the binding's `run` does: spawned on the runtime, this thread blocking on
/// the handle; returns the result, the wall seconds and the CPU seconds it took. Written
/// data is flushed first (`sync`, as the Python side's clock does), so no earlier write's
/// writeback lands in the clock.
fn timed<T, F>(rt: &tokio::runtime::Runtime, fut: F) -> (T, f64, f64)
where
    T: Send + 'static,
    F: Future<Output = floe::Result<T>> + Send + 'static,
{
    extern "C" {
        fn sync();
    }
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { sync() };
    let (c0, t0) = (cpu_seconds(), Instant::now());
    let handle = rt.spawn(fut);
    let r = rt
        .block_on(handle)
        .expect("the task panicked")
        .unwrap_or_else(|e| panic!("{e}"));
    (r, t0.elapsed().as_secs_f64(), cpu_seconds() - c0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let op = args.first().map(String::as_str).unwrap_or("");
    if !matches!(op, "scan" | "delete" | "upsert") || args.len() < 4 {
        eprintln!("{USAGE}");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The Python package opens `load_catalog("default", warehouse=...)` this way.
    let cat = Catalog::open(None, Some(&args[1]), Some("default")).expect("open the catalog");
    let (mut seconds, mut cpu, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    match op {
        "scan" => {
            let ident = parse_ident(&args[2]).expect("table name");
            let repeat: usize = args[3].parse().expect("REPEAT");
            let c = cat.clone();
            let (t, _, _) = timed(&rt, async move { c.load_table(&ident).await });
            for _ in 0..repeat {
                // As `scan_to_arrow` with the Python defaults (all columns, no filter).
                let scan = Scan::new(&t).snapshot(SnapshotSelector::Current);
                let (batches, s, c) = timed(&rt, async move {
                    let plan = scan.plan().await?;
                    let _schema = scan.output_schema(&plan)?;
                    let mut stream = scan.read(plan)?;
                    let mut out: Vec<RecordBatch> = Vec::new();
                    while let Some(b) = stream.try_next().await? {
                        out.push(b);
                    }
                    Ok(out)
                });
                seconds.push(s);
                cpu.push(c);
                rows.push(batches.iter().map(|b| b.num_rows() as u64).sum::<u64>());
            }
        }
        "delete" => {
            for name in &args[3..] {
                // As `Table.delete`: `DELETE FROM <t> WHERE <filter>` through `execute_with`.
                let sql = format!("DELETE FROM {name} WHERE {}", args[2]);
                let c = cat.clone();
                let (r, s, c) = timed(&rt, async move {
                    floe::dml::execute_with(&c, &sql, None, None).await
                });
                seconds.push(s);
                cpu.push(c);
                rows.push(r.removed_rows);
            }
        }
        "upsert" => {
            let file = std::fs::File::open(&args[2]).expect("open CHANGES.parquet");
            let input: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(file)
                .expect("read CHANGES.parquet")
                .with_batch_size(1 << 20)
                .build()
                .expect("read CHANGES.parquet")
                .collect::<Result<_, _>>()
                .expect("read CHANGES.parquet");
            for name in &args[3..] {
                let ident = parse_ident(name).expect("table name");
                let (c, input) = (cat.clone(), input.clone());
                // As `Table.upsert` on a keyed table: the rows as one ChangeBatch, default
                // options, `keyed::upsert`.
                let (r, s, c) = timed(&rt, async move {
                    let mut changes = floe::keyed::ChangeBatch::new();
                    for b in input {
                        changes.push("the input", b);
                    }
                    let options = floe::keyed::UpsertOptions::default().with_evolve_schema(false);
                    floe::keyed::upsert(&c, &ident, &changes, &options).await
                });
                seconds.push(s);
                cpu.push(c);
                rows.push(r.updated + r.inserted);
            }
        }
        _ => unreachable!(),
    }
    println!(
        "{}",
        serde_json::json!({"op": op, "seconds": seconds, "cpu_seconds": cpu, "rows": rows})
    );
}
