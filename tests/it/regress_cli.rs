//! Regression tests of issue #14's CLI and commit-outcome bugs: a closed stdout, quickstart's
//! warehouse, unknown store schemes, zero buckets/widths, names that alias a location, an
//! expiry whose cleanup fails after its commit, commits that definitely failed reported as
//! "unknown", and writer errors that named neither the file nor the cause.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Output, Stdio};

use floe::catalog::{Catalog, TableCreation};
use floe::spec::{parse_partition_spec, parse_schema, TableIdent};
use floe::table::parse_ident;
use floe::{CommitOutcome, ErrorKind, Table};
use iceberg::spec::{TableMetadata, TableMetadataBuilder};

use crate::common::{floe, floe_in, inputs, ok, text};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A warehouse with `db.t` (`id long, name string, ts timestamptz`) and two appends.
fn table_with_rows(wh: &Path, extra: &[&str]) -> (String, String) {
    let (csv, pq) = inputs(wh.parent().unwrap());
    let mut args = vec![
        "create",
        "db.t",
        "--schema",
        "id long, name string, ts timestamptz",
    ];
    args.extend_from_slice(extra);
    ok(wh, &args);
    ok(wh, &["append", "db.t", &csv]);
    ok(wh, &["append", "db.t", &pq]);
    (csv, pq)
}

async fn load(wh: &Path, name: &str) -> (Catalog, Table) {
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let t = cat.load_table(&parse_ident(name).unwrap()).await.unwrap();
    (cat, t)
}

/// `t`'s metadata with `props` set.
fn with_properties(t: &Table, props: &[(&str, &str)]) -> TableMetadata {
    TableMetadataBuilder::new_from_metadata(
        t.metadata().clone(),
        Some(t.metadata_location().to_string()),
    )
    .set_properties(
        props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    )
    .unwrap()
    .build()
    .unwrap()
    .metadata
}

