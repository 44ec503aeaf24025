//! Merge engines on keyed tables (sum, aggregate, partial-update, first-row): random batches
//! (a key many times in one batch and across batches, nulls, negative values and zero sums,
//! files that lack columns) folded by floe; after every batch the table equals an
//! independent answer — DuckDB's GROUP BY over every raw row so far, and ClickHouse's
//! SummingMergeTree / AggregatingMergeTree (tools/peers/merge_oracle.py) — before and after
//! `rewrite_data_files`, and DuckDB, pyiceberg and Spark read what floe reads.
//! `FLOE_MERGE_SEED=S` runs other random batches (the seeds S, S+1, … per engine).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::DataType;
use floe::catalog::Catalog;
use floe::keyed::{ChangeBatch, UpsertOptions};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::TableIdent;
use floe::{Table, TableCreation};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::common::*;

/// One engine's table: its DDL and properties, the oracle's column list.
struct Case {
    engine: &'static str,
    ddl: &'static str,
    /// (column, function) — function `None` for engines without functions.
    columns: Vec<(&'static str, Option<&'static str>)>,
    v2: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            engine: "aggregate",
            ddl: "k long not null, hits long, mx double, mn long, cnt long, fs string, ls string, \
                  fnn string, lnn string, ba boolean, bo boolean, avg_ms double, users long, approx long",
            columns: vec![
                ("hits", Some("sum")),
                ("mx", Some("max")),
                ("mn", Some("min")),
                ("cnt", Some("count")),
                ("fs", Some("first")),
                ("ls", Some("last")),
                ("fnn", Some("first_non_null")),
                ("lnn", Some("last_non_null")),
                ("ba", Some("bool_and")),
                ("bo", Some("bool_or")),
                ("avg_ms", Some("avg:ms")),
                ("users", Some("count_distinct:user_id")),
                ("approx", Some("approx_count_distinct:user_id")),
            ],
            v2: false,
        },
        Case {
            engine: "sum",
            ddl: "k long not null, hits long, amount decimal(12,2), ls string",
            columns: vec![("hits", Some("sum")), ("amount", Some("sum")), ("ls", None)],
            v2: true,
        },
        Case {
            engine: "partial-update",
            // A string key: stored rows matched (and held by a writer) by their encoded key.
            ddl: "k string not null, hits long, mx double, ls string",
            columns: vec![("hits", None), ("mx", None), ("ls", None)],
            v2: false,
        },
        Case {
            engine: "first-row",
            ddl: "k long not null, hits long, ls string",
            columns: vec![("hits", None), ("ls", None)],
            v2: true,
        },
    ]
}

/// A random file of changes for `case`: keys from a small range (repeats in and across
/// batches), nulls, negative values; some files lack an optional column.
fn random_file(case: &Case, rng: &mut StdRng) -> RecordBatch {
    let n = rng.gen_range(1..30);
    let keys: Vec<i64> = (0..n).map(|_| rng.gen_range(0..12)).collect();
    let key: ArrayRef = if case.ddl.starts_with("k string") {
        Arc::new(StringArray::from_iter_values(
            keys.iter().map(|k| format!("key-{k}")),
        ))
    } else {
        Arc::new(Int64Array::from(keys))
    };
    let mut cols: Vec<(String, ArrayRef)> = vec![("k".into(), key)];
    let null = |rng: &mut StdRng| rng.gen_bool(0.15);
    let drop_column = rng.gen_bool(0.2);
    for (i, (c, f)) in case.columns.iter().enumerate() {
        if drop_column && i == case.columns.len() - 1 {
            continue;
        }
        let a: Option<ArrayRef> = match (*c, *f) {
            (_, Some("count")) => None,
            ("avg_ms", _) => {
                Some(Arc::new(Float64Array::from_iter((0..n).map(|_| {
                    (!null(rng)).then(|| rng.gen_range(-50..200) as f64 / 4.0)
                }))))
            }
            ("users", _) => Some(Arc::new(Int64Array::from_iter(
                (0..n).map(|_| (!null(rng)).then(|| rng.gen_range(0..40))),
            ))),
            ("approx", _) => None,
            ("hits", _) if case.engine == "sum" => Some(Arc::new(Int64Array::from_iter_values(
                // Small values: zero sums happen.
                (0..n).map(|_| rng.gen_range(-2..3)),
            ))),
            ("amount", _) => Some(Arc::new(
                arrow::array::Decimal128Array::from_iter_values(
                    (0..n).map(|_| rng.gen_range(-300..300)),
                )
                .with_precision_and_scale(12, 2)
                .unwrap(),
            )),
            ("hits" | "mn", _) => Some(Arc::new(Int64Array::from_iter(
                (0..n).map(|_| (!null(rng)).then(|| rng.gen_range(-1000..1000))),
            ))),
            ("mx", _) => {
                Some(Arc::new(Float64Array::from_iter((0..n).map(|_| {
                    (!null(rng)).then(|| rng.gen_range(-1000..1000) as f64 / 8.0)
                }))))
            }
            ("ba" | "bo", _) => Some(Arc::new(BooleanArray::from_iter(
                (0..n).map(|_| (!null(rng)).then(|| rng.gen_bool(0.7))),
            ))),
            _ => Some(Arc::new(StringArray::from_iter((0..n).map(|_| {
                (!null(rng)).then(|| format!("s{}", rng.gen_range(0..1000)))
            })))),
        };
        if let Some(a) = a {
            // avg and distinct counts read their input columns.
            let name = match *c {
                "avg_ms" => "ms",
                "users" => "user_id",
                other => other,
            };
            cols.push((name.to_string(), a));
        }
    }
    RecordBatch::try_from_iter(cols).unwrap()
}

