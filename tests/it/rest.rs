//! The Iceberg REST catalog client against SeaweedFS's built-in REST catalog (tables in its
//! S3 table bucket): catalog operations and errors, commits refused with 409 and retried,
//! pyiceberg's `RestCatalog` and DuckDB's `ATTACH … (TYPE iceberg)` reading and writing floe's
//! tables by name, and 8 concurrent writer processes × 25 appends.
//! (Append/scan and row-level changes on S3 + REST run in `s3.rs`.)

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::SnapshotSelector;
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::storage::Storage;
use floe::table::parse_ident;
use floe::txn::{append, clone_table};
use floe::{CommitOutcome, ErrorKind};

use crate::common::*;
use crate::s3::{rest_uri, s3_catalog_of, s3_env, CatalogKind};

const DDL: &str = "id long, name string, ts timestamptz";

fn rows(start: i64, n: i64) -> RecordBatch {
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]));
    let ids: Vec<i64> = (start..start + n).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|i| format!("n{}", i % 7))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(
                    ids.iter()
                        .map(|i| 1_700_000_000_000_000 + (i % 5) * 86_400_000_000 + i)
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
        ],
    )
    .unwrap()
}

/// Runs tools/peers/rest_peers.py; panics with its output unless it succeeds.
fn rest_peers(py: &Path, args: &[&str]) -> String {
    let env = s3_env().unwrap();
    let uri = std::env::var("FLOE_TEST_REST_URI").unwrap();
    let wh = std::env::var("FLOE_TEST_REST_WAREHOUSE").unwrap_or_else(|_| "s3://lake".into());
    let mut full: Vec<&str> = vec![args[0], &uri, &wh];
    full.extend_from_slice(&args[1..]);
    let o = Command::new(py)
        .arg(repo().join("tools/peers/rest_peers.py"))
        .args(&full)
        .envs(env.vars.iter().cloned())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "rest_peers.py {full:?}:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_catalog_operations_conflicts_and_errors() {
    let Some(env) = s3_env() else { return };
    let Some(s3c) = s3_catalog_of(&env, CatalogKind::Rest) else {
        return;
    };
    let (cat, ns) = (&s3c.cat, &s3c.ns);
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("day(ts)", &schema).unwrap();
    let ident = parse_ident(&format!("{ns}.events")).unwrap();
    let t0 = cat.create_table(&ident, c.clone()).await.unwrap();
    assert!(cat.list_namespaces().await.unwrap().contains(ns));
    assert_eq!(cat.list_tables(ns).await.unwrap(), vec![ident.clone()]);
    let again = cat.create_table(&ident, c.clone()).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::AlreadyExists, "{again}");
    // v3 tables are created as v3.
    let mut c3 = TableCreation::new(schema.clone());
    c3.format_version = FormatVersion::V3;
    let v3 = cat
        .create_table(&parse_ident(&format!("{ns}.v3")).unwrap(), c3)
        .await
        .unwrap();
    assert_eq!(v3.metadata().format_version(), FormatVersion::V3);
    let r3 = append(cat, &v3, vec![Ok(rows(0, 10))]).await.unwrap();
    assert_eq!(
        count(&scan_rows(&r3.table, SnapshotSelector::Current).await),
        10
    );

    // Appends; a commit from a stale base is refused by the server (409) as a conflict,
    // and an append from a stale base is retried by floe until it lands.
    let r1 = append(cat, &t0, vec![Ok(rows(0, 100))]).await.unwrap();
    match cat.commit(&t0, r1.table.metadata().clone()).await {
        CommitOutcome::Conflict(msg) => assert!(msg.contains("another writer"), "{msg}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let r2 = append(cat, &r1.table, vec![Ok(rows(100, 50))])
        .await
        .unwrap();
    let r3 = append(cat, &r1.table, vec![Ok(rows(150, 25))])
        .await
        .unwrap();
    assert_eq!(r3.table.metadata().snapshots().len(), 3);
    let loaded = cat.load_table(&ident).await.unwrap();
    assert_eq!(loaded.metadata_location(), r3.table.metadata_location());
    let all = scan_rows(&loaded, SnapshotSelector::Current).await;
    assert_eq!(count(&all), 175);
    assert_eq!(sum_i64(&all, "id"), (0..175).sum::<i64>());
    assert_eq!(
        count(&scan_rows(&loaded, SnapshotSelector::Id(r2.snapshot_id.unwrap())).await),
        150
    );

    // A clone is registered through the catalog (register-table). SeaweedFS 4.48 answers a
    // registration with an empty stub instead of the file's metadata: floe notices and refuses
    // rather than publishing a table that reads as empty.
    let cid = parse_ident(&format!("{ns}.events_clone")).unwrap();
    match clone_table(cat, &loaded, &SnapshotSelector::Current, &cid, false).await {
        Ok(_) => {
            let cl = cat.load_table(&cid).await.unwrap();
            assert_eq!(count(&scan_rows(&cl, SnapshotSelector::Current).await), 175);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(e.to_string().contains("register-table"), "{e}");
        }
    }

    // Rename, drop, and the errors of a missing table or a non-empty namespace.
    let renamed = parse_ident(&format!("{ns}.events2")).unwrap();
    cat.rename_table(&ident, &renamed).await.unwrap();
    let gone = cat.load_table(&ident).await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    assert_eq!(
        count(
            &scan_rows(
                &cat.load_table(&renamed).await.unwrap(),
                SnapshotSelector::Current
            )
            .await
        ),
        175
    );
    let busy = cat.drop_namespace(ns).await.unwrap_err();
    assert!(busy.to_string().contains("not empty"), "{busy}");
    cat.drop_table(&renamed).await.unwrap();
    assert!(!cat.table_exists(&renamed).await.unwrap());

    // Wrong credentials: a clear error naming the catalog and what to check.
    let (uri, wh) = rest_uri(&env).unwrap();
    let bad_uri = uri.replace(
        &format!(":{}@", env.options.secret_access_key.clone().unwrap()),
        ":wrong-secret@",
    );
    assert_ne!(bad_uri, uri);
    let bad = Catalog::open_with_storage(
        Some(&bad_uri),
        Some(&wh),
        None,
        Storage::with_s3(env.options.clone()),
    )
    .unwrap();
    let e = bad.list_namespaces().await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("FLOE_REST_CREDENTIAL"), "{msg}");
    assert!(!msg.contains("wrong-secret"), "the secret leaks: {msg}");
    // An unreachable server is an I/O error naming it.
    let down = Catalog::open(Some("rest+http://127.0.0.1:9"), Some(&wh), None).unwrap();
    let e = down.list_namespaces().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("127.0.0.1:9"), "{e}");
}

