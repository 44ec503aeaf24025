//! A table's life: a CDC sink (`floe sink`, one long-running process) taking thousands of
//! commits while `floe maintain --watch` runs beside it, and thousands of plain appends (one
//! `floe append` process each) with the same maintainer. Compares the first and the last
//! window of commits: commit latency p50 / p99, a scan of the current state, a point lookup,
//! manifests, data and delete files, metadata.json size; peak RSS of the sink and of the
//! maintainer; failed commits; the final rows against a model. Then the same stream through
//! pyiceberg (`upsert` + `delete` per batch, no maintenance) for as long as floe's run took.
//!
//! `cargo bench --bench soak`. Env:
//! * `FLOE_SOAK_ROWS` — rows of the keyed table before the stream (default 1,000,000; the
//!   issue's day is 10,000,000);
//! * `FLOE_SOAK_COMMITS` — sink commits (default 2,000; the issue's day is 20,000), each of
//!   `FLOE_SOAK_CHANGES` changes (default 1,000: 65% updates, 20% inserts, 10% deletes, 5%
//!   late replays of older positions, which the sink skips by its checkpoint);
//! * `FLOE_SOAK_WINDOW` — commits in the first and last windows (default commits / 4, at most
//!   1,000);
//! * `FLOE_SOAK_APPENDS` — plain appends of a 10-row file (default 1,000);
//! * `FLOE_BENCH_FORMATS` — `v3,v2` (default both);
//! * `FLOE_SOAK_MAINTAIN` — where maintenance runs: `sink` (`floe sink --maintain`, between
//!   the sink's commits), `beside` (`floe maintain --watch` as its own process); default both;
//! * `FLOE_SOAK_NO_BASELINE=1` — no pyiceberg run;
//! * `FLOE_BENCH_DIR` — scratch (default `~/.cache/floe/bench`).
//!
//! Table policy (what a day of a real sink would use, compressed into minutes): snapshots
//! older than 10 s expire keeping 10 (`history.expire.*`), metadata files beyond 20 are
//! deleted (`write.metadata.*`), compaction from 3 input files
//! (`floe.maintain.rewrite-data-files.min-input-files`); `maintain --watch 5s`.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::Int64Type;
use floe::catalog::{Catalog, TableCreation};
use floe::scan::Scan;
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Table;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// splitmix64: the stream's deterministic randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The stream's model: live keys (version, value) and the keys in key order for picking.
struct Model {
    live: HashMap<i64, (i64, String)>,
    keys: Vec<i64>,
    next_key: i64,
    lsn: i64,
}

impl Model {
    /// One batch of Debezium events, applied to the model.
    fn batch(&mut self, rng: &mut Rng, changes: usize, out: &mut Vec<String>) {
        let mut touched = std::collections::HashSet::new();
        for _ in 0..changes {
            let r = rng.below(100);
            if r < 5 {
                // A late replay: an older version of a live key (skipped by the sink's
                // checkpoint, or ignored by the merge rule).
                let k = self.keys[rng.below(self.keys.len() as u64) as usize];
                if let Some((ver, _)) = self.live.get(&k) {
                    let lsn = (ver - 1).max(0);
                    out.push(format!(
                        r#"{{"op":"u","after":{{"id":{k},"v":"late"}},"source":{{"lsn":{lsn}}}}}"#
                    ));
                    continue;
                }
            }
            self.lsn += 1;
            let lsn = self.lsn;
            if r < 25 {
                let k = self.next_key;
                self.next_key += 1;
                self.keys.push(k);
                touched.insert(k);
                let v = format!("i{lsn}");
                out.push(format!(
                    r#"{{"op":"c","after":{{"id":{k},"v":"{v}"}},"source":{{"lsn":{lsn}}}}}"#
                ));
                self.live.insert(k, (lsn, v));
                continue;
            }
            // An update or a delete of a live key not yet touched in this batch.
            let k = loop {
                let k = self.keys[rng.below(self.keys.len() as u64) as usize];
                if self.live.contains_key(&k) && touched.insert(k) {
                    break k;
                }
            };
            if r < 35 {
                out.push(format!(
                    r#"{{"op":"d","before":{{"id":{k}}},"source":{{"lsn":{lsn}}}}}"#
                ));
                self.live.remove(&k);
            } else {
                let v = format!("u{lsn}");
                out.push(format!(
                    r#"{{"op":"u","after":{{"id":{k},"v":"{v}"}},"source":{{"lsn":{lsn}}}}}"#
                ));
                self.live.insert(k, (lsn, v));
            }
        }
    }
}

