//! Write-audit-publish against a model: random sequences of staged writes (`wap.id`),
//! cherry-picks and main writes on v2 and v3 tables. After each step floe's main and every
//! staged snapshot hold the model's rows, a refused cherry-pick commits nothing, and the
//! model says which picks Java allows (fast-forward, re-applied appends) and refuses (an
//! ancestor, an already published WAP id, a non-append off main's head). Spark, pyiceberg and
//! DuckDB read main (unchanged by staging) and the staged snapshots by id, row for row.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use floe::scan::{Scan, SnapshotSelector};
use floe::table::parse_ident;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::common::*;

type Rows = Vec<(i64, i64)>;

/// What a statement does to the model's rows.
type RowChange = Box<dyn Fn(&mut Rows)>;

fn batch(rows: &[(i64, i64)]) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as _,
        ),
        (
            "v",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))) as _,
        ),
    ])
    .unwrap()
}

async fn rows_at(t: &floe::Table, snapshot: Option<i64>) -> Rows {
    let Some(id) = snapshot else {
        return vec![];
    };
    let batches = Scan::new(t)
        .snapshot(SnapshotSelector::Id(id))
        .to_batches()
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let i = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..b.num_rows() {
            out.push((i.value(r), v.value(r)));
        }
    }
    out.sort();
    out
}

fn write_expected(path: &Path, rows: &[(i64, i64)]) {
    write_parquet(path, &[batch(rows)]);
}

/// A staged snapshot as the model knows it.
#[derive(Debug, Clone)]
struct Staged {
    wap_id: String,
    parent: Option<i64>,
    append: bool,
    /// Rows of the snapshot (its parent's plus its change).
    rows: Rows,
    /// Rows it added (appends).
    added: Rows,
    /// Its step (the latest is picked often).
    seq: usize,
}

/// The model: main's rows and history, and the staged snapshots.
#[derive(Debug, Default)]
struct Model {
    main: Rows,
    /// Main's history (snapshot ids), oldest first; no rollbacks here, so it only grows.
    chain: Vec<i64>,
    /// WAP ids on main's history (staged there by a fast-forward, or published by a pick).
    published: HashSet<String>,
    /// Snapshots picked into main by a re-apply.
    picked: HashSet<i64>,
    staged: BTreeMap<i64, Staged>,
}

impl Model {
    fn head(&self) -> Option<i64> {
        self.chain.last().copied()
    }
    /// What a cherry-pick of `id` does: `Some(true)` fast-forward, `Some(false)` re-apply,
    /// `None` refused.
    fn pick(&self, id: i64) -> Option<bool> {
        let s = self.staged.get(&id)?;
        if self.published.contains(&s.wap_id) {
            return None;
        }
        if s.parent == self.head() {
            return Some(true);
        }
        if self.chain.contains(&id) || self.picked.contains(&id) || !s.append {
            return None;
        }
        Some(false)
    }
}

