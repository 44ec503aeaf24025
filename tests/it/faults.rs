//! Faults beyond the happy path: a filesystem (Hadoop) table left at any step of a commit
//! (a kill between linking the metadata file and rewriting the hint, before the link, a torn
//! or stale hint) reads and writes on; a keyed table's sink checkpoints and tombstones follow
//! the snapshot that is current across rollbacks and moves of `main`, checked against a
//! model of the merge rule over random batches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::Int64Type;
use floe::catalog::TableCreation;
use floe::keyed::{ChangeBatch, UpsertOptions};
use floe::spec::snapshot_refs::RefChange;
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Catalog;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

// ---------------------------------------------------------------- filesystem catalog

/// A Hadoop warehouse driven through the CLI.
struct Hadoop {
    root: PathBuf,
    uri: String,
}

impl Hadoop {
    fn new(dir: &Path) -> Self {
        let root = dir.join("hadoop");
        let uri = format!("file://{}", root.display());
        Self { root, uri }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        floe_cmd()
            .arg("--catalog")
            .arg(&self.uri)
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "floe {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn metadata_dir(&self) -> PathBuf {
        self.root.join("db/t/metadata")
    }

    fn hint(&self) -> u64 {
        std::fs::read_to_string(self.metadata_dir().join("version-hint.text"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn set_hint(&self, text: &str) {
        std::fs::write(self.metadata_dir().join("version-hint.text"), text).unwrap();
    }

    fn count(&self) -> usize {
        self.ok(&["scan", "db.t", "--format", "json"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

/// A CSV of ids `[from, from + n)`.
fn ids_csv(dir: &Path, name: &str, from: usize, n: usize) -> String {
    let mut s = String::from("id,v\n");
    for i in from..from + n {
        s.push_str(&format!("{i},v{i}\n"));
    }
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p.to_string_lossy().into_owned()
}

/// Each state a killed commit can leave a filesystem table in reads as the before or the
/// after state (as Spark reads it: versions past the hint are newer), and the next append
/// lands (it used to give up after 5 attempts, forever). DuckDB and Spark read the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_table_left_at_any_commit_step_reads_and_writes_on() {
    let d = tempfile::tempdir().unwrap();
    let h = Hadoop::new(d.path());
    h.ok(&["create", "db.t", "--schema", "id long, v string"]);
    let mut rows = 0;
    let mut next_id = 0;
    let mut append = |h: &Hadoop, rows: &mut usize| {
        let f = ids_csv(d.path(), &format!("b{next_id}.csv"), next_id, 10);
        next_id += 10;
        h.ok(&["append", "db.t", &f]);
        *rows += 10;
    };
    append(&h, &mut rows);

    // Killed after vN.metadata.json was linked, before the hint was rewritten.
    append(&h, &mut rows);
    let v = h.hint();
    h.set_hint(&(v - 1).to_string());
    assert_eq!(h.count(), rows, "the linked version is the current one");
    append(&h, &mut rows);
    assert_eq!(h.hint(), v + 1);
    assert_eq!(h.count(), rows);

    // Killed before the link: the files are written, no metadata names them.
    append(&h, &mut rows);
    let v = h.hint();
    std::fs::remove_file(h.metadata_dir().join(format!("v{v}.metadata.json"))).unwrap();
    h.set_hint(&(v - 1).to_string());
    rows -= 10;
    assert_eq!(h.count(), rows);
    append(&h, &mut rows);
    assert_eq!(h.hint(), v);

    // Killed while writing the hint (empty), a hint past the last version, and a stale
    // hint a slower writer rewrote last.
    for hint in [String::new(), "99".to_string(), (h.hint() - 3).to_string()] {
        h.set_hint(&hint);
        assert_eq!(h.count(), rows, "hint {hint:?}");
        append(&h, &mut rows);
        assert_eq!(h.count(), rows, "after an append, hint {hint:?}");
    }

    // Real kills at times spread over a commit: each leaves the before or the after state,
    // and the table takes the next append.
    let big = ids_csv(d.path(), "big.csv", 1_000_000, 200_000);
    for delay_ms in [2u64, 10, 40, 90, 160, 260] {
        let mut child = floe_cmd()
            .arg("--catalog")
            .arg(&h.uri)
            .args(["append", "db.t", &big])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let n = h.count();
        assert!(n == rows || n == rows + 200_000, "{delay_ms} ms: {n} rows");
        rows = n;
        append(&h, &mut rows);
        assert_eq!(h.count(), rows);
    }

    // The peers read what floe reads.
    let Some(py) = peers_python() else { return };
    let cat = Catalog::open(Some(&h.uri), None, None).unwrap();
    let t = cat.load_table(&parse_ident("db.t").unwrap()).await.unwrap();
    let expected = d.path().join("expected.parquet");
    assert_eq!(floe_expected(&t, None, &expected).await, rows);
    peer_check(
        &py,
        d.path(),
        &[Check {
            name: "hadoop-after-kills".into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().into_owned(),
            engines: None,
            refuse: None,
        }],
    );
}

/// `floe create NAME` of a keyed table with a version and a delete column.
fn create_versioned(wh: &Path, name: &str, extra: &[&str]) {
    let mut args = vec![
        "create",
        name,
        "--schema",
        "user_id long not null, plan string, ver long, is_deleted int",
        "--primary-key",
        "user_id",
        "--property",
        "floe.merge.version-column=ver",
        "--property",
        "floe.merge.delete-column=is_deleted",
    ];
    args.extend_from_slice(extra);
    ok(wh, &args);
}

// ---------------------------------------------------------------- keyed state follows main

/// The model of a keyed table under the merge rule with ever-growing versions: live rows
/// (key → plan, version) and tombstones (key → version).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Model {
    pub(crate) live: BTreeMap<i64, (String, i64)>,
    pub(crate) tombstones: BTreeMap<i64, i64>,
}

/// One change: key, plan, version, deleted.
pub(crate) type Change = (i64, String, i64, bool);

impl Model {
    pub(crate) fn apply(&mut self, batch: &[Change]) {
        // Fold: per key the highest version wins (versions are distinct here).
        let mut winners: BTreeMap<i64, &Change> = BTreeMap::new();
        for c in batch {
            let w = winners.entry(c.0).or_insert(c);
            if c.2 >= w.2 {
                *w = c;
            }
        }
        for (k, (_, plan, ver, del)) in winners {
            let stored = self
                .live
                .get(&k)
                .map(|r| r.1)
                .or(self.tombstones.get(&k).copied());
            if stored.is_some_and(|s| *ver < s) {
                continue;
            }
            if *del {
                if self.live.remove(&k).is_some() || self.tombstones.contains_key(&k) {
                    self.tombstones.insert(k, *ver);
                }
            } else {
                self.tombstones.remove(&k);
                self.live.insert(k, (plan.clone(), *ver));
            }
        }
    }
}

pub(crate) fn change_batch(changes: &[Change]) -> ChangeBatch {
    let b = RecordBatch::try_from_iter([
        (
            "user_id",
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.0))) as ArrayRef,
        ),
        (
            "plan",
            Arc::new(StringArray::from_iter_values(
                changes.iter().map(|c| c.1.clone()),
            )) as _,
        ),
        (
            "ver",
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.2))) as _,
        ),
        (
            "is_deleted",
            Arc::new(Int32Array::from_iter_values(
                changes.iter().map(|c| c.3 as i32),
            )) as _,
        ),
    ])
    .unwrap();
    ChangeBatch::from_batches([b])
}

