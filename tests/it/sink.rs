//! `floe sink`, the CDC sink as a process: Debezium events on standard input and files
//! arriving in a directory, killed with SIGKILL at random points and restarted on the same
//! input until it finishes; every record lands exactly once (a sum table, where a record
//! applied twice shows), the rows and tombstones equal a model that applies the events one by
//! one, and the peers read the table. Bad records stop the sink naming the record, with
//! nothing of their batch committed, or go to a dead-letter file.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use floe::table::parse_ident;
use floe::Catalog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;
use crate::faults::{observed, Model};

fn sink_cmd(wh: &Path, args: &[&str]) -> Command {
    let mut c = floe_cmd();
    c.arg("--warehouse").arg(wh).arg("sink").args(args);
    c
}

/// Runs the sink on `input` (a file fed to standard input, or None for a directory sink),
/// killing it after a random delay until a run ends by itself; returns that run's stderr
/// and how many runs were killed.
fn run_with_kills(
    wh: &Path,
    args: &[&str],
    input: Option<&Path>,
    rng: &mut StdRng,
) -> (String, usize) {
    let mut kills = 0;
    for attempt in 0..40 {
        let mut c = sink_cmd(wh, args);
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        match input {
            Some(f) => c.stdin(std::fs::File::open(f).unwrap()),
            None => c.stdin(Stdio::null()),
        };
        let mut child = c.spawn().unwrap();
        let kill_after = if attempt < 6 {
            Some(Duration::from_millis(rng.gen_range(20..300)))
        } else {
            None
        };
        if let Some(d) = kill_after {
            std::thread::sleep(d);
            if child.try_wait().unwrap().is_none() {
                let _ = child.kill(); // SIGKILL
                let _ = child.wait();
                kills += 1;
                continue;
            }
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        return (err, kills);
    }
    panic!("the sink never finished");
}

/// Debezium events (lsn 1…n) on standard input, the sink killed and restarted on the whole
/// stream: the rows and tombstones equal the model's, the checkpoint is the last lsn, and a
/// replay of the stream after the end applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_events_land_exactly_once_across_kills() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.users",
            "--schema",
            "user_id long not null, plan string, ver long, is_deleted int",
            "--primary-key",
            "user_id",
            "--property",
            "floe.merge.version-column=ver",
            "--property",
            "floe.merge.delete-column=is_deleted",
            "--property",
            "write.merge.mode=merge-on-read",
            "--property",
            "floe.maintain.rewrite-data-files.min-input-files=3",
        ],
    );
    let mut rng = StdRng::seed_from_u64(44);
    let mut model = Model::default();
    let mut lines = Vec::new();
    for lsn in 1..=600i64 {
        let k = rng.gen_range(0..50i64);
        let del = model.live.contains_key(&k) && rng.gen_range(0..4) == 0;
        let plan = format!("p{lsn}");
        let row = serde_json::json!({"user_id": k, "plan": plan});
        let ev = if del {
            serde_json::json!({"op": "d", "before": {"user_id": k}, "after": null,
                               "source": {"lsn": lsn}, "ts_ms": lsn})
        } else {
            serde_json::json!({"op": if model.live.contains_key(&k) {"u"} else {"c"},
                               "before": null, "after": row, "source": {"lsn": lsn}, "ts_ms": lsn})
        };
        lines.push(ev.to_string());
        model.apply(&[(k, plan, lsn, del)]);
    }
    let events = d.path().join("events.jsonl");
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    let args = [
        "db.users",
        "--sink-id",
        "cdc",
        "--max-batch-rows",
        "40",
        "--commit-interval",
        "200ms",
        "--maintain",
        "--maintain-interval",
        "1s",
    ];
    let (_, kills) = run_with_kills(&wh, &args, Some(&events), &mut rng);
    assert!(kills >= 2, "only {kills} runs were killed mid-stream");
    let cat = Catalog::open_existing(None, Some(wh.to_str().unwrap()), None).unwrap();
    let ident = parse_ident("db.users").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let (got, _) = observed(&t).await;
    assert_eq!(got, model);
    assert_eq!(
        floe::keyed::committed_checkpoint(&t, "cdc").unwrap(),
        Some(600)
    );
    // A replay of the whole stream: every record is at or below the checkpoint.
    let o = sink_cmd(&wh, &args[..5])
        .stdin(std::fs::File::open(&events).unwrap())
        .output()
        .unwrap();
    let err = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("0 commits, 0 records, 600 replayed records skipped"),
        "{err}"
    );
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(observed(&t).await.0, model);
    let expected = d.path().join("expected.parquet");
    floe_expected(&t, None, &expected).await;
    if let Some(py) = peers_python() {
        peer_check(
            &py,
            d.path(),
            &[Check {
                name: "sink-stdin".into(),
                metadata: t.metadata_location().to_string(),
                snapshot_id: None,
                expected: expected.to_string_lossy().into_owned(),
                engines: None,
                refuse: None,
            }],
        );
    }
}

