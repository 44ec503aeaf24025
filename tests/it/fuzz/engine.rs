//! A small structure-aware mutation fuzzer for floe's decoders, on stable Rust.
//!
//! Shared by the suite (`tests/it/fuzz`, a bounded number of cases per target) and the long
//! run (`benches/fuzz.rs`). Each case's input is generated from `(seed, case index)` alone, so
//! any case replays on its own. A case fails when it panics, runs longer than the time limit,
//! or makes one allocation larger than the cap (the binary installs [`CappedAlloc`]); an
//! error is the expected outcome for bad input.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Once;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Allocation guard

thread_local! {
    /// The largest single allocation allowed on this thread (0: no limit).
    static CAP: Cell<usize> = const { Cell::new(0) };
    /// The largest allocation over the cap seen on this thread.
    static OVER: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread is a fuzz worker (its panics are expected and not printed).
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Beyond this, an allocation is refused even on a fuzz thread (the process aborts).
const HARD_CAP: usize = 64 << 30;

/// The system allocator, recording on fuzz threads any single allocation above their cap.
/// Other threads are unaffected.
pub struct CappedAlloc;

fn check(size: usize) -> bool {
    let cap = CAP.try_with(|c| c.get()).unwrap_or(0);
    if cap != 0 && size > cap {
        let _ = OVER.try_with(|o| o.set(o.get().max(size)));
        if std::env::var_os("FLOE_FUZZ_ALLOC_TRACE").is_some() {
            // Where the allocation comes from (the cap is lifted while printing).
            CAP.with(|c| c.set(0));
            eprintln!(
                "allocation of {size} bytes at\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            CAP.with(|c| c.set(cap));
        }
        return size <= HARD_CAP;
    }
    true
}

unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !check(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !check(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !check(new_size) {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

// ---------------------------------------------------------------------------------------------
// Targets and the runner

/// One fuzz target: its seeds, how a case's input is made, and the decoder call.
pub struct Target {
    /// Name (`FLOE_FUZZ_TARGET`, regression directory).
    pub name: &'static str,
    /// Valid inputs to mutate.
    pub seeds: Vec<Vec<u8>>,
    /// Makes one case's input from the seeds.
    pub generate: fn(&mut StdRng, &[Vec<u8>]) -> Vec<u8>,
    /// Calls floe's decoder; any `Result` is fine, a panic is not.
    pub run: fn(&[u8]),
    /// A larger allocation cap for this target (a known upstream allocation floe cannot
    /// guard), instead of [`Config::alloc_cap`].
    pub alloc_cap: Option<usize>,
}

/// Why a case failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The decoder panicked (message and location).
    Panic(String),
    /// The case ran longer than the limit.
    Hang,
    /// One allocation was larger than the cap.
    Alloc(usize),
}

/// A failed case with the input that made it fail.
#[derive(Debug)]
pub struct Found {
    /// The case index (`None` for a replayed regression seed).
    pub case: Option<u64>,
    /// What happened.
    pub failure: Failure,
    /// The input.
    pub input: Vec<u8>,
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the run.
    pub seed: u64,
    /// Time limit of one case.
    pub limit: Duration,
    /// Largest single allocation allowed in a case.
    pub alloc_cap: usize,
    /// Stop after this many failures.
    pub max_failures: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 0x00f1_0e5e_ed00,
            limit: Duration::from_secs(2),
            alloc_cap: 1 << 30,
            max_failures: 5,
        }
    }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases run.
    pub cases: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Failures found.
    pub found: Vec<Found>,
}

type Job = (Vec<u8>, usize);
type Done = std::result::Result<(), Failure>;

struct Worker {
    tx: mpsc::Sender<Job>,
    rx: mpsc::Receiver<Done>,
}

static HOOK: Once = Once::new();

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Installs (once) a panic hook that stays silent on fuzz threads and records where the
/// panic happened; other threads keep the previous hook.
fn install_hook() {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.try_with(|q| q.get()).unwrap_or(false) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let _ = LAST_PANIC.try_with(|p| *p.borrow_mut() = at);
            } else {
                prev(info)
            }
        }));
    });
}

fn spawn_worker(run: fn(&[u8])) -> Worker {
    let (tx, jobs) = mpsc::channel::<Job>();
    let (done, rx) = mpsc::channel::<Done>();
    std::thread::Builder::new()
        .name("fuzz-worker".into())
        .stack_size(8 << 20)
        .spawn(move || {
            QUIET.with(|q| q.set(true));
            for (input, cap) in jobs {
                OVER.with(|o| o.set(0));
                CAP.with(|c| c.set(cap));
                let r = std::panic::catch_unwind(|| run(&input));
                CAP.with(|c| c.set(0));
                let over = OVER.with(|o| o.get());
                let out = match r {
                    Err(p) => {
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "non-string panic".into());
                        let at = LAST_PANIC.with(|l| l.borrow().clone());
                        Err(Failure::Panic(format!("{msg} at {at}")))
                    }
                    Ok(()) if over > 0 => Err(Failure::Alloc(over)),
                    Ok(()) => Ok(()),
                };
                if done.send(out).is_err() {
                    break;
                }
            }
        })
        .expect("spawn fuzz worker");
    Worker { tx, rx }
}

/// The input of case `case` of a run seeded `seed`.
pub fn input_of(t: &Target, seed: u64, case: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (t.generate)(&mut rng, &t.seeds)
}

/// Runs `inputs` (case index, input) through `t.run` on a worker thread, with the limits.
fn run_inputs(
    t: &Target,
    cfg: &Config,
    inputs: impl Iterator<Item = (Option<u64>, Vec<u8>)>,
    deadline: Option<Instant>,
) -> Report {
    install_hook();
    let start = Instant::now();
    let mut worker = spawn_worker(t.run);
    let mut rep = Report::default();
    for (case, input) in inputs {
        if deadline.is_some_and(|d| Instant::now() > d) {
            break;
        }
        rep.cases += 1;
        let failure = match worker
            .tx
            .send((input.clone(), t.alloc_cap.unwrap_or(cfg.alloc_cap)))
        {
            Err(_) => Some(Failure::Panic("worker thread died".into())),
            Ok(()) => match worker.rx.recv_timeout(cfg.limit) {
                Ok(Ok(())) => None,
                Ok(Err(f)) => Some(f),
                Err(_) => {
                    // The stuck worker is abandoned; later cases get a fresh one.
                    worker = spawn_worker(t.run);
                    Some(Failure::Hang)
                }
            },
        };
        if let Some(failure) = failure {
            rep.found.push(Found {
                case,
                failure,
                input,
            });
            if rep.found.len() >= cfg.max_failures {
                break;
            }
        }
    }
    rep.elapsed = start.elapsed();
    rep
}

