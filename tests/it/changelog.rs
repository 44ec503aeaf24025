//! Changes between snapshots (`floe changes`, [`floe::scan::Changelog`]) and incremental
//! append reads (`floe scan --from-snapshot`, [`floe::scan::appended_between`]) on random
//! operation sequences — appends, deletes, updates, merges, compactions, in both write modes,
//! v2 and v3 — against a model that keeps each snapshot's rows, and (on copy-on-write tables,
//! the only ones Java's changelog scan reads) against Spark's `create_changelog_view` and
//! incremental read and pyiceberg's `incremental_append_scan`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Int32Type, Int64Type};
use floe::catalog::Catalog;
use floe::scan::{Changelog, ChangelogRange};
use floe::spec::FormatVersion;
use floe::table::parse_ident;
use floe::Table;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::common::*;

/// A row: (v, s) by id.
type State = BTreeMap<i64, (Option<i64>, Option<String>)>;

/// One committed operation: its snapshot, whether it was a compaction, the rows it appended
/// (appends only) and the table's rows after it.
struct Step {
    snapshot: i64,
    replace: bool,
    appended: Option<State>,
    state: State,
}

struct Run {
    cat: Catalog,
    name: String,
    dir: std::path::PathBuf,
    rng: StdRng,
    next_id: i64,
    state: State,
    steps: Vec<Step>,
    last: Option<i64>,
}

fn batch_of(rows: &State) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(rows.keys().copied())) as _,
        ),
        (
            "v",
            Arc::new(Int64Array::from_iter(rows.values().map(|r| r.0))) as _,
        ),
        (
            "s",
            Arc::new(StringArray::from_iter(rows.values().map(|r| r.1.clone()))) as _,
        ),
    ])
    .unwrap()
}

impl Run {
    async fn table(&self) -> Table {
        self.cat
            .load_table(&parse_ident(&self.name).unwrap())
            .await
            .unwrap()
    }

    fn fresh_rows(&mut self, n: usize) -> State {
        (0..n)
            .map(|_| {
                self.next_id += 1;
                (self.next_id, self.random_values())
            })
            .collect()
    }

    fn random_values(&mut self) -> (Option<i64>, Option<String>) {
        let v = (!self.rng.gen_bool(0.1)).then(|| self.rng.gen_range(0..5));
        let s = match self.rng.gen_range(0..4) {
            0 => None,
            i => Some(["a", "b", "c"][i - 1].to_string()),
        };
        (v, s)
    }

    /// Records the snapshot the last operation committed (if it committed one).
    async fn record(&mut self, replace: bool, appended: Option<State>) {
        let t = self.table().await;
        let sid = t.current_snapshot().map(|s| s.snapshot_id());
        if sid != self.last {
            let snapshot = sid.unwrap();
            self.steps.push(Step {
                snapshot,
                replace,
                appended,
                state: self.state.clone(),
            });
            self.last = sid;
        }
    }