fn value(c: &ArrayRef, i: usize) -> Value {
    if c.is_null(i) {
        return Value::Null;
    }
    match c.data_type() {
        DataType::Int64 => json!(c.as_any().downcast_ref::<Int64Array>().unwrap().value(i)),
        DataType::Float64 => json!(c.as_any().downcast_ref::<Float64Array>().unwrap().value(i)),
        DataType::Boolean => json!(c.as_any().downcast_ref::<BooleanArray>().unwrap().value(i)),
        DataType::Utf8 => json!(c.as_any().downcast_ref::<StringArray>().unwrap().value(i)),
        DataType::Decimal128(_, _) => {
            let s = arrow::util::display::array_value_to_string(c, i).unwrap();
            json!(s.parse::<f64>().unwrap())
        }
        DataType::LargeBinary | DataType::Binary => {
            json!(arrow::util::display::array_value_to_string(c, i).unwrap())
        }
        other => panic!("unexpected type {other}"),
    }
}

/// floe's rows of `t` at `snapshot`: `columns` as JSON, sorted by key.
async fn floe_rows(t: &Table, snapshot: Option<i64>, columns: &[&str]) -> Vec<Vec<Value>> {
    let mut s = Scan::new(t);
    if let Some(id) = snapshot {
        s = s.snapshot(SnapshotSelector::Id(id));
    }
    let mut rows = Vec::new();
    for b in s.to_batches().await.unwrap() {
        for i in 0..b.num_rows() {
            rows.push(
                columns
                    .iter()
                    .map(|n| value(b.column(b.schema().index_of(n).unwrap()), i))
                    .collect::<Vec<_>>(),
            );
        }
    }
    rows.sort_by_key(|r| (r[0].as_i64(), r[0].as_str().map(String::from)));
    rows
}

/// Whether two values agree: exactly, floats to 1e-9 relative, `approx` within 6%.
fn agree(column: &str, want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            let tol = if column == "approx" {
                0.06 * a.abs() + 1.0
            } else {
                1e-9 * a.abs().max(1.0)
            };
            (a - b).abs() <= tol
        }
        // DuckDB prints decimals as strings.
        (Value::String(a), Value::Number(b)) => a
            .parse::<f64>()
            .is_ok_and(|a| (a - b.as_f64().unwrap()).abs() < 1e-9),
        _ => want == got,
    }
}