/// Runs cases `cases` of `t` (stopping early at `deadline`).
pub fn run(
    t: &Target,
    cfg: &Config,
    cases: std::ops::Range<u64>,
    deadline: Option<Instant>,
) -> Report {
    let inputs = cases.map(|i| (Some(i), input_of(t, cfg.seed, i)));
    run_inputs(t, cfg, inputs, deadline)
}

/// Replays the given inputs (regression seeds) through `t`.
pub fn replay(t: &Target, cfg: &Config, inputs: Vec<Vec<u8>>) -> Report {
    run_inputs(t, cfg, inputs.into_iter().map(|i| (None, i)), None)
}

/// Writes failing inputs to `dir` as `<target>-<case>.bin`; returns the paths.
pub fn save(t: &Target, rep: &Report, dir: &Path) -> Vec<PathBuf> {
    let _ = std::fs::create_dir_all(dir);
    rep.found
        .iter()
        .map(|f| {
            let name = match f.case {
                Some(c) => format!("{}-{c}.bin", t.name),
                None => format!("{}-replay.bin", t.name),
            };
            let p = dir.join(name);
            let _ = std::fs::write(&p, &f.input);
            p
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Seeds

/// The `spec-fixtures` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("spec-fixtures")
}

/// Fixture files whose name satisfies `pick` (hidden `.crc` sidecars excluded), at most
/// `max_bytes` each.
pub fn fixture_files(pick: impl Fn(&str) -> bool, max_bytes: u64) -> Vec<Vec<u8>> {
    crate::files::files_under(&fixtures())
        .into_iter()
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.')
                && !p.components().any(|c| c.as_os_str() == "fuzz-regressions")
                && pick(name)
                && p.metadata().map(|m| m.len() <= max_bytes).unwrap_or(false)
        })
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

/// The regression inputs kept for `target` under `spec-fixtures/fuzz-regressions/<target>/`.
pub fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    crate::files::files_under(&fixtures().join("fuzz-regressions").join(target))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some((name, std::fs::read(&p).ok()?))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Byte-level mutations

const INTERESTING: &[i64] = &[
    0,
    1,
    -1,
    2,
    7,
    8,
    16,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    i32::MAX as i64,
    i32::MIN as i64,
    u32::MAX as i64,
    1 << 31,
    1 << 32,
    1 << 40,
    i64::MAX,
    i64::MIN,
    i64::MAX - 1,
    -2,
    1_000_000_000,
];

/// An "interesting" integer: a boundary value or a small one.
pub fn interesting(rng: &mut StdRng) -> i64 {
    if rng.gen_bool(0.8) {
        INTERESTING[rng.gen_range(0..INTERESTING.len())]
    } else {
        rng.gen_range(-300..300)
    }
}

fn chunk(rng: &mut StdRng, len: usize) -> (usize, usize) {
    let a = rng.gen_range(0..=len);
    let n = rng.gen_range(0..=(len - a).min(64));
    (a, a + n)
}

/// One random byte-level mutation of `d` (`other` for splicing).
pub fn mutate_bytes(rng: &mut StdRng, d: &mut Vec<u8>, other: &[u8]) {
    let len = d.len();
    match rng.gen_range(0..10) {
        0 | 1 if len > 0 => {
            for _ in 0..rng.gen_range(1..=4) {
                let i = rng.gen_range(0..d.len());
                d[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        2 if len > 0 => {
            let i = rng.gen_range(0..len);
            d[i] = rng.gen();
        }
        3 => {
            let i = rng.gen_range(0..=len);
            let n = rng.gen_range(1..=16);
            let ins: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            d.splice(i..i, ins);
        }
        4 => {
            let (a, b) = chunk(rng, len);
            d.drain(a..b);
        }
        5 => {
            let (a, b) = chunk(rng, len);
            let dup = d[a..b].to_vec();
            let i = rng.gen_range(0..=d.len());
            d.splice(i..i, dup);
        }
        6 | 7 if len > 0 => {
            let v = interesting(rng);
            let w = [1usize, 2, 4, 8][rng.gen_range(0..4)];
            let le = v.to_le_bytes();
            let be = v.to_be_bytes();
            let src = if rng.gen() { &le[..w] } else { &be[8 - w..] };
            let i = rng.gen_range(0..len);
            for (k, b) in src.iter().enumerate() {
                if let Some(x) = d.get_mut(i + k) {
                    *x = *b;
                }
            }
        }
        8 if !other.is_empty() => {
            let a = rng.gen_range(0..=len);
            let b = rng.gen_range(0..=other.len());
            d.truncate(a);
            d.extend_from_slice(&other[b..]);
        }
        _ => {
            let n = rng.gen_range(0..=len);
            d.truncate(n);
        }
    }
}

/// 1 to 8 stacked byte mutations (few more likely than many).
pub fn mutate_bytes_n(rng: &mut StdRng, d: &mut Vec<u8>, other: &[u8]) {
    let n = 1 << rng.gen_range(0..4);
    for _ in 0..rng.gen_range(1..=n) {
        mutate_bytes(rng, d, other);
    }
}

/// A random seed and another one (for splicing).
pub fn pick2<'a>(rng: &mut StdRng, seeds: &'a [Vec<u8>]) -> (&'a [u8], &'a [u8]) {
    let a = &seeds[rng.gen_range(0..seeds.len())];
    let b = &seeds[rng.gen_range(0..seeds.len())];
    (a, b)
}

// ---------------------------------------------------------------------------------------------
// JSON mutations

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

fn nth_node(v: &mut Value, n: &mut usize) -> Option<*mut Value> {
    if *n == 0 {
        return Some(v as *mut Value);
    }
    *n -= 1;
    match v {
        Value::Array(a) => a.iter_mut().find_map(|c| nth_node(c, n)),
        Value::Object(o) => o.values_mut().find_map(|c| nth_node(c, n)),
        _ => None,
    }
}

fn random_scalar(rng: &mut StdRng, strings: &[String]) -> Value {
    match rng.gen_range(0..10) {
        0 => Value::Null,
        1 => Value::Bool(rng.gen()),
        2 => Value::from(interesting(rng)),
        3 => Value::from(u64::MAX),
        4 => serde_json::Number::from_f64([1e308, -1e308, 0.5, -0.0, 1e-300][rng.gen_range(0..5)])
            .map(Value::Number)
            .unwrap_or(Value::Null),
        5 => Value::from(""),
        6 => Value::from("x".repeat(rng.gen_range(0..2000))),
        7 => Value::Array(vec![]),
        8 => Value::Object(Default::default()),
        _ if !strings.is_empty() => Value::from(strings[rng.gen_range(0..strings.len())].clone()),
        _ => Value::from("\u{0}\u{ffff}"),
    }
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if out.len() < 512 => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|c| collect_strings(c, out)),
        Value::Object(o) => o.iter().for_each(|(k, c)| {
            if out.len() < 512 {
                out.push(k.clone());
            }
            collect_strings(c, out)
        }),
        _ => {}
    }
}

/// One structure-aware mutation of a JSON tree: a node's type or value swapped, a key
/// dropped, copied or renamed, a subtree copied elsewhere, an array emptied or grown, deep
/// nesting.
pub fn mutate_json(rng: &mut StdRng, root: &mut Value) {
    let mut strings = Vec::new();
    collect_strings(root, &mut strings);
    let total = count_nodes(root);
    let donor = {
        let mut m = rng.gen_range(0..total);
        nth_node(root, &mut m).map(|p| unsafe { (*p).clone() })
    };
    let mut n = rng.gen_range(0..total);
    let Some(ptr) = nth_node(root, &mut n) else {
        return;
    };
    // SAFETY: `ptr` points into `root`, which is not otherwise borrowed while it is used.
    let node = unsafe { &mut *ptr };
    match rng.gen_range(0..9) {
        0 | 1 => *node = random_scalar(rng, &strings),
        2 => {
            if let Value::Number(x) = node {
                let v = x.as_i64().unwrap_or(0);
                *node = Value::from(match rng.gen_range(0..4) {
                    0 => v.wrapping_add(1),
                    1 => v.wrapping_sub(1),
                    2 => v.wrapping_neg(),
                    _ => interesting(rng),
                });
            } else {
                *node = Value::from(interesting(rng));
            }
        }
        3 => {
            if let Value::Object(o) = node {
                if !o.is_empty() {
                    let k = o.keys().nth(rng.gen_range(0..o.len())).cloned();
                    if let Some(k) = k {
                        o.remove(&k);
                    }
                }
            }
        }
        4 => {
            if let (Value::Object(o), Some(d)) = (&mut *node, donor) {
                let k = if !strings.is_empty() && rng.gen() {
                    strings[rng.gen_range(0..strings.len())].clone()
                } else {
                    format!("k{}", rng.gen::<u8>())
                };
                o.insert(k, d);
            }
        }
        5 => {
            if let Some(d) = donor {
                *node = d;
            }
        }
        6 => match node {
            Value::Array(a) if !a.is_empty() => {
                if rng.gen() {
                    a.clear();
                } else {
                    let i = rng.gen_range(0..a.len());
                    let c = a[i].clone();
                    for _ in 0..rng.gen_range(1..50) {
                        a.push(c.clone());
                    }
                }
            }
            _ => *node = Value::Array(vec![node.clone()]),
        },
        7 => {
            let depth = [10, 60, 127, 130][rng.gen_range(0..4)];
            let mut v = node.clone();
            for _ in 0..depth {
                v = if rng.gen() {
                    Value::Array(vec![v])
                } else {
                    serde_json::json!({ "a": v })
                };
            }
            *node = v;
        }
        _ => {
            if let Value::String(s) = node {
                match rng.gen_range(0..3) {
                    0 => s.clear(),
                    1 => s.push_str(&s.clone()),
                    _ => {
                        let mut b = std::mem::take(s).into_bytes();
                        mutate_bytes(rng, &mut b, &[]);
                        *s = String::from_utf8_lossy(&b).into_owned();
                    }
                }
            } else {
                *node = Value::from(node.to_string());
            }
        }
    }
}

/// A seed mutated as a JSON tree (re-serialized), then sometimes as bytes.
pub fn json_case(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = match serde_json::from_slice::<Value>(seed) {
        Ok(mut v) if rng.gen_bool(0.8) => {
            for _ in 0..rng.gen_range(1..=4) {
                mutate_json(rng, &mut v);
            }
            if rng.gen() {
                serde_json::to_vec(&v).unwrap_or_default()
            } else {
                serde_json::to_vec_pretty(&v).unwrap_or_default()
            }
        }
        _ => seed.to_vec(),
    };
    if out == seed || rng.gen_bool(0.2) {
        mutate_bytes_n(rng, &mut out, other);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Avro object container files

/// Avro zigzag varint encoding of `v`.
pub fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

fn get_long(d: &[u8], i: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *d.get(*i)?;
        *i += 1;
        if shift >= 64 {
            return None;
        }
        z |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// An Avro object container file, split into its parts.
#[derive(Debug, Clone)]
pub struct AvroFile {
    /// Header metadata (`avro.schema`, `avro.codec`, Iceberg's keys).
    pub meta: Vec<(Vec<u8>, Vec<u8>)>,
    /// The sync marker.
    pub sync: Vec<u8>,
    /// Data blocks: (object count, bytes as stored).
    pub blocks: Vec<(i64, Vec<u8>)>,
}

impl AvroFile {
    /// Splits a container file; `None` when it is not one.
    pub fn parse(d: &[u8]) -> Option<AvroFile> {
        if !d.starts_with(b"Obj\x01") {
            return None;
        }
        let mut i = 4;
        let mut meta = Vec::new();
        loop {
            let mut n = get_long(d, &mut i)?;
            if n == 0 {
                break;
            }
            if n < 0 {
                n = -n;
                get_long(d, &mut i)?;
            }
            for _ in 0..n {
                let kl = usize::try_from(get_long(d, &mut i)?).ok()?;
                let k = d.get(i..i.checked_add(kl)?)?.to_vec();
                i += kl;
                let vl = usize::try_from(get_long(d, &mut i)?).ok()?;
                let v = d.get(i..i.checked_add(vl)?)?.to_vec();
                i += vl;
                meta.push((k, v));
            }
        }
        let sync = d.get(i..i + 16)?.to_vec();
        i += 16;
        let mut blocks = Vec::new();
        while i < d.len() {
            let count = get_long(d, &mut i)?;
            let size = usize::try_from(get_long(d, &mut i)?).ok()?;
            let data = d.get(i..i.checked_add(size)?)?.to_vec();
            i += size + 16;
            blocks.push((count, data));
        }
        Some(AvroFile { meta, sync, blocks })
    }

    /// The codec named in the header.
    pub fn codec(&self) -> String {
        self.meta
            .iter()
            .find(|(k, _)| k == b"avro.codec")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_else(|| "null".into())
    }

    /// Writes the file back, with optional wrong declared values.
    pub fn encode(&self, meta_count: Option<i64>, sizes: &HashMap<usize, i64>) -> Vec<u8> {
        let mut out = b"Obj\x01".to_vec();
        if !self.meta.is_empty() {
            put_long(&mut out, meta_count.unwrap_or(self.meta.len() as i64));
            for (k, v) in &self.meta {
                put_long(&mut out, k.len() as i64);
                out.extend_from_slice(k);
                put_long(&mut out, v.len() as i64);
                out.extend_from_slice(v);
            }
        }
        put_long(&mut out, 0);
        out.extend_from_slice(&self.sync);
        for (n, (count, data)) in self.blocks.iter().enumerate() {
            put_long(&mut out, *count);
            put_long(
                &mut out,
                sizes.get(&n).copied().unwrap_or(data.len() as i64),
            );
            out.extend_from_slice(data);
            out.extend_from_slice(&self.sync);
        }
        out
    }
}

fn inflate(d: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(d)
        .take(64 << 20)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

fn deflate(d: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = e.write_all(d);
    e.finish().unwrap_or_default()
}

/// Mutates the records of a block: a zigzag varint (a string, bytes, array or map length, or
/// a union branch) overwritten with an interesting value, or bytes changed.
fn mutate_records(rng: &mut StdRng, data: &mut Vec<u8>) {
    if data.is_empty() || rng.gen_bool(0.3) {
        mutate_bytes(rng, data, &[]);
        return;
    }
    let i = rng.gen_range(0..data.len());
    let mut j = i;
    let _ = get_long(data, &mut j);
    let mut v = Vec::new();
    put_long(&mut v, interesting(rng));
    data.splice(i..j.max(i + 1).min(data.len()), v);
}

/// A manifest or manifest list mutated through its container structure (block counts and
/// sizes, header map, schema JSON, codec, sync marker, records inside decompressed blocks),
/// or as bytes.
pub fn avro_case(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let Some(mut f) = AvroFile::parse(seed).filter(|_| rng.gen_bool(0.85)) else {
        let mut d = seed.to_vec();
        mutate_bytes_n(rng, &mut d, other);
        return d;
    };
    let mut meta_count = None;
    let mut sizes = HashMap::new();
    for _ in 0..rng.gen_range(1..=3) {
        match rng.gen_range(0..10) {
            0 if !f.blocks.is_empty() => {
                let b = rng.gen_range(0..f.blocks.len());
                f.blocks[b].0 = if rng.gen() {
                    interesting(rng)
                } else {
                    f.blocks[b].0.wrapping_add(rng.gen_range(-2..=2))
                };
            }
            1 if !f.blocks.is_empty() => {
                let b = rng.gen_range(0..f.blocks.len());
                let len = f.blocks[b].1.len() as i64;
                let v = if rng.gen() {
                    interesting(rng)
                } else {
                    len.wrapping_add(rng.gen_range(-3..=3))
                };
                sizes.insert(b, v);
            }
            2 => meta_count = Some(interesting(rng)),
            3 => {
                if let Some((_, v)) = f.meta.iter_mut().find(|(k, _)| k == b"avro.schema") {
                    *v = json_case(rng, v, &[]);
                }
            }
            4 => {
                let codecs: [&[u8]; 7] = [
                    b"null",
                    b"deflate",
                    b"snappy",
                    b"zstandard",
                    b"bzip2",
                    b"xz",
                    b"nope",
                ];
                let c = codecs[rng.gen_range(0..codecs.len())].to_vec();
                match f.meta.iter_mut().find(|(k, _)| k == b"avro.codec") {
                    Some((_, v)) => *v = c,
                    None => f.meta.push((b"avro.codec".to_vec(), c)),
                }
            }
            5 if !f.blocks.is_empty() => {
                let b = rng.gen_range(0..f.blocks.len());
                if rng.gen() {
                    f.blocks.remove(b);
                } else {
                    let c = f.blocks[b].clone();
                    f.blocks.insert(b, c);
                }
            }
            6 if !f.meta.is_empty() => {
                let m = rng.gen_range(0..f.meta.len());
                let (k, v) = &mut f.meta[m];
                if k != b"avro.schema" && k != b"avro.codec" {
                    *v = json_case(rng, v, &[]);
                } else if rng.gen() {
                    f.meta.remove(m);
                }
            }
            7 => {
                let i = rng.gen_range(0..16);
                f.sync[i] ^= 1;
            }
            _ if !f.blocks.is_empty() => {
                let b = rng.gen_range(0..f.blocks.len());
                let codec = f.codec();
                let data = &mut f.blocks[b].1;
                if codec == "deflate" {
                    if let Some(mut raw) = inflate(data) {
                        for _ in 0..rng.gen_range(1..=3) {
                            mutate_records(rng, &mut raw);
                        }
                        *data = deflate(&raw);
                    }
                } else if codec == "null" {
                    for _ in 0..rng.gen_range(1..=3) {
                        mutate_records(rng, data);
                    }
                } else {
                    mutate_bytes(rng, data, &[]);
                }
            }
            _ => {}
        }
    }
    let mut out = f.encode(meta_count, &sizes);
    if rng.gen_bool(0.1) {
        mutate_bytes_n(rng, &mut out, other);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Deletion vectors and Puffin files

/// Re-frames a deletion vector body (magic + bitmap): length prefix and CRC recomputed.
pub fn dv_frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out
}

/// A deletion vector blob mutated inside its portable Roaring bitmap (bitmap count, keys,
/// container counts and cardinalities, offsets, container bytes) with length and CRC fixed
/// up, or mutated as bytes.
pub fn dv_blob_case(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    if seed.len() < 12 || rng.gen_bool(0.15) {
        let mut d = seed.to_vec();
        mutate_bytes_n(rng, &mut d, other);
        return d;
    }
    let mut body = seed[4..seed.len() - 4].to_vec();
    for _ in 0..rng.gen_range(1..=3) {
        if body.len() > 4 && rng.gen_bool(0.7) {
            // Integers of the bitmap's headers sit at small offsets after the magic; any
            // offset hits a count, key, cardinality, offset or container word.
            let near = rng.gen_bool(0.6);
            let hi = if near { body.len().min(48) } else { body.len() };
            let i = rng.gen_range(4..hi.max(5));
            let w = [2usize, 4, 8][rng.gen_range(0..3)];
            let v = interesting(rng).to_le_bytes();
            for (k, b) in v[..w].iter().enumerate() {
                if let Some(x) = body.get_mut(i + k) {
                    *x = *b;
                }
            }
        } else {
            let mut tail = body.split_off(4.min(body.len()));
            mutate_bytes(rng, &mut tail, &[]);
            body.extend(tail);
        }
    }
    if rng.gen_bool(0.9) {
        dv_frame(&body)
    } else {
        let mut d = dv_frame(&body);
        mutate_bytes(rng, &mut d, &[]);
        d
    }
}

/// A Puffin file split into its blob area and footer JSON.
pub struct Puffin {
    /// The bytes before the footer (magic and blobs).
    pub head: Vec<u8>,
    /// The footer payload (JSON).
    pub footer: Value,
}

impl Puffin {
    /// Splits an uncompressed-footer Puffin file.
    pub fn parse(d: &[u8]) -> Option<Puffin> {
        let n = d.len();
        if n < 16 || &d[n - 4..] != b"PFA1" {
            return None;
        }
        let len = u32::from_le_bytes(d[n - 12..n - 8].try_into().ok()?) as usize;
        let start = n.checked_sub(12 + len + 4)?;
        let footer = serde_json::from_slice(&d[start + 4..start + 4 + len]).ok()?;
        Some(Puffin {
            head: d[..start].to_vec(),
            footer,
        })
    }

    /// Writes the file back; `footer_len` overrides the footer payload length.
    pub fn encode(&self, footer_len: Option<u32>) -> Vec<u8> {
        let payload = serde_json::to_vec(&self.footer).unwrap_or_default();
        let mut out = self.head.clone();
        out.extend_from_slice(b"PFA1");
        out.extend_from_slice(&payload);
        out.extend_from_slice(&footer_len.unwrap_or(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(b"PFA1");
        out
    }
}

/// A Puffin file mutated through its footer (blob offsets, lengths and cardinalities, the
/// footer length), its blobs (as deletion vectors) or its bytes.
pub fn puffin_case(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let Some(mut p) = Puffin::parse(seed).filter(|_| rng.gen_bool(0.9)) else {
        let mut d = seed.to_vec();
        mutate_bytes_n(rng, &mut d, other);
        return d;
    };
    let mut footer_len = None;
    for _ in 0..rng.gen_range(1..=3) {
        let nblobs = p.footer["blobs"].as_array().map_or(0, |a| a.len());
        match rng.gen_range(0..6) {
            0..=2 if nblobs > 0 => {
                let b = &mut p.footer["blobs"][rng.gen_range(0..nblobs)];
                let key =
                    ["offset", "length", "offset", "length", "cardinality"][rng.gen_range(0..5)];
                let cur = if key == "cardinality" {
                    b["properties"][key]
                        .as_str()
                        .and_then(|s| s.parse::<i64>().ok())
                } else {
                    b[key].as_i64()
                }
                .unwrap_or(0);
                let v = if rng.gen() {
                    interesting(rng)
                } else {
                    cur.wrapping_add(rng.gen_range(-8..=8))
                };
                let slot = if key == "cardinality" {
                    b.get_mut("properties").and_then(Value::as_object_mut)
                } else {
                    b.as_object_mut()
                };
                if let Some(o) = slot {
                    o.insert(
                        key.to_string(),
                        if key == "cardinality" {
                            Value::from(v.to_string())
                        } else {
                            Value::from(v)
                        },
                    );
                }
            }
            3 if nblobs > 0 => {
                // Re-frame one blob in place (same length) after mutating its bitmap.
                let b = &p.footer["blobs"][rng.gen_range(0..nblobs)];
                let (Some(off), Some(len)) = (b["offset"].as_u64(), b["length"].as_u64()) else {
                    continue;
                };
                let (off, len) = (off as usize, len as usize);
                if let Some(blob) = off.checked_add(len).and_then(|end| p.head.get(off..end)) {
                    let new = dv_blob_case(rng, blob, &[]);
                    p.head.splice(off..off + len, new);
                }
            }
            4 => footer_len = Some(interesting(rng) as u32),
            _ => mutate_json(rng, &mut p.footer),
        }
    }
    let mut out = p.encode(footer_len);
    if rng.gen_bool(0.1) {
        mutate_bytes_n(rng, &mut out, other);
    }
    out
}

/// The deletion vectors a Puffin file's footer declares: (offset, length, cardinality), as
/// a manifest entry would carry them (`content_offset`, `content_size_in_bytes`,
/// `record_count`).
pub fn puffin_blobs(d: &[u8]) -> Vec<(i64, i64, u64)> {
    let n = d.len();
    if n < 16 {
        return vec![];
    }
    let len = u32::from_le_bytes([d[n - 12], d[n - 11], d[n - 10], d[n - 9]]) as usize;
    let Some(payload) = n
        .checked_sub(12 + len)
        .and_then(|start| d.get(start..start + len))
    else {
        return vec![];
    };
    let Ok(footer) = serde_json::from_slice::<Value>(payload) else {
        return vec![];
    };
    let mut out = Vec::new();
    for b in footer["blobs"].as_array().into_iter().flatten() {
        let num = |v: &Value| {
            v.as_i64()
                .or_else(|| v.as_u64().map(|u| u as i64))
                .unwrap_or(-1)
        };
        let card = b["properties"]["cardinality"]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0);
        out.push((num(&b["offset"]), num(&b["length"]), card as u64));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Parquet

/// A Parquet file mutated where its structure lives: the footer length, the magic, the
/// thrift-encoded footer (varints overwritten with interesting values) and the first bytes
/// of column chunks (page headers), or anywhere.
pub fn parquet_case(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let n = d.len();
    if n < 12 || rng.gen_bool(0.2) {
        mutate_bytes_n(rng, &mut d, other);
        return d;
    }
    for _ in 0..rng.gen_range(1..=3) {
        let n = d.len();
        if n < 12 {
            break;
        }
        let flen = u32::from_le_bytes([d[n - 8], d[n - 7], d[n - 6], d[n - 5]]) as usize;
        let fstart = n.saturating_sub(8 + flen).max(4);
        match rng.gen_range(0..8) {
            0 => {
                let v = if rng.gen() {
                    interesting(rng) as u32
                } else {
                    (flen as i64 + rng.gen_range(-4..=4)) as u32
                };
                d[n - 8..n - 4].copy_from_slice(&v.to_le_bytes());
            }
            1..=4 if fstart < n - 8 => {
                // Thrift compact: ints are zigzag varints, like Avro's longs.
                let i = rng.gen_range(fstart..n - 8);
                if rng.gen_bool(0.6) {
                    let mut j = i;
                    let _ = get_long(&d, &mut j);
                    let mut v = Vec::new();
                    put_long(&mut v, interesting(rng));
                    let end = j.max(i + 1).min(n - 8);
                    let grow = v.len() as i64 - (end - i) as i64;
                    d.splice(i..end, v);
                    if grow != 0 {
                        let nn = d.len();
                        let fl = (flen as i64 + grow) as u32;
                        d[nn - 8..nn - 4].copy_from_slice(&fl.to_le_bytes());
                    }
                } else {
                    d[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            5 => {
                let i = rng.gen_range(4..fstart.max(5).min(n));
                let mut v = Vec::new();
                put_long(&mut v, interesting(rng));
                for (k, b) in v.iter().enumerate() {
                    if let Some(x) = d.get_mut(i + k) {
                        *x = *b;
                    }
                }
            }
            _ => mutate_bytes(rng, &mut d, other),
        }
    }
    d
}

// ---------------------------------------------------------------------------------------------
// Text grammars (predicates, statements, catalog URIs)

/// Tokens of floe's `--where` / SQL grammar and some that are not in it.
pub const SQL_TOKENS: &[&str] = &[
    "id",
    "name",
    "price",
    "ts",
    "d",
    "f",
    "flag",
    "big",
    "t.id",
    "s.id",
    "\"id\"",
    "\"we ird\"",
    "`id`",
    "0",
    "1",
    "-1",
    "1.5",
    "-0.0",
    "1e308",
    "NaN",
    "99999999999999999999999999999999999999",
    "9223372036854775808",
    "-9223372036854775809",
    "0.000000000000000000000000000000000000001",
    "'a'",
    "''",
    "'it''s'",
    "'%'",
    "'_x%'",
    "'\u{1F600}'",
    "DATE '2024-01-01'",
    "DATE '2024-02-30'",
    "TIMESTAMP '2024-01-01 00:00:00'",
    "TIMESTAMP '9999-99-99'",
    "X'00ff'",
    "TRUE",
    "FALSE",
    "NULL",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "IS",
    "LIKE",
    "ILIKE",
    "NAN",
    "CAST",
    "AS",
    "INT",
    "BIGINT",
    "DECIMAL(38, 10)",
    "DECIMAL(99,99)",
    "STRING",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "=",
    "==",
    "!=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "(",
    ")",
    ",",
    ".",
    ";",
    "lower(",
    "upper(",
    "abs(",
    "length(",
    "coalesce(",
    "year(",
    "DELETE",
    "FROM",
    "WHERE",
    "UPDATE",
    "SET",
    "MERGE",
    "INTO",
    "USING",
    "ON",
    "MATCHED",
    "INSERT",
    "VALUES",
    "*",
    "?",
    "$1",
    "--",
    "/*",
    "\\",
    "\u{0}",
    "ESCAPE",
    "SELECT",
    "DEFAULT",
];

/// A random predicate-like expression from the grammar, `depth` levels deep at most.
pub fn gen_expr(rng: &mut StdRng, depth: u32) -> String {
    let col = ["id", "name", "price", "ts", "d", "f", "flag", "big", "t.id"][rng.gen_range(0..9)];
    let lit = |rng: &mut StdRng| SQL_TOKENS[rng.gen_range(13..40)].to_string();
    if depth == 0 {
        return match rng.gen_range(0..3) {
            0 => col.to_string(),
            _ => lit(rng),
        };
    }
    match rng.gen_range(0..12) {
        0 => format!(
            "{col} {} {}",
            ["=", "!=", "<", "<=", ">", ">="][rng.gen_range(0..6)],
            lit(rng)
        ),
        1 => format!(
            "{} {} {}",
            gen_expr(rng, depth - 1),
            ["AND", "OR"][rng.gen_range(0..2)],
            gen_expr(rng, depth - 1)
        ),
        2 => format!("NOT ({})", gen_expr(rng, depth - 1)),
        3 => {
            let items: Vec<String> = (0..rng.gen_range(0..6)).map(|_| lit(rng)).collect();
            format!(
                "{col} {}IN ({})",
                ["", "NOT "][rng.gen_range(0..2)],
                items.join(", ")
            )
        }
        4 => format!("{col} BETWEEN {} AND {}", lit(rng), lit(rng)),
        5 => format!("{col} IS {}NULL", ["", "NOT "][rng.gen_range(0..2)]),
        6 => format!("{col} IS {}NAN", ["", "NOT "][rng.gen_range(0..2)]),
        7 => format!("{col} LIKE {}", lit(rng)),
        8 => format!(
            "{} {} {}",
            gen_expr(rng, depth - 1),
            ["+", "-", "*", "/", "%", "||"][rng.gen_range(0..6)],
            gen_expr(rng, depth - 1)
        ),
        9 => format!("({})", gen_expr(rng, depth - 1)),
        10 => format!(
            "{}{})",
            ["lower(", "upper(", "abs(", "length(", "coalesce("][rng.gen_range(0..5)],
            gen_expr(rng, depth - 1)
        ),
        _ => format!(
            "CAST({} AS {})",
            gen_expr(rng, depth - 1),
            [
                "INT",
                "BIGINT",
                "STRING",
                "DECIMAL(10, 2)",
                "DATE",
                "TIMESTAMP",
                "BOOLEAN",
                "DOUBLE"
            ][rng.gen_range(0..8)]
        ),
    }
}

/// Token-level mutations of a text: tokens inserted, dropped, swapped; or random tokens.
pub fn mutate_text(rng: &mut StdRng, text: String) -> String {
    let mut toks: Vec<String> = text.split(' ').map(str::to_string).collect();
    match rng.gen_range(0..6) {
        0 => {
            let i = rng.gen_range(0..=toks.len());
            toks.insert(
                i,
                SQL_TOKENS[rng.gen_range(0..SQL_TOKENS.len())].to_string(),
            );
        }
        1 if !toks.is_empty() => {
            toks.remove(rng.gen_range(0..toks.len()));
        }
        2 if toks.len() > 1 => {
            let (a, b) = (rng.gen_range(0..toks.len()), rng.gen_range(0..toks.len()));
            toks.swap(a, b);
        }
        3 => {
            let mut b = text.into_bytes();
            mutate_bytes_n(rng, &mut b, &[]);
            return String::from_utf8_lossy(&b).into_owned();
        }
        4 => {
            return (0..rng.gen_range(1..30))
                .map(|_| SQL_TOKENS[rng.gen_range(0..SQL_TOKENS.len())])
                .collect::<Vec<_>>()
                .join(if rng.gen() { " " } else { "" });
        }
        _ => {}
    }
    toks.join(" ")
}

/// A `--where` text: grammar-generated (nesting at most 12 deep), then token-mutated.
pub fn where_case(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut s = if !seeds.is_empty() && rng.gen_bool(0.2) {
        String::from_utf8_lossy(&seeds[rng.gen_range(0..seeds.len())]).into_owned()
    } else {
        {
            let d = rng.gen_range(0..6);
            gen_expr(rng, d)
        }
    };
    for _ in 0..rng.gen_range(0..3) {
        s = mutate_text(rng, s);
    }
    s.into_bytes()
}

/// A DML statement (DELETE / UPDATE / MERGE / INSERT) with generated expressions, mutated.
pub fn sql_case(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let e = |rng: &mut StdRng| {
        let d = rng.gen_range(0..4);
        gen_expr(rng, d)
    };
    let mut s = match rng.gen_range(0..6) {
        0 => format!("DELETE FROM db.t WHERE {}", e(rng)),
        1 => format!("UPDATE db.t SET price = {}, name = {} WHERE {}", e(rng), e(rng), e(rng)),
        2 => format!(
            "MERGE INTO db.t t USING db.s s ON t.id = s.id WHEN MATCHED AND {} THEN UPDATE SET price = {} WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, {})",
            e(rng), e(rng), e(rng)
        ),
        3 => format!("INSERT INTO db.t VALUES ({}, {})", e(rng), e(rng)),
        4 if !seeds.is_empty() => {
            String::from_utf8_lossy(&seeds[rng.gen_range(0..seeds.len())]).into_owned()
        }
        _ => e(rng),
    };
    for _ in 0..rng.gen_range(0..3) {
        s = mutate_text(rng, s);
    }
    s.into_bytes()
}

/// A catalog URI or storage location built from scheme, credentials, host, port and path
/// pieces, then mutated.
pub fn uri_case(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    const SCHEMES: &[&str] = &[
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite:////",
        "postgresql://",
        "postgres://",
        "postgresql+psycopg2://",
        "rest+http://",
        "rest+https://",
        "rest+",
        "rest+ftp://",
        "file:",
        "file://",
        "file:///",
        "file://localhost",
        "fs:",
        "s3://",
        "s3a://",
        "s3n://",
        "abfs://",
        "gs://",
        "http://",
        "",
        "/",
        "//",
    ];
    const USERS: &[&str] = &[
        "",
        "user@",
        "user:pass@",
        "%41:%zz@",
        "@",
        "@@",
        ":@",
        "a:b:c@",
        "%@",
        "%4@",
        "u%3Ap@",
        "\u{e9}@",
    ];
    const HOSTS: &[&str] = &[
        "localhost",
        "127.0.0.1",
        "[::1]",
        "",
        "host:5432",
        "host:99999",
        "host:-1",
        "host:",
        "h\u{f6}st",
        "bucket",
        "a.b.c",
        "[",
        "]",
        "%00",
    ];
    const PATHS: &[&str] = &[
        "",
        "/",
        "//",
        "/db",
        "/a/b/catalog.db",
        "/../..",
        "/./x",
        "?sslmode=require",
        "?connect_timeout=abc",
        "?a=b&c",
        "#frag",
        "/%00",
        "/\u{0}",
        "/a b",
        "/a\\b",
        ".db",
        "/x.db",
        "/wh/",
        "/wh//t",
    ];
    let mut s = if !seeds.is_empty() && rng.gen_bool(0.2) {
        String::from_utf8_lossy(&seeds[rng.gen_range(0..seeds.len())]).into_owned()
    } else {
        let mut s = String::new();
        s.push_str(SCHEMES[rng.gen_range(0..SCHEMES.len())]);
        s.push_str(USERS[rng.gen_range(0..USERS.len())]);
        s.push_str(HOSTS[rng.gen_range(0..HOSTS.len())]);
        for _ in 0..rng.gen_range(0..3) {
            s.push_str(PATHS[rng.gen_range(0..PATHS.len())]);
        }
        s
    };
    if rng.gen_bool(0.4) {
        let mut b = s.into_bytes();
        mutate_bytes_n(rng, &mut b, &[]);
        s = String::from_utf8_lossy(&b).into_owned();
    }
    s.into_bytes()
}

// ---------------------------------------------------------------------------------------------
// The targets

fn gen_json(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let (a, b) = pick2(rng, seeds);
    json_case(rng, a, b)
}
fn gen_avro(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let (a, b) = pick2(rng, seeds);
    avro_case(rng, a, b)
}
fn gen_puffin(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let (a, b) = pick2(rng, seeds);
    puffin_case(rng, a, b)
}
fn gen_dv(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let (a, b) = pick2(rng, seeds);
    dv_blob_case(rng, a, b)
}
fn gen_parquet(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let (a, b) = pick2(rng, seeds);
    parquet_case(rng, a, b)
}

fn run_metadata(d: &[u8]) {
    let bytes = bytes::Bytes::copy_from_slice(d);
    if let Ok(m) = floe::table::parse_metadata("/fuzz/v1.metadata.json", &bytes) {
        let _ = floe::spec::TableProperties::parse(m.properties());
        let _ = m.current_snapshot().map(|s| s.manifest_list().len());
        let _ = iceberg::arrow::schema_to_arrow_schema(m.current_schema());
    }
}

fn run_manifest_list(d: &[u8]) {
    use iceberg::spec::FormatVersion;
    for v in [FormatVersion::V1, FormatVersion::V2, FormatVersion::V3] {
        let _ = floe::table::parse_manifest_list(d, v, "fuzz manifest list");
    }
}

fn run_manifest(d: &[u8]) {
    // The planning decoder and the iceberg crate's agree wherever both read the file.
    if let (Ok(Some(a)), Ok(b)) = (
        floe::table::parse_manifest_planned(d, "fuzz manifest"),
        floe::table::parse_manifest_by_iceberg(d, "fuzz manifest"),
    ) {
        assert!(a == b, "the decoders disagree: {a:?} vs {b:?}");
    }
    if let Ok(m) = floe::table::parse_manifest(d, "fuzz manifest") {
        for e in m.entries() {
            let _ = (
                e.file_path(),
                e.data_file().content_offset(),
                e.data_file().referenced_data_file(),
            );
        }
    }
}

/// A deletion vector read as floe reads it: the footer's offset and length, as a manifest
/// entry carries them, become a byte range; the bytes there are decoded.
fn run_puffin(d: &[u8]) {
    for (off, len, card) in puffin_blobs(d) {
        let path = "/fuzz/deletes.puffin";
        let Ok(range) = floe::scan::dv_range(path, Some(off), Some(len)) else {
            continue;
        };
        // Like a ranged read of a local file: whatever lies inside the file.
        let end = (range.end.min(d.len() as u64)) as usize;
        let start = (range.start as usize).min(end);
        let _ = floe::scan::decode_dv(&d[start..end], range, card, path);
    }
}

fn run_dv(d: &[u8]) {
    if let Ok(bm) = floe::codec::dv::decode(d, None, "fuzz") {
        let _ = floe::codec::dv::decode(d, Some(bm.len()), "fuzz");
        let _ = floe::codec::dv::encode(&bm);
    }
}

fn run_position_deletes(d: &[u8]) {
    let _ =
        floe::scan::decode_position_deletes(bytes::Bytes::copy_from_slice(d), "/fuzz/pos.parquet");
}

fn where_schema() -> &'static (floe::spec::Schema, arrow_schema::SchemaRef) {
    static S: std::sync::OnceLock<(floe::spec::Schema, arrow_schema::SchemaRef)> =
        std::sync::OnceLock::new();
    S.get_or_init(|| {
        let s = floe::spec::parse_schema(
            "id long, name string, price decimal(10, 2), ts timestamp, d date, f double, flag boolean, big decimal(38, 10)",
        )
        .expect("schema");
        let a = iceberg::arrow::schema_to_arrow_schema(&s).expect("arrow schema");
        (s, std::sync::Arc::new(a))
    })
}

fn run_where(d: &[u8]) {
    let text = String::from_utf8_lossy(d);
    let (schema, arrow) = where_schema();
    let schema = std::sync::Arc::new(schema.clone());
    let _ = floe::expr::file_selection(&text, &schema);
    if let Ok(e) = floe::expr::parse_expr(&text) {
        let _ = e.bind_predicate(arrow);
        let _ = e.to_string();
    }
}

fn run_sql(d: &[u8]) {
    let text = String::from_utf8_lossy(d);
    let _ = floe::expr::parse_statement(&text);
    let _ = floe::expr::parse_assignments(&text);
    let _ = floe::spec::parse_schema(&text);
}

fn run_uri(d: &[u8]) {
    let text = String::from_utf8_lossy(d);
    let _ = floe::catalog::check_uri(&text);
    let _ = floe::storage::check_location(&text);
    let _ = floe::table::parse_ident(&text);
}

/// Encodes a few deletion vectors with floe (dense, sparse, runs, several high words).
fn dv_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let sets: Vec<Vec<u64>> = vec![
        vec![0],
        vec![1, 5, 9, 1000, 65535, 65536, 70000],
        (0..5000).collect(),
        (0..100_000).step_by(3).collect(),
        vec![1 << 32, (1 << 32) + 7, 5 << 32, u32::MAX as u64],
    ];
    for s in sets {
        let mut bm = roaring::RoaringTreemap::new();
        bm.extend(s);
        if let Ok(b) = floe::codec::dv::encode(&bm) {
            out.push(b);
        }
    }
    out
}

fn is_position_delete(d: &[u8]) -> bool {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::copy_from_slice(d),
    )
    .map(|b| {
        let s = b.schema();
        s.field_with_name("file_path").is_ok() && s.field_with_name("pos").is_ok()
    })
    .unwrap_or(false)
}

/// Position delete files written here (plain, dictionary, compressed, several pages).
fn position_delete_seeds() -> Vec<Vec<u8>> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    let files =
        StringArray::from_iter_values((0..300).map(|i| format!("/w/t/data/f{}.parquet", i / 100)));
    let pos = Int64Array::from_iter_values((0..300).map(|i| (i % 100) * 3));
    let batch = RecordBatch::try_from_iter([
        ("file_path", std::sync::Arc::new(files) as ArrayRef),
        ("pos", std::sync::Arc::new(pos) as ArrayRef),
    ])
    .expect("batch");
    let mut out = Vec::new();
    for (c, dict) in [
        (Compression::UNCOMPRESSED, false),
        (Compression::SNAPPY, true),
        (Compression::ZSTD(ZstdLevel::default()), true),
        (Compression::UNCOMPRESSED, true),
    ] {
        let props = WriterProperties::builder()
            .set_compression(c)
            .set_dictionary_enabled(dict)
            .set_data_page_row_count_limit(64)
            .set_write_batch_size(64)
            .build();
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))
            .expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        out.push(buf);
    }
    out
}

/// Every target with its seeds (from `spec-fixtures/` and a few built here) and regression
/// inputs added to the seeds.
pub fn targets() -> Vec<Target> {
    let with_regressions = |name: &str, mut seeds: Vec<Vec<u8>>| {
        seeds.extend(regressions(name).into_iter().map(|(_, d)| d));
        seeds
    };
    let mb = 1 << 20;
    let puffins = fixture_files(|n| n.ends_with(".puffin"), mb);
    let mut blobs = dv_seeds();
    for p in &puffins {
        for (off, len, _) in puffin_blobs(p) {
            if let Some(b) = off
                .checked_add(len)
                .and_then(|end| p.get(off as usize..end as usize))
            {
                blobs.push(b.to_vec());
            }
        }
    }
    let mut pos = position_delete_seeds();
    pos.extend(
        fixture_files(|n| n.ends_with(".parquet"), 256 << 10)
            .into_iter()
            .filter(|d| is_position_delete(d)),
    );
    vec![
        Target {
            name: "metadata",
            seeds: with_regressions(
                "metadata",
                fixture_files(|n| n.ends_with(".metadata.json"), mb),
            ),
            generate: gen_json,
            run: run_metadata,
            alloc_cap: None,
        },
        Target {
            name: "manifest-list",
            seeds: with_regressions(
                "manifest-list",
                fixture_files(|n| n.starts_with("snap-") && n.ends_with(".avro"), mb),
            ),
            generate: gen_avro,
            run: run_manifest_list,
            alloc_cap: None,
        },
        Target {
            name: "manifest",
            seeds: with_regressions(
                "manifest",
                fixture_files(|n| !n.starts_with("snap-") && n.ends_with(".avro"), mb),
            ),
            generate: gen_avro,
            run: run_manifest,
            alloc_cap: None,
        },
        Target {
            name: "puffin",
            seeds: with_regressions("puffin", puffins),
            generate: gen_puffin,
            run: run_puffin,
            alloc_cap: None,
        },
        Target {
            name: "dv",
            seeds: with_regressions("dv", blobs),
            generate: gen_dv,
            run: run_dv,
            alloc_cap: None,
        },
        Target {
            name: "position-deletes",
            seeds: with_regressions("position-deletes", pos),
            generate: gen_parquet,
            run: run_position_deletes,
            // parquet 58 reserves a schema node's declared child count (i32) before reading
            // the children: up to 16 GiB of address space from a corrupt footer (reported
            // upstream-worthy; floe cannot check it without its own thrift parser).
            alloc_cap: Some(32 << 30),
        },
        Target {
            name: "where",
            seeds: with_regressions("where", vec![]),
            generate: where_case,
            run: run_where,
            alloc_cap: None,
        },
        Target {
            name: "sql",
            seeds: with_regressions("sql", vec![]),
            generate: sql_case,
            run: run_sql,
            alloc_cap: None,
        },
        Target {
            name: "uri",
            seeds: with_regressions("uri", vec![]),
            generate: uri_case,
            run: run_uri,
            alloc_cap: None,
        },
    ]
}

/// Deeply nested inputs for the parsers: `n` parentheses, `n` OR terms, `n` NOTs.
pub fn deep_inputs(n: usize) -> Vec<(&'static str, String)> {
    vec![
        (
            "parens",
            format!("{}id = 1{}", "(".repeat(n), ")".repeat(n)),
        ),
        ("or-terms", vec!["id = 1"; n].join(" OR ")),
        ("and-terms", vec!["id = 1"; n].join(" AND ")),
        ("nots", format!("{}id = 1", "NOT ".repeat(n))),
        ("plus-terms", format!("id = {}", vec!["1"; n].join(" + "))),
        ("unclosed", "(".repeat(n)),
    ]
}

/// Runs one deep input through every parser (for the child process of the nesting check).
pub fn run_deep(text: &str) {
    run_where(text.as_bytes());
    run_sql(format!("DELETE FROM t WHERE {text}").as_bytes());
}
