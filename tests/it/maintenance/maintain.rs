//! `maintain`: the plan of a dry run with its numbers and nothing committed; a pass that
//! compacts, merges deletes and expires by the table's policy with the rows unchanged for
//! floe and the peers; a CDC sink committing random batches while maintainers run beside it
//! (no sink commit fails, the rows and tombstones equal the model, files stay bounded); the
//! lease (a second maintainer refused with the holder's name, a dead holder's lease taken
//! over, the old holder told it lost it); `--watch` stopped by SIGTERM releasing its lease.

use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use floe::catalog::TableCreation;
use floe::keyed::UpsertOptions;
use floe::maintenance::{maintain, Lease, MaintainOptions, MaintainReport};
use floe::scan::Scan;
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::{Catalog, ErrorKind, Table};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::faults::{change_batch, observed, Change, Model};

fn step<'a>(r: &'a MaintainReport, name: &str) -> &'a floe::maintenance::MaintainStep {
    r.steps.iter().find(|s| s.step == name).unwrap()
}

async fn data_files(t: &Table) -> (usize, usize) {
    let plan = Scan::new(t).plan().await.unwrap();
    let deletes: std::collections::HashSet<String> = plan
        .files
        .iter()
        .flat_map(|f| f.deletes.iter().map(|d| d.file.file_path().to_string()))
        .collect();
    (plan.files.len(), deletes.len())
}

fn peers_read(dir: &Path, name: &str, t: &Table, expected: &Path) {
    let Some(py) = peers_python() else { return };
    peer_check(
        &py,
        dir,
        &[Check {
            name: name.into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().into_owned(),
            engines: None,
            refuse: None,
        }],
    );
}