    async fn step(&mut self) {
        let t = self.table().await;
        let name = self.name.clone();
        match self.rng.gen_range(0..10) {
            0..=2 => {
                let n = self.rng.gen_range(1..6);
                let rows = self.fresh_rows(n);
                floe::txn::append(&self.cat, &t, [Ok(batch_of(&rows))])
                    .await
                    .unwrap();
                self.state.extend(rows.clone());
                self.record(false, Some(rows)).await;
            }
            3..=4 => {
                let (m, r) = (self.rng.gen_range(2..5), self.rng.gen_range(0..2));
                floe::dml::execute(
                    &self.cat,
                    &format!("DELETE FROM {name} WHERE id % {m} = {r}"),
                    None,
                )
                .await
                .unwrap();
                self.state.retain(|id, _| id % m != r);
                self.record(false, None).await;
            }
            5..=6 => {
                let x = self.rng.gen_range(0..5);
                floe::dml::execute(
                    &self.cat,
                    &format!("UPDATE {name} SET v = v + 1, s = 'u' WHERE v = {x}"),
                    None,
                )
                .await
                .unwrap();
                for r in self.state.values_mut() {
                    if r.0 == Some(x) {
                        *r = (Some(x + 1), Some("u".into()));
                    }
                }
                self.record(false, None).await;
            }
            7..=8 => {
                // Some stored ids (updated) and some new ones (inserted).
                let mut source = State::new();
                let ids: Vec<i64> = self.state.keys().copied().collect();
                for _ in 0..self.rng.gen_range(0..4) {
                    if ids.is_empty() {
                        break;
                    }
                    let id = ids[self.rng.gen_range(0..ids.len())];
                    let vals = self.random_values();
                    source.insert(id, vals);
                }
                let n = self.rng.gen_range(usize::from(source.is_empty())..3);
                source.extend(self.fresh_rows(n));
                let path = self.dir.join(format!("src-{}.parquet", self.steps.len()));
                write_parquet(&path, &[batch_of(&source)]);
                floe::dml::execute(
                    &self.cat,
                    &format!(
                        "MERGE INTO {name} AS t USING '{}' AS s ON t.id = s.id \
                         WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
                        path.display()
                    ),
                    None,
                )
                .await
                .unwrap();
                self.state.extend(source);
                self.record(false, None).await;
            }
            _ => {
                let opts: HashMap<String, String> =
                    [("rewrite-all".to_string(), "true".to_string())].into();
                floe::maintenance::rewrite_data_files(&self.cat, &t, None, &opts, None)
                    .await
                    .unwrap();
                self.record(true, None).await;
            }
        }
    }

    /// The steps of range (from, to], by snapshot (`None`: from the start / to the end).
    fn range(&self, from: Option<i64>, to: Option<i64>) -> &[Step] {
        let start = from.map_or(0, |f| {
            self.steps.iter().position(|s| s.snapshot == f).unwrap() + 1
        });
        let end = to.map_or(self.steps.len(), |t| {
            self.steps.iter().position(|s| s.snapshot == t).unwrap() + 1
        });
        &self.steps[start..end]
    }

    fn state_before(&self, from: Option<i64>) -> State {
        from.map(|f| {
            self.steps
                .iter()
                .find(|s| s.snapshot == f)
                .unwrap()
                .state
                .clone()
        })
        .unwrap_or_default()
    }
}

fn row(id: i64, r: &(Option<i64>, Option<String>)) -> Vec<Value> {
    vec![json!(id), json!(r.0), json!(r.1)]
}

fn with(mut r: Vec<Value>, kind: &str, ordinal: usize, sid: i64) -> Vec<Value> {
    r.extend([json!(kind), json!(ordinal), json!(sid)]);
    r
}

fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort_by_key(|r| serde_json::to_string(r).unwrap());
    rows
}

/// The model's changelog: per snapshot of the range (compactions skipped), rows gone since
/// the parent (DELETE) and new ones (INSERT); with identifiers, an id in both is an update.
fn model_changes(run: &Run, from: Option<i64>, to: Option<i64>, ids: bool) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let mut before = run.state_before(from);
    let mut ordinal = 0;
    for step in run.range(from, to) {
        if step.replace {
            before = step.state.clone();
            continue;
        }
        let sid = step.snapshot;
        for (id, r) in &before {
            match step.state.get(id) {
                Some(a) if a == r => {}
                Some(a) if ids => {
                    out.push(with(row(*id, r), "UPDATE_BEFORE", ordinal, sid));
                    out.push(with(row(*id, a), "UPDATE_AFTER", ordinal, sid));
                }
                Some(a) => {
                    out.push(with(row(*id, r), "DELETE", ordinal, sid));
                    out.push(with(row(*id, a), "INSERT", ordinal, sid));
                }
                None => out.push(with(row(*id, r), "DELETE", ordinal, sid)),
            }
        }
        for (id, a) in &step.state {
            if !before.contains_key(id) {
                out.push(with(row(*id, a), "INSERT", ordinal, sid));
            }
        }
        before = step.state.clone();
        ordinal += 1;
    }
    sorted(out)
}

