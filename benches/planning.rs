//! Planning at the speed of the metadata (issue 45): `floe scan` of tables with many small data
//! files, where the work is reading manifests, not data. Times the `floe` CLI (the release
//! binary `cargo bench` builds) on a row count, a partition point lookup, a column-metrics
//! point lookup and `--limit 10`, with its peak RSS, and the same queries in DuckDB 1.5.5
//! (iceberg extension) and pyiceberg 0.12 (`plan_files`) through
//! `tools/bench/planning_peers.py`, in the same run; prints each figure with its ratio against
//! floe and the goals.
//!
//! `cargo bench --bench planning`. Env:
//! * `FLOE_PLAN_FILES` — data files per table (default 100,000; the 1,000,000 with
//!   `FLOE_BENCH_BIG=1`); 10,000 partitions (fewer when there are fewer files), the same
//!   number of files in each;
//! * `FLOE_BENCH_BIG=1` — 1,000,000 files unless `FLOE_PLAN_FILES` is set;
//! * `FLOE_PLAN_SHAPES` — `clustered,mixed,deletes` (default all three);
//! * `FLOE_PLAN_RUNS` — floe and DuckDB runs per query, the median reported (default 3);
//! * `FLOE_PLAN_PYICEBERG_RUNS` — pyiceberg runs per query (default 1: it is slow);
//! * `FLOE_PLAN_PEERS` — of `duckdb,pyiceberg,spark` (default `duckdb,pyiceberg`; Spark
//!   3.5.8 + Iceberg 1.10.2 is Iceberg Java's planner: `plan s` is the scan node's
//!   `inputPartitions()` of the filtered DataFrame (the driver's file planning), `s` the
//!   answer, on a warm session);
//! * `FLOE_PLAN_SPARK_RUNS` — Spark runs per query (default 1);
//! * `FLOE_BENCH_NO_BASELINE=1` — floe only;
//! * `FLOE_BENCH_REBUILD=1` — rebuild the cached tables;
//! * `FLOE_BENCH_DIR` — data, cache and scratch (default `~/.cache/floe/bench`);
//! * `FLOE_PEERS_PYTHON` — the peers venv python (default `~/.cache/floe/peers/venv/bin/python`).
//!
//! Tables (format v2, `id long, p int, v string`, identity-partitioned by `p`, manifest merging
//! off so each commit's manifest stays as written), one SQLite-catalog warehouse per shape and
//! size, built once and cached in `DIR/planning/<shape>-<files>-<hash>/` (hash of this
//! recipe's version and the layout):
//! * `clustered` — 10 commits, commit `c` adds every file of partitions
//!   `[c·P/10, (c+1)·P/10)`: each manifest covers a contiguous range of partitions;
//! * `mixed` — files/P commits, each adding one file to every partition: every manifest spans
//!   all partitions;
//! * `deletes` — `clustered`, and after each data commit one commit of file-scoped
//!   position-delete files (position 0) for every tenth data file (10% of the files).
//!
//! Every data file is a real 2-row Parquet file (file `g` holds ids `2g` and `2g+1`,
//! `v = "v<id>"`, Iceberg field ids in the Parquet schema), written by this bench with the
//! `parquet` crate, on all cores, in place under the table's `data/p=<p>/`, and registered with
//! its partition value and column metrics through `floe::txn::append_files` (nothing copied).
//! Delete files are written the same way and committed through `append_files` too (an
//! `append` snapshot that adds delete files: the only public commit of given delete files).
//!
//! What is timed, per query (`sync` before each run): the wall time of the whole
//! `floe --warehouse WH scan bench.<shape> …` process (catalog, metadata, planning, reading
//! what is left, printing), and its peak RSS (`/usr/bin/time`, else polled `VmHWM`). DuckDB:
//! the query on a fresh connection (extensions loaded untimed). pyiceberg: loading the
//! metadata, `plan_files()` (reported separately) and the answer from the planned tasks.
//! Ratios are peer time / floe time. The goals are for 1,000,000 files; at other
//! sizes they are printed for orientation.

