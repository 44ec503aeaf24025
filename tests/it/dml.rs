//! Row-level changes (DELETE / UPDATE / MERGE) in every write mode: after each statement
//! floe's scan must equal an independent model (the same SQL run by DuckDB on a plain copy of
//! the rows), and DuckDB, pyiceberg and Spark must read every snapshot row for row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use futures::TryStreamExt;

use floe::catalog::{Catalog, TableCreation};
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;
use floe::Table;

use crate::common::*;

/// One table under test and the model of its rows.
struct Case {
    label: String,
    table: Table,
    work: PathBuf,
    model: PathBuf,
    step: usize,
    checks: Vec<Check>,
}

async fn create(
    cat: &Catalog,
    work: &Path,
    label: &str,
    partition: Option<&str>,
    fv: FormatVersion,
    props: &[(&str, &str)],
) -> Case {
    let schema = parse_schema(WIDE_DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = fv;
    if let Some(p) = partition {
        c.partition_spec = parse_partition_spec(p, &schema).unwrap();
    }
    c.properties = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<HashMap<_, _>>();
    let t = cat
        .create_table(&parse_ident(&format!("dml.{label}")).unwrap(), c)
        .await
        .unwrap();
    let batches = vec![wide_batch(0, 700), wide_batch(700, 650)];
    let r1 = append(cat, &t, vec![Ok(batches[0].clone())]).await.unwrap();
    let r2 = append(cat, &r1.table, vec![Ok(batches[1].clone())])
        .await
        .unwrap();
    let model = work.join(format!("{label}-model-0.parquet"));
    write_parquet(&model, &batches);
    Case {
        label: label.to_string(),
        table: r2.table,
        work: work.to_path_buf(),
        model,
        step: 0,
        checks: Vec::new(),
    }
}

impl Case {
    /// Runs `sql` on the model; then checks floe's current scan against it and queues the
    /// peer check of this snapshot.
    async fn expect(&mut self, py: &Path, model_sql: &str, source: Option<&Path>) {
        self.step += 1;
        let next = self
            .work
            .join(format!("{}-model-{}.parquet", self.label, self.step));
        let mut cmd = Command::new(py);
        cmd.arg(repo().join("tools/peers/duckdb_model.py"))
            .arg(&self.model)
            .arg(&next);
        if let Some(s) = source {
            cmd.arg("--source").arg(s);
        }
        let out = cmd.arg(model_sql).output().unwrap();
        assert!(
            out.status.success(),
            "model failed for {model_sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.model = next;
        let actual = self
            .work
            .join(format!("{}-floe-{}.parquet", self.label, self.step));
        floe_expected(&self.table, None, &actual).await;
        assert_same_rows(
            py,
            &self.model,
            &actual,
            &format!(
                "{} after `{model_sql}`: floe differs from the model",
                self.label
            ),
        );
        let sid = self.table.current_snapshot().map(|s| s.snapshot_id());
        self.checks.push(Check {
            name: format!("{}@{}", self.label, self.step),
            metadata: self.table.metadata_location().to_string(),
            snapshot_id: sid,
            expected: self.model.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
}

/// Statements run on every table: `{t}` is the table, `{s}` the MERGE source.
const STATEMENTS: &[&str] = &[
    "DELETE FROM {t} WHERE id % 7 = 3",
    "UPDATE {t} SET a = a * 2 + 1, name = name || '-u' WHERE cat = 'beta' AND id < 400",
    "UPDATE {t} SET cat = 'moved', k = CASE WHEN k IS NULL THEN -1 ELSE k + 1 END WHERE id % 11 = 5",
    "DELETE FROM {t} WHERE name IS NULL OR k = 5",
    "MERGE INTO {t} AS t USING {s} AS s ON t.id = s.id \
     WHEN MATCHED AND s.k < 100 THEN DELETE \
     WHEN MATCHED THEN UPDATE SET a = s.a + 1000, name = 'merged', price = COALESCE(s.price, 0) \
     WHEN NOT MATCHED THEN INSERT *",
    "MERGE INTO {t} AS t USING {s} AS s ON t.id = s.id \
     WHEN MATCHED THEN UPDATE SET * \
     WHEN NOT MATCHED BY SOURCE AND t.id < 40 THEN DELETE \
     WHEN NOT MATCHED BY SOURCE AND t.id >= 40 AND t.id < 60 THEN UPDATE SET small = -1",
];

async fn dml_case(
    py: &Path,
    cat: &Catalog,
    work: &Path,
    label: &str,
    partition: Option<&str>,
    fv: FormatVersion,
    props: &[(&str, &str)],
) -> Case {
    let mut case = create(cat, work, label, partition, fv, props).await;
    let source = work.join(format!("{label}-source.parquet"));
    write_parquet(&source, &[wide_batch(1200, 300)]);
    for st in STATEMENTS {
        let floe_sql = st
            .replace("{t}", &format!("dml.{label}"))
            .replace("{s}", &format!("'{}'", source.display()));
        let r = floe::dml::execute(cat, &floe_sql, None)
            .await
            .unwrap_or_else(|e| panic!("{label}: `{floe_sql}`: {e:?}"));
        assert!(r.snapshot_id.is_some(), "{label}: `{st}` changed nothing");
        case.table = r.table;
        let model_sql = st.replace("{t}", "t").replace("{s}", "s");
        case.expect(py, &model_sql, Some(&source)).await;
    }
    case
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dml_in_every_mode_matches_the_model_and_the_peers() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mor = [
        ("write.delete.mode", "merge-on-read"),
        ("write.update.mode", "merge-on-read"),
        ("write.merge.mode", "merge-on-read"),
    ];
    let mut part = mor.to_vec();
    part.push(("write.delete.granularity", "partition"));
    let w = work.path();
    let cases = [
        dml_case(&py, &cat, w, "cow_v2", Some("cat"), FormatVersion::V2, &[]).await,
        dml_case(&py, &cat, w, "mor_v2", None, FormatVersion::V2, &mor).await,
        dml_case(
            &py,
            &cat,
            w,
            "mor_v2_part",
            Some("bucket(4, id)"),
            FormatVersion::V2,
            &part,
        )
        .await,
        dml_case(&py, &cat, w, "mor_v3", Some("cat"), FormatVersion::V3, &mor).await,
        dml_case(&py, &cat, w, "cow_v3", None, FormatVersion::V3, &[]).await,
        // MERGE partition-aligned, copy-on-write, every source row spilled.
        dml_case(
            &py,
            &cat,
            w,
            "cow_v3_bucket",
            Some("bucket(4, id)"),
            FormatVersion::V3,
            &[("floe.merge.source-memory-bytes", "0")],
        )
        .await,
    ];
    let checks: Vec<Check> = cases.iter().flat_map(|c| c.checks.clone()).collect();
    peer_check(&py, work.path(), &checks);
}

/// Spark keeps writing (DELETE, UPDATE) floe's merge-on-read tables, v2 and v3, and floe keeps
/// writing after it (merging Spark's deletion vectors): every state matches the model and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_and_floe_take_turns_on_merge_on_read_tables() {
    let Some(py) = peers_python() else { return };
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() == Ok("1") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (dir, cat) = fs_catalog();
    let mor = [
        ("write.delete.mode", "merge-on-read"),
        ("write.update.mode", "merge-on-read"),
        ("write.merge.mode", "merge-on-read"),
    ];
    let mut checks = Vec::new();
    for (label, fv) in [
        ("turns_v2", FormatVersion::V2),
        ("turns_v3", FormatVersion::V3),
    ] {
        let mut case = create(&cat, work.path(), label, Some("cat"), fv, &mor).await;
        let ident = parse_ident(&format!("dml.{label}")).unwrap();
        for (by_spark, st) in [
            (false, "DELETE FROM {t} WHERE id % 7 = 3"),
            (true, "DELETE FROM {t} WHERE id % 5 = 1"),
            (true, "UPDATE {t} SET small = small + 100 WHERE id % 13 = 2"),
            (false, "DELETE FROM {t} WHERE id % 3 = 0"),
            (false, "UPDATE {t} SET name = 'floe' WHERE id % 4 = 1"),
        ] {
            if by_spark {
                spark_write(&py, dir.path(), &format!("dml.{label}"), "", &[st]);
                case.table = cat.load_table(&ident).await.unwrap();
            } else {
                let sql = st.replace("{t}", &format!("dml.{label}"));
                case.table = floe::dml::execute(&cat, &sql, None).await.unwrap().table;
            }
            case.expect(&py, &st.replace("{t}", "t"), None).await;
        }
        checks.extend(case.checks);
    }
    peer_check(&py, work.path(), &checks);
}

fn keyed_batch(rows: &[(i64, Option<&str>, i64)]) -> arrow::array::RecordBatch {
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;
    arrow::array::RecordBatch::try_from_iter(vec![
        (
            "id",
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )) as _,
        ),
        (
            "grp",
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )) as _,
        ),
        (
            "n",
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )) as _,
        ),
    ])
    .unwrap()
}