// 1. `floe files … | head`: a closed stdout ends the process quietly.
#[test]
fn closed_stdout_ends_every_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    table_with_rows(&wh, &[]);
    let commands: [&[&str]; 11] = [
        &["files", "db.t"],
        &["snapshots", "db.t"],
        &["snapshots", "db.t", "--json"],
        &["describe", "db.t"],
        &["scan", "db.t"],
        &["scan", "db.t", "--format", "csv"],
        &["scan", "db.t", "--json"],
        &["scan", "db.t", "--count"],
        &["tables"],
        &["namespaces"],
        &["expire-snapshots", "db.t", "--dry-run"],
    ];
    for args in commands {
        let mut child = crate::common::floe_cmd()
            .arg("--warehouse")
            .arg(&wh)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before floe writes anything, as `| head -0` would.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {}", text(&o));
        use std::os::unix::process::ExitStatusExt;
        assert!(
            o.status.success() || o.status.signal() == Some(13),
            "{args:?}: {}",
            text(&o)
        );
        assert!(err.is_empty(), "{args:?}: {}", text(&o));
    }
    // With a reader that stays, the output is all there.
    let o = floe(&wh, &["scan", "db.t", "--format", "csv", "--limit", "1000"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 81);
    // A reader that quits after the first bytes of a long output.
    let mut child = crate::common::floe_cmd()
        .arg("--warehouse")
        .arg(&wh)
        .args(["files", "db.t"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", text(&o));
}

// 2. `floe --warehouse DIR quickstart` builds in DIR, not ./warehouse.
#[test]
fn quickstart_honours_the_global_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let wh = dir.path().join("wh");
    let o = floe_in(
        &cwd,
        &[
            "--warehouse",
            wh.to_str().unwrap(),
            "quickstart",
            "--rows",
            "1000",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(wh.join("catalog.db").exists(), "{}", text(&o));
    assert!(wh.join("demo/events/metadata").is_dir());
    assert!(!cwd.join("warehouse").exists(), "wrote ./warehouse");
    assert!(String::from_utf8_lossy(&o.stdout).contains(wh.to_str().unwrap()));
    // The subcommand's own --dir wins over the global flag.
    let own = dir.path().join("own");
    let o = floe_in(
        &cwd,
        &[
            "--warehouse",
            wh.to_str().unwrap(),
            "quickstart",
            "--dir",
            own.to_str().unwrap(),
            "--rows",
            "1000",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(own.join("catalog.db").exists());
    assert!(!cwd.join("warehouse").exists());
}

// 3. An abfs:// (or any unknown scheme) warehouse is an "unsupported store" error.
#[test]
fn unknown_store_schemes_are_refused_not_made_local() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    for wh in [
        "abfs://container@account.dfs.core.windows.net/wh",
        "gs://bucket/wh",
        "az://container/wh",
        "hdfs://namenode:8020/wh",
    ] {
        for args in [
            vec!["--warehouse", wh, "tables"],
            vec!["--warehouse", wh, "create", "db.t", "--schema", "id long"],
            vec!["--catalog", "sqlite:///c.db", "--warehouse", wh, "tables"],
        ] {
            let o = floe_in(cwd, &args);
            let err = stderr(&o);
            assert!(!o.status.success(), "{args:?}: {}", text(&o));
            let first = err.lines().next().unwrap_or_default();
            assert!(
                first.contains("unsupported store") && first.contains(wh),
                "{args:?}: {}",
                text(&o)
            );
            assert!(
                first.contains("s3://") && first.contains("file://"),
                "{first}"
            );
        }
        let e = Catalog::open(None, Some(wh), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
    // Nothing was created in the working directory ("abfs:", "gs:", … as relative paths).
    let left: Vec<_> = std::fs::read_dir(cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n != "c.db")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A table location on an unknown store is refused too.
    let wh = dir.path().join("wh");
    let o = floe(
        &wh,
        &[
            "create",
            "db.t",
            "--schema",
            "id long",
            "--location",
            "gs://bucket/t",
        ],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(stderr(&o).contains("unsupported store"), "{}", text(&o));
}

// 4. bucket(0, …) and truncate(0, …) are refused at create, and a table written elsewhere
// with such a spec fails to append cleanly instead of panicking.
#[tokio::test]
async fn zero_buckets_and_widths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    for (spec, want) in [
        ("bucket(0, id)", "number of buckets"),
        ("truncate(0, name)", "truncation width"),
    ] {
        let o = floe(
            &wh,
            &[
                "create",
                "db.z",
                "--schema",
                "id long, name string",
                "--partition-by",
                spec,
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", text(&o));
        assert!(stderr(&o).contains(want), "{spec}: {}", text(&o));
        let o = floe(
            &wh,
            &[
                "create",
                "db.z",
                "--schema",
                "id long, name string",
                "--sort-by",
                spec,
            ],
        );
        assert_eq!(o.status.code(), Some(2), "sort {spec}: {}", text(&o));
    }
    // The library refuses a hand-built spec too.
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let schema = parse_schema("id long, name string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = iceberg::spec::UnboundPartitionSpec::builder()
        .add_partition_field(1, "id_bucket", iceberg::spec::Transform::Bucket(0))
        .unwrap()
        .build();
    let e = cat
        .create_table(&parse_ident("db.z").unwrap(), c)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");

    // A table whose metadata (written by someone else) says bucket[0] / truncate[0].
    for (spec, good, bad) in [
        ("bucket(4, id)", "\"bucket[4]\"", "\"bucket[0]\""),
        ("truncate(3, name)", "\"truncate[3]\"", "\"truncate[0]\""),
    ] {
        let mut c = TableCreation::new(schema.clone());
        c.partition_spec = parse_partition_spec(spec, &schema).unwrap();
        let ident = parse_ident("db.elsewhere").unwrap();
        let t = cat.create_table(&ident, c).await.unwrap();
        let path = t
            .metadata_location()
            .trim_start_matches("file://")
            .to_string();
        let json = std::fs::read_to_string(&path).unwrap();
        assert!(json.contains(good), "{json}");
        std::fs::write(&path, json.replace(good, bad)).unwrap();
        let csv = dir.path().join("z.csv");
        std::fs::write(&csv, "id,name\n1,a\n2,b\n").unwrap();
        let o = floe(&wh, &["append", "db.elsewhere", csv.to_str().unwrap()]);
        assert!(!stderr(&o).contains("panicked"), "{spec}: {}", text(&o));
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", text(&o));
        assert!(
            stderr(&o).contains(&bad[1..bad.len() - 1]),
            "{spec}: {}",
            text(&o)
        );
        ok(&wh, &["drop", "db.elsewhere"]);
    }
}

// 5. Names holding `/` (and other location-aliasing characters) are refused.
#[tokio::test]
async fn names_that_alias_a_location_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    ok(&wh, &["create", "db.a.b", "--schema", "id long"]);
    for name in ["db.a/b", "db.a\\b", "db/a.b", "db..b"] {
        let o = floe(&wh, &["create", name, "--schema", "id long"]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", text(&o));
        assert!(stderr(&o).contains("alias"), "{name}: {}", text(&o));
        let o = floe(&wh, &["rename", "db.a.b", name]);
        assert_eq!(o.status.code(), Some(2), "rename to {name}: {}", text(&o));
    }
    let o = floe(&wh, &["namespaces", "--create", "x/y"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let tables = ok(&wh, &["tables"]);
    assert_eq!(tables.trim(), "db.a.b");
    // The library refuses such idents whatever their origin, in both catalog kinds.
    let (_d, fs) = crate::common::fs_catalog();
    let sql = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    for cat in [&sql, &fs] {
        for parts in [vec!["db", "a/b"], vec!["..", "t"], vec!["db.a", "b"]] {
            let ident = TableIdent::from_strs(parts.clone()).unwrap();
            let e = cat
                .create_table(&ident, TableCreation::new(parse_schema("id long").unwrap()))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{parts:?}: {e}");
        }
    }
}

// 6. expire-snapshots whose cleanup fails after the commit reports the commit, then the
// cleanup failure, and exits 0.
#[tokio::test]
async fn expire_reports_its_commit_when_the_cleanup_fails() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    table_with_rows(&wh, &[]);
    ok(
        &wh,
        &["rewrite-data-files", "db.t", "--option", "rewrite-all=true"],
    );
    let (_, t) = load(&wh, "db.t").await;
    assert_eq!(t.metadata().snapshots().len(), 3);
    // A manifest only the snapshots to expire list: only the cleanup reads it.
    let current = t.current_snapshot().unwrap().clone();
    let live: Vec<String> = t
        .manifest_list(&current)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.manifest_path)
        .collect();
    let mut only_old = None;
    for s in t.metadata().snapshots() {
        for m in t.manifest_list(s).await.unwrap() {
            if !live.contains(&m.manifest_path) {
                only_old = Some(m.manifest_path);
            }
        }
    }
    let manifest = only_old.expect("a manifest only the old snapshots reference");
    let local = manifest.trim_start_matches("file://");
    let bytes = std::fs::read(local).unwrap();
    std::fs::write(local, &bytes[..bytes.len() / 3]).unwrap();
    let now = (chrono::Utc::now().timestamp_millis() + 1000).to_string();
    let o = floe(
        &wh,
        &[
            "expire-snapshots",
            "db.t",
            "--older-than",
            &now,
            "--retain-last",
            "1",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["expired_snapshot_ids"].as_array().unwrap().len(),
        2,
        "{v}"
    );
    let committed = v["metadata_location"].as_str().unwrap().to_string();
    let cleanup = v["cleanup_error"].as_str().unwrap();
    assert!(
        cleanup.contains(&manifest) || cleanup.contains(local),
        "{cleanup}"
    );
    assert!(cleanup.contains("were expired"), "{cleanup}");
    assert!(stderr(&o).starts_with("warning: "), "{}", text(&o));
    let (_, after) = load(&wh, "db.t").await;
    assert_eq!(after.metadata().snapshots().len(), 1);
    assert_eq!(after.metadata_location(), committed);
    // No file was deleted without knowing it was unreferenced: the rows read as before.
    assert_eq!(ok(&wh, &["scan", "db.t", "--count"]).trim(), "80");

    // The text output says what was committed, then warns.
    ok(
        &wh,
        &[
            "append",
            "db.t",
            dir.path().join("in.csv").to_str().unwrap(),
        ],
    );
    let (_, t) = load(&wh, "db.t").await;
    let head = t.metadata().current_snapshot_id();
    let first = t
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .find(|id| Some(*id) != head)
        .unwrap();
    let list = t
        .metadata()
        .snapshot_by_id(first)
        .unwrap()
        .manifest_list()
        .to_string();
    std::fs::write(list.trim_start_matches("file://"), b"not avro").unwrap();
    let o = floe(
        &wh,
        &[
            "expire-snapshots",
            "db.t",
            "--snapshot-id",
            &first.to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("expired 1 snapshots") && out.contains("committed: metadata"),
        "{}",
        text(&o)
    );
    assert!(stderr(&o).contains("warning: ") && stderr(&o).contains("remove-orphan-files"));
}

/// A hand-made REST catalog that answers `GET /v1/config` and every commit with `status`.
fn fake_rest(status: u16) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Headers, then the body by Content-Length.
            let head_end = loop {
                let n = s.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let n = s.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let (code, body) = if head.starts_with("GET /v1/config") {
                (200, r#"{"defaults":{},"overrides":{}}"#.to_string())
            } else {
                (
                    status,
                    format!(
                        r#"{{"error":{{"message":"refused by the test","type":"TestException","code":{status}}}}}"#
                    ),
                )
            };
            let resp = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes());
        }
    });
    format!("rest+http://{addr}")
}

// 7. A commit that definitely did not happen is a failure, not "commit state unknown".
#[tokio::test]
async fn definite_commit_failures_are_not_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (csv, _) = table_with_rows(&wh, &[]);
    let db = wh.join("catalog.db");

    // a) A catalog that refuses the UPDATE (a read-only catalog: SQLite answers the statement
    // with an error, so the pointer did not move).
    let before = load(&wh, "db.t").await.1;
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TRIGGER read_only BEFORE UPDATE ON iceberg_tables
             BEGIN SELECT RAISE(ABORT, 'attempt to write a readonly database'); END;",
        )
        .unwrap();
    }
    let data_files = |dir: &Path| crate::common::files_under(&dir.join("db/t/data")).len();
    let files_before = data_files(&wh);
    let o = floe(&wh, &["append", "db.t", &csv]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{}", text(&o));
    assert_ne!(o.status.code(), Some(4), "{}", text(&o));
    assert!(!err.contains("may or may not"), "{}", text(&o));
    assert!(err.contains("nothing was committed"), "{}", text(&o));
    assert!(err.contains("readonly database"), "{}", text(&o));
    let (_, after) = load(&wh, "db.t").await;
    assert_eq!(after.metadata_location(), before.metadata_location());
    assert_eq!(
        data_files(&wh),
        files_before,
        "the new data files were left behind"
    );
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("DROP TRIGGER read_only").unwrap();
    }

    // b) The new metadata file cannot be written (its directory is a file): the swap never
    // ran. SQL and filesystem catalogs alike.
    let (cat, t) = load(&wh, "db.t").await;
    let (_fsd, fs) = crate::common::fs_catalog();
    let ft = fs
        .create_table(
            &parse_ident("db.f").unwrap(),
            TableCreation::new(parse_schema("id long").unwrap()),
        )
        .await
        .unwrap();
    for (cat, t) in [(&cat, &t), (&fs, &ft)] {
        let meta =
            Path::new(t.metadata().location().trim_start_matches("file://")).join("metadata");
        let moved = meta.with_extension("moved");
        std::fs::rename(&meta, &moved).unwrap();
        std::fs::write(&meta, b"a file where the metadata directory was").unwrap();
        let outcome = cat.commit(t, with_properties(t, &[("k", "v")])).await;
        std::fs::remove_file(&meta).unwrap();
        std::fs::rename(&moved, &meta).unwrap();
        match outcome {
            CommitOutcome::Failed(e) => {
                assert!(e.to_string().contains("new metadata file"), "{e}")
            }
            other => panic!("{}: {other:?}", t.name()),
        }
        let now = cat.load_table(t.ident()).await.unwrap();
        assert_eq!(now.metadata_location(), t.metadata_location());
        assert!(!now.metadata().properties().contains_key("k"));
    }

    // c) A REST commit answered with a 4xx other than 409 failed; 409 is a conflict; 5xx is
    // unknown.
    for (status, want) in [
        (400, "failed"),
        (403, "failed"),
        (404, "failed"),
        (422, "failed"),
        (409, "conflict"),
        (500, "unknown"),
        (503, "unknown"),
    ] {
        let rest = Catalog::open(Some(&fake_rest(status)), None, None).unwrap();
        let got = match rest.commit(&t, with_properties(&t, &[("k", "v")])).await {
            CommitOutcome::Failed(e) => {
                assert!(e.to_string().contains(&status.to_string()), "{e}");
                "failed"
            }
            CommitOutcome::Conflict(_) => "conflict",
            CommitOutcome::Unknown(_) => "unknown",
            CommitOutcome::Committed(_) => "committed",
        };
        assert_eq!(got, want, "REST answer {status}");
    }
}

// 8. A data or delete file that cannot be written: the first line names the file, the cause
// and that nothing was committed.
#[tokio::test]
async fn unwritable_files_name_the_file_the_cause_and_nothing_committed() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (csv, _) = inputs(dir.path());
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, b"a file where a directory is needed").unwrap();
    let data_path = blocked.join("data");
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("cow", &[], &["delete", "db.cow", "--where", "id < 5"]),
        (
            "mor",
            &["--property", "write.delete.mode=merge-on-read"],
            &["delete", "db.mor", "--where", "id < 5"],
        ),
        (
            "dv",
            &[
                "--property",
                "write.delete.mode=merge-on-read",
                "--format-version",
                "3",
            ],
            &["delete", "db.dv", "--where", "id < 5"],
        ),
        (
            "rw",
            &[],
            &[
                "rewrite-data-files",
                "db.rw",
                "--option",
                "rewrite-all=true",
            ],
        ),
        ("app", &[], &["append", "db.app", csv.as_str()]),
    ];
    for (name, props, cmd) in cases {
        let table = format!("db.{name}");
        let mut args = vec![
            "create",
            table.as_str(),
            "--schema",
            "id long, name string, ts timestamptz",
        ];
        args.extend_from_slice(props);
        ok(&wh, &args);
        ok(&wh, &["append", &table, &csv]);
        ok(&wh, &["append", &table, &csv]);
        let (cat, t) = load(&wh, &table).await;
        let next = with_properties(&t, &[("write.data.path", data_path.to_str().unwrap())]);
        let t = match cat.commit(&t, next).await {
            CommitOutcome::Committed(t) => t,
            other => panic!("{other:?}"),
        };
        let o = floe(&wh, cmd);
        let err = stderr(&o);
        let first = err.lines().next().unwrap_or_default();
        assert!(!o.status.success(), "{name}: {}", text(&o));
        assert_ne!(o.status.code(), Some(4), "{name}: {}", text(&o));
        assert!(
            first.contains(data_path.to_str().unwrap())
                && first.contains("nothing was committed")
                && first.contains("not a directory"),
            "{name}: {}",
            text(&o)
        );
        assert!(!first.contains("Failed to finish"), "{name}: {}", text(&o));
        let (_, now) = load(&wh, &table).await;
        assert_eq!(now.metadata_location(), t.metadata_location(), "{name}");
    }
}

/// Every comma-separated flag trims its items alike (`--primary-key "a, b"`, `--columns
/// "a, c"`, `--identifier-columns "a, b"` failed while `--on` took the space); an empty item
/// is refused.
#[test]
fn comma_separated_flags_trim_their_items() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.k",
            "--schema",
            "a long not null, b long not null, c string",
            "--primary-key",
            "a, b",
        ],
    );
    let csv = d.path().join("k.csv");
    std::fs::write(&csv, "a,b,c\n1,2,x\n3,4,y\n").unwrap();
    ok(&wh, &["append", "db.k", csv.to_str().unwrap()]);
    let out = ok(
        &wh,
        &["scan", "db.k", "--columns", "a, c", "--format", "json"],
    );
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "c"], "{out}");
    ok(
        &wh,
        &[
            "changes",
            "db.k",
            "--identifier-columns",
            "a, b",
            "--format",
            "json",
        ],
    );
    let o = floe(&wh, &["scan", "db.k", "--columns", "a,,c"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
