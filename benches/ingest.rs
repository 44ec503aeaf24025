//! Snapshot-dedup ingestion (issue 5): change-aware ingest + publish against the rewrite
//! strategy and against floe's own copy-on-write MERGE of the snapshot (the statement an engine
//! would run), plus the cost of CLONE (the publish step) at 10,000 data files. Ratios are
//! printed against baselines measured in the same run.
//!
//! `cargo bench --bench ingest`. Env:
//! * `FLOE_BENCH_QUICK=1` — smoke run: 13 days x 100,000 rows (default 13 x 1,000,000);
//! * `FLOE_BENCH_ROWS_PER_DAY` — rows per day (overrides both);
//! * `FLOE_BENCH_DIR` — data, cache and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python (default `~/.cache/floe/peers/venv/bin/python`);
//! * `FLOE_BENCH_ONLY=ingest,clone` — run only these parts (profiling aid);
//! * `FLOE_BENCH_CLONE_FILES` — data files of the clone tables (default 10,000).
//!
//! Data: `tools/bench/gen_snapshots.py --days 13 --rows-per-day N --snapshots 4
//! --change-rate 0.001` (cached in the bench dir, regenerated when its manifest's parameters
//! differ): snapshot 0 is the initial load (untimed), snapshots 1..3 each change ~0.1% of the
//! rows (changed values, vanished keys, new keys). Table `date date, product_id long,
//! store_id long, attribute_id long, attr_value string, update_id long`, partitioned by
//! `day(date)`, key (date, product_id, store_id, attribute_id), version update_id.
//!
//! Measured per change snapshot, each variant on its own tables (initial load untimed; the
//! time includes reading the snapshot's Parquet files):
//! * (i) change-aware ingest + publish (`IngestOptions.publish`), staging in merge-on-read v3
//!   (deletion vectors), merge-on-read v2 (position deletes) and copy-on-write v2;
//! * (ii) rewrite-strategy ingest + publish;
//! * (iii) floe's copy-on-write MERGE of the snapshot into a v2 table: `MERGE INTO t USING s
//!   ON <key> WHEN MATCHED AND s.update_id > t.update_id THEN UPDATE SET * WHEN NOT MATCHED
//!   THEN INSERT *`.
//!
//! Goals: (iii)/(i) >= 2x in time; bytes written by (i) <= 2% of the snapshot's Parquet size;
//! a clone of a 10,000-file table <= 100 ms, independent of the data size.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Date32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use floe::catalog::{Catalog, TableCreation};
use floe::ingest::{ingest_snapshot, IngestOptions, IngestResult, Strategy};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Table;
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const DDL: &str = "date date, product_id long, store_id long, attribute_id long, attr_value string, update_id long";
const KEY: [&str; 4] = ["date", "product_id", "store_id", "attribute_id"];
const DAYS: usize = 13;
const SNAPSHOTS: usize = 4;
const CHANGE_RATE: &str = "0.001";
const COW: &str = "copy-on-write";
const MOR: &str = "merge-on-read";

/// One generated snapshot (from the generator's manifest).
struct Snap {
    files: Vec<PathBuf>,
    rows: u64,
    bytes: u64,
    changed: u64,
    vanished: u64,
    added: u64,
    returned: u64,
}

/// The snapshot's rows, read lazily file by file (in arrival order).
fn read_snapshot(files: &[PathBuf]) -> impl Iterator<Item = floe::Result<RecordBatch>> + '_ {
    files.iter().flat_map(|f| {
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap()
            .with_batch_size(65536)
            .build()
            .unwrap()
            .map(|b| b.map_err(floe::Error::from))
    })
}

fn load_snapshot(files: &[PathBuf]) -> Vec<RecordBatch> {
    read_snapshot(files).map(|b| b.unwrap()).collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ChangeAware,
    Rewrite,
    Merge,
}

