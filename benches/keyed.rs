//! Keyed tables / CDC sink: sustained upserts and deletes through one long-lived
//! `floe::keyed::KeyedWriter`, against pyiceberg 0.12's `Table.upsert` and ClickHouse's
//! `ReplacingMergeTree(ver, is_deleted)` (chdb, in-process); ratios printed in the same run.
//!
//! `cargo bench --bench keyed`. Env:
//! * `FLOE_BENCH_QUICK=1` — smoke run: 1,000,000 rows, 10 batches of 10,000 changes, 20 small
//!   batches (unless the knobs below say otherwise);
//! * `FLOE_BENCH_ROWS` — rows of the starting table (default 10,000,000), always 20 files;
//! * `FLOE_BENCH_BATCHES` / `FLOE_BENCH_BATCH_ROWS` — big batches and their changes (50 x
//!   100,000);
//! * `FLOE_BENCH_SMALL_BATCHES` / `FLOE_BENCH_SMALL_ROWS` — small batches (50 x 1,000);
//! * `FLOE_BENCH_PYI_BATCHES` — big batches pyiceberg upserts (default 2; cached);
//! * `FLOE_BENCH_FORMATS` — `v3,v2` (default both);
//! * `FLOE_BENCH_BIG=1` — also the cost of a batch at `FLOE_BENCH_BIG_ROWS` (default 5 x rows,
//!   i.e. 50,000,000) vs at rows, `FLOE_BENCH_BIG_BATCHES` batches each (default 4);
//! * `FLOE_BENCH_DIR` — data, cache and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python (default `~/.cache/floe/peers/venv/bin/python`);
//! * `FLOE_BENCH_REBASE=1` — re-run the (slow, cached) pyiceberg baseline;
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only (no pyiceberg, no chdb);
//! * `FLOE_BENCH_SCAN_LOOPS` — timed scans of each kind, best reported (default 3).
//!
//! Data: `tools/bench/gen_data.py --files 20` (the core benchmark's rows, `id` 0..rows-1
//! unique) plus `ver long` = 1 and `is_deleted int` = 0: the keyed table `id long not null`
//! (primary key), `floe.merge.version-column=ver`, `floe.merge.delete-column=is_deleted`,
//! `write.merge.mode=merge-on-read`, format v3 (deletion vectors) and v2 (position deletes),
//! the 20 files committed as one append. The change stream is generated here, deterministic
//! (splitmix64, fixed seed), and cached as Parquet under the bench dir with a manifest of the
//! expected outcome of every batch: per batch 65% updates of live keys, 20% inserts of new
//! keys, 10% deletes of live keys, 5% late replays (older versions of keys changed in the
//! previous batch, a fifth of them deletes of live keys: all must be ignored); keys unique
//! within a batch, uniform over the key space, rows shuffled; batch b writes version b+1.
//! Baselines: `tools/bench/baseline_keyed.py` (chdb every run; pyiceberg cached).

mod common;
use common::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, Date32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use floe::catalog::{Catalog, TableCreation};
use floe::keyed::KeyedWriter;
use floe::scan::Scan;
use floe::spec::{parse_schema, FormatVersion, TableIdent};
use floe::table::parse_ident;
use floe::Table;
use futures::StreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};

const FILES: usize = 20;
const SEED: u64 = 0x6b65_7965_6421;
/// Bump when the change stream's recipe changes (invalidates the cached batches and the
/// cached pyiceberg baseline).
const GEN_VERSION: u32 = 1;
const KEYED_DDL: &str = "id long not null, k long, a double, b double, s1 string, s2 string, \
                         ts timestamp, d date, ver long, is_deleted int";
/// 2024-01-01 in days since the epoch (the data set's 30 days start there).
const DAY0: i64 = 19723;
const TARGET_FILE: u64 = 134_217_728;

/// Nearest-rank percentile.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn rate(changes: f64, secs: f64) -> String {
    let r = changes / secs;
    if r >= 1e6 {
        format!("{:.2}M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
}

// ---------------------------------------------------------------------------------------------
// The change stream

/// splitmix64 as a sequential generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n), n < 2^32.
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

fn change_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("a", DataType::Float64, true),
        Field::new("b", DataType::Float64, true),
        Field::new("s1", DataType::Utf8, true),
        Field::new("s2", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("d", DataType::Date32, true),
        Field::new("ver", DataType::Int64, true),
        Field::new("is_deleted", DataType::Int32, true),
    ]))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Update,
    Insert,
    Delete,
    Replay,
}

#[derive(Clone, Copy)]
struct Change {
    id: u64,
    ver: i64,
    del: bool,
    k: i64,
    kind: Kind,
}

/// The live state: rows, sum(k), sum(ver).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct State {
    rows: u64,
    sum_k: Option<i64>,
    sum_ver: i64,
}

impl State {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({"rows": self.rows, "sum_k": self.sum_k, "sum_ver": self.sum_ver})
    }
    fn of(v: &serde_json::Value) -> Option<State> {
        Some(State {
            rows: v.get("rows")?.as_u64()?,
            sum_k: v.get("sum_k").and_then(|x| x.as_i64()),
            sum_ver: v.get("sum_ver")?.as_i64()?,
        })
    }
    /// Equal, comparing sum(k) only where both know it.
    fn matches(&self, o: &State) -> bool {
        self.rows == o.rows
            && self.sum_ver == o.sum_ver
            && match (self.sum_k, o.sum_k) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sum_k {
            Some(k) => write!(
                f,
                "{} rows, sum(k) {k}, sum(ver) {}",
                self.rows, self.sum_ver
            ),
            None => write!(f, "{} rows, sum(ver) {}", self.rows, self.sum_ver),
        }
    }
}

/// One generated batch and what applying it must do.
#[derive(Clone)]
struct GenBatch {
    file: PathBuf,
    rows: u64,
    inserted: u64,
    updated: u64,
    deleted: u64,
    ignored: u64,
    /// The live state after the batch.
    after: State,
}

struct Stream {
    dir: PathBuf,
    batches: Vec<GenBatch>,
    start: State,
    /// The manifest's text (part of the pyiceberg cache key).
    manifest: String,
}