mod common;
use common::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use floe::catalog::{Catalog, TableCreation};
use floe::spec::{
    parse_partition_spec, parse_schema, DataContentType, DataFile, DataFileFormat, Datum, Literal,
    Struct,
};
use floe::table::parse_ident;
use floe::Table;
use iceberg::spec::DataFileBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// Bump when the way the tables are built changes (invalidates the cache).
const BUILD_VERSION: u32 = 1;
const MAX_PARTITIONS: usize = 10_000;
const ROWS_PER_FILE: usize = 2;
const COMMITS: usize = 10;
/// The partition of the partition point lookup.
const LOOKUP_P: usize = 5;
/// Every this-many-th data file gets a position delete (`deletes` shape).
const DELETE_EVERY: usize = 10;
/// Iceberg's reserved field ids of a position-delete file's columns.
const POS_FILE_PATH_ID: i32 = 2147483546;
const POS_POS_ID: i32 = 2147483545;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Clustered,
    Mixed,
    Deletes,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Clustered => "clustered",
            Shape::Mixed => "mixed",
            Shape::Deletes => "deletes",
        }
    }
    fn parse(s: &str) -> Option<Shape> {
        [Shape::Clustered, Shape::Mixed, Shape::Deletes]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// The layout: `parts` partitions of `per_part` files each.
#[derive(Clone, Copy, Debug)]
struct Layout {
    parts: usize,
    per_part: usize,
}

impl Layout {
    fn files(&self) -> usize {
        self.parts * self.per_part
    }
    /// The commits of `shape`: each a list of (global file index, partition).
    fn commits(&self, shape: Shape) -> Vec<Vec<(usize, usize)>> {
        let (p, f) = (self.parts, self.per_part);
        match shape {
            Shape::Clustered | Shape::Deletes => {
                let n = COMMITS.min(p);
                (0..n)
                    .map(|c| {
                        (c * p / n..(c + 1) * p / n)
                            .flat_map(|part| (0..f).map(move |k| (part * f + k, part)))
                            .collect()
                    })
                    .collect()
            }
            Shape::Mixed => (0..f)
                .map(|k| (0..p).map(|part| (k * p + part, part)).collect())
                .collect(),
        }
    }
    /// The partition of file `g` in `shape`.
    fn partition_of(&self, shape: Shape, g: usize) -> usize {
        match shape {
            Shape::Clustered | Shape::Deletes => g / self.per_part,
            Shape::Mixed => g % self.parts,
        }
    }
}

fn deleted(shape: Shape, g: usize) -> bool {
    shape == Shape::Deletes && g % DELETE_EVERY == 0
}

/// What the cached table holds and the answers the queries must give.
#[derive(Debug, Clone)]
struct Built {
    wh: PathBuf,
    table: String,
    metadata: String,
    gen_s: f64,
    data_files: usize,
    delete_files: usize,
    commits: usize,
}

struct Expected {
    count: u64,
    part: u64,
    id: u64,
    lookup_id: i64,
}

fn expected(shape: Shape, l: Layout) -> Expected {
    let n = l.files();
    let rows = |g: usize| ROWS_PER_FILE as u64 - u64::from(deleted(shape, g));
    // The looked-up id: the second row of a file in the middle (never deleted: deletes hit
    // position 0).
    let g = n / 2 + 7.min(n / 2);
    Expected {
        count: (0..n).map(rows).sum(),
        part: (0..n)
            .filter(|&g| l.partition_of(shape, g) == LOOKUP_P.min(l.parts - 1))
            .map(rows)
            .sum(),
        id: 1,
        lookup_id: (g * ROWS_PER_FILE + 1) as i64,
    }
}

/// `file:///x` → `/x`.
fn local(uri: &str) -> &str {
    uri.strip_prefix("file://").unwrap_or(uri)
}

fn parquet_bytes(batch: &RecordBatch) -> Vec<u8> {
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let mut buf = Vec::with_capacity(2048);
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    buf
}

/// The field id of column `name` in `t`'s current schema.
fn field_id(t: &Table, name: &str) -> i32 {
    t.metadata()
        .current_schema()
        .field_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .id
}

/// Writes data file `g` (partition `part`) and returns its manifest entry.
fn write_data_file(
    t: &Table,
    schema: &Arc<ArrowSchema>,
    ids: [i32; 3],
    g: usize,
    part: usize,
) -> DataFile {
    let first = (g * ROWS_PER_FILE) as i64;
    let idv: Vec<i64> = (first..first + ROWS_PER_FILE as i64).collect();
    let vv: Vec<String> = idv.iter().map(|i| format!("v{i}")).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(idv.clone())),
        Arc::new(Int32Array::from(vec![part as i32; ROWS_PER_FILE])),
        Arc::new(StringArray::from(vv.clone())),
    ];
    let cols = cols
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| arrow_cast::cast(&c, f.data_type()).unwrap())
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let bytes = parquet_bytes(&batch);
    let uri = format!("{}/data/p={part}/{g:08}.parquet", t.metadata().location());
    std::fs::write(local(&uri), &bytes).unwrap();
    let [id_id, p_id, v_id] = ids;
    let counts: HashMap<i32, u64> = ids.iter().map(|&i| (i, ROWS_PER_FILE as u64)).collect();
    let nulls: HashMap<i32, u64> = ids.iter().map(|&i| (i, 0)).collect();
    let (vmin, vmax) = (
        vv.iter().min().unwrap().clone(),
        vv.iter().max().unwrap().clone(),
    );
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(uri)
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::from_iter([Some(Literal::int(part as i32))]))
        .partition_spec_id(t.metadata().default_partition_spec_id())
        .record_count(ROWS_PER_FILE as u64)
        .file_size_in_bytes(bytes.len() as u64)
        .value_counts(counts)
        .null_value_counts(nulls)
        .lower_bounds(HashMap::from([
            (id_id, Datum::long(first)),
            (p_id, Datum::int(part as i32)),
            (v_id, Datum::string(vmin)),
        ]))
        .upper_bounds(HashMap::from([
            (id_id, Datum::long(first + ROWS_PER_FILE as i64 - 1)),
            (p_id, Datum::int(part as i32)),
            (v_id, Datum::string(vmax)),
        ]))
        .build()
        .unwrap()
}