fn assert_agree(oracle: &str, columns: &[&str], want: &[Value], got: &[Vec<Value>], what: &str) {
    let want: Vec<&Vec<Value>> = want.iter().map(|r| r.as_array().unwrap()).collect();
    let same = want.len() == got.len()
        && want.iter().zip(got).all(|(w, g)| {
            w.len() == g.len()
                && columns
                    .iter()
                    .zip(w.iter().zip(g))
                    .all(|(c, (a, b))| agree(c, a, b))
        });
    assert!(
        same,
        "{what}: floe disagrees with {oracle} on columns {columns:?}\n{oracle}: {want:?}\nfloe:  {got:?}"
    );
}

async fn create(cat: &Catalog, ident: &TableIdent, case: &Case) -> Table {
    let mut c = TableCreation::new(floe::spec::parse_schema(case.ddl).unwrap())
        .with_primary_key(&["k".to_string()])
        .with_property("floe.merge-engine", case.engine)
        .with_property("write.merge.mode", "merge-on-read")
        .with_property("format-version", if case.v2 { "2" } else { "3" });
    for (col, f) in &case.columns {
        if let Some(f) = f {
            c = c.with_property(format!("floe.aggregate.{col}"), *f);
        }
    }
    cat.create_table(ident, c).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_engines_agree_with_duckdb_clickhouse_and_the_peers_on_random_batches() {
    let py = peers_python().expect("the peers venv (bash tools/peers/setup.sh)");
    let (dir, cat) = sqlite_catalog();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut checks = Vec::new();
    let mut kept = Vec::new();
    // `FLOE_MERGE_SEED` runs other random batches (default: the suite's).
    let seed = std::env::var("FLOE_MERGE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000u64);
    for (ci, case) in cases().into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(seed + ci as u64);
        let ident =
            floe::table::parse_ident(&format!("db.{}", case.engine.replace('-', "_"))).unwrap();
        let mut t = create(&cat, &ident, &case).await;
        let mut batches: Vec<Vec<String>> = Vec::new();
        let mut snapshots = Vec::new();
        // The same batches through a long-lived writer (which keeps the table's rows in
        // memory between batches) must leave the same rows, states included.
        let wident =
            floe::table::parse_ident(&format!("db.{}_w", case.engine.replace('-', "_"))).unwrap();
        create(&cat, &wident, &case).await;
        let writer = floe::keyed::KeyedWriter::new(&cat, wident.clone());
        // And split into 1-3 tasks that fold their share apart (`pre_fold`), the folded rows
        // applied in task order in one upsert: the same rows again.
        let dident =
            floe::table::parse_ident(&format!("db.{}_d", case.engine.replace('-', "_"))).unwrap();
        let mut dt = create(&cat, &dident, &case).await;
        // And shuffled: the tasks split their shares by key into 1-3 shards, each shard is
        // merged with the stored rows apart, and the shards commit at once.
        let sident =
            floe::table::parse_ident(&format!("db.{}_s", case.engine.replace('-', "_"))).unwrap();
        let mut st = create(&cat, &sident, &case).await;
        for b in 0..6 {
            let mut changes = ChangeBatch::new();
            let mut files = Vec::new();
            let mut parts = Vec::new();
            for f in 0..rng.gen_range(1..3) {
                let rows = random_file(&case, &mut rng);
                let path = work.join(format!("{}-{b}-{f}.parquet", case.engine));
                write_parquet(&path, std::slice::from_ref(&rows));
                parts.push(rows.clone());
                changes.push(path.display().to_string(), rows);
                files.push(path.display().to_string());
            }
            let wr = writer
                .apply(parts.clone(), None)
                .await
                .unwrap_or_else(|e| panic!("{} writer batch {b}: {e}", case.engine));
            if b > 0 {
                assert_eq!(
                    wr.lookup, "state",
                    "{}: the writer kept its rows",
                    case.engine
                );
            }
            let r = floe::keyed::upsert(&cat, &ident, &changes, &UpsertOptions::default())
                .await
                .unwrap_or_else(|e| panic!("{} batch {b}: {e}", case.engine));
            t = r.table;
            let total: usize = parts.iter().map(|p| p.num_rows()).sum();
            let mut cuts: Vec<usize> = (0..rng.gen_range(0..3))
                .map(|_| rng.gen_range(0..=total))
                .collect();
            cuts.extend([0, total]);
            cuts.sort();
            let mut folded = ChangeBatch::new();
            let mut shares = Vec::new();
            for (i, w) in cuts.windows(2).enumerate() {
                // The task's rows [w[0], w[1]) of the batch's parts, in order.
                let mut share = ChangeBatch::new();
                let mut at = 0;
                for p in &parts {
                    let (s, e) = (w[0].max(at), w[1].min(at + p.num_rows()));
                    if s < e {
                        share.push(format!("task {i}"), p.slice(s - at, e - s));
                    }
                    at += p.num_rows();
                }
                let f = floe::keyed::pre_fold(&dt, &share)
                    .await
                    .unwrap_or_else(|e| panic!("{} batch {b} task {i}: {e}", case.engine));
                folded.push(format!("task {i}"), f);
                shares.push(share);
            }
            let dr = floe::keyed::upsert(
                &cat,
                &dident,
                &folded,
                &UpsertOptions::default().with_pre_folded(true),
            )
            .await
            .unwrap_or_else(|e| panic!("{} batch {b} (pre-folded): {e}", case.engine));
            dt = dr.table;
            let n_shards = rng.gen_range(1..4);
            let job = floe::txn::StagingJob::new();
            let mut tasks = Vec::new();
            for share in &shares {
                tasks.push(
                    floe::pending::stage_shuffle(&st, share, n_shards, &job)
                        .await
                        .unwrap_or_else(|e| panic!("{} batch {b} shards: {e}", case.engine)),
                );
            }
            let mut staged = Vec::new();
            for shard in 0..n_shards {
                staged.push(
                    floe::pending::stage_merged_upsert(&st, &tasks, shard, &job)
                        .await
                        .unwrap_or_else(|e| panic!("{} batch {b} shard {shard}: {e}", case.engine)),
                );
            }
            let options = floe::pending::CommitPendingOptions::new();
            let sr = match floe::pending::commit_pending(&cat, &staged, &options)
                .await
                .unwrap_or_else(|e| panic!("{} batch {b} (shuffled): {e}", case.engine))
            {
                floe::pending::PendingCommit::Upsert(r) => r,
                other => panic!("a shuffled upsert committed as {other:?}"),
            };
            floe::pending::discard_pending(&st, &tasks).await.unwrap();
            st = sr.table;
            assert_eq!(
                (
                    sr.inserted,
                    sr.updated,
                    sr.deleted,
                    sr.ignored,
                    sr.keys,
                    sr.input_rows
                ),
                (
                    r.inserted,
                    r.updated,
                    r.deleted,
                    r.ignored,
                    r.keys,
                    r.input_rows
                ),
                "{} batch {b}: shuffled tasks ({n_shards} shards) count as one upsert",
                case.engine
            );
            assert_eq!(
                (dr.inserted, dr.updated, dr.deleted, dr.ignored),
                (r.inserted, r.updated, r.deleted, r.ignored),
                "{} batch {b}: pre-folded tasks count as one upsert",
                case.engine
            );
            assert_eq!(
                (r.inserted, r.updated, r.deleted, r.ignored),
                (wr.inserted, wr.updated, wr.deleted, wr.ignored),
                "{} batch {b}: upsert and the writer count alike",
                case.engine
            );
            let names: Vec<String> = t
                .metadata()
                .current_schema()
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.name.clone())
                .collect();
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            assert_eq!(
                floe_rows(&t, None, &all).await,
                floe_rows(&wr.table, None, &all).await,
                "{} batch {b}: the writer's rows",
                case.engine
            );
            assert_eq!(
                floe_rows(&t, None, &all).await,
                floe_rows(&dt, None, &all).await,
                "{} batch {b}: the pre-folded tasks' rows (cuts {cuts:?})",
                case.engine
            );
            assert_eq!(
                floe_rows(&t, None, &all).await,
                floe_rows(&st, None, &all).await,
                "{} batch {b}: the shuffled tasks' rows (cuts {cuts:?}, {n_shards} shards)",
                case.engine
            );
            snapshots.push(t.current_snapshot().map(|s| s.snapshot_id()));
            batches.push(files);
        }
        // The oracles, after every batch.
        let spec = json!({
            "engine": case.engine,
            "key": ["k"],
            "columns": case.columns.iter().map(|(c, f)| {
                let mut o = json!({"name": c});
                if let Some(f) = f {
                    let (name, input) = f.split_once(':').map(|(a, b)| (a, Some(b))).unwrap_or((f, None));
                    o["function"] = json!(name);
                    if let Some(i) = input { o["input"] = json!(i); }
                }
                if case.engine == "sum" && f.is_none() { o["function"] = json!("last"); }
                o
            }).collect::<Vec<_>>(),
            "batches": batches,
        });
        let spec_path = work.join(format!("{}-oracle.json", case.engine));
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let out = std::process::Command::new(&py)
            .arg(repo().join("tools/peers/merge_oracle.py"))
            .arg(&spec_path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "merge_oracle.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut compared = (0, 0);
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let batch = v["batch"].as_u64().unwrap() as usize;
            let oracle = v["oracle"].as_str().unwrap();
            let columns: Vec<&str> = v["columns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            let got = floe_rows(&t, snapshots[batch - 1], &columns).await;
            let what = format!("{} batch {batch}", case.engine);
            assert_agree(oracle, &columns, v["rows"].as_array().unwrap(), &got, &what);
            if oracle == "duckdb" {
                compared.0 += 1
            } else {
                compared.1 += 1
            }
        }
        assert_eq!(
            compared.0, 6,
            "{}: DuckDB answered every batch",
            case.engine
        );
        if matches!(case.engine, "sum" | "aggregate") {
            assert_eq!(
                compared.1, 6,
                "{}: ClickHouse answered every batch",
                case.engine
            );
        }
        // The peers read what floe reads, mid-way and at the end.
        for (i, snap) in [(2usize, snapshots[2]), (5, snapshots[5])] {
            let expected = work.join(format!("{}-expected-{i}.parquet", case.engine));
            floe_expected(&t, snap, &expected).await;
            checks.push(Check {
                name: format!("{} after batch {}", case.engine, i + 1),
                metadata: t.metadata_location().to_string(),
                snapshot_id: snap,
                expected: expected.display().to_string(),
                engines: None,
                refuse: None,
            });
        }
        // Compaction keeps values and states.
        let names: Vec<String> = t
            .metadata()
            .current_schema()
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let before = floe_rows(&t, None, &all).await;
        let options = [("rewrite-all".to_string(), "true".to_string())].into();
        let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &options, None)
            .await
            .unwrap();
        let t = r.table.unwrap_or(t);
        let after = floe_rows(&t, None, &all).await;
        assert_eq!(
            before, after,
            "{}: rewrite_data_files changed the rows",
            case.engine
        );
        kept.push((ident.clone(), case.engine, names, before));
    }
    peer_check(&py, &work, &checks);
    // Expiry keeps the values (after the peers read the older snapshots); a clone carries
    // them, states included.
    for (ident, engine, names, before) in kept {
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let t = cat.load_table(&ident).await.unwrap();
        let expire = floe::maintenance::ExpireOptions::default()
            .with_older_than_ms(i64::MAX)
            .with_retain_last(1);
        let e = floe::maintenance::expire_snapshots(&cat, &t, &expire)
            .await
            .unwrap();
        assert!(
            !e.expired_snapshot_ids.is_empty(),
            "{engine}: expiry removed snapshots"
        );
        let t = cat.load_table(&ident).await.unwrap();
        assert_eq!(before, floe_rows(&t, None, &all).await, "{engine}: expiry");
        let copy =
            floe::table::parse_ident(&format!("db.{}_copy", engine.replace('-', "_"))).unwrap();
        floe::txn::clone_table(&cat, &t, &SnapshotSelector::Current, &copy, false)
            .await
            .unwrap();
        let c = cat.load_table(&copy).await.unwrap();
        assert_eq!(before, floe_rows(&c, None, &all).await, "{engine}: clone");
    }
    drop(dir);
}