/// What floe holds: live rows, tombstones, the sink's checkpoint.
pub(crate) async fn observed(t: &floe::table::Table) -> (Model, Option<i64>) {
    let mut m = Model::default();
    for b in scan_rows(t, floe::scan::SnapshotSelector::default()).await {
        let k = b
            .column_by_name("user_id")
            .unwrap()
            .as_primitive::<Int64Type>();
        let p = b.column_by_name("plan").unwrap().as_string::<i32>();
        let v = b.column_by_name("ver").unwrap().as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            m.live
                .insert(k.value(r), (p.value(r).to_string(), v.value(r)));
        }
    }
    let report = floe::keyed::tombstones(t, true).await.unwrap();
    if let Some(b) = report.keys {
        let k = b.column(0).as_primitive::<Int64Type>();
        let v = b.column(1).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            m.tombstones.insert(k.value(r), v.value(r));
        }
    }
    let cp = floe::keyed::committed_checkpoint(t, "s").unwrap();
    (m, cp)
}

/// Random batches (seeded) land with checkpoints 1…N; then `main` moves at random —
/// rollbacks to ancestors, set-current-snapshot to snapshots of abandoned lineages and back
/// — and after each move the rows, the tombstones and the sink's checkpoint are those of the
/// snapshot made current (as the model had them then). Re-sending the batches after a
/// rollback applies them again (none is "already committed") and ends where the model does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_rewinds_sink_checkpoints_and_tombstones() {
    for (fv, seed) in [(FormatVersion::V3, 7u64), (FormatVersion::V2, 11)] {
        let (_d, cat) = sqlite_catalog();
        let ident = parse_ident(&format!("db.users_v{}", fv as u8)).unwrap();
        let schema =
            parse_schema("user_id long not null, plan string, ver long, is_deleted int").unwrap();
        let c = TableCreation::new(schema)
            .with_primary_key(&["user_id".to_string()])
            .with_format_version(fv)
            .with_property("write.merge.mode", "merge-on-read")
            .with_property("floe.merge.version-column", "ver")
            .with_property("floe.merge.delete-column", "is_deleted");
        cat.create_table(&ident, c).await.unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut rnd = |n: u64| rng.gen_range(0..n);
        let mut ver = 0i64;
        let mut batches: Vec<Vec<Change>> = Vec::new();
        let mut model = Model::default();
        // (snapshot, model, checkpoint) after each batch; index 0: before any.
        let mut states: Vec<(i64, Model)> = Vec::new();
        for round in 1..=14i64 {
            let mut batch = Vec::new();
            for _ in 0..(4 + rnd(8)) {
                ver += 1;
                let k = rnd(24) as i64;
                // Deletes of live keys, upserts otherwise; a stale replay now and then.
                let del = model.live.contains_key(&k) && rnd(3) == 0;
                let v = if rnd(9) == 0 { ver - 40 } else { ver };
                batch.push((k, format!("p{round}"), v, del));
            }
            let opts = UpsertOptions::default().with_checkpoint("s", round);
            let r = floe::keyed::upsert(&cat, &ident, &change_batch(&batch), &opts)
                .await
                .unwrap();
            model.apply(&batch);
            let (got, cp) = observed(&r.table).await;
            assert_eq!(got, model, "{fv:?} round {round}");
            assert_eq!(cp, Some(round));
            states.push((
                r.table.metadata().current_snapshot_id().unwrap(),
                model.clone(),
            ));
            batches.push(batch);
        }
        let files = |t: &floe::table::Table| {
            floe::spec::keyed::TombstoneList::of(t.metadata(), "t")
                .unwrap()
                .files
                .len()
        };
        // Moves of main, each checked against the state it makes current.
        let mut resent = 0;
        for step in 0..10 {
            let to = rnd(states.len() as u64) as usize;
            let (snap, want) = states[to].clone();
            let t = cat.load_table(&ident).await.unwrap();
            let cur = t.metadata().current_snapshot_id().unwrap();
            let change = if floe::spec::snapshot_refs::is_ancestor(t.metadata(), snap, cur) {
                RefChange::RollbackTo(snap)
            } else {
                RefChange::SetCurrentSnapshot(snap)
            };
            let t = floe::txn::manage_refs(&cat, &ident, &change).await.unwrap();
            let (got, cp) = observed(&t).await;
            assert_eq!(got, want, "{fv:?} step {step}: {change:?}");
            assert_eq!(cp, Some(to as i64 + 1), "{fv:?} step {step}");
            assert!(files(&t) <= 8, "{}", files(&t));
            // Every other move: re-send the batches after it, which apply again.
            if step % 2 == 1 {
                let mut m = want.clone();
                for (i, b) in batches.iter().enumerate().skip(to + 1) {
                    let opts = UpsertOptions::default().with_checkpoint("s", i as i64 + 1);
                    let r = floe::keyed::upsert(&cat, &ident, &change_batch(b), &opts)
                        .await
                        .unwrap();
                    assert!(
                        !r.already_committed,
                        "{fv:?} batch {} after a rollback",
                        i + 1
                    );
                    m.apply(b);
                    resent += 1;
                }
                let t = cat.load_table(&ident).await.unwrap();
                let (got, cp) = observed(&t).await;
                assert_eq!(got, m, "{fv:?} re-sent after step {step}");
                assert_eq!(got, states.last().unwrap().1);
                assert_eq!(cp, Some(batches.len() as i64));
            }
        }
        assert!(resent > 0);
        // A rollback to before the first batch: no checkpoint, no tombstones.
        let t = cat.load_table(&ident).await.unwrap();
        let first = t
            .metadata()
            .snapshots()
            .min_by_key(|s| s.sequence_number())
            .unwrap()
            .snapshot_id();
        let t = floe::txn::manage_refs(&cat, &ident, &RefChange::SetCurrentSnapshot(first))
            .await
            .unwrap();
        let mut m = Model::default();
        m.apply(&batches[0]);
        assert_eq!(observed(&t).await, (m, Some(1)));
    }
}

