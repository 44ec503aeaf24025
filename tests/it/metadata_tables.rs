//! Metadata tables (`db.t.snapshots`, …) against Spark's and pyiceberg's `inspect` on the same
//! table: after appends, merge-on-read deletes, a branch, a tag and a partition change, each
//! engine's rows equal floe's on the columns all three have.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch};
use floe::scan::{read_metadata_table, MetadataTable};
use floe::spec::parse_alter_clause;
use floe::spec::snapshot_refs::{RefChange, Retention};
use floe::table::parse_ident;
use serde_json::{json, Value};

use super::common::*;

fn value(c: &dyn Array, r: usize) -> Value {
    if c.is_null(r) {
        return Value::Null;
    }
    let v = arrow::util::display::ArrayFormatter::try_new(c, &Default::default())
        .unwrap()
        .value(r)
        .to_string();
    match c.data_type() {
        arrow::datatypes::DataType::Int32 | arrow::datatypes::DataType::Int64 => {
            json!(v.parse::<i64>().unwrap())
        }
        arrow::datatypes::DataType::Boolean => json!(v == "true"),
        // Engines name files with or without the file:// scheme.
        _ => json!(v.strip_prefix("file://").unwrap_or(&v)),
    }
}

fn rows(b: &RecordBatch, cols: &[&str]) -> Vec<Vec<Value>> {
    let mut out: Vec<Vec<Value>> = (0..b.num_rows())
        .map(|r| {
            cols.iter()
                .map(|c| value(b.column_by_name(c).unwrap().as_ref(), r))
                .collect()
        })
        .collect();
    out.sort_by_key(|r| serde_json::to_string(r).unwrap());
    out
}

#[tokio::test]
async fn metadata_tables_match_spark_and_pyiceberg() {
    let (dir, cat) = fs_catalog();
    let ident = parse_ident("db.meta").unwrap();
    let schema = floe::spec::parse_schema("id long not null, v long").unwrap();
    let mut c = floe::TableCreation::new(schema.clone());
    c.partition_spec = floe::spec::parse_partition_spec("bucket(2, id)", &schema).unwrap();
    c.properties
        .insert("write.delete.mode".into(), "merge-on-read".into());
    let mut t = cat.create_table(&ident, c).await.unwrap();
    for i in 0..3i64 {
        let b = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(i * 10..i * 10 + 10)) as _,
            ),
            ("v", Arc::new(Int64Array::from_iter_values(0..10)) as _),
        ])
        .unwrap();
        t = floe::txn::append(&cat, &t, [Ok(b)]).await.unwrap().table;
    }
    floe::dml::execute(&cat, "DELETE FROM db.meta WHERE v = 3", None)
        .await
        .unwrap();
    floe::txn::manage_refs(
        &cat,
        &ident,
        &RefChange::CreateTag {
            name: "t1".into(),
            snapshot: None,
            retention: Retention {
                max_ref_age_ms: Some(86_400_000),
                ..Default::default()
            },
        },
    )
    .await
    .unwrap();
    floe::txn::alter_table(
        &cat,
        &ident,
        &parse_alter_clause("ADD PARTITION FIELD truncate(4, v)").unwrap(),
    )
    .await
    .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let b = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from_iter_values(100..105)) as _),
        ("v", Arc::new(Int64Array::from_iter_values(0..5)) as _),
    ])
    .unwrap();
    floe::txn::append(&cat, &t, [Ok(b)]).await.unwrap();
    floe::txn::manage_refs(
        &cat,
        &ident,
        &RefChange::CreateBranch {
            name: "b1".into(),
            snapshot: None,
            retention: Retention {
                min_snapshots_to_keep: Some(3),
                ..Default::default()
            },
        },
    )
    .await
    .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let spec: BTreeMap<&str, Vec<&str>> = BTreeMap::from([
        (
            "snapshots",
            vec!["snapshot_id", "parent_id", "operation", "manifest_list"],
        ),
        (
            "history",
            vec!["snapshot_id", "parent_id", "is_current_ancestor"],
        ),
        (
            "refs",
            vec![
                "name",
                "type",
                "snapshot_id",
                "max_reference_age_in_ms",
                "min_snapshots_to_keep",
                "max_snapshot_age_in_ms",
            ],
        ),
        (
            "metadata_log_entries",
            vec![
                "file",
                "latest_snapshot_id",
                "latest_schema_id",
                "latest_sequence_number",
            ],
        ),
        (
            "manifests",
            vec![
                "content",
                "path",
                "length",
                "partition_spec_id",
                "added_snapshot_id",
                "added_data_files_count",
                "existing_data_files_count",
                "deleted_data_files_count",
                "added_delete_files_count",
                "existing_delete_files_count",
                "deleted_delete_files_count",
            ],
        ),
        (
            "files",
            vec![
                "content",
                "file_path",
                "file_format",
                "spec_id",
                "record_count",
                "file_size_in_bytes",
            ],
        ),
        (
            "data_files",
            vec![
                "content",
                "file_path",
                "spec_id",
                "record_count",
                "file_size_in_bytes",
            ],
        ),
        (
            "delete_files",
            vec![
                "content",
                "file_path",
                "spec_id",
                "record_count",
                "file_size_in_bytes",
            ],
        ),
    ]);
    let mut floe_rows = BTreeMap::new();
    for (name, cols) in &spec {
        let which = MetadataTable::parse(name).unwrap();
        let b = read_metadata_table(&t, which, None).await.unwrap();
        assert!(b.num_rows() > 0, "{name} is empty");
        floe_rows.insert(name.to_string(), rows(&b, cols));
    }
    // Every commit's metadata file is in the log (ALTER and ref commits too), the current last.
    let log = read_metadata_table(&t, MetadataTable::MetadataLogEntries, None)
        .await
        .unwrap();
    assert_eq!(
        log.num_rows(),
        9,
        "create, 3 appends, delete, tag, alter, append, branch"
    );
    // Time travel: the files of the first snapshot.
    let first = t.metadata().history()[0].snapshot_id;
    let b = read_metadata_table(&t, MetadataTable::Files, Some(first))
        .await
        .unwrap();
    assert_eq!(
        b.num_rows(),
        2,
        "the first append wrote one file per bucket"
    );
    let Some(py) = peers_python() else { return };
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let out = std::process::Command::new(&py)
        .arg(repo().join("tools/peers/metadata_tables.py"))
        .arg(dir.path())
        .arg("db.meta")
        .arg(t.metadata_location())
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
    for engine in ["pyiceberg", "spark"] {
        let Some(tables) = peers[engine].as_object() else {
            continue;
        };
        for (name, got) in tables {
            let canon = |v: &Value| -> Value {
                let mut rows: Vec<Value> = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        json!(r
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| match x.as_str() {
                                Some(s) => json!(s.strip_prefix("file://").unwrap_or(s)),
                                None => x.clone(),
                            })
                            .collect::<Vec<_>>())
                    })
                    .collect();
                rows.sort_by_key(|r| r.to_string());
                json!(rows)
            };
            let want = canon(&json!(floe_rows[name]));
            let got = &canon(got);
            assert_eq!(got, &want, "{engine} {name}");
        }
    }
}