/// pyiceberg's RestCatalog and DuckDB's ATTACH read floe's table by name, append to it, and
/// floe reads what they wrote; everyone agrees row for row after each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_read_and_write_floe_tables_through_rest() {
    let Some(env) = s3_env() else { return };
    let Some(py) = peers_python() else { return };
    let Some(s3c) = s3_catalog_of(&env, CatalogKind::Rest) else {
        return;
    };
    let (cat, ns) = (&s3c.cat, &s3c.ns);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("day(ts)", &schema).unwrap();
    c.properties
        .insert("write.delete.mode".into(), "merge-on-read".into());
    let name = format!("{ns}.shared");
    let t = cat
        .create_table(&parse_ident(&name).unwrap(), c)
        .await
        .unwrap();
    let r = append(cat, &t, vec![Ok(rows(0, 300))]).await.unwrap();
    floe::dml::execute(cat, &format!("DELETE FROM {name} WHERE id % 10 = 3"), None)
        .await
        .unwrap();
    let t = cat.load_table(r.table.ident()).await.unwrap();
    assert_ne!(
        t.current_snapshot()
            .unwrap()
            .summary()
            .additional_properties
            .get("added-position-deletes")
            .map(String::as_str),
        None,
        "the delete was not merge-on-read"
    );
    let expected = w.join("floe-1.parquet");
    assert_eq!(floe_expected(&t, None, &expected).await, 270);
    rest_peers(&py, &["read", &name, expected.to_str().unwrap()]);

    // pyiceberg, then DuckDB, append through the catalog; floe sees both.
    let add_py = w.join("add-py.parquet");
    write_parquet(&add_py, &[rows(1000, 40)]);
    rest_peers(
        &py,
        &["append", &name, add_py.to_str().unwrap(), "pyiceberg"],
    );
    let add_duck = w.join("add-duck.parquet");
    write_parquet(&add_duck, &[rows(2000, 30)]);
    rest_peers(
        &py,
        &["append", &name, add_duck.to_str().unwrap(), "duckdb"],
    );
    let t = cat.load_table(t.ident()).await.unwrap();
    let all = scan_rows(&t, SnapshotSelector::Current).await;
    assert_eq!(count(&all), 270 + 40 + 30);
    let mut want: i64 = (0..300).filter(|i| i % 10 != 3).sum();
    want += (1000..1040).sum::<i64>() + (2000..2030).sum::<i64>();
    assert_eq!(sum_i64(&all, "id"), want);

    // floe keeps writing on top of the peers' snapshots, and everyone agrees.
    floe::dml::execute(
        cat,
        &format!("UPDATE {name} SET name = 'u' WHERE id >= 2000 AND id < 2010"),
        None,
    )
    .await
    .unwrap();
    let t = cat.load_table(t.ident()).await.unwrap();
    let expected = w.join("floe-2.parquet");
    assert_eq!(floe_expected(&t, None, &expected).await, 340);
    rest_peers(&py, &["read", &name, expected.to_str().unwrap()]);
}

#[test]
fn eight_writer_processes_append_25_times_each_through_rest() {
    let Some(env) = s3_env() else { return };
    let Some((uri, wh)) = rest_uri(&env) else {
        return;
    };
    let ns = format!("race_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let cli: Vec<String> = ["--catalog", uri.as_str(), "--warehouse", wh.as_str()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let storage = Storage::with_s3(env.options.clone());
    crate::postgres::eight_writers_append(&cli, &env.vars, &format!("{ns}.t"), || {
        Catalog::open_with_storage(Some(&uri), Some(&wh), None, storage.clone()).unwrap()
    });
}