/// The recovery the docs give works from the CLI: a sink's checkpoint and the tombstone list
/// can be unset (the sink then starts over; replays may bring deleted keys back), a
/// checkpoint set to a number; the merge rule cannot change after create, with or without a
/// merge-engine property, and nothing is committed when it is refused.
#[test]
fn alter_checks_a_keyed_table_as_create_does_and_unsets_its_sink_state() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.k",
            "--schema",
            "user_id long not null, plan string, ver long, op string",
            "--primary-key",
            "user_id",
        ],
    );
    let csv = d.path().join("b.csv");
    std::fs::write(&csv, "user_id,plan,ver,op\n1,a,1,x\n2,b,1,x\n").unwrap();
    let csv = csv.to_string_lossy().into_owned();
    let upsert = |cp: &str| -> serde_json::Value {
        let out = ok(
            &wh,
            &[
                "upsert",
                "db.k",
                &csv,
                "--sink-id",
                "s",
                "--checkpoint",
                cp,
                "--json",
            ],
        );
        serde_json::from_str(&out).unwrap()
    };
    assert_eq!(upsert("1")["already_committed"], false);
    // A sink id without a checkpoint would record nothing (exactly-once silently off).
    let o = floe(&wh, &["upsert", "db.k", &csv, "--sink-id", "s"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--checkpoint"),
        "{}",
        text(&o)
    );
    let describe = || ok(&wh, &["describe", "db.k", "--json"]);
    let before = describe();
    for set in [
        "floe.merge.version-column=nosuch",
        "floe.merge.version-column=plan",
        "floe.merge.version-column=ver",
        "floe.merge.delete-column=op",
        "floe.merge-engine=first-row",
    ] {
        let o = floe(&wh, &["alter", "db.k", "--set", set]);
        assert_eq!(o.status.code(), Some(2), "{set}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("cannot be changed after create"),
            "{set}: {}",
            text(&o)
        );
    }
    assert_eq!(describe(), before, "nothing was committed");
    // Unrelated changes and upserts still work.
    ok(
        &wh,
        &[
            "alter",
            "db.k",
            "--set",
            "write.target-file-size-bytes=1000000",
        ],
    );
    assert_eq!(upsert("1")["already_committed"], true);
    // Starting the sink over, and setting its checkpoint by hand.
    ok(&wh, &["alter", "db.k", "--unset", "floe.sink.s.checkpoint"]);
    assert_eq!(upsert("1")["already_committed"], false);
    ok(&wh, &["alter", "db.k", "--set", "floe.sink.s.checkpoint=5"]);
    assert_eq!(upsert("5")["already_committed"], true);
    let o = floe(
        &wh,
        &["alter", "db.k", "--set", "floe.sink.s.checkpoint=five"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // The tombstone list: unset works, set is refused.
    let o = floe(&wh, &["alter", "db.k", "--set", "floe.tombstones={}"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    create_versioned(&wh, "db.v", &[]);
    let rows = d.path().join("v.csv");
    std::fs::write(
        &rows,
        "user_id,plan,ver,is_deleted\n1,a,1,0\n1,,2,1\n2,b,1,0\n",
    )
    .unwrap();
    ok(&wh, &["upsert", "db.v", rows.to_str().unwrap()]);
    let count = |name: &str| -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&wh, &["tombstones", name, "--json"])).unwrap();
        v["tombstones_count"].as_u64().unwrap()
    };
    assert_eq!(count("db.v"), 1);
    ok(&wh, &["alter", "db.v", "--unset", "floe.tombstones"]);
    assert_eq!(count("db.v"), 0);
}

/// Tombstone files a merge of the tombstones replaced stay while a kept snapshot names them
/// (a rollback may list them again) and go with the snapshots that named them: after 20
/// delete batches and an expiry of every snapshot but the current one, the files on disk are the list
/// and what the one kept snapshot names; the tombstones themselves are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_tombstone_files_go_with_the_snapshots_that_named_them() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    create_versioned(
        &wh,
        "db.v",
        &["--property", "write.merge.mode=merge-on-read"],
    );
    let mut rows = String::from("user_id,plan,ver,is_deleted\n");
    for k in 0..200 {
        rows.push_str(&format!("{k},p,1,0\n"));
    }
    let f = d.path().join("rows.csv");
    std::fs::write(&f, rows).unwrap();
    ok(&wh, &["upsert", "db.v", f.to_str().unwrap()]);
    for b in 0..20 {
        let mut del = String::from("user_id,plan,ver,is_deleted\n");
        for k in (b * 5)..(b * 5 + 5) {
            del.push_str(&format!("{k},,2,1\n"));
        }
        let f = d.path().join(format!("del{b}.csv"));
        std::fs::write(&f, del).unwrap();
        ok(&wh, &["upsert", "db.v", f.to_str().unwrap()]);
    }
    let on_disk = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(wh.join("db/v/metadata"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("tombstones-"))
            .collect()
    };
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let ident = parse_ident("db.v").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let listed = floe::spec::keyed::TombstoneList::of(t.metadata(), "db.v").unwrap();
    let before = on_disk();
    assert!(before.len() > listed.files.len() + 5, "{before:?}");
    let count = floe::keyed::tombstones(&t, false).await.unwrap().count;
    assert_eq!(count, 100);

    let r: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.v",
            "--older-than",
            &(chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339(),
            "--retain-last",
            "1",
            "--json",
        ],
    ))
    .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    let mut want: std::collections::BTreeSet<String> =
        listed.files.iter().map(|f| name(&f.path)).collect();
    for f in floe::spec::keyed_state::files_named(t.current_snapshot().unwrap(), "db.v").unwrap() {
        want.insert(name(&f.path));
    }
    assert_eq!(on_disk(), want);
    assert_eq!(
        r["deleted_tombstone_files_count"].as_u64().unwrap() as usize,
        before.len() - want.len(),
        "{r}"
    );
    assert_eq!(floe::keyed::tombstones(&t, false).await.unwrap().count, 100);
    // A replay of an older version of a deleted key is still ignored.
    let replay = d.path().join("replay.csv");
    std::fs::write(&replay, "user_id,plan,ver,is_deleted\n3,old,1,0\n").unwrap();
    let r: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &["upsert", "db.v", replay.to_str().unwrap(), "--json"],
    ))
    .unwrap();
    assert_eq!(r["stale_records_count"], 1, "{r}");
}