/// CSV files arriving in a directory into a `sum` table, the sink killed and restarted:
/// each file is summed exactly once (the sums equal the model's), every file ends in
/// `done/`; an unreadable file goes to the dead-letter directory with its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_files_are_summed_exactly_once_across_kills() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.stock",
            "--schema",
            "sku long not null, qty long",
            "--primary-key",
            "sku",
            "--property",
            "floe.merge-engine=sum",
            "--property",
            "floe.aggregate.qty=sum",
        ],
    );
    let inbox = d.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut sums = std::collections::BTreeMap::<i64, i64>::new();
    for f in 0..30 {
        let mut text = String::from("sku,qty\n");
        for _ in 0..20 {
            let (sku, qty) = (rng.gen_range(0..10i64), rng.gen_range(1..6i64));
            *sums.entry(sku).or_default() += qty;
            text.push_str(&format!("{sku},{qty}\n"));
        }
        std::fs::write(inbox.join(format!("f{f:03}.csv")), text).unwrap();
    }
    // A file still being written is left alone; a bad one is set aside.
    std::fs::write(inbox.join("f100.csv.part"), "sku,qty\n1,1000\n").unwrap();
    std::fs::write(inbox.join("f050.csv"), "sku,qty\nnot-a-number,1\n").unwrap();
    let dead = d.path().join("dead");
    let inbox_s = inbox.to_str().unwrap().to_string();
    let dead_s = dead.to_str().unwrap().to_string();
    let args = [
        "db.stock",
        "--from",
        &inbox_s,
        "--sink-id",
        "files",
        "--once",
        "--max-batch-rows",
        "20",
        "--dead-letter",
        &dead_s,
    ];
    let (_, kills) = run_with_kills(&wh, &args, None, &mut rng);
    assert!(kills >= 2, "only {kills} runs were killed mid-stream");
    let cat = Catalog::open_existing(None, Some(wh.to_str().unwrap()), None).unwrap();
    let t = cat
        .load_table(&parse_ident("db.stock").unwrap())
        .await
        .unwrap();
    let mut got = std::collections::BTreeMap::new();
    for b in scan_rows(&t, Default::default()).await {
        let s = b.column_by_name("sku").unwrap().as_primitive::<Int64Type>();
        let q = b.column_by_name("qty").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            got.insert(s.value(i), q.value(i));
        }
    }
    assert_eq!(got, sums, "every file summed exactly once");
    let done = inbox.join(".floe-sink-files/done");
    assert_eq!(std::fs::read_dir(&done).unwrap().count(), 30);
    assert!(dead.join("f050.csv").exists());
    let why = std::fs::read_to_string(dead.join("f050.csv.error.txt")).unwrap();
    assert!(why.contains("not-a-number") || why.contains("sku"), "{why}");
    assert!(inbox.join("f100.csv.part").exists());

    // Without a dead-letter directory a bad file stops the sink, naming it; nothing of it
    // is committed.
    std::fs::write(inbox.join("f200.csv"), "sku,qty\n1,x\n").unwrap();
    let before = t.metadata().current_snapshot_id();
    let o = sink_cmd(&wh, &args[..6]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("f200.csv"), "{}", text(&o));
    let t = cat.load_table(t.ident()).await.unwrap();
    assert_eq!(t.metadata().current_snapshot_id(), before);
}

/// Bad records on standard input: without a dead-letter file the sink stops naming the
/// record's line, nothing of its batch committed; with one, the record (and a stream cut
/// mid-record) go there and the rest is committed.
#[test]
fn bad_records_stop_the_sink_or_go_to_the_dead_letter_file() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.t",
            "--schema",
            "id long not null, v string, ver long",
            "--primary-key",
            "id",
            "--property",
            "floe.merge.version-column=ver",
        ],
    );
    let ev = |id: i64, lsn: i64| {
        serde_json::json!({"op": "c", "after": {"id": id, "v": "x"}, "source": {"lsn": lsn}})
            .to_string()
    };
    let input = d.path().join("in.jsonl");
    let stream = [
        ev(1, 1),
        ev(2, 2),
        r#"{"op": "c", "after": {"id": 3, "nosuch": 1}, "source": {"lsn": 3}}"#.to_string(),
        ev(4, 4),
        r#"{"op": "c", "after": {"id": 5"#.to_string(), // the stream stops mid-record
    ];
    std::fs::write(&input, stream.join("\n")).unwrap();
    let run = |extra: &[&str]| {
        let mut c = sink_cmd(&wh, &["db.t", "--sink-id", "s"]);
        c.args(extra).stdin(std::fs::File::open(&input).unwrap());
        c.output().unwrap()
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let msg = text(&o);
    assert!(msg.contains("line 3") && msg.contains("nosuch"), "{msg}");
    assert!(msg.contains("nothing of the batch of lines 1–5"), "{msg}");
    let count = |wh: &Path| ok(wh, &["scan", "db.t", "--count"]).trim().to_string();
    assert_eq!(count(&wh), "0");
    let dl = d.path().join("dead.jsonl");
    let o = run(&["--dead-letter", dl.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(count(&wh), "3");
    let dead: Vec<serde_json::Value> = std::fs::read_to_string(&dl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        dead.iter()
            .map(|v| v["line"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![3, 5]
    );
    let doc: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(doc["checkpoint"], 4, "{doc}");
    for (args, needle) in [
        (
            vec!["db.t", "--sink-id", "s", "--format", "csv"],
            "one record per line",
        ),
        (
            vec!["db.t", "--sink-id", "s", "--from", "/nonexistent/dir"],
            "not a directory",
        ),
        (vec!["db.t", "--sink-id", "bad id!"], "sink"),
        (
            vec!["db.t", "--sink-id", "s", "--max-batch-rows", "0"],
            "at least 1",
        ),
    ] {
        let o = sink_cmd(&wh, &args).stdin(Stdio::null()).output().unwrap();
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        assert!(text(&o).contains(needle), "{args:?}: {}", text(&o));
    }
}
