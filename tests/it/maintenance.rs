//! Maintenance jobs on tables written by floe and by Spark: the same rows before and after,
//! for floe and every peer, and the table stays writable.

use std::collections::HashMap;

use floe::catalog::TableCreation;
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;

use crate::common::*;

fn live_delete_files(files: &[floe::scan::PlannedFile]) -> usize {
    files.iter().map(|f| f.deletes.len()).sum()
}

/// Compacts floe's merge-on-read tables (many small files, position deletes / deletion vectors,
/// equality deletes) and Spark's; rows are unchanged for floe and the peers, file-scoped
/// delete files are gone, and Spark keeps writing the compacted table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_data_files_keeps_every_row() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (dir, cat) = fs_catalog();
    let spark = std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1");
    let mut checks = Vec::new();
    let mut tables = Vec::new();
    // floe-written tables: 8 appends of small files, then deletes.
    for (label, fv) in [
        ("floe_v2", FormatVersion::V2),
        ("floe_v3", FormatVersion::V3),
    ] {
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        c.format_version = fv;
        c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
        let ident = parse_ident(&format!("mt.{label}")).unwrap();
        let mut t = cat.create_table(&ident, c).await.unwrap();
        for i in 0..8 {
            t = append(&cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))], None)
                .await
                .unwrap()
                .table;
        }
        let sql = format!("DELETE FROM mt.{label} WHERE id % 7 = 3");
        t = floe::dml::execute(&cat, &sql, None).await.unwrap().table;
        let keys = id_batch(500..520);
        t = floe::dml::delete_by_key(&cat, &t, &["id"], &keys)
            .await
            .unwrap()
            .table;
        tables.push((label.to_string(), t, !spark));
    }
    // A Spark-written merge-on-read table (position deletes).
    if spark {
        spark_write(
            &py,
            dir.path(),
            "mt.spark_v2",
            "",
            &[
                "CREATE TABLE {t} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='2', \
                 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')",
                "INSERT INTO {t} SELECT id, concat('a', id) FROM range(0, 300)",
                "INSERT INTO {t} SELECT id, concat('b', id) FROM range(300, 600)",
                "INSERT INTO {t} SELECT id, concat('c', id) FROM range(600, 900)",
                "DELETE FROM {t} WHERE id % 5 = 0",
                "UPDATE {t} SET v = 'u' WHERE id % 9 = 1",
            ],
        );
        let t = cat
            .load_table(&parse_ident("mt.spark_v2").unwrap())
            .await
            .unwrap();
        tables.push(("spark_v2".into(), t, false));
    }
    for (label, t, _) in &tables {
        let before_path = work.path().join(format!("{label}-before.parquet"));
        let n = floe_expected(t, None, &before_path).await;
        let plan = Scan::new(t).plan().await.unwrap();
        assert!(
            live_delete_files(&plan.files) > 0,
            "{label}: has deletes to fold"
        );
        let opts: HashMap<String, String> =
            [("min-input-files".to_string(), "2".to_string())].into();
        let r = floe::maintenance::rewrite_data_files(&cat, t, None, &opts, None)
            .await
            .unwrap();
        assert!(r.rewritten_data_files_count >= 3, "{label}: {r:?}");
        assert!(r.added_data_files_count >= 1, "{label}: {r:?}");
        let t2 = r.table.unwrap();
        let snap = t2.current_snapshot().unwrap();
        assert_eq!(snap.summary().operation, floe::spec::Operation::Replace);
        let after = t2.metadata().snapshots().count();
        assert_eq!(after, t.metadata().snapshots().count() + 1);
        // Same rows, from floe...
        let after_path = work.path().join(format!("{label}-after.parquet"));
        assert_eq!(
            floe_expected(&t2, None, &after_path).await,
            n,
            "{label}: row count"
        );
        let cmp = std::process::Command::new(&py)
            .arg(repo().join("tools/peers/compare_parquet.py"))
            .arg(&before_path)
            .arg(&after_path)
            .output()
            .unwrap();
        assert!(
            cmp.status.success(),
            "{label}: {}",
            String::from_utf8_lossy(&cmp.stdout)
        );
        // ...with no position deletes left for the rewritten files.
        let plan = Scan::new(&t2).plan().await.unwrap();
        let pos_left: usize = plan
            .files
            .iter()
            .flat_map(|f| f.deletes.iter())
            .filter(|d| d.file.content_type() == floe::spec::DataContentType::PositionDeletes)
            .count();
        assert_eq!(
            pos_left, 0,
            "{label}: position deletes left after the rewrite"
        );
        // Time travel to before the rewrite still works.
        let old = Scan::new(&t2)
            .snapshot(SnapshotSelector::Id(
                t.current_snapshot().unwrap().snapshot_id(),
            ))
            .count()
            .await
            .unwrap();
        assert_eq!(old as usize, n);
        let eq = label.starts_with("floe");
        checks.push(Check {
            name: format!("rewrite-{label}"),
            metadata: t2.metadata_location().to_string(),
            snapshot_id: None,
            expected: before_path.to_string_lossy().to_string(),
            // floe's tables keep a global equality delete file (it may apply to later rows).
            engines: Some(if eq {
                vec!["duckdb".into(), "spark".into()]
            } else {
                vec!["duckdb".into(), "pyiceberg".into(), "spark".into()]
            }),
            refuse: None,
        });
    }
    peer_check(&py, work.path(), &checks);
    // Spark keeps writing the compacted Spark table.
    if spark {
        spark_write(
            &py,
            dir.path(),
            "mt.spark_v2",
            "",
            &["DELETE FROM {t} WHERE id < 100"],
        );
        let t = cat
            .load_table(&parse_ident("mt.spark_v2").unwrap())
            .await
            .unwrap();
        let rows = scan_rows(&t, SnapshotSelector::Current).await;
        let want: Vec<i64> = (100..900).filter(|i| i % 5 != 0).collect();
        assert_eq!(count(&rows), want.len());
        assert_eq!(sum_i64(&rows, "id"), want.iter().sum::<i64>());
    }
}