struct Variant {
    label: &'static str,
    short: &'static str,
    kind: Kind,
    version: FormatVersion,
    mode: &'static str,
    /// Staging table (ingest) or the MERGE target.
    staging: String,
    /// Published table (ingest only).
    target: Option<String>,
}

/// One measurement of one variant on one snapshot.
#[derive(Clone, Default)]
struct Run {
    secs: f64,
    ingest: f64,
    publish: f64,
    bytes: u64,
    /// Files written / removed, for the log.
    detail: String,
}

struct Ctx<'a> {
    rt: &'a tokio::runtime::Runtime,
    cat: &'a Catalog,
}

impl Ctx<'_> {
    fn create(&self, name: &str, v: FormatVersion, mode: &str) -> Table {
        let schema = parse_schema(DDL).unwrap();
        let mut c = TableCreation::new(schema.clone());
        c.format_version = v;
        c.partition_spec = parse_partition_spec("day(date)", &schema).unwrap();
        for op in ["delete", "update", "merge"] {
            c.properties
                .insert(format!("write.{op}.mode"), mode.to_string());
        }
        self.rt
            .block_on(self.cat.create_table(&parse_ident(name).unwrap(), c))
            .unwrap()
    }

    fn load(&self, name: &str) -> Table {
        self.rt
            .block_on(self.cat.load_table(&parse_ident(name).unwrap()))
            .unwrap()
    }

    fn ingest(&self, v: &Variant, files: &[PathBuf]) -> (f64, IngestResult) {
        let staging = self.load(&v.staging);
        let mut o = IngestOptions::new(KEY.iter().map(|s| s.to_string()).collect(), "update_id");
        o.strategy = if v.kind == Kind::Rewrite {
            Strategy::Rewrite
        } else {
            Strategy::ChangeAware
        };
        o.publish = v.target.as_deref().map(|t| parse_ident(t).unwrap());
        settle();
        let t0 = Instant::now();
        let r = self
            .rt
            .block_on(ingest_snapshot(
                self.cat,
                &staging,
                read_snapshot(files),
                &o,
            ))
            .unwrap_or_else(|e| panic!("ingest into {}: {e}", v.staging));
        (t0.elapsed().as_secs_f64(), r)
    }

    /// Appends a snapshot as an engine's initial INSERT would (one writer, one commit).
    fn append(&self, name: &str, files: &[PathBuf]) {
        let t = self.load(name);
        self.rt.block_on(async {
            let mut w = floe::write::DataWriter::new(&t).unwrap();
            for b in read_snapshot(files) {
                w.write(b.unwrap()).await.unwrap();
            }
            let files = w.close().await.unwrap();
            floe::txn::append_files(self.cat, &t, files).await.unwrap();
        });
    }

    fn merge(&self, name: &str, files: &[PathBuf]) -> (f64, floe::dml::RowLevelResult) {
        let on = KEY
            .iter()
            .map(|k| format!("t.{k} = s.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let sql = format!(
            "MERGE INTO {name} AS t USING src AS s ON {on} \
             WHEN MATCHED AND s.update_id > t.update_id THEN UPDATE SET * \
             WHEN NOT MATCHED THEN INSERT *"
        );
        settle();
        let t0 = Instant::now();
        let source = load_snapshot(files);
        let r = self
            .rt
            .block_on(floe::dml::execute(self.cat, &sql, Some(source)))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        (t0.elapsed().as_secs_f64(), r)
    }

    /// Rows of the table, and its rows per update_id.
    fn contents(&self, name: &str) -> (u64, BTreeMap<i64, u64>) {
        let t = self.load(name);
        self.rt.block_on(async {
            let n = Scan::new(&t).count().await.unwrap();
            let mut s = Scan::new(&t)
                .select(["update_id"])
                .to_stream()
                .await
                .unwrap();
            let mut counts = BTreeMap::new();
            while let Some(b) = s.next().await {
                let b = b.unwrap();
                let col = b
                    .column_by_name("update_id")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                for x in col.iter().flatten() {
                    *counts.entry(x).or_insert(0u64) += 1;
                }
            }
            (n, counts)
        })
    }
}