fn write_parquet(path: &Path, batch: &RecordBatch) -> u64 {
    let tmp = path.with_extension("tmp");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(
            parquet::basic::ZstdLevel::try_new(1).unwrap(),
        ))
        .set_max_row_group_row_count(Some(1 << 20))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&tmp).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    std::fs::rename(&tmp, path).unwrap();
    std::fs::metadata(path).unwrap().len()
}

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The rows of `changes` (values of the non-key columns drawn from `rng`).
fn change_rows(changes: &[Change], rng: &mut Rng) -> RecordBatch {
    let n = changes.len();
    let mut a = Vec::with_capacity(n);
    let mut b = Vec::with_capacity(n);
    let mut s1 = Vec::with_capacity(n);
    let mut s2 = Vec::with_capacity(n);
    let mut ts = Vec::with_capacity(n);
    let mut d = Vec::with_capacity(n);
    for _ in changes {
        a.push(rng.unit() * 1000.0);
        b.push(rng.unit() * 2.0 - 1.0);
        let len = 9 + rng.below(7) as usize;
        let s: String = (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize] as char)
            .collect();
        s1.push(s);
        s2.push(format!("cat_{:03}", rng.below(100)));
        ts.push(
            (DAY0 * 86_400 + rng.below(30 * 86_400) as i64) * 1_000_000
                + rng.below(1_000_000) as i64,
        );
        d.push((DAY0 + rng.below(30) as i64) as i32);
    }
    RecordBatch::try_new(
        change_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(
                changes.iter().map(|c| c.id as i64),
            )),
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.k))),
            Arc::new(Float64Array::from(a)),
            Arc::new(Float64Array::from(b)),
            Arc::new(StringArray::from(s1)),
            Arc::new(StringArray::from(s2)),
            Arc::new(TimestampMicrosecondArray::from(ts)),
            Arc::new(Date32Array::from(d)),
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.ver))),
            Arc::new(Int32Array::from_iter_values(
                changes.iter().map(|c| c.del as i32),
            )),
        ],
    )
    .unwrap()
}

/// `k` of every base row (ids in file order), for the expected sum(k).
fn base_k(files: &[PathBuf]) -> Vec<i64> {
    let mut out = Vec::new();
    for f in files {
        let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap()).unwrap();
        let mask = ProjectionMask::roots(b.parquet_schema(), [1]);
        for batch in b
            .with_projection(mask)
            .with_batch_size(1 << 20)
            .build()
            .unwrap()
        {
            let batch = batch.unwrap();
            let k = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            out.extend(k.values().iter().copied());
        }
    }
    out
}