/// Equality deletes written by floe (global and partition-scoped, NULL keys): floe and Spark
/// apply them (strictly older data only), pyiceberg refuses the table, DuckDB reads the case
/// its reader gets right (global, no NULL keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equality_deletes_match_the_model_and_the_peers() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut checks = Vec::new();
    let base: Vec<(i64, Option<&str>, i64)> = (0..60)
        .map(|i| (i, [Some("a"), Some("b"), None][(i % 3) as usize], i % 7))
        .collect();
    let later: Vec<(i64, Option<&str>, i64)> =
        vec![(100, None, 2), (101, Some("b"), 2), (3, Some("a"), 3)];
    for (label, partition, cols, keys, engines) in [
        (
            "eq_global",
            None,
            vec!["id"],
            vec![(3, None, 0), (10, None, 0), (11, None, 0)],
            vec!["duckdb", "spark"],
        ),
        (
            "eq_nulls",
            None,
            vec!["grp", "n"],
            vec![(0, None, 2), (0, Some("b"), 4)],
            vec!["spark"],
        ),
        (
            "eq_partitioned",
            Some("grp"),
            vec!["grp", "n"],
            vec![(0, Some("a"), 1), (0, None, 5)],
            vec!["spark"],
        ),
    ] {
        let schema = parse_schema("id long, grp string, n long").unwrap();
        let mut c = TableCreation::new(schema.clone());
        if let Some(p) = partition {
            c.partition_spec = parse_partition_spec(p, &schema).unwrap();
        }
        let ident = parse_ident(&format!("dml.{label}")).unwrap();
        let t = cat.create_table(&ident, c).await.unwrap();
        let t = append(&cat, &t, vec![Ok(keyed_batch(&base))])
            .await
            .unwrap()
            .table;
        let model0 = work.path().join(format!("{label}-model-0.parquet"));
        write_parquet(&model0, &[keyed_batch(&base)]);
        let mut case = Case {
            label: label.to_string(),
            table: t,
            work: work.path().to_path_buf(),
            model: model0,
            step: 0,
            checks: Vec::new(),
        };
        let key_file = work.path().join(format!("{label}-keys.parquet"));
        let key_batch = keyed_batch(&keys);
        write_parquet(&key_file, std::slice::from_ref(&key_batch));
        let r = floe::dml::delete_by_key(&cat, &case.table, &cols, &key_batch)
            .await
            .unwrap();
        assert_eq!(
            r.added_delete_files,
            if partition.is_some() { 2 } else { 1 }
        );
        case.table = r.table;
        let on = cols
            .iter()
            .map(|c| format!("s.{c} IS NOT DISTINCT FROM t.{c}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        case.expect(
            &py,
            &format!("DELETE FROM t WHERE EXISTS (SELECT 1 FROM s WHERE {on})"),
            Some(&key_file),
        )
        .await;
        // Rows appended after the delete are not affected by it.
        case.table = append(&cat, &case.table, vec![Ok(keyed_batch(&later))])
            .await
            .unwrap()
            .table;
        let later_file = work.path().join(format!("{label}-later.parquet"));
        write_parquet(&later_file, &[keyed_batch(&later)]);
        case.expect(&py, "INSERT INTO t SELECT * FROM s", Some(&later_file))
            .await;
        for mut ch in case.checks {
            ch.engines = Some(engines.iter().map(|e| e.to_string()).collect());
            checks.push(ch.clone());
            ch.name = format!("{}-pyiceberg-refuses", ch.name);
            ch.engines = Some(vec!["pyiceberg".into()]);
            ch.refuse = Some(vec!["pyiceberg".into()]);
            checks.push(ch);
        }
    }
    peer_check(&py, work.path(), &checks);
}