/// Generates the snapshots unless the cached manifest has the same parameters.
fn snapshots(py: &Path, script: &Path, dir: &Path, rows_per_day: usize) -> serde_json::Value {
    let mpath = dir.join("manifest.json");
    let cached = std::fs::read_to_string(&mpath)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .filter(|m| {
            let p = &m["params"];
            m["format"] == "floe-gen-snapshots/1"
                && p["days"] == DAYS as u64
                && p["rows_per_day"] == rows_per_day as u64
                && p["snapshots"] == SNAPSHOTS as u64
                && p["change_rate"].as_f64() == CHANGE_RATE.parse::<f64>().ok()
                && p["edge_cases"] == false
                && p["files_per_day"] == 1
        })
        .filter(|m| {
            m["snapshots"].as_array().is_some_and(|s| {
                s.iter()
                    .flat_map(|s| s["files"].as_array().unwrap().iter())
                    .all(|f| {
                        std::fs::metadata(dir.join(f["path"].as_str().unwrap()))
                            .is_ok_and(|md| Some(md.len()) == f["bytes"].as_u64())
                    })
            })
        });
    if let Some(m) = cached {
        eprintln!("[ingest bench] reusing {}", dir.display());
        return m;
    }
    eprintln!("[ingest bench] generating {}", dir.display());
    run_json(
        py,
        &[
            script.to_str().unwrap(),
            dir.to_str().unwrap(),
            "--days",
            &DAYS.to_string(),
            "--rows-per-day",
            &rows_per_day.to_string(),
            "--snapshots",
            &SNAPSHOTS.to_string(),
            "--change-rate",
            CHANGE_RATE,
        ],
    )
    .expect("generate snapshots");
    serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap()
}

/// A batch of `n` rows of the ingest schema (day `file`).
fn small_batch(file: usize, n: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("date", DataType::Date32, true),
        Field::new("product_id", DataType::Int64, true),
        Field::new("store_id", DataType::Int64, true),
        Field::new("attribute_id", DataType::Int64, true),
        Field::new("attr_value", DataType::Utf8, true),
        Field::new("update_id", DataType::Int64, true),
    ]));
    let base = (file * n) as i64;
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Date32Array::from(vec![20454 + (file % 13) as i32; n])),
            Arc::new(Int64Array::from_iter_values(
                (0..n as i64).map(|i| (base + i) % 100_000),
            )),
            Arc::new(Int64Array::from_iter_values(
                (0..n as i64).map(|i| (base + i) % 1000),
            )),
            Arc::new(Int64Array::from_iter_values(
                (0..n as i64).map(|i| (base + i) % 20),
            )),
            Arc::new(StringArray::from_iter_values((0..n as i64).map(|i| {
                format!("v{}", (base + i).wrapping_mul(2654435761) % 1_000_000)
            }))),
            Arc::new(Int64Array::from(vec![1i64; n])),
        ],
    )
    .unwrap()
}