/// Net changes, without ordinals: rows of the end state not in the start (INSERT) and the
/// other way round (DELETE).
fn model_net(run: &Run, from: Option<i64>, to: Option<i64>) -> Vec<Vec<Value>> {
    let before = run.state_before(from);
    let steps = run.range(from, to);
    let after = steps
        .last()
        .map(|s| s.state.clone())
        .unwrap_or(before.clone());
    let mut out = Vec::new();
    for (id, r) in &before {
        if after.get(id) != Some(r) {
            out.push([row(*id, r), vec![json!("DELETE")]].concat());
        }
    }
    for (id, a) in &after {
        if before.get(id) != Some(a) {
            out.push([row(*id, a), vec![json!("INSERT")]].concat());
        }
    }
    sorted(out)
}

fn model_appends(run: &Run, from: Option<i64>, to: Option<i64>) -> Vec<Vec<Value>> {
    sorted(
        run.range(from, to)
            .iter()
            .filter_map(|s| s.appended.as_ref())
            .flat_map(|rows| rows.iter().map(|(id, r)| row(*id, r)))
            .collect(),
    )
}

/// floe's rows as JSON values: id, v, s (then the change columns when present).
fn floe_rows(batches: &[RecordBatch]) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for b in batches {
        let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let v = b.column_by_name("v").unwrap().as_primitive::<Int64Type>();
        let s = b.column_by_name("s").unwrap().as_string::<i32>();
        let meta = b.column_by_name("_change_type").map(|t| {
            (
                t.as_string::<i32>().clone(),
                b.column_by_name("_change_ordinal")
                    .unwrap()
                    .as_primitive::<Int32Type>()
                    .clone(),
                b.column_by_name("_commit_snapshot_id")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .clone(),
            )
        });
        for r in 0..b.num_rows() {
            let mut row = vec![
                json!(id.value(r)),
                if v.is_null(r) {
                    Value::Null
                } else {
                    json!(v.value(r))
                },
                if s.is_null(r) {
                    Value::Null
                } else {
                    json!(s.value(r))
                },
            ];
            if let Some((t, o, sid)) = &meta {
                row.extend([json!(t.value(r)), json!(o.value(r)), json!(sid.value(r))]);
            }
            out.push(row);
        }
    }
    sorted(out)
}

/// A check of one range: (kind, from, to, identifier columns, net changes).
#[derive(Debug, Clone)]
struct Check {
    appends: bool,
    from: Option<i64>,
    to: Option<i64>,
    ids: bool,
    net: bool,
}

impl Check {
    fn spec(&self) -> Value {
        if self.appends {
            json!({"kind": "appends", "from": self.from, "to": self.to})
        } else {
            json!({"kind": "changes", "from": self.from, "to": self.to,
                   "identifier_columns": if self.ids { Some(vec!["id"]) } else { None },
                   "net_changes": self.net})
        }
    }
}