/// Deleted positions are skipped by a row selection when they come in long runs and masked
/// out when scattered; both give the same rows, and row-level writes over them find the
/// right positions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_runs_and_scattered_deletes_read_the_same() {
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema);
    c.format_version = FormatVersion::V3;
    c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
    let t = cat
        .create_table(&parse_ident("dml.runs").unwrap(), c)
        .await
        .unwrap();
    append(&cat, &t, vec![Ok(id_batch(0..40_000))])
        .await
        .unwrap();
    let sum = |b: &[arrow::array::RecordBatch]| sum_i64(b, "id");
    // One long run: a row selection skips it.
    let t = floe::dml::execute(
        &cat,
        "DELETE FROM dml.runs WHERE id >= 5000 AND id < 25000",
        None,
    )
    .await
    .unwrap()
    .table;
    let rows = scan_rows(&t, floe::scan::SnapshotSelector::Current).await;
    let want: Vec<i64> = (0..40_000).filter(|i| !(5000..25000).contains(i)).collect();
    assert_eq!((count(&rows), sum(&rows)), (want.len(), want.iter().sum()));
    // Scattered deletes on top (merged into the same deletion vector): masked after decoding.
    let t = floe::dml::execute(&cat, "DELETE FROM dml.runs WHERE id % 3 = 1", None)
        .await
        .unwrap()
        .table;
    let want: Vec<i64> = want.into_iter().filter(|i| i % 3 != 1).collect();
    let rows = scan_rows(&t, floe::scan::SnapshotSelector::Current).await;
    assert_eq!((count(&rows), sum(&rows)), (want.len(), want.iter().sum()));
    // Filtered while decoding (`v` first, `id` only for the rows kept), the scattered deletes
    // masked by the positions the reader returns.
    let batches: Vec<arrow::array::RecordBatch> = floe::scan::Scan::new(&t)
        .filter(floe::expr::parse_expr("v LIKE 'v3____'").unwrap())
        .select(["id"])
        .to_stream()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let kept: Vec<i64> = want.iter().copied().filter(|i| *i >= 30000).collect();
    assert_eq!(
        (count(&batches), sum(&batches)),
        (kept.len(), kept.iter().sum())
    );
    // A delete found through the same path deletes the right positions.
    let t = floe::dml::execute(&cat, "DELETE FROM dml.runs WHERE v LIKE 'v3___5'", None)
        .await
        .unwrap()
        .table;
    let want: Vec<i64> = want
        .into_iter()
        .filter(|i| !(*i >= 30000 && i % 10 == 5))
        .collect();
    let rows = scan_rows(&t, floe::scan::SnapshotSelector::Current).await;
    assert_eq!((count(&rows), sum(&rows)), (want.len(), want.iter().sum()));
    // An update reading through both finds the right rows.
    let r = floe::dml::execute(&cat, "UPDATE dml.runs SET v = 'u' WHERE id % 5 = 0", None)
        .await
        .unwrap();
    assert_eq!(
        r.removed_rows as usize,
        want.iter().filter(|i| *i % 5 == 0).count()
    );
    let rows = scan_rows(&r.table, floe::scan::SnapshotSelector::Current).await;
    assert_eq!((count(&rows), sum(&rows)), (want.len(), want.iter().sum()));
    assert_eq!(
        floe::scan::Scan::new(&r.table)
            .filter(floe::expr::parse_expr("v = 'u'").unwrap())
            .count()
            .await
            .unwrap() as usize,
        want.iter().filter(|i| *i % 5 == 0).count()
    );
}

/// floe's position delete files carry full `file_path` bounds and `referenced_data_file`, so
/// every reader can match them to their data files without opening them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_delete_files_carry_file_path_bounds() {
    let (_d, cat) = fs_catalog();
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
    let t = cat
        .create_table(&parse_ident("dml.bounds").unwrap(), c)
        .await
        .unwrap();
    append(&cat, &t, vec![Ok(id_batch(0..100))]).await.unwrap();
    let t = floe::dml::execute(&cat, "DELETE FROM dml.bounds WHERE id % 3 = 0", None)
        .await
        .unwrap()
        .table;
    let plan = floe::scan::Scan::new(&t).plan().await.unwrap();
    let f = &plan.files[0];
    assert_eq!(f.deletes.len(), 1);
    let d = &f.deletes[0].file;
    let path = |m: &std::collections::HashMap<i32, floe::spec::Datum>| {
        m.get(&floe::spec::reserved::FILE_PATH_FIELD_ID)
            .map(|d| d.to_string())
    };
    let want = Some(format!("\"{}\"", f.file.file_path()));
    assert_eq!(path(d.lower_bounds()), want);
    assert_eq!(path(d.upper_bounds()), want);
    assert_eq!(
        d.referenced_data_file().as_deref(),
        Some(f.file.file_path())
    );
}