/// A SQLite catalog another process keeps locked past floe's 30 s wait: the command exits 4
/// (retryable) saying the database is locked and nothing changed, not 1 with "creating
/// catalog tables"; once the lock is released the same command lands.
#[test]
fn a_locked_sqlite_catalog_is_a_retryable_error() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.t", "--schema", "id long, v string"]);
    let f = ids_csv(d.path(), "a.csv", 0, 5);
    let lock = rusqlite::Connection::open(wh.join("catalog.db")).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let o = floe(&wh, &["append", "db.t", &f]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(err.contains("locked by another process"), "{}", text(&o));
    assert!(!err.contains("creating catalog tables"), "{}", text(&o));
    lock.execute_batch("COMMIT").unwrap();
    ok(&wh, &["append", "db.t", &f]);
    let n = ok(&wh, &["scan", "db.t", "--format", "json"]);
    assert_eq!(n.lines().filter(|l| !l.trim().is_empty()).count(), 5);
}

/// `scan -o FILE` stopped by Ctrl-C (SIGINT) mid-write leaves no file, partial or final, and an
/// existing FILE as it was; it says on stderr that it was interrupted and exits 130. An
/// `append` interrupted the same way commits all its rows or none, as its message says.
#[test]
fn an_interrupted_command_leaves_no_partial_output_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.big", "--schema", "id long, v string"]);
    let csv = ids_csv(d.path(), "big.csv", 0, 400_000);
    ok(&wh, &["append", "db.big", &csv]);
    let out = d.path().join("out.csv");
    std::fs::write(&out, "kept\n").unwrap();
    let partial_exists = || {
        std::fs::read_dir(d.path()).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .contains("floe-partial")
        })
    };
    let mut interrupted = 0;
    for attempt in 0..5 {
        let mut child = floe_cmd()
            .arg("--warehouse")
            .arg(&wh)
            .args(["scan", "db.big", "--format", "csv", "-o"])
            .arg(&out)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Signal once the output is being written.
        let started = std::time::Instant::now();
        while !partial_exists() && started.elapsed() < std::time::Duration::from_secs(60) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            !partial_exists(),
            "attempt {attempt}: a partial file is left"
        );
        if o.status.code() == Some(130) {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("interrupted (Ctrl-C)") && err.contains("nothing was committed"),
                "{err}"
            );
            assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept\n");
            interrupted += 1;
        } else {
            // The scan won the race: the whole output, then.
            assert!(o.status.success(), "{}", text(&o));
            let body = std::fs::read_to_string(&out).unwrap();
            assert_eq!(body.lines().count(), 400_001);
            std::fs::write(&out, "kept\n").unwrap();
        }
    }
    assert!(interrupted > 0, "no run was interrupted mid-write");

    // An interrupted append: all of its rows or none, as its message says.
    use std::os::unix::process::ExitStatusExt;
    let libc_sigint = || 2;
    let count = || -> u64 {
        let o = ok(&wh, &["scan", "db.big", "--count", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&o).unwrap();
        v["record_count"].as_u64().unwrap()
    };
    let more = ids_csv(d.path(), "more.csv", 400_000, 200_000);
    for delay_ms in [0u64, 20, 60, 150, 400] {
        let before = count();
        let child = floe_cmd()
            .arg("--warehouse")
            .arg(&wh)
            .args(["append", "db.big", &more])
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let after = count();
        match o.status.code() {
            Some(0) => assert_eq!(after, before + 200_000, "{}", text(&o)),
            Some(130) if err.contains("nothing was committed") => {
                assert_eq!(after, before, "{}", text(&o))
            }
            Some(130) if err.contains("may have landed") => assert!(
                after == before || after == before + 200_000,
                "{after} rows after {before}: {}",
                text(&o)
            ),
            // Killed by the signal before its handler was installed (the first
            // milliseconds): nothing had begun.
            None if o.status.signal() == Some(libc_sigint()) => {
                assert_eq!(after, before, "{}", text(&o))
            }
            _ => panic!("after {delay_ms} ms: {}", text(&o)),
        }
    }
}