/// The CLI: a dry run prints the plan with its numbers and commits nothing; the pass then
/// compacts the small files and merges the position deletes; the rows are unchanged for
/// floe and the peers; a second pass finds nothing worth doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_plans_and_a_pass_compacts_by_policy() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let whs = wh.to_str().unwrap().to_string();
    ok(
        &wh,
        &[
            "create",
            "db.t",
            "--schema",
            "id long, p int, v string",
            "--partition-by",
            "p",
            "--property",
            "write.delete.mode=merge-on-read",
            "--format-version",
            "2",
        ],
    );
    let csv = d.path().join("in.csv");
    for round in 0..6 {
        let rows: String = (0..20)
            .map(|i| format!("{},{},v{round}\n", round * 100 + i, i % 2))
            .collect();
        std::fs::write(&csv, format!("id,p,v\n{rows}")).unwrap();
        ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    }
    ok(&wh, &["delete", "db.t", "--where", "id % 7 = 0"]);
    ok(&wh, &["delete", "db.t", "--where", "id % 11 = 0"]);
    let cat = Catalog::open_existing(None, Some(&whs), None).unwrap();
    let ident = parse_ident("db.t").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let before = t.metadata().current_snapshot_id();
    let expected = d.path().join("expected.parquet");
    let rows = floe_expected(&t, None, &expected).await;

    let out = ok(&wh, &["maintain", "db.t", "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["dry_run"], true);
    let steps = v["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(names, floe::spec::maintain_policy::STEPS);
    let compact = &steps[0];
    assert_eq!(compact["action"], "planned", "{compact}");
    assert_eq!(
        compact["counts"]["rewritten_data_files_count"], 12,
        "{compact}"
    );
    assert!(
        compact["reason"]
            .as_str()
            .unwrap()
            .contains("12 data files"),
        "{compact}"
    );
    assert_eq!(steps[1]["action"], "planned", "{}", steps[1]);
    assert_eq!(v["commits_count"], 0);
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(
        t.metadata().current_snapshot_id(),
        before,
        "a dry run commits nothing"
    );

    let text = ok(&wh, &["maintain", "db.t"]);
    assert!(
        text.contains("rewrite-data-files") && text.contains("done"),
        "{text}"
    );
    let t = cat.load_table(&ident).await.unwrap();
    let (files, deletes) = data_files(&t).await;
    assert_eq!(
        (files, deletes),
        (2, 0),
        "one file per partition, deletes applied"
    );
    let again = floe_expected(&t, None, &d.path().join("after.parquet")).await;
    assert_eq!(again, rows);
    peers_read(d.path(), "maintained", &t, &expected);

    let out = ok(&wh, &["maintain", "db.t", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["action"] == "skipped"),
        "nothing left to do: {v}"
    );
    assert_eq!(
        v["lease_holder"].as_str().map(|h| h.contains(':')),
        Some(true)
    );

    // --max-rewrite-bytes keeps a pass within a budget: 1 byte fits no group.
    for round in 0..6 {
        std::fs::write(&csv, format!("id,p,v\n{},0,x{round}\n", 1000 + round)).unwrap();
        ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    }
    let out = ok(
        &wh,
        &["maintain", "db.t", "--json", "--max-rewrite-bytes", "1"],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["steps"][0]["action"], "skipped", "{v}");
    assert!(v["steps"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("--max-rewrite-bytes"));
}

/// Bad input: a policy property that does not parse names itself, a typo is refused with
/// the nearest name, `--watch` with a zero interval or a dry run is refused; nothing runs.
#[test]
fn bad_policy_and_flags_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.t", "--schema", "id long"]);
    let o = floe(
        &wh,
        &[
            "alter",
            "db.t",
            "--set",
            "floe.maintain.rewrite-data-file.min-input-files=2",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("floe.maintain.rewrite-data-files."),
        "{}",
        text(&o)
    );
    for (flags, needle) in [
        (vec!["--watch", "0s"], "more than 0"),
        (vec!["--watch", "5 days"], "unknown unit"),
        (vec!["--watch", "1s", "--dry-run"], "do not go together"),
        (vec!["--max-rewrite-bytes", "lots"], "not a size"),
    ] {
        let mut args = vec!["maintain", "db.t"];
        args.extend(flags);
        let o = floe(&wh, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(needle), "{args:?}: {}", text(&o));
    }
    let o = floe(
        &wh,
        &["alter", "db.t", "--set", "floe.maintain.lease-ms=soon"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("floe.maintain.lease-ms"), "{}", text(&o));
    let csv = d.path().join("in.csv");
    std::fs::write(&csv, "id\n1\n").unwrap();
    ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    ok(
        &wh,
        &[
            "alter",
            "db.t",
            "--set",
            "floe.maintain.rewrite-data-files.min-input-files=x",
        ],
    );
    let o = floe(&wh, &["maintain", "db.t", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("min-input-files"), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert_eq!(v["steps"][0]["action"], "failed", "{v}");
    assert_eq!(
        v["steps"][5]["action"], "skipped",
        "the other steps still ran: {v}"
    );
}

/// A keyed table taking random batches (updates, inserts, deletes, late replays) with sink
/// checkpoints, back to back, while two maintainers loop beside it: every sink commit
/// succeeds, only one maintainer works at a time, no maintenance step fails (compaction and
/// tombstone merges that lose a round ask the writer to hold), and at the end the rows, the
/// tombstones and the checkpoint equal the model's, the files are few, and the peers read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintainers_beside_a_sink_never_fail_it() {
    for (fv, seed) in [(FormatVersion::V3, 5u64), (FormatVersion::V2, 9)] {
        let (d, cat) = sqlite_catalog();
        let cat = Arc::new(cat);
        let ident = parse_ident(&format!("db.sink_v{}", fv as u8)).unwrap();
        let schema =
            parse_schema("user_id long not null, plan string, ver long, is_deleted int").unwrap();
        let c = TableCreation::new(schema)
            .with_primary_key(&["user_id".to_string()])
            .with_format_version(fv)
            .with_property("write.merge.mode", "merge-on-read")
            .with_property("floe.merge.version-column", "ver")
            .with_property("floe.merge.delete-column", "is_deleted")
            .with_property("floe.maintain.rewrite-data-files.min-input-files", "3")
            .with_property("floe.maintain.tombstones.min-files", "3")
            .with_property("history.expire.max-snapshot-age-ms", "1500")
            .with_property("history.expire.min-snapshots-to-keep", "3");
        cat.create_table(&ident, c).await.unwrap();
        let done = Arc::new(AtomicBool::new(false));
        // Passes and compactions so far, across maintainers: the sink runs until both
        // happened beside it (at least 40 rounds, at most 400), however fast it commits.
        let progress = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let mut maintainers = Vec::new();
        for m in 0..2 {
            let (cat, ident, done) = (cat.clone(), ident.clone(), done.clone());
            let progress = progress.clone();
            maintainers.push(tokio::spawn(async move {
                let (mut passes, mut compactions, mut refused, mut failed) = (0, 0, 0, 0);
                while !done.load(Ordering::Relaxed) {
                    let t = cat.load_table(&ident).await.unwrap();
                    let o = MaintainOptions::default().with_holder(format!("m{m}"));
                    match maintain(&cat, &t, &o).await {
                        Ok(r) => {
                            passes += 1;
                            failed += r.failed_steps;
                            let compacted = step(&r, "rewrite-data-files").action == "done";
                            compactions += usize::from(compacted);
                            progress.0.fetch_add(1, Ordering::Relaxed);
                            progress
                                .1
                                .fetch_add(usize::from(compacted), Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == ErrorKind::Conflict => {
                            assert!(e.to_string().contains("being maintained by m"), "{e}");
                            refused += 1;
                        }
                        Err(e) => panic!("maintainer m{m}: {e}"),
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                (passes, compactions, refused, failed)
            }));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Model::default();
        let mut ver = 0i64;
        let enough =
            || progress.0.load(Ordering::Relaxed) >= 3 && progress.1.load(Ordering::Relaxed) >= 2;
        let mut round = 0i64;
        while round < 40 || (!enough() && round < 400) {
            round += 1;
            let mut batch: Vec<Change> = Vec::new();
            for _ in 0..(5 + rng.gen_range(0..20)) {
                ver += 1;
                let k = rng.gen_range(0..60i64);
                let del = model.live.contains_key(&k) && rng.gen_range(0..4) == 0;
                let v = if rng.gen_range(0..10) == 0 {
                    ver - 30
                } else {
                    ver
                };
                batch.push((k, format!("p{round}"), v, del));
            }
            let opts = UpsertOptions::default().with_checkpoint("s", round);
            let r = floe::keyed::upsert(&cat, &ident, &change_batch(&batch), &opts).await;
            let r = r.unwrap_or_else(|e| panic!("{fv:?} round {round}: the sink failed: {e}"));
            model.apply(&batch);
            let (got, cp) = observed(&r.table).await;
            assert_eq!(got, model, "{fv:?} round {round}");
            assert_eq!(cp, Some(round));
            // Back to back: a starved compaction asks the writer to hold
            // (`floe.maintain.commit-intent`), so it lands anyway.
        }
        done.store(true, Ordering::Relaxed);
        let mut stats = Vec::new();
        for m in maintainers {
            stats.push(m.await.unwrap());
        }
        let (passes, compactions): (usize, usize) =
            stats.iter().fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
        let failed: usize = stats.iter().map(|s| s.3).sum();
        assert!(
            passes >= 3 && compactions >= 2 && failed == 0,
            "{fv:?}: (passes, compactions, refused, failed steps) {stats:?}"
        );
        // A last pass with the sink stopped leaves a compact table.
        let t = cat.load_table(&ident).await.unwrap();
        let r = maintain(&cat, &t, &MaintainOptions::default())
            .await
            .unwrap();
        assert_eq!(r.failed_steps, 0, "{r:?}");
        let t = r.table_after.unwrap();
        let (files, _) = data_files(&t).await;
        assert!(files <= 3, "{fv:?}: {files} data files after maintenance");
        let (got, cp) = observed(&t).await;
        assert_eq!(got, model, "{fv:?} after the last pass");
        assert_eq!(cp, Some(round));
        let expected = d.path().join("expected.parquet");
        floe_expected(&t, None, &expected).await;
        peers_read(
            d.path(),
            &format!("sink-maintained-v{}", fv as u8),
            &t,
            &expected,
        );
    }
}

/// The lease: one holder at a time, named to the others; released, or expired, it is
/// taken (the next generation); the holder whose lease was taken over learns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_keeps_one_maintainer_per_table() {
    let (_d, cat) = sqlite_catalog();
    let ident = parse_ident("db.t").unwrap();
    let t = cat
        .create_table(&ident, TableCreation::new(parse_schema("id long").unwrap()))
        .await
        .unwrap();
    let a = Lease::acquire(&t, "alpha", 60_000).await.unwrap();
    assert_eq!(a.holder().generation, 0);
    let e = Lease::acquire(&t, "beta", 60_000).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.to_string().contains("being maintained by alpha"), "{e}");
    let e = maintain(&cat, &t, &MaintainOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("alpha"), "{e}");
    // A dry run needs no lease.
    maintain(&cat, &t, &MaintainOptions::default().with_dry_run(true))
        .await
        .unwrap();
    assert_eq!(
        floe::maintenance::lease_holder(&t)
            .await
            .unwrap()
            .map(|h| h.holder),
        Some("alpha".to_string())
    );
    a.release().await.unwrap();
    assert_eq!(floe::maintenance::lease_holder(&t).await.unwrap(), None);
    // A holder that dies: its lease lapses and is taken over.
    let mut dead = Lease::acquire(&t, "dead", 1_000).await.unwrap();
    assert_eq!(dead.holder().generation, 1);
    let e = Lease::acquire(&t, "gamma", 60_000).await.unwrap_err();
    assert!(e.to_string().contains("dead"), "{e}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let g = Lease::acquire(&t, "gamma", 60_000).await.unwrap();
    assert_eq!(g.holder().generation, 2);
    let e = dead.renew().await.unwrap_err();
    assert!(e.to_string().contains("taken over by gamma"), "{e}");
    // Two contenders for one lapsed lease: exactly one wins.
    g.release().await.unwrap();
    let (x, y) = tokio::join!(
        Lease::acquire(&t, "x", 60_000),
        Lease::acquire(&t, "y", 60_000)
    );
    assert_eq!(
        usize::from(x.is_ok()) + usize::from(y.is_ok()),
        1,
        "{x:?} {y:?}"
    );
}

/// `floe maintain --watch`: passes on an interval holding the lease (a one-shot maintain
/// beside it is refused naming the holder, exit 4); SIGTERM stops it cleanly between
/// steps, exit 0, lease released, so the next maintainer runs at once.
#[test]
fn watch_runs_passes_and_stops_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.t", "--schema", "id long"]);
    let csv = d.path().join("in.csv");
    for i in 0..5 {
        std::fs::write(&csv, format!("id\n{i}\n")).unwrap();
        ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    }
    let mut child = floe_cmd()
        .arg("--warehouse")
        .arg(&wh)
        .args([
            "maintain", "db.t", "--watch", "1s", "--json", "--holder", "watcher",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["steps"][0]["action"], "done", "{first}");
    assert_eq!(first["lease_holder"], "watcher");
    let o = floe(&wh, &["maintain", "db.t"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("being maintained by watcher"),
        "{}",
        text(&o)
    );
    let second: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(second["steps"][0]["action"], "skipped", "{second}");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("lease released"), "{err}");
    let text_out = ok(&wh, &["maintain", "db.t"]);
    assert!(text_out.contains("maintained"), "{text_out}");

    // --after-commits: an hour's interval, but three commits wake the service.
    ok(
        &wh,
        &[
            "alter",
            "db.t",
            "--set",
            "floe.maintain.rewrite-data-files.min-input-files=2",
        ],
    );
    let mut child = floe_cmd()
        .arg("--warehouse")
        .arg(&wh)
        .args([
            "maintain",
            "db.t",
            "--watch",
            "1h",
            "--after-commits",
            "3",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["commits_count"], 0, "{first}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines {
            let _ = tx.send(l.unwrap());
        }
    });
    for i in 10..12 {
        std::fs::write(&csv, format!("id\n{i}\n")).unwrap();
        ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    }
    // Two commits are not three: no pass within a few of its looks.
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(4)).is_err(),
        "a pass ran after two commits"
    );
    std::fs::write(&csv, "id\n12\n").unwrap();
    ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
    let second: serde_json::Value =
        serde_json::from_str(&rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap())
            .unwrap();
    assert_eq!(second["lease_holder"], first["lease_holder"], "{second}");
    assert_eq!(second["steps"][0]["action"], "done", "{second}");
    // Its own commits do not wake it again.
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(3)).is_err(),
        "a pass ran without new commits"
    );
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `maintain` killed (SIGKILL) at random points of its passes: the rows never change, a
/// dead maintainer's lease is taken over once it lapses, and the pass after the kills collects
/// the files the killed ones wrote and never committed (orphans, with a zero age threshold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pass_loses_nothing_and_the_next_collects_its_orphans() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.t",
            "--schema",
            "id long, p int, v string",
            "--partition-by",
            "p",
            "--format-version",
            "3",
            "--property",
            "write.delete.mode=merge-on-read",
            "--property",
            "floe.maintain.rewrite-data-files.min-input-files=2",
            "--property",
            "floe.maintain.lease-ms=1000",
        ],
    );
    let mut rng = StdRng::seed_from_u64(44);
    let mut model = std::collections::BTreeMap::new();
    let csv = d.path().join("in.csv");
    let mut next = 0i64;
    let mut killed_running = 0;
    let rows_now = |wh: &Path| {
        let out = ok(wh, &["scan", "db.t", "--format", "csv"]);
        out.lines().skip(1).map(str::to_string).collect::<Vec<_>>()
    };
    for round in 0..4 {
        // Small files in a few partitions, and deletes into them.
        for _ in 0..6 {
            let mut body = String::from("id,p,v\n");
            for _ in 0..rng.gen_range(1..40) {
                let p = rng.gen_range(0..3);
                body.push_str(&format!("{next},{p},v{next}\n"));
                model.insert(next, format!("{next},{p},v{next}"));
                next += 1;
            }
            std::fs::write(&csv, body).unwrap();
            ok(&wh, &["append", "db.t", csv.to_str().unwrap()]);
        }
        let cut = rng.gen_range(0..next);
        ok(
            &wh,
            &[
                "delete",
                "db.t",
                "--where",
                &format!("id % 7 = {} and id < {cut}", round),
            ],
        );
        model.retain(|id, _| !(id % 7 == round && *id < cut));
        // A pass killed after a random delay (or finishing first).
        let mut child = floe_cmd()
            .arg("--warehouse")
            .arg(&wh)
            .args(["maintain", "db.t", "--holder", &format!("doomed-{round}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.gen_range(20..300)));
        if child.try_wait().unwrap().is_none() {
            killed_running += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        let expected: Vec<String> = model.values().cloned().collect();
        let mut got = rows_now(&wh);
        got.sort_by_key(|l| l.split(',').next().unwrap().parse::<i64>().unwrap());
        assert_eq!(
            got, expected,
            "round {round}: rows changed by a killed maintain"
        );
    }
    assert!(
        killed_running >= 2,
        "only {killed_running} passes were killed running"
    );
    let strays_before = strays(&wh);
    eprintln!("files the killed passes left: {}", strays_before.len());
    // The last holder died holding the lease: refused while it lasts, taken over after.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    ok(
        &wh,
        &[
            "alter",
            "db.t",
            "--set",
            "floe.maintain.remove-orphan-files.older-than-ms=0",
        ],
    );
    let out = ok(&wh, &["maintain", "db.t", "--json"]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["failed_steps_count"], 0, "{r}");
    let mut got = rows_now(&wh);
    got.sort_by_key(|l| l.split(',').next().unwrap().parse::<i64>().unwrap());
    assert_eq!(got, model.values().cloned().collect::<Vec<_>>());
    // Every file under data/ is one some snapshot still references.
    let stray = strays(&wh);
    assert!(stray.is_empty(), "files no snapshot references: {stray:?}");
    let cat = Catalog::open_existing(None, Some(wh.to_str().unwrap()), None).unwrap();
    let t = cat.load_table(&parse_ident("db.t").unwrap()).await.unwrap();
    let expected = d.path().join("expected.parquet");
    floe_expected(&t, None, &expected).await;
    peers_read(d.path(), "killed-maintain", &t, &expected);
}

/// The files under db.t's data/ that no snapshot references.
fn strays(wh: &Path) -> Vec<String> {
    let referenced: std::collections::HashSet<String> = ["db.t.all_files", "db.t.all_delete_files"]
        .iter()
        .flat_map(|t| {
            ok(
                wh,
                &["scan", t, "--columns", "file_path", "--format", "csv"],
            )
            .lines()
            .skip(1)
            .map(|l| {
                l.trim_matches('"')
                    .trim_start_matches("file://")
                    .to_string()
            })
            .collect::<Vec<_>>()
        })
        .collect();
    walk(&wh.join("db/t/data"))
        .into_iter()
        .map(|e| e.to_string_lossy().to_string())
        .filter(|p| !p.ends_with(".crc") && !referenced.contains(p))
        .collect()
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
