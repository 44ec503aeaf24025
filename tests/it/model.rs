//! Model-based testing of table operations: random sequences of appends, DELETE / UPDATE /
//! MERGE (copy-on-write and merge-on-read, v2 and v3), rewrite-data-files with random options,
//! rewrite-position-delete-files, expire-snapshots, remove-orphan-files, clones written on
//! their own, partition evolution, and time travel, each run through floe's public library API against an
//! in-memory model: per table, the multiset of rows of every retained snapshot.
//!
//! After every step floe's scan of the touched table's current snapshot and of a random retained
//! snapshot must equal the model; DuckDB and pyiceberg read the same snapshots (batched: one
//! peer run per sequence, plus one before an expiry would drop a snapshot still to be checked).
//! A failing sequence is shrunk (chunks of ops dropped, then rows of appends and MERGE sources
//! halved) and printed with its seed and table configuration, ready to paste as a regression.
//!
//! `FLOE_MODEL_SEQUENCES=N FLOE_MODEL_SEED=S` size the run (defaults: the seeded suite run);
//! `FLOE_MODEL_PEERS=0` checks floe only; `FLOE_MODEL_PEERS_EVERY=K` runs the peers on every
//! K-th sequence. Expected semantics are Spark's (Iceberg's reference engine).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    Array, ArrayRef, Date32Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floe::catalog::{Catalog, TableCreation};
use floe::maintenance::{
    expire_snapshots, remove_orphan_files, rewrite_data_files, rewrite_position_delete_files,
    ExpireOptions,
};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::{append, clone_table};
use floe::Table;

use crate::common::{peers_python, repo, write_parquet};

const DDL: &str = "id long not null, k int, v string, p date";
const PARTITIONS: &[&str] = &[
    "bucket(3, id)",
    "truncate(10, id)",
    "k",
    "bucket(2, k)",
    "p",
    "month(p)",
    "day(p)",
    "truncate(1, v)",
    "bucket(2, id), p",
    "bucket(8, id)",
    "truncate(25, id)",
];
const STRINGS: &[&str] = &["a", "b", "", "x y", "é", "%_", "it's"];
/// Days since the epoch of the `p` values (2022-01-01 and on).
const P0: i32 = 18_993;

/// A row as an op carries it (static strings, so a printed sequence is Rust source).
#[derive(Clone, Debug, PartialEq)]
pub struct Row(
    pub i64,
    pub Option<i32>,
    pub Option<&'static str>,
    pub Option<i32>,
);

/// A row of the model.
type MRow = (i64, Option<i32>, Option<String>, Option<i32>);

impl Row {
    fn model(&self) -> MRow {
        (self.0, self.1, self.2.map(str::to_string), self.3)
    }
}

/// The table's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub v3: bool,
    /// Merge-on-read for delete, update, merge.
    pub mor: [bool; 3],
    pub partition: Option<&'static str>,
    pub partition_granularity: bool,
    /// How a MERGE whose ON key covers the partition spec runs.
    pub merge_path: MergePath,
    /// `commit.manifest.min-count-to-merge` (`None`: Java's 100), small so that a sequence's
    /// commits merge manifests.
    pub merge_manifests_at: Option<usize>,
}

/// The MERGE path a table's properties choose when its ON key covers the partition spec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MergePath {
    /// Partition-aligned, the source in memory.
    Aligned,
    /// Partition-aligned, every source row spilled to temporary files.
    Spilled,
    /// One pass over the whole source (`floe.merge.partition-aligned=false`).
    OnePass,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Col {
    Id,
    K,
}

/// Which row a MERGE condition column reads (`None`: the only row there is).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Side {
    T,
    S,
    No,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A simple predicate over `id` / `k` (the lead fuzzes predicates separately).
#[derive(Clone, Debug, PartialEq)]
pub enum Pred {
    Cmp(Side, Col, CmpOp, i64),
    Between(Side, Col, i64, i64),
    In(Side, Col, Vec<i64>, bool),
    IsNull(Side, Col, bool),
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Not(Box<Pred>),
}