/// The change stream for a table of `base_rows` rows (ids 0..base_rows, ver 1): one batch
/// per entry of `sizes`, the first `pyi` also folded to their live upserts for pyiceberg.
/// Cached in `dir` (regenerated when the manifest's parameters or files differ).
fn stream(
    dir: &Path,
    base_rows: u64,
    sizes: &[usize],
    pyi: usize,
    base_files: Option<&[PathBuf]>,
) -> Stream {
    let params = serde_json::json!({
        "base_rows": base_rows, "sizes": sizes, "pyi": pyi, "seed": SEED,
        "gen_version": GEN_VERSION, "sum_k": base_files.is_some(),
    });
    let mpath = dir.join("manifest.json");
    let parse = |text: String| -> Option<Stream> {
        let m: serde_json::Value = serde_json::from_str(&text).ok()?;
        if m["params"] != params {
            return None;
        }
        let mut batches = Vec::new();
        for b in m["batches"].as_array()? {
            let file = dir.join(b["file"].as_str()?);
            if std::fs::metadata(&file).ok()?.len() != b["bytes"].as_u64()? {
                return None;
            }
            if let Some(p) = b["pyi_file"].as_str() {
                if std::fs::metadata(dir.join(p)).ok()?.len() != b["pyi_bytes"].as_u64()? {
                    return None;
                }
            }
            let u = |k: &str| b[k].as_u64();
            batches.push(GenBatch {
                file,
                rows: u("rows")?,
                inserted: u("inserted")?,
                updated: u("updated")?,
                deleted: u("deleted")?,
                ignored: u("ignored")?,
                after: State::of(&b["after"])?,
            });
        }
        Some(Stream {
            dir: dir.to_path_buf(),
            batches,
            start: State::of(&m["start"])?,
            manifest: text,
        })
    };
    if let Some(s) = std::fs::read_to_string(&mpath).ok().and_then(parse) {
        eprintln!("[keyed bench] reusing change batches in {}", dir.display());
        return s;
    }
    let t0 = Instant::now();
    eprintln!(
        "[keyed bench] generating change batches in {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let ins_of = |s: usize| s * 20 / 100;
    let cap = base_rows as usize + sizes.iter().map(|&s| ins_of(s)).sum::<usize>();
    let mut kv: Option<Vec<i64>> = base_files.map(|f| {
        let mut k = base_k(f);
        assert_eq!(k.len() as u64, base_rows, "base k values");
        k.resize(cap, 0);
        k
    });
    let mut ver = vec![1u32; cap];
    let mut live = vec![false; cap];
    live[..base_rows as usize].fill(true);
    let mut mark = vec![0u32; cap];
    let mut next_id = base_rows;
    let mut st = State {
        rows: base_rows,
        sum_k: kv.as_ref().map(|k| k.iter().sum()),
        sum_ver: base_rows as i64,
    };
    let start = st;
    let mut rng = Rng(SEED);
    let mut prev: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for (bi, &size) in sizes.iter().enumerate() {
        let b = bi as u32 + 1;
        let nv = b as i64 + 1;
        let n_rep = size * 5 / 100;
        let n_upd = size * 70 / 100 - n_rep;
        let n_ins = ins_of(size);
        let n_del = size - n_upd - n_ins - n_rep;
        let mut ch: Vec<Change> = Vec::with_capacity(size);
        let pick_live = |rng: &mut Rng, live: &[bool], mark: &[u32], next_id: u64| loop {
            let id = rng.below(next_id);
            if live[id as usize] && mark[id as usize] != b {
                break id;
            }
        };
        for _ in 0..n_del {
            let id = pick_live(&mut rng, &live, &mark, next_id);
            let i = id as usize;
            mark[i] = b;
            live[i] = false;
            st.rows -= 1;
            if let (Some(s), Some(k)) = (st.sum_k.as_mut(), kv.as_ref()) {
                *s -= k[i];
            }
            st.sum_ver -= ver[i] as i64;
            ver[i] = nv as u32;
            let k = rng.below(1_000_000) as i64;
            ch.push(Change {
                id,
                ver: nv,
                del: true,
                k,
                kind: Kind::Delete,
            });
        }
        for _ in 0..n_upd {
            let id = pick_live(&mut rng, &live, &mark, next_id);
            let i = id as usize;
            mark[i] = b;
            let k = rng.below(1_000_000) as i64;
            if let (Some(s), Some(kv)) = (st.sum_k.as_mut(), kv.as_mut()) {
                *s += k - kv[i];
                kv[i] = k;
            }
            st.sum_ver += nv - ver[i] as i64;
            ver[i] = nv as u32;
            ch.push(Change {
                id,
                ver: nv,
                del: false,
                k,
                kind: Kind::Update,
            });
        }
        for _ in 0..n_ins {
            let id = next_id;
            next_id += 1;
            let i = id as usize;
            mark[i] = b;
            live[i] = true;
            let k = rng.below(1_000_000) as i64;
            if let (Some(s), Some(kv)) = (st.sum_k.as_mut(), kv.as_mut()) {
                *s += k;
                kv[i] = k;
            }
            st.rows += 1;
            st.sum_ver += nv;
            ver[i] = nv as u32;
            ch.push(Change {
                id,
                ver: nv,
                del: false,
                k,
                kind: Kind::Insert,
            });
        }
        for _ in 0..n_rep {
            // An older version of a key the previous batch changed (the base rows for the
            // first batch), not otherwise in this batch.
            let mut id = u64::MAX;
            for attempt in 0..1000 {
                let c = if prev.is_empty() || attempt >= 100 {
                    rng.below(base_rows)
                } else {
                    prev[rng.below(prev.len() as u64) as usize]
                };
                if mark[c as usize] != b {
                    id = c;
                    break;
                }
            }
            assert_ne!(id, u64::MAX, "no key left for a replay");
            let i = id as usize;
            mark[i] = b;
            let del = live[i] && rng.below(5) == 0;
            let k = rng.below(1_000_000) as i64;
            ch.push(Change {
                id,
                ver: ver[i] as i64 - 1,
                del,
                k,
                kind: Kind::Replay,
            });
        }
        prev = ch
            .iter()
            .filter(|c| c.kind != Kind::Replay)
            .map(|c| c.id)
            .collect();
        // Arrival order: shuffled.
        for i in (1..ch.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            ch.swap(i, j);
        }
        let rows = change_rows(&ch, &mut rng);
        let name = format!("batch-{b:05}.parquet");
        let bytes = write_parquet(&dir.join(&name), &rows);
        let mut entry = serde_json::json!({
            "file": name, "bytes": bytes, "rows": size, "inserted": n_ins, "updated": n_upd,
            "deleted": n_del, "ignored": n_rep, "after": st.json(),
        });
        if (bi) < pyi {
            // pyiceberg can only do last-write-wins: the batch's winning upserts.
            let keep: Vec<u32> = ch
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c.kind, Kind::Update | Kind::Insert))
                .map(|(i, _)| i as u32)
                .collect();
            let idx = arrow::array::UInt32Array::from(keep);
            let cols = rows
                .columns()
                .iter()
                .map(|c| arrow_select::take::take(c, &idx, None).unwrap())
                .collect();
            let p = RecordBatch::try_new(rows.schema(), cols).unwrap();
            let pname = format!("pyi-{b:05}.parquet");
            let pbytes = write_parquet(&dir.join(&pname), &p);
            entry["pyi_file"] = pname.into();
            entry["pyi_bytes"] = pbytes.into();
        }
        out.push(entry);
    }
    let m = serde_json::json!({
        "format": "floe-keyed-changes/1", "params": params, "start": start.json(), "batches": out,
    });
    let text = serde_json::to_string_pretty(&m).unwrap();
    std::fs::write(&mpath, &text).unwrap();
    eprintln!(
        "[keyed bench] generated {} batches in {:.1}s",
        sizes.len(),
        t0.elapsed().as_secs_f64()
    );
    parse(text).expect("the manifest just written")
}

/// A gen_data.py batch with `ver` = 1 and `is_deleted` = 0 added, `id` not null.
fn base_rows(b: &RecordBatch) -> RecordBatch {
    let n = b.num_rows();
    let mut cols: Vec<Arc<dyn Array>> = b.columns().to_vec();
    cols.push(Arc::new(Int64Array::from(vec![1i64; n])));
    cols.push(Arc::new(Int32Array::from(vec![0i32; n])));
    RecordBatch::try_new(change_schema(), cols).unwrap()
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    assert_eq!(files.len(), FILES, "{}", dir.display());
    files
}

// ---------------------------------------------------------------------------------------------
// floe

struct Ctx<'a> {
    rt: &'a tokio::runtime::Runtime,
    cat: &'a Catalog,
    loops: usize,
}

/// One applied batch.
#[derive(Clone, Default)]
struct BatchRun {
    read_s: f64,
    apply_s: f64,
    cpu_s: f64,
    rows: u64,
    bytes: u64,
    data_files: usize,
    delete_files: usize,
}

fn summary_u64(t: &Table, key: &str) -> u64 {
    t.metadata()
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get(key).cloned())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn layout(t: &Table) -> String {
    format!(
        "{} data files, {} delete files ({} deleted positions), {:.1} MB, {} snapshots",
        summary_u64(t, "total-data-files"),
        summary_u64(t, "total-delete-files"),
        summary_u64(t, "total-position-deletes"),
        mb(summary_u64(t, "total-files-size")),
        t.metadata().snapshots().count()
    )
}