/// Copy-on-write on a v3 table: rows the statement does not change keep their `_row_id` and
/// `_last_updated_sequence_number`; deleted rows' ids are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_on_write_keeps_row_lineage_of_untouched_rows() {
    let (_d, cat) = fs_catalog();
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    c.format_version = FormatVersion::V3;
    let t = cat
        .create_table(&parse_ident("dml.cowlin").unwrap(), c)
        .await
        .unwrap();
    let t = append(&cat, &t, vec![Ok(id_batch(0..100))])
        .await
        .unwrap()
        .table;
    let lineage = |t: floe::Table| async move {
        let mut m = std::collections::BTreeMap::new();
        for b in floe::scan::Scan::new(&t)
            .select(["id"])
            .with_row_lineage()
            .to_batches()
            .await
            .unwrap()
        {
            use arrow::array::{AsArray, Int64Array};
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone();
            let rid = b
                .column(1)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .clone();
            let seq = b
                .column(2)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .clone();
            for i in 0..b.num_rows() {
                m.insert(ids.value(i), (rid.value(i), seq.value(i)));
            }
        }
        m
    };
    let before = lineage(t.clone()).await;
    let r = floe::dml::execute(&cat, "DELETE FROM dml.cowlin WHERE id % 10 = 0", None)
        .await
        .unwrap();
    assert_eq!(r.mode, floe::spec::WriteMode::CopyOnWrite);
    let after = lineage(r.table).await;
    assert_eq!(after.len(), 90);
    for (id, l) in &after {
        assert_eq!(before.get(id), Some(l), "row {id} kept its lineage");
    }
}

/// v3 UPDATE (both modes): updated rows keep their `_row_id` and take the new snapshot's
/// sequence number as `_last_updated_sequence_number`, as Spark reads them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_keeps_row_ids_on_v3() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut checks = Vec::new();
    for (label, mode) in [
        ("updlin_cow", "copy-on-write"),
        ("updlin_mor", "merge-on-read"),
    ] {
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        c.format_version = FormatVersion::V3;
        c.properties = [("write.update.mode".to_string(), mode.to_string())].into();
        let t = cat
            .create_table(&parse_ident(&format!("dml.{label}")).unwrap(), c)
            .await
            .unwrap();
        let t = append(&cat, &t, vec![Ok(id_batch(0..60))])
            .await
            .unwrap()
            .table;
        let lineage = |t: floe::Table| async move {
            floe::scan::Scan::new(&t)
                .select(["id"])
                .with_row_lineage()
                .to_batches()
                .await
                .unwrap()
        };
        let map = |bs: &[arrow::array::RecordBatch]| {
            use arrow::array::AsArray;
            let mut m = std::collections::BTreeMap::new();
            for b in bs {
                let c = |i| {
                    b.column(i)
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .clone()
                };
                let (id, rid, seq) = (c(0), c(1), c(2));
                for i in 0..b.num_rows() {
                    m.insert(id.value(i), (rid.value(i), seq.value(i)));
                }
            }
            m
        };
        let before = map(&lineage(t.clone()).await);
        let r = floe::dml::execute(
            &cat,
            &format!("UPDATE dml.{label} SET v = 'u' WHERE id % 4 = 0"),
            None,
        )
        .await
        .unwrap();
        let new_seq = r.table.current_snapshot().unwrap().sequence_number();
        let rows = lineage(r.table.clone()).await;
        let after = map(&rows);
        assert_eq!(after.len(), 60);
        for (id, (rid, seq)) in &after {
            let (old_rid, old_seq) = before[id];
            assert_eq!(*rid, old_rid, "{label}: row {id} keeps its row id");
            let want = if id % 4 == 0 { new_seq } else { old_seq };
            assert_eq!(*seq, want, "{label}: row {id} last-updated sequence number");
        }
        let p = work.path().join(format!("{label}.parquet"));
        write_parquet(&p, &rows);
        checks.push(Check {
            name: label.into(),
            metadata: r.table.metadata_location().to_string(),
            snapshot_id: None,
            expected: p.to_string_lossy().to_string(),
            engines: Some(vec!["spark".into()]),
            refuse: None,
        });
    }
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1") {
        peer_check(&py, work.path(), &checks);
    }
}

