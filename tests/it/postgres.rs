//! The SQL catalog on PostgreSQL: catalog operations (both JDBC schema versions), errors that
//! say what to do, pyiceberg's `SqlCatalog` sharing the database in both directions, 8
//! concurrent writer processes × 25 appends, and a merge-on-read DELETE the peers read.
//!
//! The server comes from `tools/servers/postgres.sh` (started by `tools/test.sh`), which
//! exports `FLOE_TEST_POSTGRES_URI`; every test creates a database of its own there.
//! Without it these tests fail, unless `FLOE_NO_POSTGRES=1` says to skip them.

use std::collections::HashSet;
use std::path::Path;

use arrow::array::{Array, Int64Array};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::SnapshotSelector;
use floe::spec::parse_schema;
use floe::table::parse_ident;
use floe::txn::append;
use floe::ErrorKind;

use crate::catalog::{exercise, pyice};
use crate::common::floe;
use crate::common::*;

/// The test server's URI, or `None` (skip) when `FLOE_NO_POSTGRES=1`.
fn server() -> Option<String> {
    if std::env::var("FLOE_NO_POSTGRES").as_deref() == Ok("1") {
        eprintln!("FLOE_NO_POSTGRES=1: PostgreSQL catalog tests skipped");
        return None;
    }
    match std::env::var("FLOE_TEST_POSTGRES_URI") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => panic!(
            "FLOE_TEST_POSTGRES_URI is not set: run `bash tools/test.sh` (it starts PostgreSQL), or \
             `eval \"$(bash tools/servers/postgres.sh start)\"; export FLOE_TEST_POSTGRES_URI`; \
             FLOE_NO_POSTGRES=1 skips these tests"
        ),
    }
}