/// Writes a file-scoped position-delete file deleting position 0 of `data`.
fn write_delete_file(t: &Table, data: &DataFile, g: usize, part: usize) -> DataFile {
    let with_id = |f: Field, id: i32| {
        f.with_metadata(HashMap::from([(
            "PARQUET:field_id".to_string(),
            id.to_string(),
        )]))
    };
    let schema = Arc::new(ArrowSchema::new(vec![
        with_id(
            Field::new("file_path", DataType::Utf8, false),
            POS_FILE_PATH_ID,
        ),
        with_id(Field::new("pos", DataType::Int64, false), POS_POS_ID),
    ]));
    let path = data.file_path().to_string();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec![path.clone()])),
            Arc::new(Int64Array::from(vec![0i64])),
        ],
    )
    .unwrap();
    let bytes = parquet_bytes(&batch);
    let uri = format!(
        "{}/data/p={part}/{g:08}-deletes.parquet",
        t.metadata().location()
    );
    std::fs::write(local(&uri), &bytes).unwrap();
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(uri)
        .file_format(DataFileFormat::Parquet)
        .partition(data.partition().clone())
        .partition_spec_id(t.metadata().default_partition_spec_id())
        .record_count(1)
        .file_size_in_bytes(bytes.len() as u64)
        .referenced_data_file(Some(path.clone()))
        .value_counts(HashMap::from([(POS_FILE_PATH_ID, 1), (POS_POS_ID, 1)]))
        .null_value_counts(HashMap::from([(POS_FILE_PATH_ID, 0), (POS_POS_ID, 0)]))
        .lower_bounds(HashMap::from([
            (POS_FILE_PATH_ID, Datum::string(&path)),
            (POS_POS_ID, Datum::long(0)),
        ]))
        .upper_bounds(HashMap::from([
            (POS_FILE_PATH_ID, Datum::string(&path)),
            (POS_POS_ID, Datum::long(0)),
        ]))
        .build()
        .unwrap()
}