/// Runs random operations on a new table and checks random ranges against the model;
/// returns the checks and floe's rows for each (for the peers).
async fn random_case(
    seed: u64,
    fv: FormatVersion,
    mode: &str,
    partitioned: bool,
    ops: usize,
) -> (tempfile::TempDir, Run, Vec<(Check, Vec<Vec<Value>>)>) {
    let (dir, cat) = fs_catalog();
    let name = "db.cl".to_string();
    let schema = floe::spec::parse_schema("id long not null, v long, s string").unwrap();
    let mut c = floe::TableCreation::new(schema.clone());
    if partitioned {
        c.partition_spec = floe::spec::parse_partition_spec("bucket(2, id)", &schema).unwrap();
    }
    c.format_version = fv;
    for k in ["write.delete.mode", "write.update.mode", "write.merge.mode"] {
        c.properties.insert(k.into(), mode.into());
    }
    cat.create_table(&parse_ident(&name).unwrap(), c)
        .await
        .unwrap();
    let mut run = Run {
        cat,
        name,
        dir: dir.path().to_path_buf(),
        rng: StdRng::seed_from_u64(seed),
        next_id: 0,
        state: State::new(),
        steps: Vec::new(),
        last: None,
    };
    for _ in 0..ops {
        run.step().await;
    }
    let t = run.table().await;
    let ids: Vec<i64> = run.steps.iter().map(|s| s.snapshot).collect();
    let mut checks = Vec::new();
    for k in 0..8 {
        let a = run.rng.gen_range(0..=ids.len());
        let b = run.rng.gen_range(a..=ids.len());
        // from: None or a snapshot; to: a later snapshot or None (the current one).
        let from = (a > 0).then(|| ids[a - 1]);
        let to = (b < ids.len() && b > a).then(|| ids[b - 1]);
        let check = Check {
            appends: k % 4 == 3,
            from,
            to,
            ids: k % 4 == 1,
            net: k % 4 == 2,
        };
        let range = ChangelogRange {
            from_snapshot_exclusive: check.from,
            to_snapshot: check.to,
            ..Default::default()
        };
        let what = format!("seed {seed} {fv:?} {mode} partitioned={partitioned} {check:?}");
        let (got, want) = if check.appends {
            if check.from.is_none() {
                continue;
            }
            let got = floe::scan::appended_between(&floe::scan::Scan::new(&t), &range)
                .await
                .unwrap();
            (floe_rows(&got), model_appends(&run, check.from, check.to))
        } else {
            let mut log = Changelog::new(&t, range).net_changes(check.net);
            if check.ids {
                log = log.identifier_columns(vec!["id".into()]);
            }
            let got = floe_rows(&log.read().await.unwrap());
            if check.net {
                let types: Vec<Vec<Value>> = sorted(got.iter().map(|r| r[..4].to_vec()).collect());
                assert_eq!(types, model_net(&run, check.from, check.to), "{what}");
                checks.push((check, got));
                continue;
            }
            let want = model_changes(&run, check.from, check.to, check.ids);
            (got, want)
        };
        assert_eq!(got, want, "{what}");
        checks.push((check, got));
    }
    (dir, run, checks)
}

#[tokio::test]
async fn changes_of_random_operations_match_the_model() {
    let mut compared = 0;
    for seed in 0..10u64 {
        let fv = if seed % 2 == 0 {
            FormatVersion::V2
        } else {
            FormatVersion::V3
        };
        let mode = if seed % 3 == 0 {
            "copy-on-write"
        } else {
            "merge-on-read"
        };
        let (_, _, checks) = random_case(seed, fv, mode, seed % 4 < 2, 16).await;
        compared += checks.iter().map(|(_, rows)| rows.len()).sum::<usize>();
    }
    assert!(compared > 200, "too few rows compared: {compared}");
}

