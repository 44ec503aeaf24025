//! floe reads the reference tables other engines wrote (spec-fixtures/, deletes included), relocated from
//! where they were written, with the right rows at every snapshot.

use std::path::PathBuf;

use floe::scan::{Scan, SnapshotSelector};
use floe::storage::Storage;
use floe::Table;

use crate::common::*;

fn fixtures() -> PathBuf {
    repo().join("spec-fixtures")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_every_fixture_at_every_snapshot() {
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("index.json")).expect("spec-fixtures/index.json"),
    )
    .unwrap();
    let py = peers_python();
    let work = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut checked_with_deletes = 0;
    let mut lineage_checked = 0;
    for t in index.as_array().unwrap() {
        let meta = fixtures().join(t["metadata"].as_str().unwrap());
        let table = Table::open_static(&Storage::new(), meta.to_str().unwrap())
            .await
            .unwrap_or_else(|e| panic!("{}: {e:?}", meta.display()));
        let name = format!(
            "{}/{}",
            t["engine"].as_str().unwrap(),
            t["table"].as_str().unwrap()
        );
        let steps = t
            .get("snapshots")
            .and_then(|s| s.as_array())
            .cloned()
            .unwrap_or_default();
        for step in steps {
            let sid = step["snapshot_id"].as_i64().unwrap();
            let batches = Scan::new(&table)
                .snapshot(SnapshotSelector::Id(sid))
                .to_batches()
                .await
                .unwrap_or_else(|e| panic!("{name}@{sid}: {e:?}"));
            let rows = count(&batches);
            let counted = Scan::new(&table)
                .snapshot(SnapshotSelector::Id(sid))
                .count()
                .await
                .unwrap_or_else(|e| panic!("{name}@{sid} count: {e:?}"));
            assert_eq!(counted, rows as u64, "{name} at snapshot {sid}: count()");
            assert_eq!(
                rows as u64,
                step["rows"].as_u64().unwrap(),
                "{name} at snapshot {sid}: row count"
            );
            if let Some(sum) = step.get("sum_id").and_then(|v| v.as_i64()) {
                if rows > 0
                    && batches[0].schema().index_of("id").is_ok()
                    && batches[0]
                        .schema()
                        .field_with_name("id")
                        .unwrap()
                        .data_type()
                        == &arrow::datatypes::DataType::Int64
                {
                    assert_eq!(
                        sum_i64(&batches, "id"),
                        sum,
                        "{name} at snapshot {sid}: sum(id)"
                    );
                }
            }
            // Branches and tags resolve to the same rows.
            for r in step
                .get("refs")
                .and_then(|r| r.as_array())
                .cloned()
                .unwrap_or_default()
            {
                let rname = r
                    .get("name")
                    .and_then(|n| n.as_str())
                    .or_else(|| r.as_str())
                    .unwrap()
                    .to_string();
                let by_ref = Scan::new(&table)
                    .snapshot(SnapshotSelector::Ref(rname.clone()))
                    .to_batches()
                    .await
                    .unwrap();
                assert_eq!(count(&by_ref), rows, "{name} ref {rname}");
            }
            if let (Some(py), Some(exp)) = (&py, step.get("expected").and_then(|e| e.as_str())) {
                if rows == 0 {
                    continue;
                }
                let actual = work
                    .path()
                    .join(format!("{}-{sid}.parquet", name.replace('/', "_")));
                write_parquet(&actual, &batches);
                assert_same_rows(
                    py,
                    &fixtures().join(exp),
                    &actual,
                    &format!("{name} at snapshot {sid} differs from the writer's own rows"),
                );
            }
            // v3 row lineage as Spark reads it (after updates and deletion vectors too).
            if let (Some(py), Some(exp)) =
                (&py, step.get("lineage_expected").and_then(|e| e.as_str()))
            {
                let rows = Scan::new(&table)
                    .snapshot(SnapshotSelector::Id(sid))
                    .select(["id"])
                    .with_row_lineage()
                    .to_batches()
                    .await
                    .unwrap_or_else(|e| panic!("{name}@{sid} lineage: {e:?}"));
                let actual = work
                    .path()
                    .join(format!("{}-{sid}-lineage.parquet", name.replace('/', "_")));
                write_parquet(&actual, &rows);
                assert_same_rows(
                    py,
                    &fixtures().join(exp),
                    &actual,
                    &format!("{name} at snapshot {sid}: row lineage differs from Spark's"),
                );
                lineage_checked += 1;
            }
            checked += 1;
            if t.get("has_deletes").and_then(|v| v.as_bool()) == Some(true) {
                checked_with_deletes += 1;
            }
        }
    }
    if py.is_some() {
        assert!(
            lineage_checked >= 5,
            "row lineage checked at {lineage_checked} snapshots"
        );
    }
    assert!(
        checked_with_deletes >= 50,
        "expected the peer tables with position/equality deletes and deletion vectors, checked {checked_with_deletes} snapshots"
    );
    assert!(
        checked >= 10,
        "expected at least 10 fixture snapshots, checked {checked}"
    );
}
