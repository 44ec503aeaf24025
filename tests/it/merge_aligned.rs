//! Partition-aligned MERGE: a `bucket(N, id)` table merged on `id` reads one partition at a
//! time. The same statements on a twin table with `floe.merge.partition-aligned=false` (one
//! pass over the whole source) must leave the same rows, for random sources, in every write
//! mode and format version, with the source in memory and spilled; the peers read the result.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floe::catalog::{Catalog, TableCreation};
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use floe::Table;

use crate::common::*;

const DDL: &str = "id long not null, k int, v string";

async fn create(cat: &Catalog, name: &str, v3: bool, props: &[(&str, &str)]) -> Table {
    let schema = parse_schema(DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = if v3 {
        FormatVersion::V3
    } else {
        FormatVersion::V2
    };
    c.partition_spec = parse_partition_spec("bucket(8, id)", &schema).unwrap();
    c.sort_order = Some(parse_sort_order("id", &schema).unwrap());
    c.properties = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<HashMap<_, _>>();
    cat.create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap()
}

fn batch(ids: &[i64], rng: &mut StdRng) -> RecordBatch {
    let k: Int32Array = ids
        .iter()
        .map(|_| rng.gen_bool(0.9).then(|| rng.gen_range(-20..100)))
        .collect();
    let v: StringArray = ids
        .iter()
        .map(|i| {
            rng.gen_bool(0.9)
                .then(|| format!("v{i}-{}", rng.gen_range(0..5)))
        })
        .collect();
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
        ("k", Arc::new(k) as ArrayRef),
        ("v", Arc::new(v) as ArrayRef),
    ])
    .unwrap()
}

/// The table's rows, sorted, as text.
async fn rows(t: &Table) -> Vec<String> {
    let batches = scan_rows(t, Default::default()).await;
    let mut out = Vec::new();
    for b in &batches {
        let id = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let k = b.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
        let v = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        for r in 0..b.num_rows() {
            out.push(format!(
                "{} {:?} {:?}",
                id.value(r),
                k.is_valid(r).then(|| k.value(r)),
                v.is_valid(r).then(|| v.value(r))
            ));
        }
    }
    out.sort();
    out
}