/// An unpartitioned table of `files` data files of `rows` rows each, in `commits` appends.
fn many_files_table(c: &Ctx, name: &str, files: usize, rows: usize, commits: usize) -> Table {
    let t0 = Instant::now();
    let mut t = {
        let schema = parse_schema(DDL).unwrap();
        c.rt.block_on(
            c.cat
                .create_table(&parse_ident(name).unwrap(), TableCreation::new(schema)),
        )
        .unwrap()
    };
    let per_commit = files.div_ceil(commits);
    for chunk in (0..files).collect::<Vec<_>>().chunks(per_commit) {
        let tt = t.clone();
        let written: Vec<_> =
            c.rt.block_on(
                futures::stream::iter(chunk.iter().copied())
                    .map(|i| {
                        let t = tt.clone();
                        async move {
                            let mut w = floe::write::DataWriter::with_lanes(&t, 1)?;
                            w.write(small_batch(i, rows)).await?;
                            w.close().await
                        }
                    })
                    .buffer_unordered(16)
                    .try_collect::<Vec<_>>(),
            )
            .unwrap();
        let written: Vec<_> = written.into_iter().flatten().collect();
        assert_eq!(written.len(), chunk.len(), "one file per writer");
        t =
            c.rt.block_on(floe::txn::append_files(c.cat, &t, written))
                .unwrap()
                .table;
    }
    eprintln!(
        "[ingest bench] built {name}: {files} files x {rows} rows in {commits} commits, {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    t
}

struct CloneTiming {
    rows: usize,
    data_mb: f64,
    new_ms: f64,
    replace_ms: f64,
    manifests: usize,
    replace_copied: usize,
    replace_reused: usize,
}

fn clone_timing(c: &Ctx, files: usize, rows: usize) -> CloneTiming {
    let src_name = format!("bench.clone_src_{rows}");
    let mut src = many_files_table(c, &src_name, files, rows, 10);
    let data_mb = src
        .metadata()
        .current_snapshot()
        .and_then(|s| {
            s.summary()
                .additional_properties
                .get("total-files-size")
                .cloned()
        })
        .and_then(|s| s.parse::<u64>().ok())
        .map(mb)
        .unwrap_or(f64::NAN);
    // New table, best of 5 (a new target each time).
    let mut i = 0;
    let (new_s, first) = best(5, || {
        i += 1;
        let target = parse_ident(&format!("bench.clone_{rows}_{i}")).unwrap();
        c.rt.block_on(floe::txn::clone_table(
            c.cat,
            &src,
            &SnapshotSelector::Current,
            &target,
            false,
        ))
        .unwrap()
    });
    let manifests = first.copied_manifests + first.reused_manifests;
    // Re-publish onto the first clone after a small change to the source (untimed), as
    // `ingest-snapshot --publish` does after each snapshot: best of 5.
    let target = parse_ident(&format!("bench.clone_{rows}_1")).unwrap();
    let mut best_replace = f64::MAX;
    let mut last = None;
    for k in 0..5 {
        let f = c.rt.block_on(async {
            let mut w = floe::write::DataWriter::with_lanes(&src, 1).unwrap();
            w.write(small_batch(files + k, rows)).await.unwrap();
            w.close().await.unwrap()
        });
        src =
            c.rt.block_on(floe::txn::append_files(c.cat, &src, f))
                .unwrap()
                .table;
        settle();
        let t0 = Instant::now();
        let r =
            c.rt.block_on(floe::txn::clone_table(
                c.cat,
                &src,
                &SnapshotSelector::Current,
                &target,
                true,
            ))
            .unwrap();
        best_replace = best_replace.min(t0.elapsed().as_secs_f64());
        last = Some(r);
    }
    let last = last.unwrap();
    let check = c.rt.block_on(async {
        let t = c.cat.load_table(&target).await.unwrap();
        Scan::new(&t).count().await.unwrap()
    });
    assert_eq!(
        check,
        ((files + 5) * rows) as u64,
        "replaced clone row count"
    );
    eprintln!(
        "[ingest bench] clone {files} files x {rows} rows: new {:.1} ms ({} manifests), replace {:.1} ms (copied {}, reused {})",
        new_s * 1e3,
        manifests,
        best_replace * 1e3,
        last.copied_manifests,
        last.reused_manifests
    );
    CloneTiming {
        rows,
        data_mb,
        new_ms: new_s * 1e3,
        replace_ms: best_replace * 1e3,
        manifests,
        replace_copied: last.copied_manifests,
        replace_reused: last.reused_manifests,
    }
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe ingest benchmark: run with `cargo bench --bench ingest`");
        return;
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && v != "0");
    let quick = env("FLOE_BENCH_QUICK").is_some();
    let rows_per_day: usize = env("FLOE_BENCH_ROWS_PER_DAY")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let clone_files: usize = env("FLOE_BENCH_CLONE_FILES")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let only = env("FLOE_BENCH_ONLY");
    let part = |p: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == p));
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = base.join("work-ingest");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let cat = Catalog::open(None, Some(work.join("wh").to_str().unwrap()), None).unwrap();
    let c = Ctx { rt: &rt, cat: &cat };

    // ---- snapshot ingestion ----
    let mut report: Vec<(Variant, Vec<Run>)> = Vec::new();
    let mut snaps: Vec<Snap> = Vec::new();
    let mut correctness: Vec<(String, u64, bool)> = Vec::new();
    let mut expected_rows = 0u64;
    let mut read_secs = f64::NAN;
    if part("ingest") {
        let py = python().expect("peers python: run tools/peers/setup.sh first");
        let dir = base.join(format!(
            "snapshots-d{DAYS}-r{rows_per_day}-s{SNAPSHOTS}-c{CHANGE_RATE}"
        ));
        let m = snapshots(
            &py,
            &repo.join("tools/bench/gen_snapshots.py"),
            &dir,
            rows_per_day,
        );
        for s in m["snapshots"].as_array().unwrap() {
            let u = |k: &str| s[k].as_u64().unwrap();
            snaps.push(Snap {
                files: s["files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| dir.join(f["path"].as_str().unwrap()))
                    .collect(),
                rows: u("rows"),
                bytes: u("bytes"),
                changed: u("changed"),
                vanished: u("vanished"),
                added: u("added"),
                returned: u("returned"),
            });
        }
        expected_rows = m["expected_final"]["rows"].as_u64().unwrap();
        let expected_counts: BTreeMap<i64, u64> = m["expected_final"]["update_id_counts"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
            .collect();
        println!(
            "floe ingest benchmark: {DAYS} days x {rows_per_day} rows ({} rows, {:.1} MB Parquet per snapshot), {} change snapshots at rate {CHANGE_RATE}, {cores} cores{}",
            snaps[0].rows,
            mb(snaps[0].bytes),
            SNAPSHOTS - 1,
            if quick { ", QUICK" } else { "" }
        );
        // Reading a snapshot alone (part of every measured time below).
        let (rs, n) = best(1, || {
            load_snapshot(&snaps[1].files)
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>()
        });
        assert_eq!(n as u64, snaps[1].rows);
        read_secs = rs;

        let variants = vec![
            Variant {
                label: "(i) change-aware + publish, MoR v3 (DV)",
                short: "(i) MoR v3",
                kind: Kind::ChangeAware,
                version: FormatVersion::V3,
                mode: MOR,
                staging: "bench.stg_mor3".into(),
                target: Some("bench.pub_mor3".into()),
            },
            Variant {
                label: "(i) change-aware + publish, MoR v2 (pos del)",
                short: "(i) MoR v2",
                kind: Kind::ChangeAware,
                version: FormatVersion::V2,
                mode: MOR,
                staging: "bench.stg_mor2".into(),
                target: Some("bench.pub_mor2".into()),
            },
            Variant {
                label: "(i) change-aware + publish, CoW v2",
                short: "(i) CoW v2",
                kind: Kind::ChangeAware,
                version: FormatVersion::V2,
                mode: COW,
                staging: "bench.stg_cow2".into(),
                target: Some("bench.pub_cow2".into()),
            },
            Variant {
                label: "(ii) rewrite strategy + publish",
                short: "(ii) rewrite",
                kind: Kind::Rewrite,
                version: FormatVersion::V2,
                mode: COW,
                staging: "bench.stg_rw".into(),
                target: Some("bench.pub_rw".into()),
            },
            Variant {
                label: "(iii) floe MERGE, CoW v2",
                short: "(iii) MERGE",
                kind: Kind::Merge,
                version: FormatVersion::V2,
                mode: COW,
                staging: "bench.merge_cow".into(),
                target: None,
            },
        ];
        // Initial load (untimed).
        for v in &variants {
            let t0 = Instant::now();
            c.create(&v.staging, v.version, v.mode);
            match v.kind {
                Kind::Merge => c.append(&v.staging, &snaps[0].files),
                _ => {
                    c.ingest(v, &snaps[0].files);
                }
            }
            eprintln!(
                "[ingest bench] initial load of {} in {:.1}s",
                v.staging,
                t0.elapsed().as_secs_f64()
            );
        }
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); variants.len()];
        for (k, snap) in snaps.iter().enumerate().skip(1) {
            for (vi, v) in variants.iter().enumerate() {
                let run = match v.kind {
                    Kind::Merge => {
                        let (secs, r) = c.merge(&v.staging, &snap.files);
                        Run {
                            secs,
                            ingest: secs,
                            publish: 0.0,
                            bytes: r.written_bytes,
                            detail: format!(
                                "removed {} rows, wrote {} rows (+{} copied), files -{} +{} data +{} delete",
                                r.removed_rows,
                                r.written_rows,
                                r.rewritten_rows,
                                r.removed_data_files,
                                r.added_data_files,
                                r.added_delete_files
                            ),
                        }
                    }
                    _ => {
                        let (secs, r) = c.ingest(v, &snap.files);
                        let ch = &r.changes;
                        if v.kind == Kind::ChangeAware
                            && (ch.updated != snap.changed
                                || ch.inserted != snap.added + snap.returned)
                        {
                            eprintln!(
                                "[ingest bench] NOTE {}: snapshot {k} changes {ch:?}, generator says changed {} added {} returned {}",
                                v.staging, snap.changed, snap.added, snap.returned
                            );
                        }
                        let p = r.published.as_ref();
                        Run {
                            secs,
                            ingest: r.ingest_seconds,
                            publish: r.publish_seconds,
                            bytes: r.written_bytes,
                            detail: format!(
                                "{:?}: unchanged {} updated {} inserted {} stale {}; wrote {} rows, files -{} +{} data +{} delete; publish copied {} reused {} manifests",
                                r.mode,
                                ch.unchanged,
                                ch.updated,
                                ch.inserted,
                                ch.stale,
                                r.written_rows,
                                r.removed_data_files,
                                r.added_data_files,
                                r.added_delete_files,
                                p.map_or(0, |p| p.copied_manifests),
                                p.map_or(0, |p| p.reused_manifests)
                            ),
                        }
                    }
                };
                eprintln!(
                    "[ingest bench] snapshot {k} {:<12} {:.3}s (ingest {:.3}s, publish {:.1} ms), {:.3} MB  {}",
                    v.short,
                    run.secs,
                    run.ingest,
                    run.publish * 1e3,
                    mb(run.bytes),
                    run.detail
                );
                runs[vi].push(run);
            }
        }
        // Correctness: every result table holds the expected rows.
        for v in &variants {
            let name = v.target.clone().unwrap_or_else(|| v.staging.clone());
            let (n, counts) = c.contents(&name);
            let ok = n == expected_rows && counts == expected_counts;
            if !ok {
                eprintln!(
                    "[ingest bench] WRONG {name}: {n} rows, update_id counts {counts:?}; expected {expected_rows}, {expected_counts:?}"
                );
            }
            correctness.push((name, n, ok));
        }
        report = variants.into_iter().zip(runs).collect();
    }

    // ---- clone at 10,000 files ----
    let mut clones = Vec::new();
    if part("clone") {
        for rows in [10, 1000] {
            clones.push(clone_timing(&c, clone_files, rows));
        }
    }

    // ---- report ----
    println!();
    if !report.is_empty() {
        println!(
            "(reading a snapshot's Parquet alone: {read_secs:.3} s; included in every time below)"
        );
        let merge_runs = &report
            .iter()
            .find(|(v, _)| v.kind == Kind::Merge)
            .unwrap()
            .1;
        for (k, snap) in snaps.iter().enumerate().skip(1) {
            println!(
                "snapshot {k}: {} rows, {:.2} MB Parquet ({} changed, {} vanished, {} added)",
                snap.rows,
                mb(snap.bytes),
                snap.changed,
                snap.vanished,
                snap.added + snap.returned
            );
            for (v, runs) in &report {
                let r = &runs[k - 1];
                let pct = 100.0 * r.bytes as f64 / snap.bytes as f64;
                let phases = if v.kind == Kind::Merge {
                    String::new()
                } else {
                    format!(
                        " (ingest {:.3} s + publish {:.0} ms)",
                        r.ingest,
                        r.publish * 1e3
                    )
                };
                let ratio = if v.kind == Kind::ChangeAware {
                    format!(" | MERGE/this = {:.2}x", merge_runs[k - 1].secs / r.secs)
                } else {
                    String::new()
                };
                println!(
                    "  {:<46} {:>8.3} s{phases:<34} {:>9.3} MB = {pct:>7.3}% of snapshot{ratio}",
                    v.label,
                    r.secs,
                    mb(r.bytes)
                );
            }
        }
        let n = (snaps.len() - 1) as f64;
        let mean_bytes = snaps.iter().skip(1).map(|s| s.bytes as f64).sum::<f64>() / n;
        let merge_mean = merge_runs.iter().map(|r| r.secs).sum::<f64>() / n;
        println!(
            "mean over {} change snapshots ({:.2} MB Parquet each):",
            snaps.len() - 1,
            mean_bytes / 1e6
        );
        for (v, runs) in &report {
            let secs = runs.iter().map(|r| r.secs).sum::<f64>() / n;
            let ingest = runs.iter().map(|r| r.ingest).sum::<f64>() / n;
            let publish = runs.iter().map(|r| r.publish).sum::<f64>() / n;
            let bytes = runs.iter().map(|r| r.bytes as f64).sum::<f64>() / n;
            let pct = 100.0 * bytes / mean_bytes;
            let phases = if v.kind == Kind::Merge {
                String::new()
            } else {
                format!(" (ingest {ingest:.3} s + publish {:.0} ms)", publish * 1e3)
            };
            let goals = if v.kind == Kind::ChangeAware {
                let ratio = merge_mean / secs;
                format!(
                    " | MERGE/this = {ratio:.2}x (target >= 2x) {}; bytes (target <= 2%) {}",
                    verdict(ratio >= 2.0),
                    verdict(pct <= 2.0)
                )
            } else {
                String::new()
            };
            println!(
                "  {:<46} {secs:>8.3} s{phases:<34} {:>9.3} MB = {pct:>7.3}% of snapshot{goals}",
                v.label,
                bytes / 1e6
            );
        }
        let all_ok = correctness.iter().all(|(_, _, ok)| *ok);
        println!(
            "correctness after the last snapshot (expected {expected_rows} rows and the generator's update_id counts): {} {}",
            correctness
                .iter()
                .map(|(name, n, ok)| format!("{name}={n}{}", if *ok { "" } else { " WRONG" }))
                .collect::<Vec<_>>()
                .join(", "),
            verdict(all_ok)
        );
    }
    if clones.len() == 2 {
        for t in &clones {
            println!(
                "clone of {clone_files} files x {} rows ({:.1} MB data, {} manifests): new table {:.1} ms, --replace re-publish {:.1} ms (copied {} manifests, reused {}) (target <= 100 ms) {}",
                t.rows,
                t.data_mb,
                t.manifests,
                t.new_ms,
                t.replace_ms,
                t.replace_copied,
                t.replace_reused,
                verdict(t.new_ms <= 100.0 && t.replace_ms <= 100.0)
            );
        }
        println!(
            "clone time ratio, {} rows/file / {} rows/file: new {:.2}x, replace {:.2}x (independent of data size: ~1x)",
            clones[1].rows,
            clones[0].rows,
            clones[1].new_ms / clones[0].new_ms,
            clones[1].replace_ms / clones[0].replace_ms
        );
    }
}