/// What the table looks like at a point of its life.
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    scan_s: f64,
    lookup_s: f64,
    manifests: usize,
    data_files: usize,
    delete_files: usize,
    metadata_bytes: u64,
}

fn cli_seconds(wh: &Path, args: &[&str]) -> f64 {
    best(3, || {
        let out = Command::new(env!("CARGO_BIN_EXE_floe"))
            .arg("--warehouse")
            .arg(wh)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .0
}

async fn shape(cat: &Catalog, wh: &Path, name: &str, lookup: &str) -> Shape {
    let t = cat.load_table(&parse_ident(name).unwrap()).await.unwrap();
    let manifests = match t.current_snapshot() {
        Some(s) => t.manifest_list(s).await.unwrap().len(),
        None => 0,
    };
    let plan = Scan::new(&t).plan().await.unwrap();
    let deletes: std::collections::HashSet<&str> = plan
        .files
        .iter()
        .flat_map(|f| f.deletes.iter().map(|d| d.file.file_path()))
        .collect();
    let md = t
        .metadata_location()
        .trim_start_matches("file://")
        .to_string();
    Shape {
        scan_s: cli_seconds(wh, &["scan", name, "--count"]),
        lookup_s: cli_seconds(wh, &["scan", name, "--where", lookup, "--count"]),
        manifests,
        data_files: plan.files.len(),
        delete_files: deletes.len(),
        metadata_bytes: std::fs::metadata(md).map(|m| m.len()).unwrap_or(0),
    }
}

fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// `floe maintain --watch` beside a writer: its documents are gathered by a thread.
struct Maintainer {
    child: Child,
    docs: Arc<Mutex<Vec<serde_json::Value>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Maintainer {
    fn start(wh: &Path, name: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
            .arg("--warehouse")
            .arg(wh)
            .args(["maintain", name, "--watch", "5s", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let docs = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let d = docs.clone();
        let reader = std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
                if let Ok(v) = serde_json::from_str(&l) {
                    d.lock().unwrap().push(v);
                }
            }
        });
        Self {
            child,
            docs,
            reader,
        }
    }

    /// Stops it (SIGTERM): passes, compactions done, failed steps, peak RSS (KiB).
    fn stop(mut self) -> (usize, usize, u64, u64) {
        let rss = peak_rss_kb(self.child.id());
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = self.reader.join();
        let docs = self.docs.lock().unwrap();
        let compactions = docs
            .iter()
            .filter(|d| d["steps"][0]["action"] == "done")
            .count();
        let failed = docs
            .iter()
            .map(|d| d["failed_steps_count"].as_u64().unwrap_or(0))
            .sum();
        (docs.len(), compactions, failed, rss)
    }
}

fn print_shapes(first: &Shape, last: &Shape) {
    let r = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::NAN };
    println!(
        "  scan --count      {:>8.3} s   {:>8.3} s   {:>5.2}x  {}",
        first.scan_s,
        last.scan_s,
        r(first.scan_s, last.scan_s),
        verdict(r(first.scan_s, last.scan_s) <= 1.2)
    );
    println!(
        "  point lookup      {:>8.3} s   {:>8.3} s   {:>5.2}x  {}",
        first.lookup_s,
        last.lookup_s,
        r(first.lookup_s, last.lookup_s),
        verdict(r(first.lookup_s, last.lookup_s) <= 1.2)
    );
    println!(
        "  manifests         {:>8}     {:>8}",
        first.manifests, last.manifests
    );
    println!(
        "  data files        {:>8}     {:>8}",
        first.data_files, last.data_files
    );
    println!(
        "  delete files      {:>8}     {:>8}",
        first.delete_files, last.delete_files
    );
    println!(
        "  metadata.json     {:>8.1} KB  {:>8.1} KB {:>5.2}x  {}",
        first.metadata_bytes as f64 / 1e3,
        last.metadata_bytes as f64 / 1e3,
        r(first.metadata_bytes as f64, last.metadata_bytes as f64),
        verdict(r(first.metadata_bytes as f64, last.metadata_bytes as f64) <= 1.2)
    );
}

fn latency_line(what: &str, first: &[f64], last: &[f64]) {
    for (p, name) in [(0.5, "p50"), (0.99, "p99")] {
        let (a, b) = (pct(first, p), pct(last, p));
        println!(
            "  {what} {name:<4}  {:>8.1} ms  {:>8.1} ms  {:>5.2}x  {}",
            a * 1e3,
            b * 1e3,
            b / a,
            verdict(b / a <= 1.2)
        );
    }
}

const POLICY: [(&str, &str); 6] = [
    ("history.expire.max-snapshot-age-ms", "10000"),
    ("history.expire.min-snapshots-to-keep", "10"),
    ("write.metadata.delete-after-commit.enabled", "true"),
    ("write.metadata.previous-versions-max", "20"),
    ("floe.maintain.rewrite-data-files.min-input-files", "3"),
    ("floe.maintain.tombstones.min-files", "4"),
];

/// The sink's soak on one format; returns its wall seconds.
async fn sink_soak(wh: &Path, cat: &Catalog, fv: FormatVersion, beside: bool) -> f64 {
    let rows = env_usize("FLOE_SOAK_ROWS", 1_000_000) as i64;
    let commits = env_usize("FLOE_SOAK_COMMITS", 2_000);
    let changes = env_usize("FLOE_SOAK_CHANGES", 1_000);
    let window = env_usize("FLOE_SOAK_WINDOW", (commits / 4).clamp(1, 1_000));
    let name = format!(
        "db.soak_v{}_{}",
        fv as u8,
        if beside { "beside" } else { "insink" }
    );
    let ident = parse_ident(&name).unwrap();
    let mut c = TableCreation::new(
        parse_schema("id long not null, v string, ver long, is_deleted int").unwrap(),
    )
    .with_primary_key(&["id".to_string()])
    .with_format_version(fv)
    .with_property("write.merge.mode", "merge-on-read")
    .with_property("floe.merge.version-column", "ver")
    .with_property("floe.merge.delete-column", "is_deleted");
    for (k, v) in POLICY {
        c = c.with_property(k, v);
    }
    let t = cat.create_table(&ident, c).await.unwrap();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from_iter_values(0..rows)) as _),
        (
            "v",
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("r{i}")),
            )) as _,
        ),
        (
            "ver",
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| 1))) as _,
        ),
        (
            "is_deleted",
            Arc::new(Int32Array::from_iter_values((0..rows).map(|_| 0))) as _,
        ),
    ])
    .unwrap();
    floe::txn::append(cat, &t, [Ok(batch)]).await.unwrap();
    let mut model = Model {
        live: (0..rows).map(|i| (i, (1, format!("r{i}")))).collect(),
        keys: (0..rows).collect(),
        next_key: rows,
        lsn: 1,
    };
    let mut rng = Rng(0x736f_616b + fv as u64);
    let maintainer = beside.then(|| Maintainer::start(wh, &name));
    let mut sink = Command::new(env!("CARGO_BIN_EXE_floe"))
        .arg("--warehouse")
        .arg(wh)
        .args([
            "sink",
            &name,
            "--sink-id",
            "soak",
            "--json",
            "--commit-interval",
            "200ms",
        ])
        .args(["--max-batch-rows", &changes.to_string()])
        .args(if beside {
            &[][..]
        } else {
            &["--maintain", "--maintain-interval", "5s"][..]
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = sink.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let out = sink.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Ok(v) = serde_json::from_str(&l) {
                let _ = tx.send(v);
            }
        }
    });
    let started = Instant::now();
    let mut latencies = Vec::new();
    // Commit latencies by how the sink found the stored rows (its key index as kept,
    // caught up after a compaction, or built again).
    let mut by_lookup: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut lines = Vec::with_capacity(changes);
    // Every commit's document, kept beside the sink's standard error in the scratch
    // directory (to see what a slow commit did).
    let mut docs: Vec<String> = Vec::new();
    let (mut first_shape, mut first_wall) = (Shape::default(), 0.0);
    let mut sent = 0;
    let lookup_key = rows / 2;
    let lookup = format!("id = {lookup_key}");
    while sent < commits {
        // Up to the end of the first window, then to the end.
        let until = if sent < window { window } else { commits };
        let t0 = Instant::now();
        while sent < until {
            lines.clear();
            model.batch(&mut rng, changes, &mut lines);
            // The sink commits every `changes` records it takes (late replays below its
            // checkpoint are skipped, so commits straddle batches): counted by documents.
            stdin
                .write_all((lines.join("\n") + "\n").as_bytes())
                .unwrap();
            sent += 1;
        }
        stdin.flush().unwrap();
        // Wait until the sink has committed every change sent.
        while let Ok(doc) = rx.recv_timeout(Duration::from_secs(600)) {
            docs.push(doc.to_string());
            latencies.push(doc["elapsed_ms"].as_f64().unwrap_or(f64::NAN) / 1e3);
            let how = doc["lookup"].as_str().unwrap_or("?").to_string();
            by_lookup
                .entry(how)
                .or_default()
                .push(*latencies.last().unwrap());
            if doc["checkpoint"].as_i64() == Some(model.lsn) {
                break;
            }
        }
        if sent == window {
            first_wall = t0.elapsed().as_secs_f64();
            first_shape = shape(cat, wh, &name, &lookup).await;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let sink_rss = peak_rss_kb(sink.id());
    drop(stdin);
    let out = sink.wait_with_output().unwrap();
    let _ = reader.join();
    let tag = format!(
        "sink-{}-{}",
        if fv == FormatVersion::V3 { "v3" } else { "v2" },
        if beside { "beside" } else { "in-sink" }
    );
    let _ = std::fs::write(wh.join(format!("../{tag}.jsonl")), docs.join("\n"));
    let _ = std::fs::write(wh.join(format!("../{tag}.err")), &out.stderr);
    let sink_failed = u64::from(!out.status.success());
    let (passes, compactions, maint_failed, maint_rss) = match maintainer {
        Some(m) => m.stop(),
        None => {
            // In the sink: its standard error says what each pass did.
            let err = String::from_utf8_lossy(&out.stderr);
            let passes: Vec<&str> = err.lines().filter(|l| l.starts_with("maintain:")).collect();
            let compactions = passes
                .iter()
                .filter(|l| l.contains("rewrite-data-files"))
                .count();
            // "maintain: N commits (steps), F failed steps; key index …"
            let failed = passes
                .iter()
                .filter(|l| !l.contains(", 0 failed steps"))
                .count() as u64;
            (passes.len(), compactions, failed, 0)
        }
    };
    let last_shape = shape(cat, wh, &name, &lookup).await;
    // The final rows against the model.
    let t = cat.load_table(&ident).await.unwrap();
    let wrong = wrong_rows(&t, &model.live).await;
    let n = latencies.len();
    let w = window.min(n / 2).max(1);
    println!(
        "\nsink soak, format v{}, maintenance {}: {rows} rows, {n} commits of {changes} changes \
         in {wall:.1} s ({:.0} changes/s; first window {first_wall:.1} s)",
        fv as u8,
        if beside {
            "beside (maintain --watch 5s)"
        } else {
            "in the sink (--maintain, every 5 s)"
        },
        (n * changes) as f64 / wall
    );
    println!("                      first {w:<5}   last {w:<5}   last/first");
    latency_line("commit", &latencies[..w], &latencies[n - w..]);
    print_shapes(&first_shape, &last_shape);
    for (how, l) in &mut by_lookup {
        l.sort_by(f64::total_cmp);
        println!(
            "  lookup {how:<16} {:>5} commits, p50 {:.1} ms, max {:.1} ms",
            l.len(),
            l[l.len() / 2] * 1e3,
            l[l.len() - 1] * 1e3
        );
    }
    println!(
        "  peak RSS: sink {:.0} MB, maintain {:.0} MB; maintain: {passes} passes, \
         {compactions} compactions, {maint_failed} failed steps",
        sink_rss as f64 / 1e3,
        maint_rss as f64 / 1e3
    );
    println!(
        "  failed sink commits: {sink_failed} {}; wrong rows against the model: {wrong} {}",
        verdict(sink_failed == 0),
        verdict(wrong == 0)
    );
    if sink_failed != 0 {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    wall
}

async fn wrong_rows(t: &Table, live: &HashMap<i64, (i64, String)>) -> usize {
    let mut seen = 0usize;
    let mut wrong = 0usize;
    let mut stream = Scan::new(t)
        .select(["id", "v", "ver"])
        .to_stream()
        .await
        .unwrap();
    use futures::StreamExt;
    while let Some(b) = stream.next().await {
        let b = b.unwrap();
        let id = b.column(0).as_primitive::<Int64Type>();
        let v = b.column(1).as_string::<i32>();
        let ver = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            seen += 1;
            match live.get(&id.value(i)) {
                Some((ve, vv)) if *ve == ver.value(i) && vv == v.value(i) => {}
                _ => wrong += 1,
            }
        }
    }
    wrong + live.len().abs_diff(seen - wrong)
}

async fn append_soak(wh: &Path, cat: &Catalog, scratch: &Path) {
    let appends = env_usize("FLOE_SOAK_APPENDS", 1_000);
    if appends == 0 {
        return;
    }
    let window = (appends / 4).clamp(1, 1_000);
    let name = "db.appends";
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    for (k, v) in POLICY {
        c = c.with_property(k, v);
    }
    cat.create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap();
    let maintainer = Maintainer::start(wh, name);
    let mut lat = Vec::new();
    let mut first_shape = Shape::default();
    let csv = scratch.join("ten.csv");
    let started = Instant::now();
    for i in 0..appends {
        let rows: String = (0..10).map(|j| format!("{},x{i}\n", i * 10 + j)).collect();
        std::fs::write(&csv, format!("id,v\n{rows}")).unwrap();
        let t0 = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_floe"))
            .arg("--warehouse")
            .arg(wh)
            .args(["append", name, csv.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lat.push(t0.elapsed().as_secs_f64());
        if i + 1 == window {
            first_shape = shape(cat, wh, name, "id = 5").await;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let (passes, compactions, failed, rss) = maintainer.stop();
    let last_shape = shape(cat, wh, name, "id = 5").await;
    let n = lat.len();
    println!("\nappend soak: {n} appends of 10 rows (one process each) in {wall:.1} s");
    println!("                      first {window:<5}   last {window:<5}   last/first");
    latency_line("append", &lat[..window], &lat[n - window..]);
    print_shapes(&first_shape, &last_shape);
    println!(
        "  maintain: {passes} passes, {compactions} compactions, {failed} failed steps, \
         peak RSS {:.0} MB",
        rss as f64 / 1e3
    );
}

fn pyiceberg_baseline(scratch: &Path, seconds: f64) {
    if std::env::var("FLOE_SOAK_NO_BASELINE").is_ok() {
        return;
    }
    let Some(py) = python() else {
        println!("\npyiceberg: skipped (no peers python)");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/bench/soak_pyiceberg.py");
    let work = scratch.join("pyiceberg");
    let _ = std::fs::remove_dir_all(&work);
    let rows = env_usize("FLOE_SOAK_ROWS", 1_000_000).to_string();
    let changes = env_usize("FLOE_SOAK_CHANGES", 1_000).to_string();
    let secs = format!("{seconds:.0}");
    let Some(v) = run_json(
        &py,
        &[
            script.to_str().unwrap(),
            "--work",
            work.to_str().unwrap(),
            "--rows",
            &rows,
            "--changes",
            &changes,
            "--seconds",
            &secs,
        ],
    ) else {
        println!("\npyiceberg: the baseline failed (see stderr)");
        return;
    };
    println!(
        "\npyiceberg 0.12 (upsert + delete per batch, no maintenance), {secs} s: {} commits; \
         commit p50 first {:.0} ms, last {:.0} ms; scan {:.2} s first, {:.2} s last",
        v["commits"],
        v["p50_first_ms"].as_f64().unwrap_or(f64::NAN),
        v["p50_last_ms"].as_f64().unwrap_or(f64::NAN),
        v["scan_first_s"].as_f64().unwrap_or(f64::NAN),
        v["scan_last_s"].as_f64().unwrap_or(f64::NAN),
    );
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base: PathBuf = std::env::var("FLOE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/floe/bench")
        });
    let scratch = base.join("soak");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let wh = scratch.join("wh");
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let formats = std::env::var("FLOE_BENCH_FORMATS").unwrap_or_else(|_| "v3,v2".into());
    println!(
        "floe soak benchmark ({}; 2-core machines: figures are noisy, the ratios are the point)",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let maintain_modes =
        std::env::var("FLOE_SOAK_MAINTAIN").unwrap_or_else(|_| "sink,beside".into());
    let mut first_wall = None;
    for f in formats.split(',') {
        let fv = match f.trim() {
            "v2" => FormatVersion::V2,
            _ => FormatVersion::V3,
        };
        for mode in maintain_modes.split(',') {
            let w = rt.block_on(sink_soak(&wh, &cat, fv, mode.trim() == "beside"));
            first_wall.get_or_insert(w);
        }
    }
    rt.block_on(append_soak(&wh, &cat, &scratch));
    pyiceberg_baseline(&scratch, first_wall.unwrap_or(60.0));
}
