//! Catalog operations, and SQLite catalog sharing with pyiceberg in both directions.

use std::process::Command;

use floe::catalog::{Catalog, TableCreation};
use floe::scan::SnapshotSelector;
use floe::spec::parse_schema;
use floe::table::parse_ident;
use floe::txn::append;
use floe::ErrorKind;

use crate::common::*;

pub async fn exercise(cat: &Catalog, can_rename: bool) {
    let schema = parse_schema("id long, v string").unwrap();
    cat.create_namespace("ns1", &[]).await.unwrap();
    // Creating a table in a missing namespace creates it.
    let t = cat
        .create_table(
            &parse_ident("ns2.a").unwrap(),
            TableCreation::new(schema.clone()),
        )
        .await
        .unwrap();
    append(cat, &t, vec![Ok(id_batch(0..5))]).await.unwrap();
    let ns = cat.list_namespaces().await.unwrap();
    assert!(
        ns.contains(&"ns1".to_string()) && ns.contains(&"ns2".to_string()),
        "{ns:?}"
    );
    let dup = cat
        .create_table(
            &parse_ident("ns2.a").unwrap(),
            TableCreation::new(schema.clone()),
        )
        .await
        .unwrap_err();
    assert_eq!(dup.kind(), ErrorKind::AlreadyExists);
    assert_eq!(cat.list_tables("ns2").await.unwrap().len(), 1);
    let e = cat.drop_namespace("ns2").await.unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    if can_rename {
        cat.rename_table(
            &parse_ident("ns2.a").unwrap(),
            &parse_ident("ns1.b").unwrap(),
        )
        .await
        .unwrap();
        let t = cat
            .load_table(&parse_ident("ns1.b").unwrap())
            .await
            .unwrap();
        assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 5);
        assert_eq!(
            cat.load_table(&parse_ident("ns2.a").unwrap())
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
        floe::maintenance::drop_table(cat, &parse_ident("ns1.b").unwrap(), false)
            .await
            .unwrap();
        assert!(
            std::path::Path::new(t.metadata().location().trim_start_matches("file://")).exists(),
            "drop without purge keeps files"
        );
    } else {
        let loc = t
            .metadata()
            .location()
            .trim_start_matches("file://")
            .to_string();
        floe::maintenance::drop_table(cat, &parse_ident("ns2.a").unwrap(), true)
            .await
            .unwrap();
        assert!(!std::path::Path::new(&loc).exists(), "purge removes files");
    }
    let t = cat
        .create_table(&parse_ident("ns1.c").unwrap(), TableCreation::new(schema))
        .await
        .unwrap();
    let loc = t
        .metadata()
        .location()
        .trim_start_matches("file://")
        .to_string();
    floe::maintenance::drop_table(cat, &parse_ident("ns1.c").unwrap(), true)
        .await
        .unwrap();
    assert!(!std::path::Path::new(&loc).exists());
    assert!(!cat
        .table_exists(&parse_ident("ns1.c").unwrap())
        .await
        .unwrap());
}

#[tokio::test]
async fn sqlite_catalog_operations() {
    let (_d, cat) = sqlite_catalog();
    exercise(&cat, true).await;
}

#[tokio::test]
async fn filesystem_catalog_operations() {
    let (_d, cat) = fs_catalog();
    exercise(&cat, false).await;
}

#[tokio::test]
async fn catalog_name_is_respected() {
    let d = tempfile::tempdir().unwrap();
    let w = d.path().to_str().unwrap();
    let a = Catalog::open(None, Some(w), Some("a")).unwrap();
    let b = Catalog::open(None, Some(w), Some("b")).unwrap();
    a.create_table(
        &parse_ident("x.t").unwrap(),
        TableCreation::new(parse_schema("id long").unwrap()),
    )
    .await
    .unwrap();
    assert!(b.list_tables("x").await.unwrap().is_empty());
    assert_eq!(a.list_tables("x").await.unwrap().len(), 1);
}

pub fn pyice(args: &[&str]) -> Option<serde_json::Value> {
    let py = peers_python()?;
    let out = Command::new(py)
        .arg(repo().join("tools/peers/pyice_catalog.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyice_catalog {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or("{}");
    Some(serde_json::from_str(last).unwrap_or_else(|_| serde_json::from_str(&text).unwrap()))
}

#[tokio::test]
async fn pyiceberg_opens_floe_catalog_and_keeps_writing() {
    let (d, cat) = sqlite_catalog();
    let t = cat
        .create_table(
            &parse_ident("shared.t").unwrap(),
            TableCreation::new(parse_schema("id long, name string, ts timestamptz").unwrap()),
        )
        .await
        .unwrap();
    let b = {
        use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from((0..30).collect::<Vec<i64>>())) as _,
            ),
            (
                "name",
                Arc::new(StringArray::from(
                    (0..30).map(|i| format!("n{i}")).collect::<Vec<_>>(),
                )) as _,
            ),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from(
                        (0..30).map(|i| i * 1_000_000).collect::<Vec<i64>>(),
                    )
                    .with_timezone("UTC"),
                ) as _,
            ),
        ])
        .unwrap()
    };
    append(&cat, &t, vec![Ok(b)]).await.unwrap();
    let uri = format!("sqlite:///{}", d.path().join("catalog.db").display());
    let wh = format!("file://{}", d.path().display());
    let Some(listed) = pyice(&["list", &uri, &wh]) else {
        return;
    };
    let s = listed.to_string();
    assert!(
        s.contains("shared") && s.contains("\"t\"") || s.contains("shared.t"),
        "pyiceberg listing: {s}"
    );
    assert!(s.contains("30"), "pyiceberg should count 30 rows: {s}");
    // pyiceberg appends to floe's table; floe sees both writers' rows.
    pyice(&["append", &uri, &wh, "shared.t", "12"]).unwrap();
    let t = cat
        .load_table(&parse_ident("shared.t").unwrap())
        .await
        .unwrap();
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 42);
    assert_eq!(t.metadata().snapshots().len(), 2);
}

#[tokio::test]
async fn floe_opens_pyiceberg_catalog() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("py.db");
    let uri = format!("sqlite:///{}", db.display());
    let wh = format!("file://{}", d.path().display());
    let Some(created) = pyice(&["create", &uri, &wh, "pyns.events"]) else {
        return;
    };
    let rows = created["rows"].as_u64().unwrap_or(100) as usize;
    // pyiceberg made the schema (no iceberg_type column); floe must read and write through it.
    let cat = Catalog::open(
        Some(&format!("sqlite:{}", db.display())),
        Some(d.path().to_str().unwrap()),
        None,
    )
    .unwrap();
    let ident = parse_ident("pyns.events").unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), rows);
    assert!(cat
        .list_namespaces()
        .await
        .unwrap()
        .contains(&"pyns".to_string()));
    // floe appends to pyiceberg's partitioned table; pyiceberg then sees it.
    let extra = rows_like(t.metadata().current_schema(), 1000, 7);
    append(&cat, &t, vec![Ok(extra)]).await.unwrap();
    let listed = pyice(&["list", &uri, &wh]).unwrap().to_string();
    assert!(
        listed.contains(&format!("{}", rows + 7)),
        "pyiceberg should see {} rows: {listed}",
        rows + 7
    );
}