/// Runs SQL on the server with the synchronous client (on a thread of its own: the client
/// runs its own runtime, which must not start inside a test's).
fn admin_sql(uri: &str, sql: &str) {
    let (uri, sql) = (uri.to_string(), sql.to_string());
    std::thread::spawn(move || {
        let mut c = ::postgres::Client::connect(&uri, ::postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to the test PostgreSQL: {e}"));
        c.batch_execute(&sql)
            .unwrap_or_else(|e| panic!("`{sql}`: {e}"));
    })
    .join()
    .unwrap();
}

/// `uri` with another database.
fn with_db(uri: &str, db: &str) -> String {
    let mut u = url::Url::parse(uri).unwrap();
    u.set_path(&format!("/{db}"));
    u.to_string()
}

/// A fresh database of its own for one test: its URI.
pub(crate) fn database() -> Option<String> {
    let admin = server()?;
    let name = format!("floe_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    admin_sql(&admin, &format!("CREATE DATABASE {name}"));
    Some(with_db(&admin, &name))
}

fn open(uri: &str, wh: &Path, name: Option<&str>) -> Catalog {
    Catalog::open(Some(uri), Some(wh.to_str().unwrap()), name).unwrap()
}

#[tokio::test]
async fn postgres_catalog_operations() {
    let Some(uri) = database() else { return };
    let d = tempfile::tempdir().unwrap();
    let cat = open(&uri, d.path(), None);
    exercise(&cat, true).await;
    // The catalog name separates catalogs sharing one database.
    let other = open(&uri, d.path(), Some("other"));
    assert!(other.list_namespaces().await.unwrap().is_empty());
    other
        .create_table(
            &parse_ident("x.t").unwrap(),
            TableCreation::new(parse_schema("id long").unwrap()),
        )
        .await
        .unwrap();
    assert!(!cat.list_namespaces().await.unwrap().contains(&"x".into()));
    // postgres:// and SQLAlchemy's postgresql+psycopg2:// name the same catalog.
    for alias in [
        uri.replacen("postgresql://", "postgres://", 1),
        uri.replacen("postgresql://", "postgresql+psycopg2://", 1),
    ] {
        let a = open(&alias, d.path(), Some("other"));
        assert_eq!(a.list_tables("x").await.unwrap().len(), 1, "{alias}");
    }
    // Namespace properties are upserted, not duplicated.
    cat.create_namespace("p", &[("owner".into(), "a".into())])
        .await
        .unwrap();
    cat.create_namespace("p", &[("owner".into(), "b".into())])
        .await
        .unwrap();
    cat.drop_namespace("p").await.unwrap();
    assert!(!cat.list_namespaces().await.unwrap().contains(&"p".into()));
}

/// Java's `JdbcCatalog` creates its tables without `iceberg_type` (schema V0) and a nullable
/// `property_value`; floe works on them as they are. With the column (V1), views are not tables.
#[tokio::test]
async fn postgres_catalog_on_both_jdbc_schema_versions() {
    let Some(uri) = database() else { return };
    admin_sql(
        &uri,
        "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL,
           table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000),
           PRIMARY KEY (catalog_name, table_namespace, table_name));
         CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL,
           property_key VARCHAR(255), property_value VARCHAR(1000),
           PRIMARY KEY (catalog_name, namespace, property_key));
         INSERT INTO iceberg_namespace_properties VALUES ('default', 'javans', 'exists', NULL);",
    );
    let d = tempfile::tempdir().unwrap();
    let cat = open(&uri, d.path(), None);
    exercise(&cat, true).await;
    assert!(cat
        .list_namespaces()
        .await
        .unwrap()
        .contains(&"javans".into()));
    let ident = parse_ident("v0.t").unwrap();
    let t = cat
        .create_table(
            &ident,
            TableCreation::new(parse_schema("id long, v string").unwrap()),
        )
        .await
        .unwrap();
    append(&cat, &t, vec![Ok(id_batch(0..3))]).await.unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 3);

    // Schema V1 (with iceberg_type): a Java view row is not a table.
    let Some(uri) = database() else { return };
    let cat = open(&uri, d.path(), None);
    cat.create_table(
        &parse_ident("v1.t").unwrap(),
        TableCreation::new(parse_schema("id long").unwrap()),
    )
    .await
    .unwrap();
    admin_sql(
        &uri,
        "INSERT INTO iceberg_tables VALUES ('default', 'v1', 'view1', '/nowhere/v.metadata.json', NULL, 'VIEW')",
    );
    let names: Vec<String> = cat
        .list_tables("v1")
        .await
        .unwrap()
        .iter()
        .map(|i| i.name().to_string())
        .collect();
    assert_eq!(names, vec!["t".to_string()]);
    assert_eq!(
        cat.load_table(&parse_ident("v1.view1").unwrap())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn postgres_errors_name_the_catalog_and_say_what_to_do() {
    let Some(admin) = server() else { return };
    let d = tempfile::tempdir().unwrap();
    // A database that does not exist.
    let missing = with_db(&admin, "floe_no_such_db");
    let e = open(&missing, d.path(), None)
        .list_namespaces()
        .await
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("postgres catalog postgresql://floe")
            && s.contains("floe_no_such_db")
            && s.contains("CREATE DATABASE"),
        "{s}"
    );
    assert!(!s.contains("floe-test"), "the password leaked: {s}");
    // A wrong password.
    let mut u = url::Url::parse(&admin).unwrap();
    u.set_password(Some("wrong-password")).unwrap();
    let e = open(u.as_str(), d.path(), None)
        .list_namespaces()
        .await
        .unwrap_err();
    let s = e.to_string();
    assert!(s.contains("check the user and password"), "{s}");
    assert!(!s.contains("wrong-password"), "the password leaked: {s}");
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("postgresql://floe@127.0.0.1:{port}/floe");
    let o = floe(d.path(), &["--catalog", &down, "namespaces"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("is PostgreSQL running at 127.0.0.1:{port}")),
        "{err}"
    );
    // Not a database URI at all.
    let e = Catalog::open(
        Some("postgresql://u@127.0.0.1:5432"),
        Some(d.path().to_str().unwrap()),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("names no database"), "{e}");
}