const MERGES: &[&str] = &[
    "MERGE INTO {t} t USING src s ON t.id = s.id \
     WHEN MATCHED AND s.k < 0 THEN DELETE \
     WHEN MATCHED THEN UPDATE SET k = s.k, v = s.v \
     WHEN NOT MATCHED AND s.k IS NOT NULL THEN INSERT *",
    "MERGE INTO {t} t USING src s ON t.id = s.id \
     WHEN MATCHED THEN UPDATE SET * \
     WHEN NOT MATCHED BY SOURCE AND t.k > 90 THEN DELETE \
     WHEN NOT MATCHED BY SOURCE AND t.k < -15 THEN UPDATE SET v = 'orphan'",
    "MERGE INTO {t} t USING src s ON t.id = s.id \
     WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, 0, 'new')",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_merge_leaves_the_rows_of_a_one_pass_merge() {
    let (_d, cat) = fs_catalog();
    let work = tempfile::tempdir().unwrap();
    let mut checks = Vec::new();
    let mut case = 0;
    for v3 in [false, true] {
        for mor in [false, true] {
            for spill in [false, true] {
                case += 1;
                let mode = if mor {
                    "merge-on-read"
                } else {
                    "copy-on-write"
                };
                let mut props = vec![("write.merge.mode", mode)];
                if spill {
                    props.push(("floe.merge.source-memory-bytes", "0"));
                }
                let mut aligned = create(&cat, &format!("db.a{case}"), v3, &props).await;
                props.push(("floe.merge.partition-aligned", "false"));
                let mut one_pass = create(&cat, &format!("db.o{case}"), v3, &props).await;
                let mut rng = StdRng::seed_from_u64(case);
                for chunk in 0..3i64 {
                    let ids: Vec<i64> = (chunk * 2000..chunk * 2000 + 2000).collect();
                    let b = batch(&ids, &mut rng);
                    aligned = floe::txn::append(&cat, &aligned, [Ok(b.clone())])
                        .await
                        .unwrap()
                        .table;
                    one_pass = floe::txn::append(&cat, &one_pass, [Ok(b)])
                        .await
                        .unwrap()
                        .table;
                }
                for (step, sql) in MERGES.iter().enumerate() {
                    // Unique source keys: some existing, some new, a few in one bucket only.
                    let n = rng.gen_range(1..1500);
                    let mut ids: Vec<i64> = (0..n).map(|_| rng.gen_range(0..9000)).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    if step == 2 {
                        ids.truncate(3);
                    }
                    let src = batch(&ids, &mut rng);
                    let run = |name: &str| {
                        let sql = sql.replace("{t}", name);
                        let src = src.clone();
                        let cat = &cat;
                        async move {
                            floe::dml::execute(cat, &sql, Some(vec![src]))
                                .await
                                .unwrap()
                        }
                    };
                    let a = run(&format!("db.a{case}")).await;
                    let o = run(&format!("db.o{case}")).await;
                    let what = format!("case {case} (v3 {v3}, {mode}, spill {spill}) step {step}");
                    let al = a
                        .aligned
                        .clone()
                        .unwrap_or_else(|| panic!("{what}: not aligned"));
                    assert!(o.aligned.is_none(), "{what}");
                    assert!(
                        al.source_partitions >= 1 && al.source_partitions <= 8,
                        "{what}: {al:?}"
                    );
                    assert_eq!(al.spilled_bytes > 0, spill, "{what}: {al:?}");
                    if step == 1 {
                        // NOT MATCHED BY SOURCE: every partition with files is read.
                        assert_eq!(al.target_partitions_read, 8, "{what}: {al:?}");
                    } else {
                        assert!(
                            al.target_partitions_read <= al.source_partitions,
                            "{what}: {al:?}"
                        );
                    }
                    if step == 2 {
                        assert!(al.source_partitions <= 3, "{what}: {al:?}");
                    }
                    assert_eq!(
                        (a.removed_rows, a.written_rows, a.rewritten_rows),
                        (o.removed_rows, o.written_rows, o.rewritten_rows),
                        "{what}"
                    );
                    aligned = a.table;
                    one_pass = o.table;
                    assert_eq!(rows(&aligned).await, rows(&one_pass).await, "{what}");
                }
                // Each file added by the aligned merges holds one partition, sorted end to end
                // when it says so.
                let plan = floe::scan::Scan::new(&aligned).plan().await.unwrap();
                for f in &plan.files {
                    assert_eq!(f.file.partition().fields().len(), 1);
                }
                let p = work.path().join(format!("a{case}.parquet"));
                floe_expected(&aligned, None, &p).await;
                checks.push(Check {
                    name: format!("aligned-{case}"),
                    metadata: aligned.metadata_location().to_string(),
                    snapshot_id: None,
                    expected: p.to_string_lossy().to_string(),
                    engines: None,
                    refuse: None,
                });
            }
        }
    }
    if let Some(py) = peers_python() {
        peer_check(&py, work.path(), &checks);
    }
}

/// A source key held by several rows is refused as in one pass (naming the key), and nothing
/// is committed; the CLI's JSON says the aligned path ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_merge_refuses_duplicate_keys_and_reports_itself() {
    let (d, cat) = sqlite_catalog();
    let t = create(&cat, "db.t", true, &[]).await;
    let mut rng = StdRng::seed_from_u64(1);
    let t = floe::txn::append(
        &cat,
        &t,
        [Ok(batch(&(0..100).collect::<Vec<_>>(), &mut rng))],
    )
    .await
    .unwrap()
    .table;
    let src = batch(&[5, 7, 5], &mut rng);
    let e = floe::dml::execute(
        &cat,
        "MERGE INTO db.t t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
        Some(vec![src]),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("more than one source row (2 rows of key (5))"),
        "{e}"
    );
    let now = cat.load_table(&parse_ident("db.t").unwrap()).await.unwrap();
    assert_eq!(now.metadata_location(), t.metadata_location());

    let wh = d.path();
    let p = d.path().join("src.parquet");
    write_parquet(&p, &[batch(&[1, 2, 300], &mut rng)]);
    let merge = [
        "merge",
        "db.t",
        "--source",
        p.to_str().unwrap(),
        "--on",
        "id",
    ];
    let out = ok(wh, &[&merge[..], &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["aligned"]["source_partitions_count"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert_eq!(v["deleted_records_count"], 2, "{v}");
    assert_eq!(v["added_records_count"], 3, "{v}");
    let text = ok(wh, &merge);
    assert!(
        text.contains("aligned with the table's partitions"),
        "{text}"
    );
}

/// Files written under an older partition spec say nothing about where a key lives: the MERGE
/// reads in one pass until a rewrite moves every file to the current spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_after_partition_evolution_is_aligned_once_files_are_rewritten() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(&wh, &["create", "db.c", "--schema", DDL]);
    let mut rng = StdRng::seed_from_u64(3);
    let p = d.path().join("in.parquet");
    write_parquet(&p, &[batch(&(0..500).collect::<Vec<_>>(), &mut rng)]);
    ok(&wh, &["append", "db.c", p.to_str().unwrap()]);
    ok(
        &wh,
        &[
            "alter",
            "db.c",
            "--partition-by",
            "bucket(4, id)",
            "--sort-by",
            "id",
        ],
    );
    let src = d.path().join("src.parquet");
    write_parquet(&src, &[batch(&[3, 499, 500, 501], &mut rng)]);
    let merge = || {
        let out = ok(
            &wh,
            &[
                "merge",
                "db.c",
                "--source",
                src.to_str().unwrap(),
                "--on",
                "id",
                "--json",
            ],
        );
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let v = merge();
    assert!(v["aligned"].is_null(), "{v}");
    assert_eq!(v["added_records_count"], 4, "{v}");
    ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.c",
            "--strategy",
            "sort",
            "--option",
            "rewrite-all=true",
        ],
    );
    let v = merge();
    assert!(
        v["aligned"]["source_partitions_count"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert_eq!(v["added_records_count"], 4, "{v}");
    assert_eq!(v["deleted_records_count"], 4, "{v}");
    let cat = floe::Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let t = cat.load_table(&parse_ident("db.c").unwrap()).await.unwrap();
    assert_eq!(rows(&t).await.len(), 502);
}