/// A failing wake-up of tokio's I/O driver (EIO injected into its eventfd writes by strace)
/// panics a runtime worker: the command exits 1 saying the runtime failed, never hangs, and
/// the table holds the append's rows or none of them.
#[test]
fn a_runtime_that_fails_to_wake_ends_the_command() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.t", "--schema", "id long, v string"]);
    let f = ids_csv(d.path(), "a.csv", 0, 5);
    let exe = env!("CARGO_BIN_EXE_floe");
    let mut failed = 0;
    for when in 1..=6 {
        let before = ok(&wh, &["scan", "db.t", "--count"])
            .trim()
            .parse::<u64>()
            .unwrap();
        let mut child = std::process::Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "-P", "anon_inode:[eventfd]"])
            .args(["-e", "trace=write", "-e"])
            .arg(format!("inject=write:error=EIO:when={when}"))
            .arg(exe)
            .arg("--warehouse")
            .arg(&wh)
            .args(["append", "db.t", &f])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("strace (tools/test.sh installs it)");
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("append with EIO on wake-up {when} hung for 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let after = ok(&wh, &["scan", "db.t", "--count"])
            .trim()
            .parse::<u64>()
            .unwrap();
        if status.success() {
            assert_eq!(after, before + 5, "{err}");
        } else {
            failed += 1;
            assert_eq!(status.code(), Some(1), "{err}");
            assert!(err.contains("async runtime failed"), "{err}");
            assert!(
                after == before || after == before + 5,
                "{after} rows after {before}"
            );
        }
    }
    assert!(
        failed > 0,
        "no injected wake-up failure reached the runtime"
    );
}