fn rows_of(listing: &serde_json::Value, ident: &str) -> Option<u64> {
    listing["tables"]
        .as_array()?
        .iter()
        .find(|t| t["identifier"] == ident)?["rows"]
        .as_u64()
}

/// floe creates the catalog and a table; pyiceberg's SqlCatalog on the same database lists
/// and reads it and appends to it; floe sees pyiceberg's snapshot.
#[tokio::test]
async fn pyiceberg_opens_floe_postgres_catalog_and_keeps_writing() {
    let Some(uri) = database() else { return };
    let d = tempfile::tempdir().unwrap();
    let cat = open(&uri, d.path(), None);
    let ident = parse_ident("shared.t").unwrap();
    let t = cat
        .create_table(
            &ident,
            TableCreation::new(parse_schema("id long, name string, ts timestamptz").unwrap()),
        )
        .await
        .unwrap();
    let b = rows_like(t.metadata().current_schema(), 0, 30);
    append(&cat, &t, vec![Ok(b)]).await.unwrap();
    let wh = format!("file://{}", d.path().display());
    let Some(listed) = pyice(&["list", &uri, &wh]) else {
        return;
    };
    assert_eq!(rows_of(&listed, "shared.t"), Some(30), "{listed}");
    let after = pyice(&["append", &uri, &wh, "shared.t", "12"]).unwrap();
    assert_eq!(after["rows"], 42, "{after}");
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 42);
    assert_eq!(t.metadata().snapshots().len(), 2);
    assert_eq!(
        t.metadata_location(),
        after["metadata_location"].as_str().unwrap()
    );
    // floe keeps writing after pyiceberg.
    append(
        &cat,
        &t,
        vec![Ok(rows_like(t.metadata().current_schema(), 100, 5))],
    )
    .await
    .unwrap();
    let listed = pyice(&["list", &uri, &wh]).unwrap();
    assert_eq!(rows_of(&listed, "shared.t"), Some(47), "{listed}");
}

/// pyiceberg creates the catalog tables and a partitioned table; floe opens that catalog,
/// reads and appends, and creates a table of its own that pyiceberg then reads.
#[tokio::test]
async fn floe_opens_pyiceberg_postgres_catalog() {
    let Some(uri) = database() else { return };
    let d = tempfile::tempdir().unwrap();
    let wh = format!("file://{}", d.path().display());
    let Some(created) = pyice(&["create", &uri, &wh, "pyns.events"]) else {
        return;
    };
    let rows = created["rows"].as_u64().unwrap() as usize;
    let cat = open(&uri, d.path(), None);
    let ident = parse_ident("pyns.events").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), rows);
    assert!(cat
        .list_namespaces()
        .await
        .unwrap()
        .contains(&"pyns".into()));
    let extra = rows_like(t.metadata().current_schema(), 1000, 7);
    append(&cat, &t, vec![Ok(extra)]).await.unwrap();
    let mine = parse_ident("floens.mine").unwrap();
    let m = cat
        .create_table(
            &mine,
            TableCreation::new(parse_schema("id long, name string").unwrap()),
        )
        .await
        .unwrap();
    append(
        &cat,
        &m,
        vec![Ok(rows_like(m.metadata().current_schema(), 0, 9))],
    )
    .await
    .unwrap();
    let listed = pyice(&["list", &uri, &wh]).unwrap();
    assert_eq!(
        rows_of(&listed, "pyns.events"),
        Some(rows as u64 + 7),
        "{listed}"
    );
    assert_eq!(rows_of(&listed, "floens.mine"), Some(9), "{listed}");
    let again = pyice(&["append", &uri, &wh, "floens.mine", "4"]).unwrap();
    assert_eq!(again["rows"], 13, "{again}");
}