/// v3 row lineage on random statements (UPDATE, MERGE updating and inserting, DELETE,
/// appends, compaction) in both write modes, against a model: untouched rows keep their
/// `_row_id` and `_last_updated_sequence_number`, updated rows (UPDATE and MERGE alike) keep
/// their id and take the new snapshot's sequence number, new rows get ids never used before
/// (at or above the table's `next-row-id`) and the new sequence number, compaction changes
/// neither; ids stay unique. Spark reads the same lineage at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_statements_keep_row_lineage_as_the_model_says() {
    use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
    use rand::{Rng, SeedableRng};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut checks = Vec::new();
    for (seed, mode) in [(7u64, "copy-on-write"), (8, "merge-on-read")] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let name = format!("dml.lin_{}", mode.replace('-', "_"));
        let mut c = TableCreation::new(parse_schema("id long not null, v string").unwrap());
        c.format_version = FormatVersion::V3;
        for k in ["write.delete.mode", "write.update.mode", "write.merge.mode"] {
            c.properties.insert(k.into(), mode.into());
        }
        cat.create_table(&parse_ident(&name).unwrap(), c)
            .await
            .unwrap();
        // id → (v, row id, last-updated sequence number)
        type Lineage = BTreeMap<i64, (String, i64, i64)>;
        let read = |t: Table| async move {
            let mut m = Lineage::new();
            for b in floe::scan::Scan::new(&t)
                .select(["_last_updated_sequence_number", "id", "v", "_row_id"])
                .to_batches()
                .await
                .unwrap()
            {
                assert_eq!(
                    b.schema().field(3).name(),
                    "_row_id",
                    "columns in the order selected"
                );
                let seq = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                let id = b.column(1).as_primitive::<arrow::datatypes::Int64Type>();
                let v = b.column(2).as_string::<i32>();
                let rid = b.column(3).as_primitive::<arrow::datatypes::Int64Type>();
                for i in 0..b.num_rows() {
                    let prev = m.insert(
                        id.value(i),
                        (v.value(i).to_string(), rid.value(i), seq.value(i)),
                    );
                    assert!(prev.is_none(), "id {} twice", id.value(i));
                }
            }
            m
        };
        let batch = |rows: &[(i64, String)]| {
            RecordBatch::try_from_iter([
                (
                    "id",
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as _,
                ),
                (
                    "v",
                    Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|r| r.1.clone()),
                    )) as _,
                ),
            ])
            .unwrap()
        };
        let mut model = Lineage::new();
        let mut used: BTreeSet<i64> = BTreeSet::new();
        let mut next_id = 0i64;
        for step in 0..14 {
            let t = cat.load_table(&parse_ident(&name).unwrap()).await.unwrap();
            let next_row_id = t.metadata().next_row_id() as i64;
            // What the statement does: (new values of updated ids, new rows, deleted ids).
            let mut updated: BTreeMap<i64, String> = BTreeMap::new();
            let mut inserted: BTreeMap<i64, String> = BTreeMap::new();
            let mut deleted: BTreeSet<i64> = BTreeSet::new();
            let op = if step < 2 { 0 } else { rng.gen_range(0..5) };
            match op {
                0 => {
                    let rows: Vec<(i64, String)> = (0..rng.gen_range(3..12))
                        .map(|_| {
                            next_id += 1;
                            (next_id, format!("a{next_id}"))
                        })
                        .collect();
                    append(&cat, &t, vec![Ok(batch(&rows))]).await.unwrap();
                    inserted.extend(rows);
                }
                1 => {
                    let (m, r) = (rng.gen_range(2..5), rng.gen_range(0..2));
                    floe::dml::execute(
                        &cat,
                        &format!("UPDATE {name} SET v = v || 'u' WHERE id % {m} = {r}"),
                        None,
                    )
                    .await
                    .unwrap();
                    for (id, (v, _, _)) in &model {
                        if id % m == r {
                            updated.insert(*id, format!("{v}u"));
                        }
                    }
                }
                2 => {
                    let ids: Vec<i64> = model.keys().copied().collect();
                    let mut src: BTreeMap<i64, String> = BTreeMap::new();
                    for _ in 0..rng.gen_range(1..5) {
                        let id = ids[rng.gen_range(0..ids.len())];
                        src.insert(id, format!("m{step}"));
                    }
                    for _ in 0..rng.gen_range(0..3) {
                        next_id += 1;
                        src.insert(next_id, format!("n{next_id}"));
                    }
                    let path = work.path().join(format!("{seed}-src-{step}.parquet"));
                    let rows: Vec<(i64, String)> = src.clone().into_iter().collect();
                    write_parquet(&path, &[batch(&rows)]);
                    floe::dml::execute(
                        &cat,
                        &format!(
                            "MERGE INTO {name} t USING '{}' s ON t.id = s.id \
                             WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
                            path.display()
                        ),
                        None,
                    )
                    .await
                    .unwrap();
                    for (id, v) in src {
                        if model.contains_key(&id) {
                            updated.insert(id, v);
                        } else {
                            inserted.insert(id, v);
                        }
                    }
                }
                3 => {
                    let (m, r) = (rng.gen_range(3..6), rng.gen_range(0..3));
                    floe::dml::execute(
                        &cat,
                        &format!("DELETE FROM {name} WHERE id % {m} = {r}"),
                        None,
                    )
                    .await
                    .unwrap();
                    deleted.extend(model.keys().filter(|id| *id % m == r));
                }
                _ => {
                    let opts: HashMap<String, String> =
                        [("rewrite-all".to_string(), "true".to_string())].into();
                    floe::maintenance::rewrite_data_files(&cat, &t, None, &opts, None)
                        .await
                        .unwrap();
                }
            }
            let t = cat.load_table(&parse_ident(&name).unwrap()).await.unwrap();
            let seq = t.current_snapshot().unwrap().sequence_number();
            let got = read(t).await;
            let what = format!("{mode} step {step} (op {op})");
            for id in &deleted {
                model.remove(id);
            }
            for (id, v) in &updated {
                let e = model.get_mut(id).unwrap();
                *e = (v.clone(), e.1, seq);
            }
            assert_eq!(
                got.keys().copied().collect::<BTreeSet<_>>(),
                model
                    .keys()
                    .chain(inserted.keys())
                    .copied()
                    .collect::<BTreeSet<_>>(),
                "{what}: ids"
            );
            for (id, v) in &inserted {
                let (gv, rid, gseq) = &got[id];
                assert_eq!((gv, *gseq), (v, seq), "{what}: new row {id}");
                assert!(
                    *rid >= next_row_id && !used.contains(rid),
                    "{what}: new row {id} has row id {rid} (next-row-id was {next_row_id})"
                );
                used.insert(*rid);
                model.insert(*id, (v.clone(), *rid, seq));
            }
            assert_eq!(got, model, "{what}: lineage");
        }
        // Spark reads the same lineage.
        let t = cat.load_table(&parse_ident(&name).unwrap()).await.unwrap();
        let rows = floe::scan::Scan::new(&t)
            .select(["id", "v", "_row_id", "_last_updated_sequence_number"])
            .to_batches()
            .await
            .unwrap();
        let p = work.path().join(format!("lineage-{seed}.parquet"));
        write_parquet(&p, &rows);
        checks.push(Check {
            name: name.clone(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: p.to_string_lossy().to_string(),
            engines: Some(vec!["spark".into()]),
            refuse: None,
        });
    }
    let Some(py) = peers_python() else { return };
    if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1") {
        peer_check(&py, work.path(), &checks);
    }
}

/// Which model rows a statement matches.
type RowTest = Box<dyn Fn(&(i64, i32, i64)) -> bool>;