/// Bad configurations and bad input: a clear error, nothing created or committed.
#[tokio::test]
async fn merge_engine_mistakes_are_refused_and_commit_nothing() {
    let (_dir, cat) = sqlite_catalog();
    let ident = floe::table::parse_ident("db.s").unwrap();
    let base = || {
        TableCreation::new(floe::spec::parse_schema("k long not null, a long, mx long").unwrap())
            .with_primary_key(&["k".to_string()])
    };
    let e = cat
        .create_table(&ident, base().with_property("floe.merge-engine", "sum"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not sum every numeric column"), "{e}");
    let e = cat
        .create_table(
            &ident,
            base()
                .with_property("floe.merge-engine", "aggregate")
                .with_property("floe.aggregate.k", "sum"),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("part of the primary key"), "{e}");
    assert!(!cat.table_exists(&ident).await.unwrap());
    // A sum that overflows at write: nothing committed.
    let t = cat
        .create_table(
            &ident,
            TableCreation::new(floe::spec::parse_schema("k long not null, a int").unwrap())
                .with_primary_key(&["k".to_string()])
                .with_property("floe.merge-engine", "sum")
                .with_property("floe.aggregate.a", "sum"),
        )
        .await
        .unwrap();
    let rows = |a: Vec<i32>| {
        RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from(vec![1; a.len()])) as ArrayRef,
            ),
            ("a", Arc::new(arrow::array::Int32Array::from(a)) as _),
        ])
        .unwrap()
    };
    let opts = UpsertOptions::default();
    floe::keyed::upsert(
        &cat,
        &ident,
        &ChangeBatch::from_batches([rows(vec![i32::MAX - 1])]),
        &opts,
    )
    .await
    .unwrap();
    let e = floe::keyed::upsert(
        &cat,
        &ident,
        &ChangeBatch::from_batches([rows(vec![5])]),
        &opts,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("overflows"), "{e}");
    let now = cat.load_table(&ident).await.unwrap();
    assert_eq!(
        now.metadata().snapshots().count(),
        1,
        "nothing committed after the overflow"
    );
    let _ = (t, Path::new("."));
}