async fn run_sequence(version: u8, seed: u64) {
    let (dir, cat) = sqlite_catalog();
    let ident = parse_ident("db.wap").unwrap();
    let mut c =
        floe::TableCreation::new(floe::spec::parse_schema("id long not null, v long").unwrap())
            .with_property("write.wap.enabled", "true");
    c.format_version = if version == 3 {
        floe::spec::FormatVersion::V3
    } else {
        floe::spec::FormatVersion::V2
    };
    for k in ["write.delete.mode", "write.update.mode"] {
        c.properties.insert(k.into(), "merge-on-read".into());
    }
    let t = cat.create_table(&ident, c).await.unwrap();
    let first: Rows = (0..10).map(|i| (i, i * 10)).collect();
    let r = floe::txn::append(&cat, &t, [Ok(batch(&first))])
        .await
        .unwrap();
    let mut m = Model {
        main: first,
        chain: vec![r.snapshot_id.unwrap()],
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = 10i64;
    let mut checks = Vec::new();
    let (mut ff, mut reapplied, mut refused) = (0, 0, 0);
    for step in 0..60 {
        let t = cat.load_table(&ident).await.unwrap();
        let before = t.metadata_location().to_string();
        let wap_id = format!("w{}", rng.gen_range(0..8));
        match rng.gen_range(0..10) {
            // A main append.
            0 | 1 => {
                let new: Rows = (next..next + rng.gen_range(1..4)).map(|i| (i, i)).collect();
                next += new.len() as i64;
                let r = floe::txn::append(&cat, &t, [Ok(batch(&new))])
                    .await
                    .unwrap();
                m.main.extend(new);
                m.chain.push(r.snapshot_id.unwrap());
            }
            // A main delete.
            2 => {
                let k = rng.gen_range(3..7);
                let r = floe::dml::execute(
                    &cat,
                    &format!("DELETE FROM db.wap WHERE id % {k} = 2"),
                    None,
                )
                .await
                .unwrap();
                if let Some(id) = r.snapshot_id {
                    m.main.retain(|r| r.0 % k != 2);
                    m.chain.push(id);
                }
            }
            // A staged append.
            3..=5 => {
                let new: Rows = (next..next + rng.gen_range(1..4))
                    .map(|i| (i, -i))
                    .collect();
                next += new.len() as i64;
                let staged = t.with_wap_id(&wap_id).unwrap();
                let r = floe::txn::append(&cat, &staged, [Ok(batch(&new))])
                    .await
                    .unwrap();
                let mut rows = m.main.clone();
                rows.extend(new.iter().copied());
                rows.sort();
                m.staged.insert(
                    r.snapshot_id.unwrap(),
                    Staged {
                        wap_id: wap_id.clone(),
                        parent: m.head(),
                        append: true,
                        rows,
                        added: new,
                        seq: step,
                    },
                );
            }
            // A staged update or delete (published only by a fast-forward).
            6 => {
                let k = rng.gen_range(2..5);
                let (sql, f): (String, RowChange) = if rng.gen_bool(0.5) {
                    (
                        format!("UPDATE db.wap SET v = v + 1000 WHERE id % {k} = 0"),
                        Box::new(move |rows: &mut Rows| {
                            for r in rows.iter_mut().filter(|r| r.0 % k == 0) {
                                r.1 += 1000;
                            }
                        }),
                    )
                } else {
                    (
                        format!("DELETE FROM db.wap WHERE id % {k} = 1"),
                        Box::new(move |rows: &mut Rows| rows.retain(|r| r.0 % k != 1)),
                    )
                };
                let r = floe::dml::execute_with(&cat, &sql, None, Some(&wap_id))
                    .await
                    .unwrap();
                if let Some(id) = r.snapshot_id {
                    let mut rows = m.main.clone();
                    f(&mut rows);
                    rows.sort();
                    m.staged.insert(
                        id,
                        Staged {
                            wap_id: wap_id.clone(),
                            parent: m.head(),
                            append: false,
                            rows,
                            added: vec![],
                            seq: step,
                        },
                    );
                }
            }
            // A cherry-pick of a staged snapshot (or of one already on main).
            _ => {
                // In staging order (snapshot ids are random: ordering by id would make the
                // sequence differ from run to run under one seed).
                let mut ids: Vec<i64> = m.staged.keys().copied().collect();
                ids.sort_by_key(|id| m.staged[id].seq);
                if ids.is_empty() {
                    continue;
                }
                // Often the latest staged one (a fast-forward when main has not moved).
                let latest = *m.staged.iter().max_by_key(|(_, s)| s.seq).unwrap().0;
                let id = if rng.gen_bool(0.5) {
                    latest
                } else {
                    ids[rng.gen_range(0..ids.len())]
                };
                let expect = m.pick(id);
                match floe::txn::cherrypick(&cat, &ident, id).await {
                    Ok(r) => {
                        let s = m.staged[&id].clone();
                        match expect {
                            Some(true) => {
                                assert!(r.fast_forward, "step {step}: {id} should fast-forward");
                                assert_eq!(r.snapshot_id, id);
                                m.main = s.rows.clone();
                                m.chain.push(id);
                                ff += 1;
                            }
                            Some(false) => {
                                assert!(!r.fast_forward, "step {step}: {id} re-applied");
                                m.main.extend(s.added.iter().copied());
                                m.chain.push(r.snapshot_id);
                                m.picked.insert(id);
                                let new = r.table.metadata().snapshot_by_id(r.snapshot_id).unwrap();
                                let p = &new.summary().additional_properties;
                                assert_eq!(p.get("source-snapshot-id"), Some(&id.to_string()));
                                assert_eq!(p.get("published-wap-id"), Some(&s.wap_id));
                                assert_eq!(
                                    new.parent_snapshot_id(),
                                    Some(m.chain[m.chain.len() - 2])
                                );
                                reapplied += 1;
                            }
                            None => panic!("step {step}: cherry-pick of {id} ({s:?}) was accepted"),
                        }
                        assert_eq!(r.published_wap_id.as_deref(), Some(s.wap_id.as_str()));
                        m.published.insert(s.wap_id);
                    }
                    Err(e) => {
                        assert!(
                            expect.is_none(),
                            "step {step}: cherry-pick of {id} refused: {e}"
                        );
                        assert_eq!(e.kind(), floe::ErrorKind::InvalidInput, "{e}");
                        let now = cat.load_table(&ident).await.unwrap();
                        assert_eq!(now.metadata_location(), before, "a refused pick committed");
                        refused += 1;
                    }
                }
            }
        }
        m.main.sort();
        let t = cat.load_table(&ident).await.unwrap();
        assert_eq!(
            t.metadata().current_snapshot_id(),
            m.head(),
            "v{version} step {step}"
        );
        assert_eq!(
            rows_at(&t, m.head()).await,
            m.main,
            "v{version} step {step}: main"
        );
        for (id, s) in &m.staged {
            let snap = t.metadata().snapshot_by_id(*id).unwrap();
            assert_eq!(
                snap.summary().additional_properties.get("wap.id"),
                Some(&s.wap_id)
            );
            assert_eq!(
                rows_at(&t, Some(*id)).await,
                s.rows,
                "v{version} step {step}: staged {id}"
            );
        }
        // Main and one staged snapshot, for the peers (every few steps).
        if step % 8 == 7 {
            let expected = dir.path().join(format!("main-{step}.parquet"));
            write_expected(&expected, &m.main);
            checks.push(Check {
                name: format!("v{version} step {step} main"),
                metadata: t.metadata_location().to_string(),
                snapshot_id: None,
                expected: expected.to_string_lossy().into(),
                engines: None,
                refuse: None,
            });
            let unpublished = m
                .staged
                .iter()
                .filter(|(id, _)| !m.chain.contains(id))
                .max_by_key(|(_, s)| s.seq);
            if let Some((id, s)) = unpublished {
                let expected = dir.path().join(format!("staged-{step}.parquet"));
                write_expected(&expected, &s.rows);
                checks.push(Check {
                    name: format!("v{version} step {step} staged {id} ({})", s.wap_id),
                    metadata: t.metadata_location().to_string(),
                    snapshot_id: Some(*id),
                    expected: expected.to_string_lossy().into(),
                    engines: None,
                    refuse: None,
                });
            }
        }
    }
    assert!(
        ff > 0 && reapplied > 0 && refused > 0,
        "ff {ff}, re-applied {reapplied}, refused {refused}"
    );
    let t = cat.load_table(&ident).await.unwrap();
    let expected = dir.path().join("main-final.parquet");
    write_expected(&expected, &m.main);
    checks.push(Check {
        name: format!("v{version} final main"),
        metadata: t.metadata_location().to_string(),
        snapshot_id: None,
        expected: expected.to_string_lossy().into(),
        engines: None,
        refuse: None,
    });
    if let Some(py) = peers_python() {
        peer_check(&py, dir.path(), &checks);
    }

    // Expiry keeps staged snapshots until they age out, like any snapshot off the refs.
    let o = floe::maintenance::ExpireOptions::default();
    floe::maintenance::expire_snapshots(&cat, &t, &o)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    for id in m.staged.keys() {
        assert!(
            t.metadata().snapshot_by_id(*id).is_some(),
            "young staged {id} expired"
        );
    }
    // Files only staged snapshots reach (every file of a snapshot main does not read).
    let files_of = |t: &floe::Table, id: i64| {
        let t = t.clone();
        async move {
            let plan = Scan::new(&t)
                .snapshot(SnapshotSelector::Id(id))
                .plan()
                .await
                .unwrap();
            let mut out = HashSet::new();
            for f in &plan.files {
                out.insert(f.file.file_path().to_string());
                out.extend(f.deletes.iter().map(|d| d.file.file_path().to_string()));
            }
            out
        }
    };
    let main_files = files_of(&t, m.head().unwrap()).await;
    let mut staged_only = HashSet::new();
    for id in m.staged.keys() {
        staged_only.extend(files_of(&t, *id).await);
    }
    staged_only.retain(|f| !main_files.contains(f));
    let o = floe::maintenance::ExpireOptions::default()
        .with_older_than_ms(chrono::Utc::now().timestamp_millis() + 1)
        .with_retain_last(1);
    floe::maintenance::expire_snapshots(&cat, &t, &o)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    for id in m.staged.keys().filter(|id| Some(**id) != m.head()) {
        assert!(
            t.metadata().snapshot_by_id(*id).is_none(),
            "old staged {id} kept"
        );
    }
    let exists = |f: &str| Path::new(f.strip_prefix("file://").unwrap_or(f)).exists();
    assert!(!staged_only.is_empty());
    for f in &staged_only {
        assert!(
            !exists(f),
            "v{version}: {f}, reached only by expired staged snapshots, kept"
        );
    }
    for f in &main_files {
        assert!(exists(f), "v{version}: {f}, read by main, deleted");
    }
    // The published rows survive the expiry of the snapshots they were staged in.
    assert_eq!(
        rows_at(&t, m.head()).await,
        m.main,
        "v{version} after expiry"
    );
}

#[tokio::test]
async fn staged_writes_and_cherry_picks_agree_with_the_model_and_the_peers() {
    for (version, seed) in [(2u8, 11u64), (3, 12)] {
        run_sequence(version, seed).await;
    }
}

/// `floe` in `wh`, returning (exit code, stdout, stderr).
fn run(wh: &Path, args: &[&str]) -> (i32, String, String) {
    let o = floe(wh, args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn metadata_of(wh: &Path, table: &str) -> String {
    let (code, out, err) = run(wh, &["describe", table, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["metadata_location"].as_str().unwrap().to_string()
}

#[test]
fn bad_wap_input_is_refused_and_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let wh = wh.as_path();
    let csv = dir.path().join("rows.csv");
    std::fs::write(&csv, "id,v\n1,10\n2,20\n").unwrap();
    let csv = csv.to_str().unwrap();
    let ok = |args: &[&str]| {
        let (code, out, err) = run(wh, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    ok(&["create", "db.t", "--schema", "id long, v long"]);
    ok(&["append", "db.t", csv]);
    // --wap-id without write.wap.enabled: refused before anything is written.
    let before = metadata_of(wh, "db.t");
    let (code, _, err) = run(wh, &["append", "db.t", csv, "--wap-id", "a"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("write.wap.enabled=true"), "{err}");
    let (code, _, err) = run(
        wh,
        &["delete", "db.t", "--where", "id = 1", "--wap-id", "a"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("write.wap.enabled"), "{err}");
    assert_eq!(metadata_of(wh, "db.t"), before);
    // --wap-id and --branch together: refused by the argument parser.
    let (code, _, err) = run(
        wh,
        &["append", "db.t", csv, "--wap-id", "a", "--branch", "b"],
    );
    assert_eq!(code, 2, "{err}");
    ok(&["alter", "db.t", "--set", "write.wap.enabled=true"]);
    // An unknown snapshot.
    let before = metadata_of(wh, "db.t");
    let (code, _, err) = run(wh, &["cherrypick", "db.t", "42"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no snapshot 42"), "{err}");
    // Stage twice with one WAP id, publish the first; the second is refused.
    let stage = |id: &str| -> i64 {
        let out = ok(&["append", "db.t", csv, "--wap-id", id, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["snapshot_id"].as_i64().unwrap()
    };
    let a = stage("audit");
    let b = stage("audit");
    assert_ne!(metadata_of(wh, "db.t"), before);
    let out = ok(&["cherrypick", "db.t", &a.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fast_forward"], true);
    assert_eq!(v["published_wap_id"], "audit");
    let before = metadata_of(wh, "db.t");
    let (code, _, err) = run(wh, &["cherrypick", "db.t", &b.to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already published"), "{err}");
    // Picking what main already has.
    let (code, _, err) = run(wh, &["cherrypick", "db.t", &a.to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already"), "{err}");
    // A staged delete off an older main state: Java only fast-forwards deletes.
    let d = {
        let out = ok(&[
            "delete", "db.t", "--where", "id = 1", "--wap-id", "del", "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["snapshot_id"].as_i64().unwrap()
    };
    ok(&["append", "db.t", csv]);
    let before_pick = metadata_of(wh, "db.t");
    assert_ne!(before, before_pick);
    let (code, _, err) = run(wh, &["cherrypick", "db.t", &d.to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fast-forward"), "{err}");
    assert_eq!(metadata_of(wh, "db.t"), before_pick);
    // Main's rows: the first append, the published one and the last append.
    let out = ok(&["scan", "db.t", "--count", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["record_count"], 6, "{out}");
    // `floe sql --wap-id` (Spark's spark.wap.id): staged, main unchanged until picked.
    let count = |args: &[&str]| -> i64 {
        let v: serde_json::Value = serde_json::from_str(&ok(args)).unwrap();
        v["record_count"].as_i64().unwrap()
    };
    let before = metadata_of(wh, "db.t");
    let out = ok(&[
        "sql",
        "DELETE FROM db.t WHERE v = 20",
        "--wap-id",
        "sql-1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let staged = v["snapshot_id"].as_i64().unwrap().to_string();
    assert_eq!(count(&["scan", "db.t", "--count", "--json"]), 6);
    assert_eq!(
        count(&["scan", "db.t", "--snapshot", &staged, "--count", "--json"]),
        3
    );
    let out = ok(&["cherrypick", "db.t", &staged, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["published_wap_id"], "sql-1", "{out}");
    assert_eq!(count(&["scan", "db.t", "--count", "--json"]), 3);
    assert_ne!(metadata_of(wh, "db.t"), before);
    // Without the property: refused, nothing written.
    ok(&["alter", "db.t", "--set", "write.wap.enabled=false"]);
    let before = metadata_of(wh, "db.t");
    let (code, _, err) = run(
        wh,
        &["sql", "DELETE FROM db.t WHERE v = 10", "--wap-id", "sql-2"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("write.wap.enabled"), "{err}");
    assert_eq!(metadata_of(wh, "db.t"), before);
}

/// Rows of `table` at ref `r` (`None`: main) through the CLI, sorted, as (id, v) text pairs.
fn cli_rows(wh: &Path, table: &str, r: Option<&str>) -> Vec<(i64, String)> {
    let mut args = vec!["scan", table, "--json"];
    if let Some(r) = r {
        args.extend(["--ref", r]);
    }
    let o = floe(wh, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut out: Vec<(i64, String)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["id"].as_i64().unwrap(), v["v"].to_string())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn upsert_ingest_and_rewrite_write_a_branch_and_leave_main_alone() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let wh = wh.as_path();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().to_string()
    };
    let ok = |args: &[&str]| {
        let (code, out, err) = run(wh, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let refused = |args: &[&str], what: &str| {
        let (code, _, err) = run(wh, args);
        assert_ne!(code, 0, "{args:?} was accepted");
        assert!(err.contains(what), "{args:?}: {err}");
    };
    let s = |rows: &[(i64, &str)]| -> Vec<(i64, String)> {
        rows.iter().map(|(i, v)| (*i, format!("\"{v}\""))).collect()
    };
    let n = |rows: &[(i64, i64)]| -> Vec<(i64, String)> {
        rows.iter().map(|(i, v)| (*i, v.to_string())).collect()
    };

    // A keyed table: upserts to a branch (by --branch and by Spark's name) and staged.
    ok(&[
        "create",
        "db.k",
        "--schema",
        "id long not null, v string, ver long",
        "--primary-key",
        "id",
        "--property",
        "floe.merge.version-column=ver",
        "--property",
        "write.wap.enabled=true",
    ]);
    ok(&[
        "upsert",
        "db.k",
        &file("k1.csv", "id,v,ver\n1,a,1\n2,b,1\n3,c,1\n"),
    ]);
    ok(&["branch", "create", "db.k", "dev"]);
    ok(&[
        "upsert",
        "db.k",
        &file("k2.csv", "id,v,ver\n2,B,2\n4,d,1\n"),
        "--branch",
        "dev",
    ]);
    ok(&[
        "upsert",
        "db.k.branch_dev",
        &file("k3.csv", "id,v,ver\n3,C,2\n1,old,0\n"),
    ]);
    let main = s(&[(1, "a"), (2, "b"), (3, "c")]);
    let dev = s(&[(1, "a"), (2, "B"), (3, "C"), (4, "d")]);
    assert_eq!(cli_rows(wh, "db.k", None), main);
    assert_eq!(cli_rows(wh, "db.k", Some("dev")), dev);
    let out = ok(&[
        "upsert",
        "db.k",
        &file("k4.csv", "id,v,ver\n5,e,1\n"),
        "--wap-id",
        "k",
        "--json",
    ]);
    let staged: serde_json::Value = serde_json::from_str(&out).unwrap();
    let staged = staged["snapshot_id"].as_i64().unwrap().to_string();
    assert_eq!(cli_rows(wh, "db.k", None), main);
    ok(&["cherrypick", "db.k", &staged]);
    let main = s(&[(1, "a"), (2, "b"), (3, "c"), (5, "e")]);
    assert_eq!(cli_rows(wh, "db.k", None), main);
    // Checkpoints and tombstones are table-wide: refused on a branch.
    refused(
        &[
            "upsert",
            "db.k",
            &file("k5.csv", "id,v,ver\n6,f,1\n"),
            "--branch",
            "dev",
            "--sink-id",
            "s",
            "--checkpoint",
            "1",
        ],
        "checkpoint",
    );
    ok(&[
        "create",
        "db.kd",
        "--schema",
        "id long not null, v string, ver long, del int",
        "--primary-key",
        "id",
        "--property",
        "floe.merge.version-column=ver",
        "--property",
        "floe.merge.delete-column=del",
    ]);
    ok(&[
        "upsert",
        "db.kd",
        &file("d1.csv", "id,v,ver,del\n1,a,1,0\n"),
    ]);
    ok(&["branch", "create", "db.kd", "dev"]);
    refused(
        &[
            "upsert",
            "db.kd",
            &file("d2.csv", "id,v,ver,del\n1,a,2,1\n"),
            "--branch",
            "dev",
        ],
        "tombstones",
    );
    assert_eq!(cli_rows(wh, "db.kd", Some("dev")), s(&[(1, "a")]));

    // Snapshot ingestion into a branch of staging, published from it.
    ok(&["create", "db.st", "--schema", "id long, v long, ver long"]);
    ok(&[
        "ingest-snapshot",
        "db.st",
        &file("s1.csv", "id,v,ver\n1,1,1\n2,2,1\n"),
        "--key",
        "id",
        "--version",
        "ver",
    ]);
    ok(&["branch", "create", "db.st", "dev"]);
    ok(&[
        "ingest-snapshot",
        "db.st",
        &file("s2.csv", "id,v,ver\n2,5,2\n3,3,1\n"),
        "--key",
        "id",
        "--version",
        "ver",
        "--branch",
        "dev",
        "--publish",
        "db.pub",
    ]);
    assert_eq!(cli_rows(wh, "db.st", None), n(&[(1, 1), (2, 2)]));
    let st_dev = n(&[(1, 1), (2, 5), (3, 3)]);
    assert_eq!(cli_rows(wh, "db.st", Some("dev")), st_dev);
    assert_eq!(cli_rows(wh, "db.pub", None), st_dev);

    // Compaction of a branch: its rows unchanged, its files merged; main's files untouched.
    for i in 0..3 {
        ok(&[
            "append",
            "db.st",
            &file(
                &format!("a{i}.csv"),
                &format!("id,v,ver\n{},{},1\n", 10 + i, i),
            ),
            "--branch",
            "dev",
        ]);
    }
    let before_main = ok(&["files", "db.st", "--json"]);
    let out = ok(&[
        "rewrite-data-files",
        "db.st",
        "--branch",
        "dev",
        "--option",
        "rewrite-all=true",
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        r["rewritten_data_files_count"].as_u64().unwrap() >= 4,
        "{out}"
    );
    assert_eq!(r["added_data_files_count"], 1, "{out}");
    let mut st_dev = st_dev;
    st_dev.extend(n(&[(10, 0), (11, 1), (12, 2)]));
    assert_eq!(cli_rows(wh, "db.st", Some("dev")), st_dev);
    assert_eq!(ok(&["files", "db.st", "--json"]), before_main);
    refused(
        &["rewrite-data-files", "db.st.branch_dev", "--plan-only"],
        "main only",
    );

    // The peers read each branch by name as floe does.
    if let Some(py) = peers_python() {
        let mut checks = Vec::new();
        for (table, r, rows) in [("db.k", "dev", dev), ("db.st", "dev", st_dev)] {
            let t = metadata_of(wh, table);
            let expected = dir.path().join(format!("{table}-{r}.parquet"));
            let o = floe(
                wh,
                &[
                    "scan",
                    table,
                    "--ref",
                    r,
                    "--format",
                    "parquet",
                    "--output",
                    expected.to_str().unwrap(),
                ],
            );
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(rows.len(), cli_rows(wh, table, Some(r)).len());
            checks.push(serde_json::json!({
                "name": format!("{table} {r}"),
                "metadata": t,
                "ref": r,
                "expected": expected.to_string_lossy(),
            }));
        }
        peer_check_env(&py, dir.path(), &checks, &[]);
    }
}

/// Rows (id, p) of `t`'s main, sorted.
async fn main_rows(t: &floe::Table) -> Rows {
    rows_at(t, t.metadata().current_snapshot_id()).await
}

/// The snapshot of `t` staged with `wap_id`.
fn staged_by(t: &floe::Table, wap_id: &str) -> i64 {
    t.metadata()
        .snapshots()
        .find(|s| {
            s.summary()
                .additional_properties
                .get("wap.id")
                .map(String::as_str)
                == Some(wap_id)
        })
        .unwrap_or_else(|| panic!("no snapshot staged with wap.id {wap_id}"))
        .snapshot_id()
}

/// Spark stages dynamic partition overwrites (`spark.wap.id`); floe re-applies one whose
/// partitions main did not change since (Java's rule) and refuses one whose partition it did.
#[tokio::test]
async fn spark_staged_partition_overwrites_are_cherry_picked_by_javas_rule() {
    let Some(py) = peers_python() else {
        return;
    };
    let (dir, cat) = fs_catalog();
    let ident = parse_ident("db.ow").unwrap();
    let schema = floe::spec::parse_schema("id long not null, v long not null").unwrap();
    let c = floe::TableCreation::new(schema.clone())
        .with_partition_spec(floe::spec::parse_partition_spec("v", &schema).unwrap())
        .with_property("write.wap.enabled", "true");
    let t = cat.create_table(&ident, c).await.unwrap();
    let t = floe::txn::append(&cat, &t, [Ok(batch(&[(1, 1), (2, 1), (3, 2)]))])
        .await
        .unwrap()
        .table;
    let before = main_rows(&t).await;
    let overwrite = |wap: &str, values: &str| {
        vec![
            "SET spark.sql.sources.partitionOverwriteMode=dynamic".to_string(),
            format!("SET spark.wap.id={wap}"),
            format!("INSERT OVERWRITE {{t}} VALUES {values}"),
        ]
    };
    let (a, b) = (overwrite("ow1", "(10, 1)"), overwrite("ow2", "(20, 2)"));
    let stmts: Vec<&str> = a.iter().chain(b.iter()).map(String::as_str).collect();
    spark_write(&py, dir.path(), "db.ow", "", &stmts);
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(main_rows(&t).await, before, "staging changed main");
    let (ow1, ow2) = (staged_by(&t, "ow1"), staged_by(&t, "ow2"));
    let s1 = t.metadata().snapshot_by_id(ow1).unwrap();
    assert_eq!(
        s1.summary()
            .additional_properties
            .get("replace-partitions")
            .map(String::as_str),
        Some("true")
    );
    // Main moves in partition 3 only: ow1 (partition 1) is re-applied.
    floe::txn::append(&cat, &t, [Ok(batch(&[(30, 3)]))])
        .await
        .unwrap();
    let r = floe::txn::cherrypick(&cat, &ident, ow1).await.unwrap();
    assert!(!r.fast_forward);
    assert_eq!((r.added_files, r.removed_files), (1, 1));
    assert_eq!(r.published_wap_id.as_deref(), Some("ow1"));
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(main_rows(&t).await, vec![(3, 2), (10, 1), (30, 3)]);
    // Main changes partition 2: ow2 (partition 2) is refused, nothing committed.
    let t = floe::txn::append(&cat, &t, [Ok(batch(&[(40, 2)]))])
        .await
        .unwrap()
        .table;
    let e = floe::txn::cherrypick(&cat, &ident, ow2).await.unwrap_err();
    assert!(e.to_string().contains("changed"), "{e}");
    let now = cat.load_table(&ident).await.unwrap();
    assert_eq!(now.metadata_location(), t.metadata_location());
    // The peers read the published state.
    let expected = dir.path().join("ow-main.parquet");
    write_expected(&expected, &[(3, 2), (10, 1), (30, 3), (40, 2)]);
    peer_check(
        &py,
        dir.path(),
        &[Check {
            name: "partition overwrite cherry-picked".into(),
            metadata: now.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().into(),
            engines: None,
            refuse: None,
        }],
    );
}