/// The counts a DELETE or UPDATE reports are the rows it changed: random statements on an
/// identity-partitioned table (whole partitions dropped by their values, files with earlier
/// position deletes / deletion vectors among them), in both modes and formats, against a
/// model of the live rows.
#[tokio::test]
async fn reported_counts_are_the_rows_changed() {
    use rand::{Rng, SeedableRng};
    for (seed, version, mode) in [
        (1u64, FormatVersion::V2, "merge-on-read"),
        (2, FormatVersion::V3, "merge-on-read"),
        (3, FormatVersion::V2, "copy-on-write"),
    ] {
        let (_d, cat) = sqlite_catalog();
        let schema = parse_schema("id long not null, k int, v long").unwrap();
        let mut c = TableCreation::new(schema.clone());
        c.format_version = version;
        c.partition_spec = parse_partition_spec("k", &schema).unwrap();
        c.properties.extend([
            ("write.delete.mode".to_string(), mode.to_string()),
            ("write.update.mode".to_string(), mode.to_string()),
        ]);
        let t = cat
            .create_table(&parse_ident("db.counts").unwrap(), c)
            .await
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut live: Vec<(i64, i32, i64)> = Vec::new();
        let mut next = 0i64;
        let mut t = t;
        for step in 0..16 {
            if step % 3 == 0 {
                let rows: Vec<(i64, i32, i64)> = (0..rng.gen_range(5..40))
                    .map(|i| (next + i, rng.gen_range(0..3), rng.gen_range(0..10)))
                    .collect();
                next += rows.len() as i64;
                let batch = arrow::array::RecordBatch::try_from_iter([
                    (
                        "id",
                        std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(
                            rows.iter().map(|r| r.0),
                        )) as _,
                    ),
                    (
                        "k",
                        std::sync::Arc::new(arrow::array::Int32Array::from_iter_values(
                            rows.iter().map(|r| r.1),
                        )) as _,
                    ),
                    (
                        "v",
                        std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(
                            rows.iter().map(|r| r.2),
                        )) as _,
                    ),
                ])
                .unwrap();
                append(&cat, &t, [Ok(batch)]).await.unwrap();
                live.extend(rows);
            }
            let (k, v) = (rng.gen_range(0..3), rng.gen_range(0..10));
            let (sql, matches): (String, RowTest) = match rng.gen_range(0..3) {
                0 => (
                    format!("DELETE FROM db.counts WHERE k = {k}"),
                    Box::new(move |r| r.1 == k),
                ),
                1 => (
                    format!("DELETE FROM db.counts WHERE v = {v}"),
                    Box::new(move |r| r.2 == v),
                ),
                _ => (
                    format!("UPDATE db.counts SET v = v + 100 WHERE k = {k}"),
                    Box::new(move |r| r.1 == k),
                ),
            };
            if step % 4 == 1 {
                // A MERGE: source ids half known, half new; each clause's count checked.
                let ids: Vec<i64> = (0..rng.gen_range(1..30))
                    .map(|_| rng.gen_range(0..next + 20))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let vs: Vec<i64> = ids.iter().map(|_| rng.gen_range(0..10)).collect();
                let source = arrow::array::RecordBatch::try_from_iter([
                    (
                        "id",
                        std::sync::Arc::new(arrow::array::Int64Array::from(ids.clone())) as _,
                    ),
                    (
                        "v",
                        std::sync::Arc::new(arrow::array::Int64Array::from(vs.clone())) as _,
                    ),
                ])
                .unwrap();
                let sql = "MERGE INTO db.counts t USING src s ON t.id = s.id \
                           WHEN MATCHED AND s.v < 3 THEN DELETE \
                           WHEN MATCHED THEN UPDATE SET v = s.v \
                           WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, 1, s.v)";
                let r = floe::dml::execute(&cat, sql, Some(vec![source]))
                    .await
                    .unwrap();
                let (mut upd, mut del, mut ins) = (0u64, 0u64, 0u64);
                for (id, v) in ids.iter().zip(&vs) {
                    match live.iter().position(|r| r.0 == *id) {
                        Some(i) if *v < 3 => {
                            live.remove(i);
                            del += 1;
                        }
                        Some(i) => {
                            live[i].2 = *v;
                            upd += 1;
                        }
                        None => {
                            live.push((*id, 1, *v));
                            ins += 1;
                        }
                    }
                }
                let m = r.merged.expect("a MERGE reports its clauses");
                assert_eq!(
                    (m.updated, m.deleted, m.inserted),
                    (upd, del, ins),
                    "seed {seed} step {step}: MERGE counts"
                );
                assert_eq!(r.removed_rows, upd + del, "seed {seed} step {step}");
                next = next.max(ids.last().map_or(0, |i| i + 1));
                t = r.table;
                let n = floe::scan::Scan::new(&t).count().await.unwrap() as usize;
                assert_eq!(n, live.len(), "seed {seed} step {step}: {sql}");
                continue;
            }
            let r = floe::dml::execute(&cat, &sql, None).await.unwrap();
            let want = live.iter().filter(|r| matches(r)).count();
            assert_eq!(
                r.removed_rows as usize, want,
                "seed {seed} step {step}: {sql} reported the wrong count"
            );
            assert!(r.merged.is_none());
            if sql.starts_with("DELETE") {
                live.retain(|r| !matches(r));
            } else {
                for r in live.iter_mut().filter(|r| r.1 == k) {
                    r.2 += 100;
                }
            }
            t = r.table;
            let n = floe::scan::Scan::new(&t).count().await.unwrap() as usize;
            assert_eq!(n, live.len(), "seed {seed} step {step}: {sql}");
        }
    }
}