impl Ctx<'_> {
    /// A keyed table holding the 20 base files as one append.
    fn table(&self, ident: &TableIdent, v: FormatVersion, files: &[PathBuf]) -> (Table, f64) {
        let t0 = Instant::now();
        let c = TableCreation::new(parse_schema(KEYED_DDL).unwrap())
            .with_primary_key(["id"])
            .with_format_version(v)
            .with_property("floe.merge.version-column", "ver")
            .with_property("floe.merge.delete-column", "is_deleted")
            .with_property("write.merge.mode", "merge-on-read");
        let t = self.rt.block_on(async {
            let t = self.cat.create_table(ident, c).await.unwrap();
            append_each_as_one_file(self.cat, &t, files, |f| {
                load_parquet(f).iter().map(base_rows).collect()
            })
            .await
        });
        (t, t0.elapsed().as_secs_f64())
    }

    /// Drops `ident` and deletes its directory.
    fn drop(&self, ident: &TableIdent) {
        let t = self.load_table(ident);
        let loc = t.metadata().location().to_string();
        self.rt.block_on(self.cat.drop_table(ident)).unwrap();
        let _ = std::fs::remove_dir_all(loc.strip_prefix("file://").unwrap_or(&loc));
    }

    fn load_table(&self, ident: &TableIdent) -> Table {
        self.rt.block_on(self.cat.load_table(ident)).unwrap()
    }

    /// The current state (rows, sum(k), sum(ver)) by a scan of `k` and `ver`; best time.
    fn state(&self, t: &Table) -> (f64, State) {
        best(self.loops, || {
            self.rt.block_on(async {
                let mut s = Scan::new(t)
                    .select(["k", "ver"])
                    .concurrency(2)
                    .to_stream()
                    .await
                    .unwrap();
                let (mut rows, mut sk, mut sv) = (0u64, 0i64, 0i64);
                while let Some(b) = s.next().await {
                    let b = b.unwrap();
                    rows += b.num_rows() as u64;
                    let col = |i: usize| {
                        arrow::compute::sum(
                            b.column(i).as_any().downcast_ref::<Int64Array>().unwrap(),
                        )
                        .unwrap_or(0)
                    };
                    sk += col(0);
                    sv += col(1);
                }
                State {
                    rows,
                    sum_k: Some(sk),
                    sum_ver: sv,
                }
            })
        })
    }

    /// Best time of full scans (all columns, 2 threads) of `t`, and its rows.
    fn full_scan(&self, t: &Table) -> (f64, u64) {
        best(self.loops, || {
            self.rt.block_on(async {
                let mut s = Scan::new(t).concurrency(2).to_stream().await.unwrap();
                let mut n = 0u64;
                while let Some(b) = s.next().await {
                    n += b.unwrap().num_rows() as u64;
                }
                n
            })
        })
    }

    /// Applies `batches` one after the other through `w`, checking each result against the
    /// generator's expectation (mismatches go to `wrong`).
    fn apply(
        &self,
        w: &KeyedWriter,
        batches: &[GenBatch],
        label: &str,
        sync: bool,
        wrong: &mut Vec<String>,
    ) -> Vec<BatchRun> {
        let mut out = Vec::new();
        for (i, g) in batches.iter().enumerate() {
            if sync {
                settle();
            }
            let t0 = Instant::now();
            let rows = load_parquet(&g.file);
            let read_s = t0.elapsed().as_secs_f64();
            let c0 = cpu_seconds();
            let t0 = Instant::now();
            let r = self
                .rt
                .block_on(w.apply(rows, None))
                .unwrap_or_else(|e| panic!("{label}: batch {}: {e}", g.file.display()));
            let apply_s = t0.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds() - c0;
            let got = (r.inserted, r.updated, r.deleted, r.ignored);
            let want = (g.inserted, g.updated, g.deleted, g.ignored);
            if got != want || r.input_rows != g.rows {
                let m = format!(
                    "{label} {}: (inserted, updated, deleted, ignored) = {got:?}, expected {want:?} (input rows {} / {}; deleted_absent {})",
                    g.file.file_name().unwrap().to_string_lossy(),
                    r.input_rows,
                    g.rows,
                    r.deleted_absent
                );
                eprintln!("[keyed bench] WRONG {m}");
                wrong.push(m);
            }
            let n = batches.len();
            if n <= 20 || i < 3 || (i + 1) % 10 == 0 || i + 1 == n {
                eprintln!(
                    "[keyed bench] {label} batch {}/{n}: read {:.3}s apply {:.3}s (cpu {:.2}s) = {}; +{} data +{} delete files, {:.2} MB",
                    i + 1,
                    read_s,
                    apply_s,
                    cpu_s,
                    rate(g.rows as f64, apply_s),
                    r.added_data_files,
                    r.added_delete_files,
                    mb(r.written_bytes)
                );
            }
            out.push(BatchRun {
                read_s,
                apply_s,
                cpu_s,
                rows: g.rows,
                bytes: r.written_bytes,
                data_files: r.added_data_files,
                delete_files: r.added_delete_files,
            });
        }
        out
    }
}

/// Everything measured on one format version.
#[derive(Default)]
struct VersionRun {
    label: String,
    setup_s: f64,
    base_state_s: f64,
    base_full_s: f64,
    big: Vec<BatchRun>,
    rss_before_kb: u64,
    hwm_batches_kb: u64,
    rss_after_kb: u64,
    state_big_s: f64,
    state_big: State,
    full_big_s: f64,
    layout_big: String,
    small: Vec<BatchRun>,
    state_all: State,
    full_before_rewrite_s: f64,
    layout_before_rewrite: String,
    rewrite_s: f64,
    rewrite_detail: String,
    full_after_rewrite_s: f64,
    state_after_rewrite_s: f64,
    state_after_rewrite: State,
    layout_after_rewrite: String,
    hwm_end_kb: u64,
}

fn sum_apply(runs: &[BatchRun]) -> (f64, f64, f64, u64, u64) {
    let apply: f64 = runs.iter().map(|r| r.apply_s).sum();
    let read: f64 = runs.iter().map(|r| r.read_s).sum();
    let cpu: f64 = runs.iter().map(|r| r.cpu_s).sum();
    let rows: u64 = runs.iter().map(|r| r.rows).sum();
    let bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    (apply, read, cpu, rows, bytes)
}