/// One assignment of UPDATE or of a MERGE `UPDATE SET`.
#[derive(Clone, Debug, PartialEq)]
pub enum Set {
    /// `k = k + c` (the target's k).
    KPlus(i32),
    KConst(Option<i32>),
    /// `k = s.k` (MERGE matched only).
    KFromSource,
    VConst(Option<&'static str>),
    /// `v = v || 'x'`.
    VAppend(&'static str),
    PConst(Option<i32>),
    IdPlus(i64),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Delete,
    UpdateStar,
    Update(Vec<Set>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Clause {
    Matched(Option<Pred>, Action),
    /// `Some(c)`: `INSERT (id, k, v, p) VALUES (s.id, s.k + c, 'ins', s.p)`; `None`: `INSERT *`.
    NotMatched(Option<Pred>, Option<i32>),
    NotMatchedBySource(Option<Pred>, Action),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OlderThan {
    Default,
    /// The timestamp of the n-th (mod count) retained snapshot, oldest first, plus 1 ms.
    Snapshot(u64),
    Future,
}

/// One operation; `t` picks the table (mod the number of tables), `u64` picks choose among
/// what exists when the op runs, so that any subsequence is still a valid sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Append {
        t: usize,
        rows: Vec<Row>,
    },
    Delete {
        t: usize,
        pred: Option<Pred>,
    },
    Update {
        t: usize,
        set: Vec<Set>,
        pred: Option<Pred>,
    },
    Merge {
        t: usize,
        source: Vec<Row>,
        clauses: Vec<Clause>,
    },
    Rewrite {
        t: usize,
        options: Vec<(&'static str, &'static str)>,
        filter: Option<Pred>,
    },
    RewriteDeletes {
        t: usize,
        options: Vec<(&'static str, &'static str)>,
    },
    Expire {
        t: usize,
        retain_last: Option<usize>,
        older_than: OlderThan,
        ids: Vec<u64>,
    },
    Orphans {
        t: usize,
    },
    /// `maintain` with the table's default policy (compaction from 5 small files, delete
    /// merges, expiry and orphans by their defaults), under its lease.
    Maintain {
        t: usize,
    },
    Clone {
        t: usize,
        at: Option<u64>,
    },
    TimeTravel {
        t: usize,
        pick: u64,
    },
    /// Partition evolution: the spec becomes `PARTITIONS[spec]` (unpartitioned past the end),
    /// by ALTER TABLE DROP / ADD PARTITION FIELD; the rows stay.
    Repartition {
        t: usize,
        spec: usize,
    },
}

impl Op {
    fn table(&self) -> usize {
        match self {
            Op::Append { t, .. }
            | Op::Delete { t, .. }
            | Op::Update { t, .. }
            | Op::Merge { t, .. }
            | Op::Rewrite { t, .. }
            | Op::RewriteDeletes { t, .. }
            | Op::Expire { t, .. }
            | Op::Orphans { t }
            | Op::Maintain { t }
            | Op::Clone { t, .. }
            | Op::TimeTravel { t, .. }
            | Op::Repartition { t, .. } => *t,
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Op::Append { .. } => "append",
            Op::Delete { .. } => "delete",
            Op::Update { .. } => "update",
            Op::Merge { .. } => "merge",
            Op::Rewrite { .. } => "rewrite-data-files",
            Op::RewriteDeletes { .. } => "rewrite-position-delete-files",
            Op::Expire { .. } => "expire-snapshots",
            Op::Orphans { .. } => "remove-orphan-files",
            Op::Maintain { .. } => "maintain",
            Op::Clone { .. } => "clone",
            Op::TimeTravel { .. } => "time-travel",
            Op::Repartition { .. } => "repartition",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generation

fn gen_row(rng: &mut StdRng, fresh: bool) -> Row {
    let id = if fresh {
        rng.gen_range(1000..100_000)
    } else {
        rng.gen_range(0..60)
    };
    let k = (!rng.gen_bool(0.15)).then(|| rng.gen_range(-5..20));
    let v = (!rng.gen_bool(0.15)).then(|| STRINGS[rng.gen_range(0..STRINGS.len())]);
    let p = (!rng.gen_bool(0.1)).then(|| P0 + rng.gen_range(0..70));
    Row(id, k, v, p)
}

fn gen_rows(rng: &mut StdRng) -> Vec<Row> {
    let n = match rng.gen_range(0..10) {
        0 => 0,
        1 => 1,
        2 => rng.gen_range(100..300),
        _ => rng.gen_range(2..40),
    };
    let fresh = rng.gen_bool(0.2);
    (0..n).map(|_| gen_row(rng, fresh)).collect()
}

fn gen_leaf(rng: &mut StdRng, side: Side) -> Pred {
    let col = if rng.gen_bool(0.5) { Col::Id } else { Col::K };
    let lit = |rng: &mut StdRng| match col {
        Col::Id => rng.gen_range(-2..62),
        Col::K => rng.gen_range(-6..21),
    };
    match rng.gen_range(0..8) {
        0..=3 => {
            let op = [
                CmpOp::Eq,
                CmpOp::Ne,
                CmpOp::Lt,
                CmpOp::Le,
                CmpOp::Gt,
                CmpOp::Ge,
            ][rng.gen_range(0..6)];
            Pred::Cmp(side, col, op, lit(rng))
        }
        4 => {
            let a = lit(rng);
            Pred::Between(side, col, a, a + rng.gen_range(-1..15))
        }
        5 | 6 => {
            let n = rng.gen_range(1..5);
            Pred::In(
                side,
                col,
                (0..n).map(|_| lit(rng)).collect(),
                rng.gen_bool(0.3),
            )
        }
        _ => Pred::IsNull(side, col, rng.gen_bool(0.4)),
    }
}

fn gen_pred(rng: &mut StdRng, sides: &[Side], depth: u32) -> Pred {
    let side = sides[rng.gen_range(0..sides.len())];
    if depth == 0 || rng.gen_bool(0.6) {
        return gen_leaf(rng, side);
    }
    match rng.gen_range(0..3) {
        0 => Pred::And(
            Box::new(gen_pred(rng, sides, depth - 1)),
            Box::new(gen_pred(rng, sides, depth - 1)),
        ),
        1 => Pred::Or(
            Box::new(gen_pred(rng, sides, depth - 1)),
            Box::new(gen_pred(rng, sides, depth - 1)),
        ),
        _ => Pred::Not(Box::new(gen_pred(rng, sides, depth - 1))),
    }
}

fn gen_set(rng: &mut StdRng, merge: bool) -> Vec<Set> {
    let mut out: Vec<Set> = Vec::new();
    let n = rng.gen_range(1..3);
    for _ in 0..n {
        let s = match rng.gen_range(0..8) {
            0 => Set::KPlus(rng.gen_range(-3..4)),
            1 => Set::KConst((!rng.gen_bool(0.3)).then(|| rng.gen_range(-5..20))),
            2 if merge => Set::KFromSource,
            2 => Set::KPlus(1),
            3 => {
                Set::VConst((!rng.gen_bool(0.2)).then(|| STRINGS[rng.gen_range(0..STRINGS.len())]))
            }
            4 => Set::VAppend(["x", "-u"][rng.gen_range(0..2)]),
            5 => Set::PConst((!rng.gen_bool(0.2)).then(|| P0 + rng.gen_range(0..70))),
            6 => Set::IdPlus(rng.gen_range(1..100)),
            _ => Set::KPlus(10),
        };
        // One assignment per column.
        if !out.iter().any(|o| set_col(o) == set_col(&s)) {
            out.push(s);
        }
    }
    out
}

fn set_col(s: &Set) -> &'static str {
    match s {
        Set::KPlus(_) | Set::KConst(_) | Set::KFromSource => "k",
        Set::VConst(_) | Set::VAppend(_) => "v",
        Set::PConst(_) => "p",
        Set::IdPlus(_) => "id",
    }
}

fn gen_action(rng: &mut StdRng, matched: bool) -> Action {
    match rng.gen_range(0..3) {
        0 => Action::Delete,
        1 if matched => Action::UpdateStar,
        _ => Action::Update(gen_set(rng, matched)),
    }
}

fn gen_merge(rng: &mut StdRng) -> (Vec<Row>, Vec<Clause>) {
    let n = rng.gen_range(0..30);
    let mut source: Vec<Row> = Vec::new();
    for _ in 0..n {
        let fresh = rng.gen_bool(0.1);
        let mut r = gen_row(rng, fresh);
        // Mostly unique source keys; sometimes a duplicate on purpose.
        while source.iter().any(|s| s.0 == r.0) && !rng.gen_bool(0.05) {
            r.0 = rng.gen_range(0..80);
        }
        source.push(r);
    }
    let mut clauses = Vec::new();
    let n = rng.gen_range(1..4);
    for _ in 0..n {
        let cond =
            |rng: &mut StdRng, sides: &[Side]| (rng.gen_bool(0.5)).then(|| gen_pred(rng, sides, 1));
        clauses.push(match rng.gen_range(0..5) {
            0 | 1 => {
                let c = cond(rng, &[Side::T, Side::S]);
                Clause::Matched(c, gen_action(rng, true))
            }
            2 | 3 => {
                let c = cond(rng, &[Side::S]);
                Clause::NotMatched(c, rng.gen_bool(0.4).then(|| rng.gen_range(0..5)))
            }
            _ => {
                let c = cond(rng, &[Side::T]);
                Clause::NotMatchedBySource(c, gen_action(rng, false))
            }
        });
    }
    (source, clauses)
}

fn gen_rewrite_options(rng: &mut StdRng) -> Vec<(&'static str, &'static str)> {
    let mut o = Vec::new();
    let mut maybe = |rng: &mut StdRng, p: f64, k: &'static str, vals: &[&'static str]| {
        if rng.gen_bool(p) {
            o.push((k, vals[rng.gen_range(0..vals.len())]));
        }
    };
    maybe(
        rng,
        0.4,
        "target-file-size-bytes",
        &["600", "4000", "100000", "536870912"],
    );
    maybe(rng, 0.5, "min-input-files", &["1", "2", "3"]);
    maybe(rng, 0.3, "rewrite-all", &["true", "false"]);
    maybe(rng, 0.3, "delete-file-threshold", &["1", "2"]);
    maybe(rng, 0.2, "delete-ratio-threshold", &["0.05", "0.5"]);
    maybe(rng, 0.2, "max-file-group-size-bytes", &["2000", "50000"]);
    maybe(rng, 0.2, "partial-progress.enabled", &["true"]);
    maybe(rng, 0.2, "partial-progress.max-commits", &["2", "3"]);
    maybe(rng, 0.2, "use-starting-sequence-number", &["true", "false"]);
    maybe(
        rng,
        0.2,
        "rewrite-job-order",
        &["bytes-asc", "bytes-desc", "files-asc", "files-desc", "none"],
    );
    maybe(rng, 0.2, "remove-dangling-deletes", &["true", "false"]);
    maybe(rng, 0.1, "max-concurrent-file-group-rewrites", &["1", "3"]);
    maybe(rng, 0.15, "max-files-to-rewrite", &["1", "3"]);
    // Another layout of the rewritten rows: z-order (both spellings) or a sort order.
    match rng.gen_range(0..10) {
        0 => o.extend([("strategy", "zorder"), ("zorder-by", "k,id")]),
        1 => o.extend([("strategy", "sort"), ("sort-order", "zorder(v, p)")]),
        2 => o.extend([
            ("strategy", "sort"),
            ("sort-order", "k DESC NULLS LAST, id"),
        ]),
        _ => {}
    }
    o
}

fn gen_op(rng: &mut StdRng, first: bool) -> Op {
    let t = if rng.gen_bool(0.6) {
        0
    } else {
        rng.gen_range(0..4)
    };
    if first {
        let mut rows = gen_rows(rng);
        while rows.len() < 3 {
            rows.push(gen_row(rng, false));
        }
        return Op::Append { t: 0, rows };
    }
    match rng.gen_range(0..100) {
        0..=21 => Op::Append {
            t,
            rows: gen_rows(rng),
        },
        22..=35 => Op::Delete {
            t,
            pred: (!rng.gen_bool(0.05)).then(|| gen_pred(rng, &[Side::No], 2)),
        },
        36..=49 => Op::Update {
            t,
            set: gen_set(rng, false),
            pred: (!rng.gen_bool(0.1)).then(|| gen_pred(rng, &[Side::No], 2)),
        },
        50..=63 => {
            let (source, clauses) = gen_merge(rng);
            Op::Merge { t, source, clauses }
        }
        64..=72 => Op::Rewrite {
            t,
            options: gen_rewrite_options(rng),
            filter: rng.gen_bool(0.25).then(|| gen_leaf(rng, Side::No)),
        },
        73..=78 => {
            let mut options = Vec::new();
            if rng.gen_bool(0.4) {
                options.push(("rewrite-all", "true"));
            }
            if rng.gen_bool(0.4) {
                options.push(("min-input-files", ["1", "2", "3"][rng.gen_range(0..3)]));
            }
            Op::RewriteDeletes { t, options }
        }
        79..=84 => Op::Expire {
            t,
            retain_last: rng.gen_bool(0.6).then(|| rng.gen_range(1..4)),
            older_than: match rng.gen_range(0..3) {
                0 => OlderThan::Default,
                1 => OlderThan::Snapshot(rng.gen()),
                _ => OlderThan::Future,
            },
            ids: if rng.gen_bool(0.2) {
                vec![rng.gen()]
            } else {
                vec![]
            },
        },
        85..=88 => Op::Orphans { t },
        89..=90 => Op::Repartition {
            t,
            spec: rng.gen_range(0..=PARTITIONS.len()),
        },
        91..=93 => Op::Clone {
            t,
            at: rng.gen_bool(0.4).then(|| rng.gen()),
        },
        94..=96 => Op::Maintain { t },
        _ => Op::TimeTravel { t, pick: rng.gen() },
    }
}

/// The sequence of seed `seed`.
fn generate(seed: u64, len: usize) -> (Config, Vec<Op>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let config = Config {
        v3: rng.gen_bool(0.5),
        mor: [rng.gen_bool(0.5), rng.gen_bool(0.5), rng.gen_bool(0.5)],
        partition: rng
            .gen_bool(0.6)
            .then(|| PARTITIONS[rng.gen_range(0..PARTITIONS.len())]),
        partition_granularity: rng.gen_bool(0.3),
        merge_path: [MergePath::Aligned, MergePath::Spilled, MergePath::OnePass]
            [rng.gen_range(0..3)],
        // Drawn apart so that the seeds' operations stay what they were.
        merge_manifests_at: {
            let mut r = StdRng::seed_from_u64(seed ^ 0x6d65_7267_6521);
            r.gen_bool(0.6).then(|| r.gen_range(2..6))
        },
    };
    let n = rng.gen_range(len / 2..=len + len / 2);
    let ops = (0..n).map(|i| gen_op(&mut rng, i == 0)).collect();
    (config, ops)
}

// ---------------------------------------------------------------------------------------------
// SQL rendering and the model's evaluation

fn col_name(side: Side, c: Col) -> String {
    let n = match c {
        Col::Id => "id",
        Col::K => "k",
    };
    match side {
        Side::T => format!("t.{n}"),
        Side::S => format!("s.{n}"),
        Side::No => n.to_string(),
    }
}

fn sql_pred(p: &Pred) -> String {
    match p {
        Pred::Cmp(s, c, op, v) => {
            let o = match op {
                CmpOp::Eq => "=",
                CmpOp::Ne => "!=",
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                CmpOp::Ge => ">=",
            };
            format!("{} {o} {v}", col_name(*s, *c))
        }
        Pred::Between(s, c, a, b) => format!("{} BETWEEN {a} AND {b}", col_name(*s, *c)),
        Pred::In(s, c, vs, neg) => format!(
            "{} {}IN ({})",
            col_name(*s, *c),
            if *neg { "NOT " } else { "" },
            vs.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Pred::IsNull(s, c, neg) => format!(
            "{} IS {}NULL",
            col_name(*s, *c),
            if *neg { "NOT " } else { "" }
        ),
        Pred::And(a, b) => format!("({}) AND ({})", sql_pred(a), sql_pred(b)),
        Pred::Or(a, b) => format!("({}) OR ({})", sql_pred(a), sql_pred(b)),
        Pred::Not(a) => format!("NOT ({})", sql_pred(a)),
    }
}

/// SQL's three-valued evaluation; `get` reads a column of a side.
fn eval(p: &Pred, get: &dyn Fn(Side, Col) -> Option<i64>) -> Option<bool> {
    match p {
        Pred::Cmp(s, c, op, v) => get(*s, *c).map(|x| match op {
            CmpOp::Eq => x == *v,
            CmpOp::Ne => x != *v,
            CmpOp::Lt => x < *v,
            CmpOp::Le => x <= *v,
            CmpOp::Gt => x > *v,
            CmpOp::Ge => x >= *v,
        }),
        Pred::Between(s, c, a, b) => get(*s, *c).map(|x| *a <= x && x <= *b),
        Pred::In(s, c, vs, neg) => get(*s, *c).map(|x| vs.contains(&x) != *neg),
        Pred::IsNull(s, c, neg) => Some(get(*s, *c).is_none() != *neg),
        Pred::And(a, b) => match (eval(a, get), eval(b, get)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Pred::Or(a, b) => match (eval(a, get), eval(b, get)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Pred::Not(a) => eval(a, get).map(|b| !b),
    }
}

fn holds(p: &Option<Pred>, get: &dyn Fn(Side, Col) -> Option<i64>) -> bool {
    p.as_ref().is_none_or(|p| eval(p, get) == Some(true))
}

fn get_of(r: &MRow, c: Col) -> Option<i64> {
    match c {
        Col::Id => Some(r.0),
        Col::K => r.1.map(i64::from),
    }
}

fn date_sql(d: i32) -> String {
    let day =
        chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(i64::from(d));
    format!("DATE '{}'", day.format("%Y-%m-%d"))
}

fn str_sql(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn sql_set(s: &Set, tq: &str) -> String {
    match s {
        Set::KPlus(c) => format!("k = {tq}k + {c}"),
        Set::KConst(Some(c)) => format!("k = {c}"),
        Set::KConst(None) => "k = NULL".into(),
        Set::KFromSource => "k = s.k".into(),
        Set::VConst(Some(v)) => format!("v = {}", str_sql(v)),
        Set::VConst(None) => "v = NULL".into(),
        Set::VAppend(x) => format!("v = {tq}v || {}", str_sql(x)),
        Set::PConst(Some(d)) => format!("p = {}", date_sql(*d)),
        Set::PConst(None) => "p = NULL".into(),
        Set::IdPlus(c) => format!("id = {tq}id + {c}"),
    }
}

/// `r` with `set` applied (`src`: the matched source row of a MERGE).
fn apply_set(r: &MRow, set: &[Set], src: Option<&MRow>) -> MRow {
    let mut o = r.clone();
    for s in set {
        match s {
            Set::KPlus(c) => o.1 = r.1.map(|k| k + c),
            Set::KConst(c) => o.1 = *c,
            Set::KFromSource => o.1 = src.and_then(|s| s.1),
            Set::VConst(v) => o.2 = v.map(str::to_string),
            Set::VAppend(x) => o.2 = r.2.as_ref().map(|v| format!("{v}{x}")),
            Set::PConst(d) => o.3 = *d,
            Set::IdPlus(c) => o.0 = r.0 + c,
        }
    }
    o
}

fn sql_action(a: &Action, tq: &str) -> String {
    match a {
        Action::Delete => "DELETE".into(),
        Action::UpdateStar => "UPDATE SET *".into(),
        Action::Update(set) => format!(
            "UPDATE SET {}",
            set.iter()
                .map(|s| sql_set(s, tq))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn merge_sql(table: &str, clauses: &[Clause]) -> String {
    let mut sql = format!("MERGE INTO {table} t USING src s ON t.id = s.id");
    for c in clauses {
        let cond = |c: &Option<Pred>| {
            c.as_ref()
                .map(|p| format!(" AND {}", sql_pred(p)))
                .unwrap_or_default()
        };
        sql.push_str(&match c {
            Clause::Matched(p, a) => {
                format!(" WHEN MATCHED{} THEN {}", cond(p), sql_action(a, "t."))
            }
            Clause::NotMatchedBySource(p, a) => format!(
                " WHEN NOT MATCHED BY SOURCE{} THEN {}",
                cond(p),
                sql_action(a, "t.")
            ),
            Clause::NotMatched(p, None) => format!(" WHEN NOT MATCHED{} THEN INSERT *", cond(p)),
            Clause::NotMatched(p, Some(c)) => format!(
                " WHEN NOT MATCHED{} THEN INSERT (id, k, v, p) VALUES (s.id, s.k + {c}, 'ins', s.p)",
                cond(p)
            ),
        });
    }
    sql
}

/// MERGEs committed partition-aligned and in one pass (the suite must cover both).
static ALIGNED_MERGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ONE_PASS_MERGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether a MERGE on `id` runs partition-aligned: the table is partitioned on `id` alone and
/// its properties do not turn alignment off. `None` (either path) when the table also holds
/// data files of an older partition spec: a MERGE that plans one of them runs in one pass.
async fn merges_aligned(table: &Table) -> Option<bool> {
    let md = table.metadata();
    let id = md.current_schema().field_by_name("id").unwrap().id;
    let spec = md.default_partition_spec();
    let aligned = !spec.is_unpartitioned()
        && spec.fields().iter().all(|f| f.source_id == id)
        && table.properties().unwrap().merge_partition_aligned;
    let files = floe::scan::read_metadata_table(table, floe::scan::MetadataTable::DataFiles, None)
        .await
        .unwrap();
    let specs = crate::common::i32_column(&files, "spec_id");
    let mixed = specs.iter().any(|s| s != Some(spec.spec_id()));
    (!(aligned && mixed)).then_some(aligned)
}

/// The rows after the MERGE, or `Err` when Spark refuses it (a target row matched by several
/// source rows while a matched action other than one unconditional DELETE exists).
fn model_merge(rows: &[MRow], source: &[MRow], clauses: &[Clause]) -> Result<Vec<MRow>, String> {
    let matched: Vec<&Clause> = clauses
        .iter()
        .filter(|c| matches!(c, Clause::Matched(..)))
        .collect();
    let check_cardinality = !(matched.is_empty()
        || matched.len() == 1 && matches!(matched[0], Clause::Matched(None, Action::Delete)));
    let target_ids: HashSet<i64> = rows.iter().map(|r| r.0).collect();
    let mut out = Vec::new();
    for r in rows {
        let hits: Vec<&MRow> = source.iter().filter(|s| s.0 == r.0).collect();
        if check_cardinality && hits.len() > 1 {
            return Err(format!(
                "target id {} matches {} source rows",
                r.0,
                hits.len()
            ));
        }
        let mut done = false;
        for c in clauses {
            match (c, hits.first()) {
                (Clause::Matched(cond, act), Some(s)) => {
                    let get = |side: Side, col: Col| match side {
                        Side::S => get_of(s, col),
                        _ => get_of(r, col),
                    };
                    if holds(cond, &get) {
                        match act {
                            Action::Delete => {}
                            Action::UpdateStar => out.push((*s).clone()),
                            Action::Update(set) => out.push(apply_set(r, set, Some(s))),
                        }
                        done = true;
                    }
                }
                (Clause::NotMatchedBySource(cond, act), None)
                    if holds(cond, &|_, col| get_of(r, col)) =>
                {
                    match act {
                        Action::Delete => {}
                        Action::UpdateStar => unreachable!("not generated"),
                        Action::Update(set) => out.push(apply_set(r, set, None)),
                    }
                    done = true;
                }
                _ => {}
            }
            if done {
                break;
            }
        }
        if !done {
            out.push(r.clone());
        }
    }
    for s in source.iter().filter(|s| !target_ids.contains(&s.0)) {
        for c in clauses {
            if let Clause::NotMatched(cond, insert) = c {
                if holds(cond, &|_, col| get_of(s, col)) {
                    out.push(match insert {
                        None => s.clone(),
                        Some(c) => (s.0, s.1.map(|k| k + c), Some("ins".into()), s.3),
                    });
                    break;
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Arrow <-> model rows

fn arrow_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Utf8, true),
        Field::new("p", DataType::Date32, true),
    ]))
}

fn to_batch(rows: &[MRow]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        )),
        Arc::new(Int32Array::from(
            rows.iter().map(|r| r.1).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            rows.iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        )),
        Arc::new(Date32Array::from(
            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(arrow_schema(), cols).unwrap()
}

fn column(b: &RecordBatch, name: &str, ty: &DataType) -> Result<ArrayRef, String> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| format!("scan result has no column {name}"))?;
    arrow::compute::cast(c, ty).map_err(|e| format!("column {name}: {e}"))
}

fn from_batches(batches: &[RecordBatch]) -> Result<Vec<MRow>, String> {
    let mut out = Vec::new();
    for b in batches {
        let id = column(b, "id", &DataType::Int64)?;
        let k = column(b, "k", &DataType::Int32)?;
        let v = column(b, "v", &DataType::Utf8)?;
        let p = column(b, "p", &DataType::Date32)?;
        let id = id.as_any().downcast_ref::<Int64Array>().unwrap();
        let k = k.as_any().downcast_ref::<Int32Array>().unwrap();
        let v = v.as_any().downcast_ref::<StringArray>().unwrap();
        let p = p.as_any().downcast_ref::<Date32Array>().unwrap();
        for i in 0..b.num_rows() {
            if id.is_null(i) {
                return Err(format!("row {i}: NULL id in a required column"));
            }
            out.push((
                id.value(i),
                k.is_valid(i).then(|| k.value(i)),
                v.is_valid(i).then(|| v.value(i).to_string()),
                p.is_valid(i).then(|| p.value(i)),
            ));
        }
    }
    Ok(out)
}

fn sorted(mut rows: Vec<MRow>) -> Vec<MRow> {
    rows.sort();
    rows
}

/// Where `actual` differs from `expected` (both sorted): up to 5 rows each way.
fn diff(expected: &[MRow], actual: &[MRow]) -> String {
    let mut missing = Vec::new();
    let mut unexpected = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < expected.len() || j < actual.len() {
        match (expected.get(i), actual.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                missing.push(a);
                i += 1;
            }
            (Some(a), None) => {
                missing.push(a);
                i += 1;
            }
            (_, Some(b)) => {
                unexpected.push(b);
                j += 1;
            }
            (None, None) => break,
        }
    }
    format!(
        "expected {} rows, got {}; missing {:?}{}; unexpected {:?}{}",
        expected.len(),
        actual.len(),
        &missing[..missing.len().min(5)],
        if missing.len() > 5 { " …" } else { "" },
        &unexpected[..unexpected.len().min(5)],
        if unexpected.len() > 5 { " …" } else { "" },
    )
}

// ---------------------------------------------------------------------------------------------
// Running a sequence

/// Why a sequence failed: at which step, what kind (kept while shrinking), the details.
#[derive(Debug, Clone)]
pub struct Failure {
    pub step: usize,
    pub kind: String,
    pub detail: String,
}

fn fail(step: usize, kind: &str, detail: impl Into<String>) -> Failure {
    Failure {
        step,
        kind: kind.to_string(),
        detail: detail.into(),
    }
}

/// A table of the run and its model: rows per retained snapshot id.
struct ModelTable {
    name: String,
    snaps: HashMap<i64, Vec<MRow>>,
}

/// A snapshot still to be read by the peers.
struct Pending {
    table: usize,
    snapshot: i64,
    label: String,
}

struct Run<'a> {
    cat: Catalog,
    work: &'a Path,
    tables: Vec<ModelTable>,
    pending: Vec<Pending>,
    queued: HashSet<(usize, i64)>,
    python: Option<PathBuf>,
    expected_files: HashMap<(usize, i64), PathBuf>,
}

impl Run<'_> {
    async fn load(&self, t: usize) -> Result<Table, String> {
        self.cat
            .load_table(&parse_ident(&self.tables[t].name).unwrap())
            .await
            .map_err(|e| format!("load {}: {e}", self.tables[t].name))
    }

    /// Current rows of table `t` in the model.
    fn current_rows(&self, table: &Table, t: usize) -> Vec<MRow> {
        match table.current_snapshot() {
            Some(s) => self.tables[t].snaps[&s.snapshot_id()].clone(),
            None => Vec::new(),
        }
    }

    /// Records the snapshots `table` has and the model lacks as holding `rows` (at most
    /// `max_new` of them), and forgets the expired ones.
    fn sync(
        &mut self,
        step: usize,
        t: usize,
        table: &Table,
        rows: &[MRow],
        max_new: usize,
    ) -> Result<(), Failure> {
        let ids: HashSet<i64> = table
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .collect();
        let m = &mut self.tables[t];
        let new: Vec<i64> = ids
            .iter()
            .filter(|i| !m.snaps.contains_key(i))
            .copied()
            .collect();
        if new.len() > max_new {
            return Err(fail(
                step,
                "snapshots",
                format!("{} new snapshots, expected at most {max_new}", new.len()),
            ));
        }
        for i in new {
            m.snaps.insert(i, rows.to_vec());
        }
        m.snaps.retain(|i, _| ids.contains(i));
        Ok(())
    }

    /// floe's scan of table `t` at `snapshot` (current when `None`) equals the model; queues
    /// the peers' read.
    async fn check(
        &mut self,
        step: usize,
        label: &str,
        t: usize,
        snapshot: Option<i64>,
    ) -> Result<(), Failure> {
        let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
        let sid = snapshot.or_else(|| table.current_snapshot().map(|s| s.snapshot_id()));
        let Some(sid) = sid else {
            return Ok(());
        };
        let expected = sorted(
            self.tables[t]
                .snaps
                .get(&sid)
                .ok_or_else(|| fail(step, "model", format!("snapshot {sid} not in the model")))?
                .clone(),
        );
        // Every other snapshot is read with each file in parts (a part per 7 rows, up to
        // 8 at once): the parts' rows, deletes and positions must add up to the file's.
        let scan = match sid % 2 {
            0 => Scan::new(&table).concurrency(8).split_rows(7),
            _ => Scan::new(&table),
        };
        let batches = scan
            .snapshot(SnapshotSelector::Id(sid))
            .to_batches()
            .await
            .map_err(|e| {
                fail(
                    step,
                    "floe-scan-error",
                    format!("{} @{sid}: {e}", table.name()),
                )
            })?;
        let actual = sorted(from_batches(&batches).map_err(|e| fail(step, "floe-scan", e))?);
        if actual != expected {
            return Err(fail(
                step,
                "floe-scan",
                format!(
                    "{label}: floe reads {} @{sid} wrong: {}",
                    self.tables[t].name,
                    diff(&expected, &actual)
                ),
            ));
        }
        if self.python.is_some() && self.queued.insert((t, sid)) {
            let file = self.work.join(format!("expected-{t}-{sid}.parquet"));
            write_parquet(&file, &[to_batch(&expected)]);
            self.expected_files.insert((t, sid), file);
            self.pending.push(Pending {
                table: t,
                snapshot: sid,
                label: format!("step {step} ({label}) {}@{sid}", self.tables[t].name),
            });
        }
        Ok(())
    }

    /// Runs the peers over the pending snapshots (each read through the table's latest
    /// metadata, which still holds it).
    async fn flush_peers(&mut self) -> Result<(), Failure> {
        let Some(py) = self.python.clone() else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut checks = Vec::new();
        let mut labels: HashMap<String, usize> = HashMap::new();
        let pending = std::mem::take(&mut self.pending);
        for (i, p) in pending.iter().enumerate() {
            let table = self.load(p.table).await.map_err(|e| fail(0, "load", e))?;
            if !self.tables[p.table].snaps.contains_key(&p.snapshot) {
                continue;
            }
            labels.insert(p.label.clone(), i);
            checks.push(serde_json::json!({
                "name": p.label,
                "metadata": table.metadata_location(),
                "snapshot_id": p.snapshot,
                "expected": self.expected_files[&(p.table, p.snapshot)],
                "engines": ["duckdb", "pyiceberg"],
            }));
        }
        let file = self
            .work
            .join(format!("checks-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&file, serde_json::to_vec(&checks).unwrap()).unwrap();
        let out = Command::new(&py)
            .arg(repo().join("tools/peers/peer_check.py"))
            .arg(&file)
            .output()
            .map_err(|e| fail(0, "peer", format!("run peer_check.py: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut bad: Vec<(usize, String)> = Vec::new();
        let mut seen = 0;
        for l in stdout.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
                continue;
            };
            seen += 1;
            if v.get("ok").and_then(|o| o.as_bool()) != Some(true) {
                let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let step = name
                    .strip_prefix("step ")
                    .and_then(|s| s.split(' ').next())
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                bad.push((step, l.to_string()));
            }
        }
        if !bad.is_empty() || (!out.status.success() && seen == 0) {
            bad.sort_by_key(|b| b.0);
            let step = bad.first().map(|b| b.0).unwrap_or(0);
            let engine = bad
                .first()
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b.1).ok())
                .and_then(|v| v.get("engine").and_then(|e| e.as_str()).map(String::from))
                .unwrap_or_default();
            return Err(fail(
                step,
                &format!("peer-{engine}"),
                format!(
                    "{}\n{}",
                    bad.iter()
                        .map(|b| b.1.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .rev()
                        .take(10)
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            ));
        }
        Ok(())
    }

    /// Retained snapshots of `table`, oldest first.
    fn retained(table: &Table) -> Vec<(i64, i64)> {
        let mut s: Vec<(i64, i64)> = table
            .metadata()
            .snapshots()
            .map(|s| (s.sequence_number(), s.snapshot_id()))
            .collect();
        s.sort();
        s.into_iter()
            .map(|(_, id)| {
                let ts = table.metadata().snapshot_by_id(id).unwrap().timestamp_ms();
                (id, ts)
            })
            .collect()
    }

    async fn step(&mut self, step: usize, op: &Op) -> Result<(), Failure> {
        let t = op.table() % self.tables.len();
        let name = self.tables[t].name.clone();
        let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
        let before = self.current_rows(&table, t);
        let op_err = |e: floe::Error| fail(step, &format!("{}-error", op.kind()), format!("{e}"));
        match op {
            Op::Append { rows, .. } => {
                let rows: Vec<MRow> = rows.iter().map(Row::model).collect();
                append(&self.cat, &table, vec![Ok(to_batch(&rows))])
                    .await
                    .map_err(op_err)?;
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                let after: Vec<MRow> = before.iter().cloned().chain(rows).collect();
                self.sync(step, t, &table, &after, 1)?;
            }
            Op::Delete { pred, .. } => {
                let sql = match pred {
                    Some(p) => format!("DELETE FROM {name} WHERE {}", sql_pred(p)),
                    None => format!("DELETE FROM {name}"),
                };
                let r = floe::dml::execute(&self.cat, &sql, None)
                    .await
                    .map_err(|e| fail(step, "delete-error", format!("{sql}: {e}")))?;
                let after: Vec<MRow> = before
                    .iter()
                    .filter(|r| !holds(pred, &|_, c| get_of(r, c)))
                    .cloned()
                    .collect();
                if r.removed_rows as usize != before.len() - after.len() {
                    return Err(fail(
                        step,
                        "delete-count",
                        format!(
                            "{sql}: reported {} rows deleted, the model deleted {}",
                            r.removed_rows,
                            before.len() - after.len()
                        ),
                    ));
                }
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &after, 1)?;
            }
            Op::Update { set, pred, .. } => {
                let set_sql = set
                    .iter()
                    .map(|s| sql_set(s, ""))
                    .collect::<Vec<_>>()
                    .join(", ");
                let sql = match pred {
                    Some(p) => format!("UPDATE {name} SET {set_sql} WHERE {}", sql_pred(p)),
                    None => format!("UPDATE {name} SET {set_sql}"),
                };
                let r = floe::dml::execute(&self.cat, &sql, None)
                    .await
                    .map_err(|e| fail(step, "update-error", format!("{sql}: {e}")))?;
                let matched = before
                    .iter()
                    .filter(|r| holds(pred, &|_, c| get_of(r, c)))
                    .count();
                if r.removed_rows as usize != matched {
                    return Err(fail(
                        step,
                        "update-count",
                        format!(
                            "{sql}: reported {} rows updated, the model matched {matched}",
                            r.removed_rows
                        ),
                    ));
                }
                let after: Vec<MRow> = before
                    .iter()
                    .map(|r| {
                        if holds(pred, &|_, c| get_of(r, c)) {
                            apply_set(r, set, None)
                        } else {
                            r.clone()
                        }
                    })
                    .collect();
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &after, 1)?;
            }
            Op::Merge {
                source, clauses, ..
            } => {
                let src: Vec<MRow> = source.iter().map(Row::model).collect();
                let sql = merge_sql(&name, clauses);
                let expected = model_merge(&before, &src, clauses);
                let r = floe::dml::execute(&self.cat, &sql, Some(vec![to_batch(&src)])).await;
                match (r, expected) {
                    (Ok(r), Ok(after)) => {
                        let path = match r.aligned {
                            Some(_) => &ALIGNED_MERGES,
                            None => &ONE_PASS_MERGES,
                        };
                        path.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if merges_aligned(&table)
                            .await
                            .is_some_and(|a| a != r.aligned.is_some())
                        {
                            return Err(fail(
                                step,
                                "merge-path",
                                format!(
                                    "{sql}: aligned {:?} on {:?}",
                                    r.aligned,
                                    table.metadata().default_partition_spec()
                                ),
                            ));
                        }
                        let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                        self.sync(step, t, &table, &after, 1)?;
                    }
                    (Err(e), Ok(_)) => {
                        return Err(fail(step, "merge-error", format!("{sql}: {e}")));
                    }
                    (Ok(_), Err(why)) => {
                        return Err(fail(
                            step,
                            "merge-not-refused",
                            format!("{sql}: committed, but Spark refuses it ({why})"),
                        ));
                    }
                    (Err(_), Err(_)) => {
                        // Refused as Spark refuses it: nothing may have been committed.
                        let now = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                        if now.metadata_location() != table.metadata_location() {
                            return Err(fail(step, "merge-refused-but-committed", sql));
                        }
                    }
                }
            }
            Op::Rewrite {
                options, filter, ..
            } => {
                let opts: HashMap<String, String> = options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let pred = match filter {
                    Some(p) => Some(
                        floe::expr::file_selection(&sql_pred(p), table.metadata().current_schema())
                            .map_err(|e| {
                                fail(step, "rewrite-filter", format!("{}: {e}", sql_pred(p)))
                            })?,
                    ),
                    None => None,
                };
                rewrite_data_files(&self.cat, &table, pred, &opts, None)
                    .await
                    .map_err(|e| {
                        fail(
                            step,
                            "rewrite-data-files-error",
                            format!("{options:?}: {e}"),
                        )
                    })?;
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &before, 20)?;
            }
            Op::RewriteDeletes { options, .. } => {
                let opts: HashMap<String, String> = options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                rewrite_position_delete_files(&self.cat, &table, &opts)
                    .await
                    .map_err(op_err)?;
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &before, 1)?;
            }
            Op::Expire {
                retain_last,
                older_than,
                ids,
                ..
            } => {
                let retained = Self::retained(&table);
                let current = table.current_snapshot().map(|s| s.snapshot_id());
                let older_than_ms = match older_than {
                    OlderThan::Default => None,
                    OlderThan::Future => Some(chrono::Utc::now().timestamp_millis() + 60_000),
                    OlderThan::Snapshot(n) if !retained.is_empty() => {
                        Some(retained[(*n % retained.len() as u64) as usize].1 + 1)
                    }
                    OlderThan::Snapshot(_) => None,
                };
                let others: Vec<i64> = retained
                    .iter()
                    .map(|r| r.0)
                    .filter(|i| Some(*i) != current)
                    .collect();
                let snapshot_ids: Vec<i64> = if others.is_empty() {
                    vec![]
                } else {
                    ids.iter()
                        .map(|n| others[(*n % others.len() as u64) as usize])
                        .collect()
                };
                let mut o = ExpireOptions::default()
                    .with_snapshot_ids(snapshot_ids)
                    .with_dry_run(true);
                o.older_than_ms = older_than_ms;
                o.retain_last = *retain_last;
                // Snapshots the peers have still to read are read before they go.
                let dry = expire_snapshots(&self.cat, &table, &o)
                    .await
                    .map_err(op_err)?;
                if self
                    .pending
                    .iter()
                    .any(|p| p.table == t && dry.expired_snapshot_ids.contains(&p.snapshot))
                {
                    self.flush_peers().await?;
                }
                o.dry_run = false;
                let r = expire_snapshots(&self.cat, &table, &o)
                    .await
                    .map_err(op_err)?;
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                if let Some(c) = current {
                    if r.expired_snapshot_ids.contains(&c)
                        || table.current_snapshot().map(|s| s.snapshot_id()) != Some(c)
                    {
                        return Err(fail(step, "expire", "the current snapshot was expired"));
                    }
                }
                for id in &r.expired_snapshot_ids {
                    if table.metadata().snapshot_by_id(*id).is_some() {
                        return Err(fail(
                            step,
                            "expire",
                            format!("{id} reported expired but kept"),
                        ));
                    }
                }
                self.sync(step, t, &table, &before, 0)?;
                self.check_all(step, "after expire").await?;
            }
            Op::Repartition { spec, .. } => {
                let md = table.metadata();
                let current: Vec<String> = md
                    .default_partition_spec()
                    .fields()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect();
                // The spec's terms: split at commas outside parentheses.
                let mut terms: Vec<String> = Vec::new();
                let (mut depth, mut term) = (0, String::new());
                for c in PARTITIONS.get(*spec).copied().unwrap_or("").chars() {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        ',' if depth == 0 => {
                            terms.push(std::mem::take(&mut term).trim().to_string());
                            continue;
                        }
                        _ => {}
                    }
                    term.push(c);
                }
                if !term.trim().is_empty() {
                    terms.push(term.trim().to_string());
                }
                let drops: Vec<String> = current
                    .iter()
                    .map(|n| format!("DROP PARTITION FIELD {n}"))
                    .collect();
                let adds: Vec<String> = terms
                    .iter()
                    .map(|t| format!("ADD PARTITION FIELD {t}"))
                    .collect();
                for clauses in [drops, adds] {
                    let mut changes = Vec::new();
                    for c in &clauses {
                        changes.extend(floe::spec::parse_alter_clause(c).unwrap());
                    }
                    if changes.is_empty() {
                        continue;
                    }
                    floe::txn::alter_table(&self.cat, table.ident(), &changes)
                        .await
                        .map_err(|e| {
                            fail(step, "repartition-error", format!("{clauses:?}: {e}"))
                        })?;
                }
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &before, 0)?;
            }
            Op::Maintain { .. } => {
                let r = floe::maintenance::maintain(&self.cat, &table, &Default::default())
                    .await
                    .map_err(op_err)?;
                if let Some(f) = r.steps.iter().find(|s| s.action == "failed") {
                    return Err(fail(
                        step,
                        "maintain-error",
                        format!("{}: {}", f.step, f.error.clone().unwrap_or_default()),
                    ));
                }
                let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, t, &table, &before, 30)?;
                self.check_all(step, "after maintain").await?;
            }
            Op::Orphans { .. } => {
                let future = chrono::Utc::now().timestamp_millis() + 60_000;
                remove_orphan_files(&self.cat, &table, Some(future), false)
                    .await
                    .map_err(op_err)?;
                self.check_all(step, "after remove-orphan-files").await?;
            }
            Op::Clone { at, .. } => {
                if self.tables.len() >= 4 {
                    return Ok(());
                }
                let retained = Self::retained(&table);
                let sel = match at {
                    Some(n) if !retained.is_empty() => {
                        SnapshotSelector::Id(retained[(*n % retained.len() as u64) as usize].0)
                    }
                    _ => SnapshotSelector::Current,
                };
                let source_rows = match &sel {
                    SnapshotSelector::Id(i) => self.tables[t].snaps[i].clone(),
                    _ => before.clone(),
                };
                if table.current_snapshot().is_none() {
                    return Ok(()); // nothing to clone (refused, tested elsewhere)
                }
                let target = format!("m.c{}", self.tables.len());
                clone_table(
                    &self.cat,
                    &table,
                    &sel,
                    &parse_ident(&target).unwrap(),
                    false,
                )
                .await
                .map_err(op_err)?;
                self.tables.push(ModelTable {
                    name: target,
                    snaps: HashMap::new(),
                });
                let n = self.tables.len() - 1;
                let clone = self.load(n).await.map_err(|e| fail(step, "load", e))?;
                self.sync(step, n, &clone, &source_rows, 1)?;
                self.check(step, op.kind(), n, None).await?;
            }
            Op::TimeTravel { pick, .. } => {
                let retained = Self::retained(&table);
                if !retained.is_empty() {
                    let sid = retained[(*pick % retained.len() as u64) as usize].0;
                    self.check(step, "time travel", t, Some(sid)).await?;
                }
            }
        }
        self.check(step, op.kind(), t, None).await
    }

    /// Every retained snapshot of every table reads as the model says.
    async fn check_all(&mut self, step: usize, label: &str) -> Result<(), Failure> {
        for t in 0..self.tables.len() {
            let table = self.load(t).await.map_err(|e| fail(step, "load", e))?;
            for (sid, _) in Self::retained(&table) {
                self.check(step, label, t, Some(sid)).await?;
            }
        }
        Ok(())
    }
}

async fn create_table(cat: &Catalog, config: &Config) -> Table {
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = if config.v3 {
        FormatVersion::V3
    } else {
        FormatVersion::V2
    };
    if let Some(p) = config.partition {
        c.partition_spec = parse_partition_spec(p, &schema).unwrap();
    }
    let mode = |m: bool| if m { "merge-on-read" } else { "copy-on-write" };
    let mut props: HashMap<String, String> = [
        ("write.delete.mode", mode(config.mor[0])),
        ("write.update.mode", mode(config.mor[1])),
        ("write.merge.mode", mode(config.mor[2])),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if config.partition_granularity {
        props.insert("write.delete.granularity".into(), "partition".into());
    }
    if let Some(n) = config.merge_manifests_at {
        props.insert("commit.manifest.min-count-to-merge".into(), n.to_string());
    }
    match config.merge_path {
        MergePath::Aligned => {}
        MergePath::Spilled => {
            props.insert(floe::spec::MERGE_SOURCE_MEMORY_BYTES.into(), "0".into());
        }
        MergePath::OnePass => {
            props.insert(floe::spec::MERGE_PARTITION_ALIGNED.into(), "false".into());
        }
    }
    c.properties = props;
    cat.create_table(&parse_ident("m.t0").unwrap(), c)
        .await
        .unwrap()
}

/// Runs `ops` on a fresh table from scratch; the first failure, if any.
async fn run_sequence(config: &Config, ops: &[Op], peers: bool) -> Result<(), Failure> {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cat = Catalog::open(None, Some(dir.path().join("wh").to_str().unwrap()), None).unwrap();
    create_table(&cat, config).await;
    let mut run = Run {
        cat,
        work: &work,
        tables: vec![ModelTable {
            name: "m.t0".into(),
            snaps: HashMap::new(),
        }],
        pending: Vec::new(),
        queued: HashSet::new(),
        python: if peers { peers_python() } else { None },
        expected_files: HashMap::new(),
    };
    let mut earlier = StdRng::seed_from_u64(ops.len() as u64);
    for (i, op) in ops.iter().enumerate() {
        let step = i + 1;
        let r = std::panic::AssertUnwindSafe(run.step(step, op))
            .catch_unwind()
            .await;
        match r {
            Ok(r) => r?,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                return Err(fail(step, &format!("{}-panic", op.kind()), msg));
            }
        }
        // A random retained snapshot of a random table (time travel).
        let t = earlier.gen_range(0..run.tables.len());
        let table = run.load(t).await.map_err(|e| fail(step, "load", e))?;
        let retained = Run::retained(&table);
        if !retained.is_empty() {
            let sid = retained[earlier.gen_range(0..retained.len())].0;
            run.check(step, "earlier snapshot", t, Some(sid)).await?;
        }
    }
    run.check_all(ops.len(), "end").await?;
    run.flush_peers().await
}

/// Shrinks a failing sequence: drops chunks of ops (halving the chunk size down to one op),
/// then halves the rows of appends and MERGE sources, keeping a failure of the same kind.
async fn shrink(config: &Config, ops: Vec<Op>, first: Failure, peers: bool) -> (Vec<Op>, Failure) {
    let mut ops: Vec<Op> = ops[..first.step.min(ops.len())].to_vec();
    let mut best = first;
    let same = |f: &Failure, best: &Failure| f.kind == best.kind;
    let mut tries = 0;
    let mut improved = true;
    while improved && tries < 400 {
        improved = false;
        let mut chunk = ops.len().div_ceil(2).max(1);
        while chunk >= 1 {
            let mut i = 0;
            while i < ops.len() {
                let mut cand = ops.clone();
                cand.drain(i..(i + chunk).min(cand.len()));
                tries += 1;
                if let Err(f) = run_sequence(config, &cand, peers).await {
                    if same(&f, &best) {
                        cand.truncate(f.step.min(cand.len()));
                        ops = cand;
                        best = f;
                        improved = true;
                        continue;
                    }
                }
                i += chunk;
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
        // Fewer rows in appends and MERGE sources.
        for i in 0..ops.len() {
            loop {
                let rows = match &ops[i] {
                    Op::Append { rows, .. } => rows.len(),
                    Op::Merge { source, .. } => source.len(),
                    _ => 0,
                };
                if rows == 0 {
                    break;
                }
                let mut done = false;
                for half in [0, 1] {
                    for keep_one in [false, true] {
                        let mut cand = ops.clone();
                        let v = match &mut cand[i] {
                            Op::Append { rows, .. } => rows,
                            Op::Merge { source, .. } => source,
                            _ => unreachable!(),
                        };
                        let n = v.len();
                        if keep_one {
                            if n <= 1 {
                                continue;
                            }
                            let keep = v[if half == 0 { 0 } else { n - 1 }].clone();
                            *v = vec![keep];
                        } else if half == 0 {
                            v.drain(..n.div_ceil(2));
                        } else {
                            v.truncate(n / 2);
                        }
                        tries += 1;
                        if let Err(f) = run_sequence(config, &cand, peers).await {
                            if same(&f, &best) {
                                ops = cand;
                                best = f;
                                improved = true;
                                done = true;
                                break;
                            }
                        }
                    }
                    if done {
                        break;
                    }
                }
                if !done {
                    break;
                }
            }
        }
    }
    (ops, best)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The minimal failing sequence, printed as data for a regression test.
fn report(seed: u64, config: &Config, ops: &[Op], f: &Failure) -> String {
    let mut s = format!(
        "seed {seed}: step {} [{}]: {}\nconfig: {config:?}\nops ({}):\n",
        f.step,
        f.kind,
        f.detail,
        ops.len()
    );
    for (i, op) in ops.iter().enumerate() {
        s.push_str(&format!("  {}: {op:?},\n", i + 1));
        if let Op::Merge { t, clauses, .. } = op {
            s.push_str(&format!(
                "     -- {}\n",
                merge_sql(&format!("t{t}"), clauses)
            ));
        }
    }
    s
}

/// Runs `n` sequences of seeds `seed..seed + n`; shrinks and reports every failure.
async fn run_many(seed: u64, n: u64, len: usize, peers_every: u64) -> Vec<String> {
    let start = Instant::now();
    let mut failures = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut ops_run = 0;
    for i in 0..n {
        let s = seed + i;
        let (config, ops) = generate(s, len);
        ops_run += ops.len();
        let peers = peers_every > 0 && i % peers_every == 0;
        if let Err(f) = run_sequence(&config, &ops, peers).await {
            let count = kinds.entry(f.kind.clone()).or_default();
            *count += 1;
            eprintln!(
                "model: seed {s} failed at step {} [{}]: {}",
                f.step, f.kind, f.detail
            );
            // Each new kind of failure is shrunk (the first few of a kind are reported).
            if *count <= 2 {
                let (min, f) = shrink(&config, ops, f, peers).await;
                let r = report(s, &config, &min, &f);
                eprintln!("model: minimal:\n{r}");
                failures.push(r);
            }
        }
        if (i + 1) % 100 == 0 {
            eprintln!(
                "model: {} sequences ({ops_run} ops) in {:.0?}, {} failed",
                i + 1,
                start.elapsed(),
                kinds.values().sum::<usize>()
            );
        }
    }
    eprintln!(
        "model: {n} sequences from seed {seed} ({ops_run} ops, peers every {peers_every}) in {:.1?}; failures by kind: {kinds:?}",
        start.elapsed()
    );
    failures
}

/// The seeded run: `FLOE_MODEL_SEQUENCES` sequences from `FLOE_MODEL_SEED` (24 from a fixed
/// seed by default), each checked by floe after every step and by DuckDB and pyiceberg at its
/// end (`FLOE_MODEL_PEERS=0` skips them, `FLOE_MODEL_PEERS_EVERY=K` runs them every K-th).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operation_sequences_match_the_model() {
    let n = env_u64("FLOE_MODEL_SEQUENCES").unwrap_or(24);
    let seed = env_u64("FLOE_MODEL_SEED").unwrap_or(0x5eed_0000);
    let len = env_u64("FLOE_MODEL_OPS").unwrap_or(12) as usize;
    let peers_every = if std::env::var("FLOE_MODEL_PEERS").as_deref() == Ok("0") {
        0
    } else {
        env_u64("FLOE_MODEL_PEERS_EVERY").unwrap_or(1)
    };
    let failures = run_many(seed, n, len, peers_every).await;
    assert!(
        failures.is_empty(),
        "{} failing sequences (minimal):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let (aligned, one_pass) = (
        ALIGNED_MERGES.load(std::sync::atomic::Ordering::Relaxed),
        ONE_PASS_MERGES.load(std::sync::atomic::Ordering::Relaxed),
    );
    eprintln!("model: {aligned} MERGEs ran partition-aligned, {one_pass} in one pass");
    assert!(
        n < 24 || (aligned > 0 && one_pass > 0),
        "the sequences must run MERGE both ways ({aligned} aligned, {one_pass} one pass)"
    );
}

/// The same seed gives the same sequence (a printed seed reproduces its failure).
#[test]
fn generation_is_deterministic() {
    let (c1, a) = generate(42, 12);
    let (c2, b) = generate(42, 12);
    assert_eq!(a, b);
    assert_eq!(format!("{c1:?}"), format!("{c2:?}"));
    assert_ne!(generate(43, 12).1, a);
}

/// The model's MERGE follows Spark: a target row matched twice is an error unless the only
/// matched action is an unconditional DELETE; unmatched duplicates are all inserted.
#[test]
fn model_merge_follows_spark() {
    let t: Vec<MRow> = vec![(1, Some(1), None, None), (2, None, None, None)];
    let s: Vec<MRow> = vec![
        (1, Some(5), None, None),
        (1, Some(6), None, None),
        (3, Some(7), None, None),
        (3, Some(8), None, None),
    ];
    let upsert = [
        Clause::Matched(None, Action::UpdateStar),
        Clause::NotMatched(None, None),
    ];
    assert!(model_merge(&t, &s, &upsert).is_err());
    let del = [
        Clause::Matched(None, Action::Delete),
        Clause::NotMatched(None, None),
    ];
    let r = sorted(model_merge(&t, &s, &del).unwrap());
    assert_eq!(r.iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 3, 3]);
    let ins = [Clause::NotMatched(None, Some(1))];
    let r = sorted(model_merge(&t, &s, &ins).unwrap());
    assert_eq!(r.len(), 4);
    assert_eq!(r[2], (3, Some(8), Some("ins".into()), None));
}

/// Runs a fixed sequence (a regression kept as data) with the peers, panicking with the report.
async fn replay(seed: u64, config: Config, ops: Vec<Op>) {
    let peers = std::env::var("FLOE_MODEL_PEERS").as_deref() != Ok("0");
    if let Err(f) = run_sequence(&config, &ops, peers).await {
        panic!("{}", report(seed, &config, &ops, &f));
    }
}

/// MERGE with duplicate source keys, as Spark runs it: no error without MATCHED clauses or
/// with one unconditional `WHEN MATCHED THEN DELETE` (floe refused both: "a target row
/// matches more than one source row"); the duplicated matched keys are not inserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_merge_duplicate_source_keys_without_update() {
    for (v3, mor) in [(false, false), (false, true), (true, true), (true, false)] {
        let config = Config {
            v3,
            mor: [mor, mor, mor],
            partition: None,
            partition_granularity: false,
            merge_path: MergePath::Aligned,
            merge_manifests_at: None,
        };
        let src = vec![
            Row(1, Some(5), Some("a"), None),
            Row(1, Some(6), Some("b"), None),
            Row(3, Some(7), None, Some(P0)),
            Row(3, Some(8), None, Some(P0)),
        ];
        let ops = vec![
            Op::Append {
                t: 0,
                rows: vec![Row(1, Some(1), None, None), Row(2, None, Some("x y"), None)],
            },
            Op::Merge {
                t: 0,
                source: src.clone(),
                clauses: vec![Clause::NotMatched(None, None)],
            },
            Op::Merge {
                t: 0,
                source: src.clone(),
                clauses: vec![Clause::NotMatchedBySource(
                    None,
                    Action::Update(vec![Set::KConst(Some(9))]),
                )],
            },
            Op::Merge {
                t: 0,
                source: src.clone(),
                clauses: vec![
                    Clause::Matched(None, Action::Delete),
                    Clause::NotMatched(None, Some(1)),
                ],
            },
            Op::Append {
                t: 0,
                rows: vec![Row(3, None, None, None)],
            },
            // A conditional matched clause keeps Spark's check: refused, nothing committed.
            Op::Merge {
                t: 0,
                source: src,
                clauses: vec![Clause::Matched(
                    Some(Pred::Cmp(Side::S, Col::K, CmpOp::Gt, 0)),
                    Action::Delete,
                )],
            },
        ];
        replay(0, config, ops).await;
    }
}