/// A partial-update table ordered by a version column: a batch's older versions of stored
/// keys fold under the stored row (its values stay where they are not null) and still count
/// as updates, not inserts (a version reorders a key's rows: the stored row is not first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_update_by_version_counts_stored_keys_as_updated() {
    let (_dir, cat) = sqlite_catalog();
    let ident = floe::table::parse_ident("db.profile").unwrap();
    let c = TableCreation::new(
        floe::spec::parse_schema("k long not null, hits long, ls string, ver long").unwrap(),
    )
    .with_primary_key(&["k".to_string()])
    .with_property("floe.merge-engine", "partial-update")
    .with_property("floe.merge.version-column", "ver");
    cat.create_table(&ident, c).await.unwrap();
    let batch = |keys: std::ops::Range<i64>, ver: i64, ls: Option<&str>| {
        let n = keys.end - keys.start;
        RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from_iter_values(keys.clone())) as ArrayRef,
            ),
            (
                "hits",
                Arc::new(Int64Array::from_iter_values(keys.map(|k| k * ver))) as _,
            ),
            ("ls", Arc::new(StringArray::from(vec![ls; n as usize])) as _),
            (
                "ver",
                Arc::new(Int64Array::from(vec![ver; n as usize])) as _,
            ),
        ])
        .unwrap()
    };
    let apply = |b: RecordBatch| {
        let cat = cat.clone();
        let ident = ident.clone();
        async move {
            floe::keyed::upsert(
                &cat,
                &ident,
                &ChangeBatch::from_batches([b]),
                &UpsertOptions::default(),
            )
            .await
            .unwrap()
        }
    };
    let r = apply(batch(0..10, 5, Some("five"))).await;
    assert_eq!((r.inserted, r.updated), (10, 0));
    // Keys 0..10 again at an older version with a null `ls`, keys 10..15 new.
    let r = apply(batch(0..15, 1, None)).await;
    assert_eq!((r.inserted, r.updated, r.ignored), (5, 10, 0));
    let got = floe_rows(&r.table, None, &["k", "hits", "ls", "ver"]).await;
    assert_eq!(got.len(), 15);
    for row in got {
        let k = row[0].as_i64().unwrap();
        let want = match k < 10 {
            true => vec![json!(k), json!(k * 5), json!("five"), json!(5)],
            false => vec![json!(k), json!(k), Value::Null, json!(1)],
        };
        assert_eq!(row, want, "key {k}");
    }
}