/// `Scan::count` answers from record counts less deleted positions (position delete files,
/// deletion vectors) without reading data files: after random DELETEs in every merge-on-read
/// granularity, with and without a limit and a filter, it equals the rows a scan returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_from_deleted_positions_equal_the_rows_read() {
    use rand::{Rng, SeedableRng};
    let (_d, cat) = fs_catalog();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xC0_47);
    for (label, fv, granularity) in [
        ("v2_file", FormatVersion::V2, "file"),
        ("v2_part", FormatVersion::V2, "partition"),
        ("v3_dv", FormatVersion::V3, "file"),
    ] {
        let schema = parse_schema("id long, p int").unwrap();
        let mut c = TableCreation::new(schema.clone());
        c.format_version = fv;
        c.partition_spec = parse_partition_spec("p", &schema).unwrap();
        c.properties = [
            ("write.delete.mode", "merge-on-read"),
            ("write.delete.granularity", granularity),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let name = format!("cnt.{label}");
        let mut t = cat
            .create_table(&parse_ident(&name).unwrap(), c)
            .await
            .unwrap();
        for f in 0..4i64 {
            let ids: Vec<i64> = (f * 100..f * 100 + 100).collect();
            let ps: Vec<i32> = ids.iter().map(|i| (i % 3) as i32).collect();
            let b = arrow::array::RecordBatch::try_from_iter([
                (
                    "id",
                    std::sync::Arc::new(arrow::array::Int64Array::from(ids)) as _,
                ),
                (
                    "p",
                    std::sync::Arc::new(arrow::array::Int32Array::from(ps)) as _,
                ),
            ])
            .unwrap();
            t = append(&cat, &t, vec![Ok(b)]).await.unwrap().table;
        }
        for round in 0..6 {
            let (a, m) = (rng.gen_range(2..9), rng.gen_range(0..8));
            let sql = format!(
                "DELETE FROM {name} WHERE id % {a} = {m} AND id > {}",
                round * 40
            );
            floe::dml::execute(&cat, &sql, None).await.unwrap();
            let t = cat.load_table(&parse_ident(&name).unwrap()).await.unwrap();
            let read = |scan: floe::scan::Scan| async move {
                scan.to_batches()
                    .await
                    .unwrap()
                    .iter()
                    .map(|b| b.num_rows() as u64)
                    .sum::<u64>()
            };
            let all = read(floe::scan::Scan::new(&t)).await;
            let counted = floe::scan::Scan::new(&t).count().await.unwrap();
            assert_eq!(counted, all, "{label} after {sql}");
            let limit = rng.gen_range(1..(all as usize + 20));
            let limited = floe::scan::Scan::new(&t)
                .limit(limit)
                .count()
                .await
                .unwrap();
            assert_eq!(limited, all.min(limit as u64), "{label} limit {limit}");
            let rows = read(floe::scan::Scan::new(&t).limit(limit)).await;
            assert_eq!(rows, all.min(limit as u64), "{label} limited scan {limit}");
            let f = floe::expr::parse_expr("p = 1").unwrap();
            let filtered = read(floe::scan::Scan::new(&t).filter(f.clone())).await;
            let counted = floe::scan::Scan::new(&t).filter(f).count().await.unwrap();
            assert_eq!(counted, filtered, "{label} p = 1 after {sql}");
            // A filter no pruning predicate expresses still drops rows under a limit.
            let even = floe::expr::parse_expr("id % 2 = 0").unwrap();
            let all_even = read(floe::scan::Scan::new(&t).filter(even.clone())).await;
            let limited = read(floe::scan::Scan::new(&t).filter(even).limit(limit)).await;
            assert_eq!(
                limited,
                all_even.min(limit as u64),
                "{label} even, limit {limit}"
            );
        }
    }
}