#[tokio::test]
async fn changes_and_appends_match_spark_and_pyiceberg() {
    let Some(py) = peers_python() else { return };
    for (seed, fv, partitioned) in [
        (101u64, FormatVersion::V2, false),
        (202, FormatVersion::V3, true),
    ] {
        let (dir, run, checks) = random_case(seed, fv, "copy-on-write", partitioned, 12).await;
        let t = run.table().await;
        let spec = json!({
            "warehouse": dir.path(),
            "table": "db.cl",
            "metadata": t.metadata_location(),
            "columns": ["id", "v", "s"],
            "checks": checks.iter().map(|(c, _)| c.spec()).collect::<Vec<_>>(),
        });
        let spec_path = dir.path().join("changelog-spec.json");
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let out = std::process::Command::new(&py)
            .arg(repo().join("tools/peers/changelog.py"))
            .arg(&spec_path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let peers: Value = serde_json::from_slice(
            out.stdout
                .split(|b| *b == b'\n')
                .rfind(|l| l.starts_with(b"{"))
                .unwrap(),
        )
        .unwrap();
        let mut compared = 0;
        for engine in ["spark", "pyiceberg"] {
            let Some(results) = peers[engine].as_array() else {
                continue;
            };
            assert_eq!(results.len(), checks.len(), "{engine}");
            for ((check, ours), theirs) in checks.iter().zip(results) {
                if theirs.is_null() {
                    continue;
                }
                compared += ours.len();
                let theirs: Vec<Vec<Value>> = serde_json::from_value(theirs.clone()).unwrap();
                assert_eq!(
                    &sorted(theirs),
                    ours,
                    "{engine} disagrees (seed {seed}, {fv:?}): {check:?}"
                );
            }
        }
        assert!(compared > 20, "too few rows compared: {compared}");
    }
}

/// JSON lines as values.
fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The CLI: `floe changes` with each option, `floe scan --from-snapshot`, and bad ranges.
#[test]
fn changes_cli() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path();
    ok(
        wh,
        &[
            "create",
            "db.c",
            "--schema",
            "id long not null, v string",
            "--property",
            "write.update.mode=copy-on-write",
        ],
    );
    let csv = wh.join("a.csv");
    std::fs::write(&csv, "id,v\n1,a\n2,b\n3,c\n").unwrap();
    ok(wh, &["append", "db.c", csv.to_str().unwrap()]);
    let snaps: Value = serde_json::from_str(&ok(wh, &["snapshots", "db.c", "--json"])).unwrap();
    let first = snaps[0]["snapshot_id"].as_i64().unwrap().to_string();
    ok(wh, &["delete", "db.c", "--where", "id = 2"]);
    ok(
        wh,
        &["update", "db.c", "--set", "v = 'z'", "--where", "id = 3"],
    );
    ok(wh, &["append", "db.c", csv.to_str().unwrap()]);
    let json_rows = |args: &[&str]| -> Vec<Value> {
        let mut a = vec!["changes", "db.c", "--json"];
        a.extend(args);
        lines(&ok(wh, &a))
    };
    let kinds = |rows: &[Value]| -> Vec<String> {
        let mut k: Vec<String> = rows
            .iter()
            .map(|r| format!("{}:{}", r["id"], r["_change_type"].as_str().unwrap()))
            .collect();
        k.sort();
        k
    };
    assert_eq!(
        kinds(&json_rows(&["--from", &first])),
        ["1:INSERT", "2:DELETE", "2:INSERT", "3:DELETE", "3:INSERT", "3:INSERT"]
    );
    assert_eq!(
        kinds(&json_rows(&[
            "--from",
            &first,
            "--identifier-columns",
            "id"
        ]))
        .iter()
        .filter(|k| k.contains("UPDATE"))
        .count(),
        2
    );
    assert_eq!(
        kinds(&json_rows(&["--from", &first, "--net-changes"])),
        ["1:INSERT", "3:INSERT"]
    );
    assert_eq!(
        ok(
            wh,
            &[
                "changes",
                "db.c",
                "--where",
                "_change_type = 'DELETE'",
                "--count"
            ]
        )
        .trim(),
        "2"
    );
    let appended = lines(&ok(
        wh,
        &["scan", "db.c", "--from-snapshot", &first, "--json"],
    ));
    assert_eq!(appended.len(), 3);
    // Bad input: an unknown snapshot, net changes with update images, both starts.
    for (args, says) in [
        (vec!["--from", "42"], "not an ancestor"),
        (vec!["--to", "42"], "no snapshot 42"),
        (
            vec!["--net-changes", "--identifier-columns", "id"],
            "net changes",
        ),
        (vec!["--from", &first, "--from-timestamp", "0"], "not both"),
        (vec!["--compute-updates"], "no identifier fields"),
    ] {
        let mut a = vec!["changes", "db.c"];
        a.extend(args.iter().copied());
        let out = floe(wh, &a);
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    // Once the first snapshots are expired, what was live before the oldest one left cannot
    // be told: an error, not every row reported as inserted.
    let future = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    ok(
        wh,
        &[
            "expire-snapshots",
            "db.c",
            "--older-than",
            &future,
            "--retain-last",
            "2",
        ],
    );
    // The oldest snapshot left's parent is gone: an error naming it.
    let out = floe(wh, &["changes", "db.c"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("was expired"), "{}", text(&out));
    // The first snapshot is no longer in the history the range follows.
    for a in [
        vec!["changes", "db.c", "--from", first.as_str()],
        vec!["scan", "db.c", "--from-snapshot", first.as_str(), "--count"],
    ] {
        let out = floe(wh, &a);
        assert!(!out.status.success(), "{a:?}");
        assert!(
            text(&out).contains("not an ancestor"),
            "{a:?}: {}",
            text(&out)
        );
    }
}