/// 8 writer processes × 25 appends each, all through one PostgreSQL catalog: every commit
/// lands, no row is lost, and no metadata file is overwritten (each file in the metadata log
/// is distinct and holds exactly the history up to its commit).
#[test]
fn eight_writer_processes_append_25_times_each_through_postgres() {
    let Some(uri) = database() else { return };
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let cli: Vec<String> = [
        "--catalog",
        uri.as_str(),
        "--warehouse",
        wh.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    eight_writers_append(&cli, &[], "race.t", || open(&uri, &wh, None));
}

/// 8 `floe append` processes × 25 appends each on `table`, through the catalog that `cli`
/// (`--catalog …`, `--warehouse …`) names, with `envs` set: every commit lands, no row is lost
/// or doubled, the history is linear, and every metadata file of the log is a distinct file
/// holding exactly the snapshots of its commit (none overwritten, none left by a loser).
pub(crate) fn eight_writers_append(
    cli: &[String],
    envs: &[(String, String)],
    table: &str,
    open: impl Fn() -> Catalog,
) {
    const WRITERS: i64 = 8;
    const APPENDS: i64 = 25;
    const ROWS: i64 = 4;
    let d = tempfile::tempdir().unwrap();
    let floe = |args: &[&str]| {
        crate::common::floe_cmd()
            .envs(envs.iter().cloned())
            .args(cli)
            .args(args)
            .output()
            .unwrap()
    };
    let run = |args: &[&str]| {
        let o = floe(args);
        assert!(
            o.status.success(),
            "floe {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    run(&[
        "create",
        table,
        "--schema",
        "id long, writer int, round int",
        "--property",
        "commit.retry.num-retries=1000",
        "--property",
        "commit.retry.min-wait-ms=10",
        "--property",
        "commit.retry.max-wait-ms=400",
        "--property",
        "write.metadata.previous-versions-max=1000",
    ]);
    let inputs = d.path().join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (inputs, floe) = (&inputs, &floe);
            scope.spawn(move || {
                for i in 0..APPENDS {
                    let csv = inputs.join(format!("w{w}-{i}.csv"));
                    let mut s = String::from("id,writer,round\n");
                    for k in 0..ROWS {
                        s.push_str(&format!("{},{w},{i}\n", (w * APPENDS + i) * ROWS + k));
                    }
                    std::fs::write(&csv, s).unwrap();
                    let o = floe(&["append", table, csv.to_str().unwrap()]);
                    assert!(
                        o.status.success(),
                        "writer {w} append {i} failed:\n{}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            });
        }
    });
    let total = (WRITERS * APPENDS * ROWS) as usize;
    let n: usize = run(&["scan", table, "--count"]).trim().parse().unwrap();
    assert_eq!(n, total, "rows lost");

    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let cat = open();
            let t = cat.load_table(&parse_ident(table).unwrap()).await.unwrap();
            // Every row, exactly once.
            let batches = scan_rows(&t, SnapshotSelector::Current).await;
            let mut ids: Vec<i64> = batches
                .iter()
                .flat_map(|b| {
                    let c = b.column(b.schema().index_of("id").unwrap());
                    let a = c.as_any().downcast_ref::<Int64Array>().unwrap();
                    assert_eq!(a.null_count(), 0);
                    a.values().to_vec()
                })
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..total as i64).collect::<Vec<_>>());
            // 200 snapshots in one linear history.
            let md = t.metadata();
            let commits = (WRITERS * APPENDS) as usize;
            assert_eq!(md.snapshots().len(), commits);
            let mut chain = vec![];
            let mut cur = md.current_snapshot();
            while let Some(s) = cur {
                chain.push(s.snapshot_id());
                cur = s.parent_snapshot_id().and_then(|p| md.snapshot_by_id(p));
            }
            chain.reverse();
            assert_eq!(chain.len(), commits, "history is not linear");
            // The metadata log: create + 199 earlier commits, then the current file; all
            // distinct, and file k holds exactly the first k snapshots of the history.
            let mut files: Vec<String> = md
                .metadata_log()
                .iter()
                .map(|l| l.metadata_file.clone())
                .collect();
            files.push(t.metadata_location().to_string());
            assert_eq!(files.len(), commits + 1);
            let distinct: HashSet<&String> = files.iter().collect();
            assert_eq!(distinct.len(), files.len(), "a metadata file repeats");
            for (k, f) in files.iter().enumerate() {
                let m = floe::table::read_metadata(t.storage(), f).await.unwrap();
                assert_eq!(m.snapshots().len(), k, "{f} was overwritten");
                assert_eq!(
                    m.current_snapshot().map(|s| s.snapshot_id()),
                    k.checked_sub(1).map(|i| chain[i]),
                    "{f} was overwritten"
                );
            }
            // Losing attempts left no metadata file behind.
            let listed = t
                .storage()
                .list(&format!("{}/metadata/", t.metadata().location()))
                .await
                .unwrap();
            let on_storage: HashSet<String> = listed
                .into_iter()
                .map(|o| o.location)
                .filter(|l| l.ends_with(".metadata.json"))
                .collect();
            assert_eq!(on_storage, files.into_iter().collect::<HashSet<_>>());
        });
}