/// Runs `f` over `items` on `threads` threads (contiguous chunks), results in order.
fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let chunk = items.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// Builds (or finds in the cache) the table of `shape`.
fn build(
    rt: &tokio::runtime::Runtime,
    base: &Path,
    shape: Shape,
    l: Layout,
    rebuild: bool,
) -> Built {
    let key = fnv1a(
        0xcbf2_9ce4_8422_2325,
        format!(
            "{BUILD_VERSION}/{}/{}x{}/{ROWS_PER_FILE}/{COMMITS}/{DELETE_EVERY}",
            shape.name(),
            l.parts,
            l.per_part
        )
        .as_bytes(),
    );
    let dir = base
        .join("planning")
        .join(format!("{}-{}-{key:016x}", shape.name(), l.files()));
    let stamp = dir.join("built.json");
    let wh = dir.join("wh");
    let table = format!("bench.{}", shape.name());
    if !rebuild && stamp.exists() {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stamp).unwrap()).unwrap();
        let metadata = v["metadata"].as_str().unwrap().to_string();
        if Path::new(local(&metadata)).exists() {
            eprintln!("[planning] {table}: cached in {}", dir.display());
            return Built {
                wh,
                table,
                metadata,
                gen_s: v["gen_s"].as_f64().unwrap_or(0.0),
                data_files: v["data_files"].as_u64().unwrap_or(0) as usize,
                delete_files: v["delete_files"].as_u64().unwrap_or(0) as usize,
                commits: v["commits"].as_u64().unwrap_or(0) as usize,
            };
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&wh).unwrap();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let start = Instant::now();
    let cat = Catalog::open(None, wh.to_str(), None).unwrap();
    let schema = parse_schema("id long, p int, v string").unwrap();
    let mut c =
        TableCreation::new(schema.clone()).with_property("commit.manifest-merge.enabled", "false");
    c.partition_spec = parse_partition_spec("p", &schema).unwrap();
    let mut t = rt
        .block_on(cat.create_table(&parse_ident(&table).unwrap(), c))
        .unwrap();
    let arrow_schema = t.arrow_schema().unwrap();
    let ids = [field_id(&t, "id"), field_id(&t, "p"), field_id(&t, "v")];
    let data_dir = format!("{}/data", local(t.metadata().location()));
    for part in 0..l.parts {
        std::fs::create_dir_all(format!("{data_dir}/p={part}")).unwrap();
    }
    let (mut write_s, mut commit_s) = (0.0, 0.0);
    let (mut data_files, mut delete_files, mut commits) = (0, 0, 0);
    for files in l.commits(shape) {
        let t0 = Instant::now();
        let written = par_map(&files, threads, |&(g, part)| {
            write_data_file(&t, &arrow_schema, ids, g, part)
        });
        let deletes: Vec<(usize, usize, DataFile)> = files
            .iter()
            .zip(&written)
            .filter(|((g, _), _)| deleted(shape, *g))
            .map(|(&(g, part), f)| (g, part, f.clone()))
            .collect();
        let deletes = par_map(&deletes, threads, |(g, part, f)| {
            write_delete_file(&t, f, *g, *part)
        });
        write_s += t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        data_files += written.len();
        t = rt
            .block_on(floe::txn::append_files(&cat, &t, written))
            .unwrap()
            .table;
        commits += 1;
        if !deletes.is_empty() {
            delete_files += deletes.len();
            t = rt
                .block_on(floe::txn::append_files(&cat, &t, deletes))
                .unwrap()
                .table;
            commits += 1;
        }
        commit_s += t1.elapsed().as_secs_f64();
        eprintln!(
            "[planning] {table}: {data_files}/{} data files, {delete_files} delete files, \
             {commits} commits, {:.1} s",
            l.files(),
            start.elapsed().as_secs_f64()
        );
    }
    let gen_s = start.elapsed().as_secs_f64();
    eprintln!(
        "[planning] {table}: generated in {gen_s:.1} s (Parquet files {write_s:.1} s on \
         {threads} threads, commits {commit_s:.1} s)"
    );
    let metadata = t.metadata_location().to_string();
    let v = serde_json::json!({
        "metadata": metadata,
        "gen_s": gen_s,
        "write_s": write_s,
        "commit_s": commit_s,
        "data_files": data_files,
        "delete_files": delete_files,
        "commits": commits,
        "layout": {"partitions": l.parts, "files_per_partition": l.per_part},
    });
    std::fs::write(&stamp, v.to_string()).unwrap();
    Built {
        wh,
        table,
        metadata,
        gen_s,
        data_files,
        delete_files,
        commits,
    }
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Peak RSS (kB) of a running process, polled from `/proc/<pid>/status`.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// One query's floe measurement.
struct FloeRun {
    median_s: f64,
    runs: Vec<f64>,
    /// Peak RSS over the runs, kB.
    rss_kb: u64,
    stdout: String,
}