#[allow(clippy::too_many_arguments)]
fn run_version(
    c: &Ctx,
    v: FormatVersion,
    files: &[PathBuf],
    s: &Stream,
    n_big: usize,
    wrong: &mut Vec<String>,
) -> VersionRun {
    let label = match v {
        FormatVersion::V3 => "v3 (DV)",
        _ => "v2 (pos deletes)",
    };
    let tag = match v {
        FormatVersion::V3 => "v3",
        _ => "v2",
    };
    let ident = parse_ident(&format!("bench.keyed_{tag}")).unwrap();
    let mut r = VersionRun {
        label: label.to_string(),
        ..Default::default()
    };
    let (t, setup_s) = c.table(&ident, v, files);
    r.setup_s = setup_s;
    eprintln!(
        "[keyed bench] {label}: created {} ({}) in {setup_s:.1}s",
        ident,
        layout(&t)
    );
    let (secs, st) = c.state(&t);
    r.base_state_s = secs;
    if !st.matches(&s.start) {
        wrong.push(format!(
            "{label}: starting table {st}, expected {}",
            s.start
        ));
    }
    r.base_full_s = c.full_scan(&t).0;
    drop(t);

    // ---- the big batches, one writer ----
    let writer = KeyedWriter::new(c.cat, ident.clone());
    settle();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    r.rss_before_kb = status_kb("VmRSS:").unwrap_or(0);
    r.big = c.apply(&writer, &s.batches[..n_big], label, true, wrong);
    r.hwm_batches_kb = status_kb("VmHWM:").unwrap_or(0);
    r.rss_after_kb = status_kb("VmRSS:").unwrap_or(0);
    let t = c.load_table(&ident);
    r.layout_big = layout(&t);
    let (secs, st) = c.state(&t);
    (r.state_big_s, r.state_big) = (secs, st);
    let want = s.batches[n_big - 1].after;
    if !st.matches(&want) {
        wrong.push(format!(
            "{label}: after {n_big} batches {st}, expected {want}"
        ));
    }
    r.full_big_s = c.full_scan(&t).0;

    // ---- small batches, the same writer ----
    r.small = c.apply(
        &writer,
        &s.batches[n_big..],
        &format!("{label} small"),
        false,
        wrong,
    );
    let t = c.load_table(&ident);
    let st = c.state(&t).1;
    r.state_all = st;
    let want = s.batches.last().unwrap().after;
    if !st.matches(&want) {
        wrong.push(format!("{label}: after all batches {st}, expected {want}"));
    }

    // ---- compaction ----
    r.layout_before_rewrite = layout(&t);
    r.full_before_rewrite_s = c.full_scan(&t).0;
    let opts: HashMap<String, String> = [
        ("rewrite-all".to_string(), "true".to_string()),
        (
            "target-file-size-bytes".to_string(),
            TARGET_FILE.to_string(),
        ),
    ]
    .into();
    settle();
    let t0 = Instant::now();
    let rw =
        c.rt.block_on(floe::maintenance::rewrite_data_files(
            c.cat, &t, None, &opts, None,
        ))
        .unwrap();
    r.rewrite_s = t0.elapsed().as_secs_f64();
    r.rewrite_detail = format!(
        "{} groups, -{} +{} data files, -{} delete files",
        rw.file_groups,
        rw.rewritten_data_files_count,
        rw.added_data_files_count,
        rw.removed_delete_files_count
    );
    let t = c.load_table(&ident);
    r.layout_after_rewrite = layout(&t);
    r.full_after_rewrite_s = c.full_scan(&t).0;
    let (secs, st) = c.state(&t);
    (r.state_after_rewrite_s, r.state_after_rewrite) = (secs, st);
    if !st.matches(&r.state_all) {
        wrong.push(format!(
            "{label}: after rewrite_data_files {st}, before it {}",
            r.state_all
        ));
    }
    r.hwm_end_kb = status_kb("VmHWM:").unwrap_or(0);
    eprintln!(
        "[keyed bench] {label}: rewrite {:.2}s ({}); {}",
        r.rewrite_s, r.rewrite_detail, r.layout_after_rewrite
    );
    r
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe keyed benchmark: run with `cargo bench --bench keyed`");
        return;
    }
    let t_start = Instant::now();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && v != "0");
    let num = |k: &str, d: usize| env(k).and_then(|v| v.parse().ok()).unwrap_or(d);
    let quick = env("FLOE_BENCH_QUICK").is_some();
    let rows = num(
        "FLOE_BENCH_ROWS",
        if quick { 1_000_000 } else { 10_000_000 },
    );
    let n_big = num("FLOE_BENCH_BATCHES", if quick { 10 } else { 50 });
    let big_rows = num(
        "FLOE_BENCH_BATCH_ROWS",
        if quick { 10_000 } else { 100_000 },
    );
    let n_small = num("FLOE_BENCH_SMALL_BATCHES", if quick { 20 } else { 50 });
    let small_rows = num("FLOE_BENCH_SMALL_ROWS", 1_000);
    let n_pyi = num("FLOE_BENCH_PYI_BATCHES", 2).min(n_big);
    let loops = num("FLOE_BENCH_SCAN_LOOPS", 3).max(1);
    let big = env("FLOE_BENCH_BIG").is_some();
    let big_table_rows = num("FLOE_BENCH_BIG_ROWS", 5 * rows);
    let n_big_cmp = num("FLOE_BENCH_BIG_BATCHES", 4).clamp(2, n_big);
    let no_baseline = env("FLOE_BENCH_NO_BASELINE").is_some();
    let formats: Vec<FormatVersion> = env("FLOE_BENCH_FORMATS")
        .unwrap_or_else(|| "v3,v2".into())
        .split(',')
        .map(|f| match f.trim() {
            "v3" | "3" => FormatVersion::V3,
            "v2" | "2" => FormatVersion::V2,
            o => panic!("FLOE_BENCH_FORMATS: unknown format {o:?}"),
        })
        .collect();
    assert!(n_big >= 1 && rows >= FILES);
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    std::fs::create_dir_all(&base).unwrap();
    let py = python().expect("peers python: run tools/peers/setup.sh first");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = |s: &str| repo.join("tools/bench").join(s);
    let gen_data = |rows: usize| -> PathBuf {
        let data = base.join(format!("data-{rows}-f{FILES}"));
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
        data
    };
    let data = gen_data(rows);
    let files = data_files(&data);
    let sizes: Vec<usize> = std::iter::repeat_n(big_rows, n_big)
        .chain(std::iter::repeat_n(small_rows, n_small))
        .collect();
    let sizes_desc = format!("{n_big}x{big_rows}+{n_small}x{small_rows}");
    let s = stream(
        &base.join(format!("keyed-changes-{rows}-{sizes_desc}-g{GEN_VERSION}")),
        rows as u64,
        &sizes,
        n_pyi,
        Some(&files),
    );
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "floe keyed benchmark: {rows} rows x 10 columns in {FILES} files (one append), {n_big} batches x {big_rows} changes + {n_small} x {small_rows}, {cores} cores{}",
        if quick { ", QUICK" } else { "" }
    );
    println!(
        "  per batch: {}% updates of live keys, 20% inserts, {}% deletes, 5% late replays (older versions; must be ignored); uniform keys; changes in {}",
        70 - 5,
        10,
        s.dir.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = base.join("work-keyed");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    // ---- baselines: chdb every run, pyiceberg cached ----
    let chdb = (!no_baseline)
        .then(|| {
            eprintln!("[keyed bench] running the chdb ReplacingMergeTree baseline");
            settle();
            let v = run_json(
                &py,
                &[
                    script("baseline_keyed.py").to_str().unwrap(),
                    "chdb",
                    "--data",
                    data.to_str().unwrap(),
                    "--changes",
                    s.dir.to_str().unwrap(),
                    "--big",
                    &n_big.to_string(),
                    "--small",
                    &n_small.to_string(),
                    "--work",
                    work.join("chdb").to_str().unwrap(),
                    "--repeat",
                    &loops.to_string(),
                ],
            );
            let _ = std::fs::remove_dir_all(work.join("chdb"));
            v
        })
        .flatten();
    let mut pyi_note = String::new();
    let pyi = (!no_baseline && n_pyi > 0)
        .then(|| {
            let ver = Command::new(&py)
                .args(["-c", "import pyiceberg; print(pyiceberg.__version__)"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            let mut h = fnv1a(0xcbf29ce484222325, ver.as_bytes());
            for sc in ["baseline_keyed.py", "gen_data.py"] {
                h = fnv1a(h, &std::fs::read(script(sc)).unwrap());
            }
            h = fnv1a(h, s.manifest.as_bytes());
            let cache = base.join(format!(
                "baseline-pyiceberg-keyed-{rows}-{n_pyi}x{big_rows}-pyiceberg{ver}-{h:016x}.json"
            ));
            if env("FLOE_BENCH_REBASE").is_none() {
                if let Some(v) = std::fs::read_to_string(&cache)
                    .ok()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                {
                    pyi_note = format!("cached {}", cache.display());
                    return Some(v);
                }
            }
            eprintln!("[keyed bench] running the pyiceberg upsert baseline ({n_pyi} batches; minutes at 10M rows; cached afterwards)");
            settle();
            let v = run_json(
                &py,
                &[
                    script("baseline_keyed.py").to_str().unwrap(),
                    "pyiceberg",
                    "--data",
                    data.to_str().unwrap(),
                    "--changes",
                    s.dir.to_str().unwrap(),
                    "--batches",
                    &n_pyi.to_string(),
                    "--work",
                    work.join("pyiceberg").to_str().unwrap(),
                ],
            );
            let _ = std::fs::remove_dir_all(work.join("pyiceberg"));
            let v = v?;
            let _ = std::fs::write(&cache, v.to_string());
            pyi_note = format!("measured now, cached in {}", cache.display());
            Some(v)
        })
        .flatten();

    // ---- floe ----
    let cat = Catalog::open(None, Some(work.join("wh").to_str().unwrap()), None).unwrap();
    let c = Ctx {
        rt: &rt,
        cat: &cat,
        loops,
    };
    let mut wrong: Vec<String> = Vec::new();
    let mut runs: Vec<VersionRun> = Vec::new();
    for &v in &formats {
        runs.push(run_version(&c, v, &files, &s, n_big, &mut wrong));
        // The table is not needed any more: keep the disk (and page cache) small.
        let tag = if v == FormatVersion::V3 { "v3" } else { "v2" };
        c.drop(&parse_ident(&format!("bench.keyed_{tag}")).unwrap());
    }

    // ---- 4. a batch at 5x the table size ----
    let mut big_cmp: Option<(usize, Vec<BatchRun>, String)> = None;
    if big {
        let big_data = gen_data(big_table_rows);
        let big_files = data_files(&big_data);
        let sizes = vec![big_rows; n_big_cmp];
        let bs = stream(
            &base.join(format!(
                "keyed-changes-{big_table_rows}-{n_big_cmp}x{big_rows}+0x0-g{GEN_VERSION}"
            )),
            big_table_rows as u64,
            &sizes,
            0,
            None,
        );
        let v = formats[0];
        let ident = parse_ident("bench.keyed_big").unwrap();
        let (t, secs) = c.table(&ident, v, &big_files);
        eprintln!(
            "[keyed bench] big: created {ident} ({}) in {secs:.1}s",
            layout(&t)
        );
        let w = KeyedWriter::new(&cat, ident.clone());
        let r = c.apply(&w, &bs.batches, "big", true, &mut wrong);
        let t = c.load_table(&ident);
        let st = c.state(&t).1;
        let want = bs.batches.last().unwrap().after;
        if !st.matches(&want) {
            wrong.push(format!(
                "big table: after {n_big_cmp} batches {st}, expected {want}"
            ));
        }
        c.drop(&ident);
        big_cmp = Some((big_table_rows, r, format!("{v:?}")));
    }

    // ---- report ----
    println!();
    let chdb_f = |k: &str| chdb.as_ref().and_then(|v| v[k].as_f64());
    let chdb_state = |k: &str| chdb.as_ref().and_then(|v| State::of(&v[k]));
    let chdb_inserts: Vec<f64> = chdb
        .as_ref()
        .and_then(|v| v["insert_s"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    let chdb_small: Vec<f64> = chdb
        .as_ref()
        .and_then(|v| v["small_insert_s"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    if let Some(v) = &chdb {
        println!(
            "baseline chdb {} (ClickHouse {}), ReplacingMergeTree(ver, is_deleted) ORDER BY id, max_threads={}: base load + OPTIMIZE FINAL {:.1} s (untimed); {} parts when FINAL was read",
            v["versions"]["chdb"].as_str().unwrap_or("?"),
            v["versions"]["clickhouse"].as_str().unwrap_or("?"),
            v["threads"],
            chdb_f("load_s").unwrap_or(f64::NAN),
            v["parts_before_final"]
        );
        for (k, at) in [("state_big", n_big), ("state_all", n_big + n_small)] {
            if let Some(st) = chdb_state(k) {
                let want = s.batches[at - 1].after;
                if !st.matches(&want) {
                    wrong.push(format!(
                        "chdb FINAL after {at} batches: {st}, expected {want}"
                    ));
                }
            }
        }
    }
    let pyi_runs: Vec<(f64, u64, f64)> = pyi
        .as_ref()
        .and_then(|v| v["batches"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|b| {
            (
                b["seconds"].as_f64().unwrap_or(f64::NAN),
                b["source_rows"].as_u64().unwrap_or(0),
                b["cpu_seconds"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    let pyi_secs: f64 = pyi_runs.iter().map(|r| r.0).sum();
    let pyi_changes = (pyi_runs.len() * big_rows) as f64;
    if let Some(v) = &pyi {
        println!(
            "baseline pyiceberg {} (pyarrow {}), format v2, Table.upsert(join_cols=[id]) of the folded live upserts of the first {} batches ({} rows fed; deletes and replays skipped): {}; ({pyi_note})",
            v["versions"]["pyiceberg"].as_str().unwrap_or("?"),
            v["versions"]["pyarrow"].as_str().unwrap_or("?"),
            pyi_runs.len(),
            pyi_runs.iter().map(|r| r.1).sum::<u64>(),
            pyi_runs
                .iter()
                .map(|r| format!("{:.1} s (cpu {:.1} s)", r.0, r.2))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut summary: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |goal: &str, vals: Vec<String>| summary.push((goal.to_string(), vals));
    for r in &runs {
        let l = &r.label;
        println!();
        println!("== floe {l} ==  (table set-up {:.1} s, untimed)", r.setup_s);
        let (apply, read, cpu, changes, bytes) = sum_apply(&r.big);
        let per: Vec<f64> = r.big.iter().map(|b| b.apply_s).collect();
        let cps = changes as f64 / apply;
        // Without the first batch (a fresh writer builds its key index there).
        let later = if r.big.len() > 1 {
            let (a, _, _, c, _) = sum_apply(&r.big[1..]);
            format!(", batches 2..{n_big} {}", rate(c as f64, a))
        } else {
            String::new()
        };
        println!(
            "1. {n_big} batches x {big_rows}: apply {apply:.2} s (cpu {cpu:.2} s) = {} sustained (target >= 1M/s) {}; per batch p50 {:.3} s, p90 {:.3} s, max {:.3} s, first {:.3} s{later}; reading the batches' Parquet {read:.2} s more",
            rate(changes as f64, apply),
            verdict(cps >= 1e6),
            pct(&per, 0.5),
            pct(&per, 0.9),
            pct(&per, 1.0),
            per[0]
        );
        let mut v1 = vec![format!(
            "{} {} (first batch {:.2} s{later})",
            rate(changes as f64, apply),
            verdict(cps >= 1e6),
            per[0]
        )];
        if !pyi_runs.is_empty() {
            let pyi_rate = pyi_changes / pyi_secs;
            let ratio = cps / pyi_rate;
            let (a2, _, _, c2, _) = sum_apply(&r.big[..pyi_runs.len()]);
            let same = (c2 as f64 / a2) / pyi_rate;
            println!(
                "   vs pyiceberg upsert: {} per change ({} batches, {pyi_secs:.1} s) = {ratio:.0}x (target >= 200x) {}; on the same {} batches floe {} = {same:.0}x",
                rate(pyi_changes, pyi_secs),
                pyi_runs.len(),
                verdict(ratio >= 200.0),
                pyi_runs.len(),
                rate(c2 as f64, a2)
            );
            v1.push(format!("{ratio:.0}x {}", verdict(ratio >= 200.0)));
        } else {
            v1.push("n/a".into());
        }
        // 2. ClickHouse
        let floe_batch = (apply + read) / r.big.len() as f64;
        let mut v2 = Vec::new();
        match chdb_f("final_s") {
            Some(final_s) => {
                let ratio = final_s / r.state_big_s;
                println!(
                    "2. current state after {n_big} batches (count, sum(k), sum(ver)): floe scan {:.3} s | chdb SELECT ... FINAL {final_s:.3} s = {ratio:.2}x (target >= 2x) {}",
                    r.state_big_s,
                    verdict(ratio >= 2.0)
                );
                v2.push(format!("{ratio:.2}x {}", verdict(ratio >= 2.0)));
            }
            None => {
                println!(
                    "2. current state after {n_big} batches: floe scan {:.3} s | chdb: n/a",
                    r.state_big_s
                );
                v2.push("n/a".into());
            }
        }
        if !chdb_inserts.is_empty() {
            let ch_mean = chdb_inserts.iter().sum::<f64>() / chdb_inserts.len() as f64;
            let ratio = floe_batch / ch_mean;
            println!(
                "   per batch: floe read Parquet + apply {floe_batch:.3} s | chdb INSERT from Parquet {ch_mean:.3} s (p50 {:.3}, max {:.3}) = floe/chdb {ratio:.2}x (target <= 3x) {}",
                pct(&chdb_inserts, 0.5),
                pct(&chdb_inserts, 1.0),
                verdict(ratio <= 3.0)
            );
            v2.push(format!("{ratio:.2}x {}", verdict(ratio <= 3.0)));
        } else {
            v2.push("n/a".into());
        }
        // 3. small batches
        let lat: Vec<f64> = r.small.iter().map(|b| b.apply_s).collect();
        let mut v3 = vec!["n/a".to_string()];
        if !lat.is_empty() {
            let (p50, p99) = (pct(&lat, 0.5) * 1e3, pct(&lat, 0.99) * 1e3);
            let ok = p50 <= 100.0 && p99 <= 300.0;
            let ch = if chdb_small.is_empty() {
                String::new()
            } else {
                format!(
                    " | chdb INSERT p50 {:.1} ms, p99 {:.1} ms",
                    pct(&chdb_small, 0.5) * 1e3,
                    pct(&chdb_small, 0.99) * 1e3
                )
            };
            println!(
                "3. {} small batches x {small_rows} (same writer, after the big ones): commit latency p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms (target p50 <= 100, p99 <= 300 ms) {}{ch}",
                lat.len(),
                pct(&lat, 1.0) * 1e3,
                verdict(ok)
            );
            v3 = vec![format!("{p50:.0} / {p99:.0} ms {}", verdict(ok))];
        }
        // 5. bytes and scans
        let (_, _, _, sc, sb) = sum_apply(&r.small);
        println!(
            "5. bytes written: {:.1} MB for {changes} changes = {:.1} B/change (small batches: {:.1} B/change); {} data + {} delete files added by the big batches",
            mb(bytes),
            bytes as f64 / changes as f64,
            sb as f64 / sc.max(1) as f64,
            r.big.iter().map(|b| b.data_files).sum::<usize>(),
            r.big.iter().map(|b| b.delete_files).sum::<usize>()
        );
        println!(
            "   full scan (all columns, 2 threads): fresh table {:.3} s; after {n_big} batches {:.3} s ({}); after all batches {:.3} s; after rewrite_data_files {:.3} s = {:.2}x faster",
            r.base_full_s,
            r.full_big_s,
            r.layout_big,
            r.full_before_rewrite_s,
            r.full_after_rewrite_s,
            r.full_before_rewrite_s / r.full_after_rewrite_s
        );
        println!(
            "   rewrite_data_files (rewrite-all, 128 MiB target): {:.2} s, {} -> {}; state read {:.3} s (fresh table {:.3} s, after {n_big} batches {:.3} s)",
            r.rewrite_s,
            r.rewrite_detail,
            r.layout_after_rewrite,
            r.state_after_rewrite_s,
            r.base_state_s,
            r.state_big_s
        );
        // 6. memory
        println!(
            "6. peak RSS (VmHWM, reset before the batches): during the {n_big} batches {:.0} MB (RSS {:.0} MB before, {:.0} MB after); to the end of the {} run (scans, small batches, rewrite) {:.0} MB",
            r.hwm_batches_kb as f64 / 1024.0,
            r.rss_before_kb as f64 / 1024.0,
            r.rss_after_kb as f64 / 1024.0,
            r.label,
            r.hwm_end_kb as f64 / 1024.0
        );
        println!(
            "   state: after {n_big} batches {}; after all {}",
            r.state_big, r.state_all
        );
        add(&format!("{l}: 1. sustained changes/s; vs pyiceberg"), v1);
        add(&format!("{l}: 2. FINAL/floe read; floe/chdb insert"), v2);
        add(&format!("{l}: 3. small p50 / p99"), v3);
        add(
            &format!("{l}: 5. B/change; scan before/after rewrite"),
            vec![
                format!("{:.1} B", bytes as f64 / changes as f64),
                format!(
                    "{:.3} / {:.3} s",
                    r.full_before_rewrite_s, r.full_after_rewrite_s
                ),
            ],
        );
        add(
            &format!("{l}: 6. peak RSS batches / end"),
            vec![format!(
                "{:.0} / {:.0} MB",
                r.hwm_batches_kb as f64 / 1024.0,
                r.hwm_end_kb as f64 / 1024.0
            )],
        );
    }
    // 4. table size
    if let Some((big_n, br, v)) = &big_cmp {
        let small_run = runs
            .iter()
            .find(|r| r.label.starts_with(&v.to_lowercase()))
            .or(runs.first());
        if let Some(r0) = small_run {
            let n = br.len();
            let a: Vec<f64> = r0.big[..n].iter().map(|b| b.apply_s).collect();
            let b: Vec<f64> = br.iter().map(|b| b.apply_s).collect();
            let steady = |x: &[f64]| pct(&x[1..], 0.5);
            let ratio = steady(&b) / steady(&a);
            let first = b[0] / a[0];
            println!();
            println!(
                "4. one {big_rows}-change batch, fresh writer, {}: at {rows} rows first {:.3} s, then median {:.3} s | at {big_n} rows first {:.3} s, then median {:.3} s; ratio of the later batches {ratio:.2}x (target <= 1.5x) {} (first batch, which builds the writer's key index: {first:.2}x)",
                r0.label,
                a[0],
                steady(&a),
                b[0],
                steady(&b),
                verdict(ratio <= 1.5)
            );
            let list = |x: &[f64]| {
                x.iter()
                    .map(|s| format!("{s:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "   apply per batch (s): at {rows} rows [{}] | at {big_n} rows [{}]",
                list(&a),
                list(&b)
            );
            add(
                "4. batch at 5x rows / at rows (later batches)",
                vec![format!("{ratio:.2}x {}", verdict(ratio <= 1.5))],
            );
        }
    } else {
        println!();
        println!("4. batch cost at 5x table rows: skipped (set FLOE_BENCH_BIG=1)");
    }

    // correctness
    let gen_big = s.batches[n_big - 1].after;
    let gen_all = s.batches.last().unwrap().after;
    println!();
    println!("correctness: generator expects after {n_big} batches {gen_big}; after all {gen_all}");
    if let (Some(a), Some(b)) = (chdb_state("state_big"), chdb_state("state_all")) {
        println!("             chdb FINAL after {n_big} batches {a}; after all {b}");
    }
    for r in &runs {
        println!(
            "             floe {} after {n_big} batches {}; after all {}; after rewrite {}",
            r.label, r.state_big, r.state_all, r.state_after_rewrite
        );
    }
    let ok = wrong.is_empty();
    for w in &wrong {
        println!("  WRONG: {w}");
    }
    println!(
        "correctness (every batch's inserted/updated/deleted/ignored, and the states above agree): {}",
        if ok { "ok" } else { "WRONG" }
    );

    println!();
    println!(
        "==== summary: keyed, {rows} rows, {n_big} x {big_rows} + {n_small} x {small_rows} changes, {cores} cores{} ====",
        if quick { ", QUICK" } else { "" }
    );
    println!("targets: 1. >= 1M changes/s, >= 200x pyiceberg; 2. FINAL/floe read >= 2x, floe/chdb insert <= 3x; 3. p50 <= 100 ms, p99 <= 300 ms; 4. <= 1.5x");
    for (goal, vals) in &summary {
        println!("{goal:<58} {}", vals.join(" | "));
    }
    println!("correctness: {}", if ok { "ok" } else { "WRONG" });
    println!("wall time: {:.1} s", t_start.elapsed().as_secs_f64());
    if !ok {
        std::process::exit(1);
    }
}