/// A merge-on-read DELETE through the PostgreSQL catalog: position delete files, the right
/// rows for floe in another process, for pyiceberg through the same catalog, and for the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_on_read_delete_through_postgres_reads_the_same_everywhere() {
    let Some(uri) = database() else { return };
    let Some(py) = peers_python() else { return };
    let d = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let cat = open(&uri, d.path(), None);
    let ident = parse_ident("dml.t").unwrap();
    let mut c = TableCreation::new(parse_schema(WIDE_DDL).unwrap());
    c.properties = [
        ("write.delete.mode".to_string(), "merge-on-read".to_string()),
        ("write.update.mode".to_string(), "merge-on-read".to_string()),
    ]
    .into();
    let t = cat.create_table(&ident, c).await.unwrap();
    let t = append(&cat, &t, vec![Ok(wide_batch(0, 600))])
        .await
        .unwrap()
        .table;
    let mut checks = vec![];
    let before = work.path().join("before.parquet");
    assert_eq!(floe_expected(&t, None, &before).await, 600);
    checks.push(Check {
        name: "pg_append".into(),
        metadata: t.metadata_location().to_string(),
        snapshot_id: t.current_snapshot().map(|s| s.snapshot_id()),
        expected: before.to_string_lossy().to_string(),
        engines: None,
        refuse: None,
    });
    // The DELETE goes through the CLI, as another process would run it.
    let o = floe(
        d.path(),
        &[
            "--catalog",
            &uri,
            "delete",
            "dml.t",
            "--where",
            "id % 7 = 3",
        ],
    );
    assert!(
        o.status.success(),
        "floe delete failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = floe::dml::execute(&cat, "UPDATE dml.t SET name = 'pg' WHERE id % 5 = 0", None)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(t.metadata_location(), r.table.metadata_location());
    let summary = &t
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert!(
        summary
            .get("total-position-deletes")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            > 0,
        "merge-on-read wrote no position deletes: {summary:?}"
    );
    let want = (0..600).filter(|i| i % 7 != 3).count();
    let after = work.path().join("after.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, want);
    let batches = scan_rows(&t, SnapshotSelector::Current).await;
    let updated = batches
        .iter()
        .map(|b| {
            let c = b.column(b.schema().index_of("name").unwrap());
            let a = c
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .unwrap();
            a.iter().filter(|v| *v == Some("pg")).count()
        })
        .sum::<usize>();
    assert_eq!(
        updated,
        (0..600).filter(|i| i % 7 != 3 && i % 5 == 0).count()
    );
    checks.push(Check {
        name: "pg_mor_delete_update".into(),
        metadata: t.metadata_location().to_string(),
        snapshot_id: t.current_snapshot().map(|s| s.snapshot_id()),
        expected: after.to_string_lossy().to_string(),
        engines: None,
        refuse: None,
    });
    let wh = format!("file://{}", d.path().display());
    let listed = pyice(&["list", &uri, &wh]).unwrap();
    assert_eq!(rows_of(&listed, "dml.t"), Some(want as u64), "{listed}");
    peer_check(&py, work.path(), &checks);
}