/// One random predicate of the strict-count test: its SQL (floe's and DuckDB's) and its
/// value on a row `(id, s, d)` in SQL's three-valued logic.
#[derive(Clone, Debug)]
enum CountPred {
    Id(&'static str, i64),
    IdBetween(i64, i64),
    IdIn(Vec<i64>, bool),
    S(&'static str, &'static str),
    SNull(bool),
    DGe(i32),
    And(Box<CountPred>, Box<CountPred>),
    Or(Box<CountPred>, Box<CountPred>),
    Not(Box<CountPred>),
}

type CountRow = (i64, Option<&'static str>, i32);

impl CountPred {
    fn random(rng: &mut impl rand::Rng, depth: u32) -> Self {
        use CountPred::*;
        const OPS: [&str; 6] = ["<", "<=", ">", ">=", "=", "<>"];
        let k = |rng: &mut dyn rand::RngCore| (rng.next_u32() % 1150) as i64 - 20;
        match rng.gen_range(0..if depth > 0 { 9 } else { 6 }) {
            0 => Id(OPS[rng.gen_range(0..6)], k(rng)),
            1 => {
                let a = k(rng);
                IdBetween(a, a + rng.gen_range(0..400))
            }
            2 => IdIn(
                (0..rng.gen_range(1..4)).map(|_| k(rng)).collect(),
                rng.gen(),
            ),
            3 => S(
                OPS[rng.gen_range(0..6)],
                ["a", "b", "c", "d", "e", "f", "g"][rng.gen_range(0..7)],
            ),
            4 => SNull(rng.gen()),
            5 => DGe(19_000 + rng.gen_range(0..115)),
            6 => And(
                Box::new(Self::random(rng, depth - 1)),
                Box::new(Self::random(rng, depth - 1)),
            ),
            7 => Or(
                Box::new(Self::random(rng, depth - 1)),
                Box::new(Self::random(rng, depth - 1)),
            ),
            _ => Not(Box::new(Self::random(rng, depth - 1))),
        }
    }

    fn sql(&self) -> String {
        use CountPred::*;
        match self {
            Id(op, k) => format!("id {op} {k}"),
            IdBetween(a, b) => format!("id BETWEEN {a} AND {b}"),
            IdIn(ks, neg) => format!(
                "id {}IN ({})",
                if *neg { "NOT " } else { "" },
                ks.iter()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            S(op, v) => format!("s {op} '{v}'"),
            SNull(neg) => format!("s IS {}NULL", if *neg { "NOT " } else { "" }),
            DGe(d) => format!(
                "d >= DATE '{}'",
                chrono::NaiveDate::from_num_days_from_ce_opt(719_163 + d).unwrap()
            ),
            And(a, b) => format!("({} AND {})", a.sql(), b.sql()),
            Or(a, b) => format!("({} OR {})", a.sql(), b.sql()),
            Not(a) => format!("(NOT {})", a.sql()),
        }
    }

    fn eval(&self, r: &CountRow) -> Option<bool> {
        use CountPred::*;
        let cmp = |op: &str, o: std::cmp::Ordering| match op {
            "<" => o.is_lt(),
            "<=" => o.is_le(),
            ">" => o.is_gt(),
            ">=" => o.is_ge(),
            "=" => o.is_eq(),
            _ => o.is_ne(),
        };
        match self {
            Id(op, k) => Some(cmp(op, r.0.cmp(k))),
            IdBetween(a, b) => Some(r.0 >= *a && r.0 <= *b),
            IdIn(ks, neg) => Some(ks.contains(&r.0) != *neg),
            S(op, v) => r.1.map(|s| cmp(op, s.cmp(v))),
            SNull(neg) => Some(r.1.is_none() != *neg),
            DGe(d) => Some(r.2 >= *d),
            And(a, b) => match (a.eval(r), b.eval(r)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Or(a, b) => match (a.eval(r), b.eval(r)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            Not(a) => a.eval(r).map(|v| !v),
        }
    }
}

/// `Scan::count` with a filter takes a file's record count (less its deleted positions) when
/// the file's column metrics prove that every row matches, and reads only the others: on
/// random files (overlapping id ranges, strings with and without nulls, dates), random
/// DELETEs (position delete files, deletion vectors) and random predicates, the count equals
/// the model's, the rows floe's scan returns and DuckDB's count; a count whose filter the
/// metrics prove for every file opens no data file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_with_filters_from_strict_metrics_equal_the_model_and_duckdb() {
    use rand::{Rng, SeedableRng};
    let (d, cat) = fs_catalog();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5_7c1c7);
    let mut duck_queries = Vec::new();
    let mut duck_expected = Vec::new();
    for (label, fv) in [("v2", FormatVersion::V2), ("v3", FormatVersion::V3)] {
        let schema = parse_schema("id long, s string, d date").unwrap();
        let mut c = TableCreation::new(schema);
        c.format_version = fv;
        c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
        let name = format!("cnt.strict_{label}");
        let mut t = cat
            .create_table(&parse_ident(&name).unwrap(), c)
            .await
            .unwrap();
        let mut model: Vec<CountRow> = Vec::new();
        for _ in 0..9 {
            let base = rng.gen_range(0..1000i64);
            let n = rng.gen_range(20..90i64);
            let nulls = rng.gen_bool(0.4);
            let letters: Vec<&'static str> =
                ["a", "b", "c", "d", "e", "f"][rng.gen_range(0..3)..rng.gen_range(3..6)].to_vec();
            let rows: Vec<CountRow> = (base..base + n)
                .map(|id| {
                    let s = (!(nulls && rng.gen_bool(0.2)))
                        .then(|| letters[rng.gen_range(0..letters.len())]);
                    (id, s, 19_000 + (id / 10) as i32)
                })
                .collect();
            let b = arrow::array::RecordBatch::try_from_iter([
                (
                    "id",
                    std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(
                        rows.iter().map(|r| r.0),
                    )) as arrow::array::ArrayRef,
                ),
                (
                    "s",
                    std::sync::Arc::new(arrow::array::StringArray::from_iter(
                        rows.iter().map(|r| r.1),
                    )) as _,
                ),
                (
                    "d",
                    std::sync::Arc::new(arrow::array::Date32Array::from_iter_values(
                        rows.iter().map(|r| r.2),
                    )) as _,
                ),
            ])
            .unwrap();
            t = append(&cat, &t, vec![Ok(b)]).await.unwrap().table;
            model.extend(rows);
        }
        for _ in 0..2 {
            let (a, m, lo) = (
                rng.gen_range(3..9),
                rng.gen_range(0..3),
                rng.gen_range(0..900),
            );
            let sql = format!("DELETE FROM {name} WHERE id % {a} = {m} AND id > {lo}");
            floe::dml::execute(&cat, &sql, None).await.unwrap();
            model.retain(|r| !(r.0 % a == m && r.0 > lo));
        }
        let t = cat.load_table(&parse_ident(&name).unwrap()).await.unwrap();
        let mut proven = 0;
        for q in 0..70 {
            let p = CountPred::random(&mut rng, 2);
            let sql = p.sql();
            let want = model.iter().filter(|r| p.eval(r) == Some(true)).count() as u64;
            let e = floe::expr::parse_expr(&sql).unwrap();
            let counted = floe::scan::Scan::new(&t)
                .filter(e.clone())
                .count()
                .await
                .unwrap();
            assert_eq!(counted, want, "{label}: count where {sql}");
            let read: u64 = floe::scan::Scan::new(&t)
                .filter(e)
                .to_batches()
                .await
                .unwrap()
                .iter()
                .map(|b| b.num_rows() as u64)
                .sum();
            assert_eq!(read, want, "{label}: rows where {sql}");
            proven += usize::from(want > 0 && !sql.contains("NOT") && !sql.contains("<>"));
            let out = d.path().join(format!("duck-{label}-{q}.jsonl"));
            duck_queries.push((
                format!(
                    "SELECT count(*) AS n FROM iceberg_scan('{}') WHERE {sql}",
                    t.metadata_location()
                ),
                out.to_string_lossy().into_owned(),
            ));
            duck_expected.push((out, want, sql));
        }
        assert!(proven > 10, "{label}: too few predicates that match rows");
        // Every file's metrics prove `id > -100 AND d >= DATE '1970-01-01'`: with the data
        // files gone the count still answers; a filter they do not prove must read them.
        let all = floe::expr::parse_expr("id > -100 AND d >= DATE '1970-01-01'").unwrap();
        let plan = floe::scan::Scan::new(&t).plan().await.unwrap();
        for f in &plan.files {
            let path = f.file.file_path().trim_start_matches("file://").to_string();
            std::fs::rename(&path, format!("{path}.away")).unwrap();
        }
        let n = floe::scan::Scan::new(&t).filter(all).count().await.unwrap();
        assert_eq!(n, model.len() as u64, "{label}: counted from metrics");
        let even = floe::expr::parse_expr("id % 2 = 0").unwrap();
        assert!(floe::scan::Scan::new(&t)
            .filter(even)
            .count()
            .await
            .is_err());
        for f in &plan.files {
            let path = f.file.file_path().trim_start_matches("file://").to_string();
            std::fs::rename(format!("{path}.away"), &path).unwrap();
        }
    }
    let Some(py) = peers_python() else { return };
    crate::input_formats::duckdb_rows(&py, d.path(), &duck_queries);
    for (out, want, sql) in duck_expected {
        let v: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&out).unwrap().trim()).unwrap();
        assert_eq!(v["n"].as_u64(), Some(want), "DuckDB: count where {sql}");
    }
}