/// Runs `floe --warehouse WH <args>` `n` times: median wall time, max peak RSS.
fn floe_query(wh: &Path, args: &[&str], n: usize, scratch: &Path) -> FloeRun {
    let bin = env!("CARGO_BIN_EXE_floe");
    let timer = Path::new("/usr/bin/time");
    let report = scratch.join("planning-time.txt");
    let (mut runs, mut rss_kb, mut stdout) = (Vec::new(), 0u64, String::new());
    for _ in 0..n {
        settle();
        let mut cmd = if timer.exists() {
            let mut c = Command::new(timer);
            c.args(["-f", "%M", "-o", report.to_str().unwrap()])
                .arg(bin);
            c
        } else {
            Command::new(bin)
        };
        cmd.arg("--warehouse")
            .arg(wh)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t0 = Instant::now();
        let mut child = cmd.spawn().expect("run floe");
        let mut polled = 0u64;
        if !timer.exists() {
            // No /usr/bin/time: poll the child's VmHWM until it exits.
            while child.try_wait().unwrap().is_none() {
                polled = polled.max(vm_hwm_kb(child.id()).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let out = child.wait_with_output().unwrap();
        runs.push(t0.elapsed().as_secs_f64());
        assert!(
            out.status.success(),
            "floe {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let peak = if timer.exists() {
            std::fs::read_to_string(&report)
                .unwrap()
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0)
        } else {
            polled
        };
        rss_kb = rss_kb.max(peak);
        stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let mut sorted = runs.clone();
    FloeRun {
        median_s: median(&mut sorted),
        runs,
        rss_kb,
        stdout,
    }
}

/// The goal for a query at 1,000,000 files: (time bound, label).
fn goal(q: &str) -> Option<(f64, &'static str)> {
    match q {
        "count" => Some((0.5, "<= 0.5 s")),
        "part" | "id" => Some((1.0, "<= 1 s")),
        "limit" => Some((0.2, "<= 0.2 s")),
        _ => None,
    }
}

const DUCKDB_RATIO: f64 = 10.0;
const PYICEBERG_RATIO: f64 = 50.0;
const RSS_GOAL_MB: f64 = 300.0;

fn main() {
    // `cargo bench` passes --bench; under `cargo test` this binary does nothing.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("floe planning benchmark: run with `cargo bench --bench planning`");
        return;
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && v != "0");
    let big = env("FLOE_BENCH_BIG").is_some();
    let want: usize = env("FLOE_PLAN_FILES")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if big { 1_000_000 } else { 100_000 })
        .max(1);
    let parts = MAX_PARTITIONS.min(want);
    let layout = Layout {
        parts,
        per_part: want / parts,
    };
    let shapes: Vec<Shape> = env("FLOE_PLAN_SHAPES")
        .unwrap_or_else(|| "clustered,mixed,deletes".into())
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| Shape::parse(s.trim()).unwrap_or_else(|| panic!("unknown shape {s}")))
        .collect();
    let runs: usize = env("FLOE_PLAN_RUNS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let pyi_runs: usize = env("FLOE_PLAN_PYICEBERG_RUNS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let spark_runs: usize = env("FLOE_PLAN_SPARK_RUNS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let peers = if env("FLOE_BENCH_NO_BASELINE").is_some() {
        String::new()
    } else {
        env("FLOE_PLAN_PEERS").unwrap_or_else(|| "duckdb,pyiceberg".into())
    };
    let rebuild = env("FLOE_BENCH_REBUILD").is_some();
    let base = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/floe/bench")
        });
    std::fs::create_dir_all(&base).unwrap();
    let py = if peers.is_empty() {
        None
    } else {
        let p = python();
        if p.is_none() {
            eprintln!("[planning] no peers python (run tools/peers/setup.sh): floe only");
        }
        p
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("tools/bench/planning_peers.py");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    println!(
        "planning benchmark: {} data files per table ({} partitions x {} files, {ROWS_PER_FILE} \
         rows each); floe and DuckDB: median of {runs}, pyiceberg: median of {pyi_runs}, \
         Spark: median of {spark_runs}",
        layout.files(),
        layout.parts,
        layout.per_part
    );
    for shape in shapes {
        let b = build(&rt, &base, shape, layout, rebuild);
        let e = expected(shape, layout);
        let p = LOOKUP_P.min(layout.parts - 1);
        let part_where = format!("p = {p}");
        let id_where = format!("id = {}", e.lookup_id);
        let queries: Vec<(&str, String, Vec<&str>, Option<u64>)> = vec![
            (
                "count",
                "scan --count".to_string(),
                vec!["--count"],
                Some(e.count),
            ),
            (
                "part",
                format!("--where \"{part_where}\" --count"),
                vec!["--where", &part_where, "--count"],
                Some(e.part),
            ),
            (
                "id",
                format!("--where \"{id_where}\" --count"),
                vec!["--where", &id_where, "--count"],
                Some(e.id),
            ),
            (
                "limit",
                "scan --limit 10".to_string(),
                vec!["--limit", "10", "--format", "csv"],
                Some(10),
            ),
        ];
        let mut floe = Vec::new();
        for (q, _, args, want) in &queries {
            let mut a = vec!["scan", b.table.as_str()];
            a.extend(args.iter().copied());
            let r = floe_query(&b.wh, &a, runs, &base);
            let got = if *q == "limit" {
                r.stdout.lines().count().saturating_sub(1) as u64
            } else {
                r.stdout.trim().parse::<u64>().unwrap_or(u64::MAX)
            };
            let runs_s: Vec<String> = r.runs.iter().map(|s| format!("{s:.3}")).collect();
            eprintln!(
                "[planning] {} floe {q}: {:.3} s (runs {}), peak RSS {:.0} MB, rows {got}",
                b.table,
                r.median_s,
                runs_s.join(" "),
                r.rss_kb as f64 / 1e3 * 1.024
            );
            if let Some(w) = want {
                assert_eq!(got, *w, "floe {q} on {}: wrong answer", b.table);
            }
            floe.push(r);
        }
        let peer = py.as_ref().and_then(|py| {
            settle();
            run_json(
                py,
                &[
                    script.to_str().unwrap(),
                    "--metadata",
                    &b.metadata,
                    "--id",
                    &e.lookup_id.to_string(),
                    "--p",
                    &p.to_string(),
                    "--engines",
                    &peers,
                    "--repeat",
                    &runs.to_string(),
                    "--pyiceberg-repeat",
                    &pyi_runs.to_string(),
                    "--spark-repeat",
                    &spark_runs.to_string(),
                ],
            )
        });

        // ---- report ----
        println!();
        println!(
            "shape {}: {} data files, {} delete files, {} commits, generated in {:.1} s{} \
             (metadata {})",
            shape.name(),
            b.data_files,
            b.delete_files,
            b.commits,
            b.gen_s,
            if b.gen_s > 0.0 { "" } else { " (cached)" },
            b.metadata
        );
        println!(
            "{:<34} | {:>8} | {:>7} | {:>9} | {:>8} | {:>10} | {:>10} | {:>8} | {:>12} | {:>9} | \
             {:>8} | goals at 1M files (time, RSS <= {RSS_GOAL_MB:.0} MB, DuckDB >= \
             {DUCKDB_RATIO:.0}x, pyiceberg >= {PYICEBERG_RATIO:.0}x)",
            "query",
            "floe s",
            "RSS MB",
            "DuckDB s",
            "DuckDB/f",
            "pyi plan s",
            "pyi s",
            "pyi/f",
            "spark plan s",
            "spark s",
            "spark/f"
        );
        let peer_get = |engine: &str, q: &str, k: &str| -> Option<f64> {
            peer.as_ref()?.get(engine)?.get(q)?.get(k)?.as_f64()
        };
        for ((q, label, _, want), r) in queries.iter().zip(&floe) {
            let rss_mb = r.rss_kb as f64 * 1024.0 / 1e6;
            let duck = peer_get("duckdb", q, "s");
            let pyi = peer_get("pyiceberg", q, "s");
            let pyi_plan = peer_get("pyiceberg", q, "plan_s");
            let spark = peer_get("spark", q, "s");
            let spark_plan = peer_get("spark", q, "plan_s");
            let f = |v: Option<f64>, w: usize, d: usize| match v {
                Some(v) => format!("{v:>w$.d$}"),
                None => format!("{:>w$}", "n/a"),
            };
            let ratio = |v: Option<f64>| v.map(|v| v / r.median_s);
            let (bound, blabel) = goal(q).unwrap();
            let mut goals = vec![format!("time {blabel} {}", verdict(r.median_s <= bound))];
            goals.push(format!("RSS {}", verdict(rss_mb <= RSS_GOAL_MB)));
            if let Some(x) = ratio(duck) {
                goals.push(format!("DuckDB {}", verdict(x >= DUCKDB_RATIO)));
            }
            if let Some(x) = ratio(pyi) {
                goals.push(format!("pyiceberg {}", verdict(x >= PYICEBERG_RATIO)));
            }
            println!(
                "{:<34} | {:>8.3} | {:>7.0} | {} | {} | {} | {} | {} | {} | {} | {} | {}",
                format!("{q}: {label}"),
                r.median_s,
                rss_mb,
                f(duck, 9, 3),
                f(ratio(duck).map(|x| (x * 10.0).round() / 10.0), 7, 1) + "x",
                f(pyi_plan, 10, 3),
                f(pyi, 10, 3),
                f(ratio(pyi).map(|x| (x * 10.0).round() / 10.0), 7, 1) + "x",
                f(spark_plan, 12, 3),
                f(spark, 9, 3),
                f(ratio(spark).map(|x| (x * 10.0).round() / 10.0), 7, 1) + "x",
                goals.join(", ")
            );
            // Check the peers' answers against the expected ones.
            for engine in ["duckdb", "pyiceberg", "spark"] {
                if let (Some(got), Some(w)) = (peer_get(engine, q, "rows"), want) {
                    if got as u64 != *w {
                        println!("  !! {engine} {q}: {got} rows, expected {w}");
                    }
                }
            }
        }
        if let Some(v) = &peer {
            for engine in ["duckdb", "pyiceberg", "spark"] {
                if let Some(err) = v.get(engine).and_then(|e| e.get("error")) {
                    println!("  {engine} failed: {err}");
                }
            }
            for engine in ["pyiceberg", "spark"] {
                if let Some(files) = v
                    .get(engine)
                    .and_then(|p| p.as_object())
                    .filter(|p| !p.contains_key("error"))
                {
                    let planned: Vec<String> = files
                        .iter()
                        .filter_map(|(q, x)| Some(format!("{q} {}", x.get("files")?)))
                        .collect();
                    println!("  {engine} files planned: {}", planned.join(", "));
                }
            }
        }
        if layout.files() != 1_000_000 {
            println!(
                "  (the goals are for 1,000,000 files; this table has {})",
                layout.files()
            );
        }
    }
}
