//! ALTER TABLE against an independent model: random sequences of column changes (add, drop,
//! rename, widen, move, make optional, v3 defaults) and partition / sort-order / property
//! changes, with rows appended between them and, right after an ALTER (the last snapshot
//! still has the old schema), a DELETE, an UPDATE or a compaction, copy-on-write or
//! merge-on-read. After every step floe's scan equals the model (columns tracked by field id,
//! as Iceberg resolves them); at the end DuckDB, pyiceberg and Spark read every snapshot as
//! floe does. Mistakes are refused with nothing committed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::evolution::{ColumnPosition, TableChange};
use floe::spec::parse_alter_clause;
use floe::table::parse_ident;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::common::*;

/// A column as the model knows it.
#[derive(Clone, Debug)]
struct Col {
    name: String,
    long: bool,
    default: Option<i64>,
}

/// The model: columns in order (by a model id), rows as values by model id.
#[derive(Default)]
struct Model {
    cols: Vec<(u32, Col)>,
    rows: Vec<BTreeMap<u32, Option<i64>>>,
    next: u32,
}

impl Model {
    fn expected(&self) -> Vec<Vec<Option<i64>>> {
        let mut out: Vec<Vec<Option<i64>>> = self
            .rows
            .iter()
            .map(|r| {
                self.cols
                    .iter()
                    .map(|(id, c)| match r.get(id) {
                        Some(v) => *v,
                        None => c.default,
                    })
                    .collect()
            })
            .collect();
        out.sort();
        out
    }
}

async fn floe_rows(t: &floe::Table, snapshot: Option<i64>) -> Vec<Vec<Option<i64>>> {
    let sel = snapshot.map(SnapshotSelector::Id).unwrap_or_default();
    let batches = Scan::new(t).snapshot(sel).to_batches().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        if c.is_null(r) {
                            return None;
                        }
                        if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
                            Some(a.value(r))
                        } else if let Some(a) = c.as_any().downcast_ref::<Int32Array>() {
                            Some(a.value(r) as i64)
                        } else {
                            panic!("unexpected column type {:?}", c.data_type())
                        }
                    })
                    .collect(),
            );
        }
    }
    out.sort();
    out
}

/// A change picked at random that the model says is legal, applied to the model.
fn pick(rng: &mut StdRng, m: &mut Model, v3: bool) -> String {
    let n = m.cols.len();
    loop {
        match rng.gen_range(0..7) {
            0 | 1 => {
                let id = m.next;
                m.next += 1;
                let name = format!("c{id}");
                let long = rng.gen_bool(0.5);
                let default = (v3 && rng.gen_bool(0.5)).then(|| rng.gen_range(-5..5i64));
                let at = rng.gen_range(0..=n);
                let (pos, idx) = match at {
                    0 => (" FIRST".to_string(), 0),
                    i if i == n => (String::new(), n),
                    i => (format!(" AFTER {}", m.cols[i - 1].1.name), i),
                };
                let dflt = default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default();
                m.cols.insert(
                    idx,
                    (
                        id,
                        Col {
                            name: name.clone(),
                            long,
                            default,
                        },
                    ),
                );
                return format!(
                    "ADD COLUMN {name} {}{dflt}{pos}",
                    if long { "long" } else { "int" }
                );
            }
            2 if n > 2 => {
                // Never the first-created `id` (the partition source).
                let i = rng.gen_range(0..n);
                if m.cols[i].0 == 0 {
                    continue;
                }
                let (_, c) = m.cols.remove(i);
                return format!("DROP COLUMN {}", c.name);
            }
            3 => {
                let i = rng.gen_range(0..n);
                let to = format!("r{}", m.next);
                m.next += 1;
                let from = std::mem::replace(&mut m.cols[i].1.name, to.clone());
                return format!("RENAME COLUMN {from} TO {to}");
            }
            4 => {
                let Some(i) = (0..n).find(|&i| !m.cols[i].1.long) else {
                    continue;
                };
                m.cols[i].1.long = true;
                return format!("ALTER COLUMN {} TYPE long", m.cols[i].1.name);
            }
            5 if n > 1 => {
                let i = rng.gen_range(0..n);
                let c = m.cols.remove(i);
                let name = c.1.name.clone();
                let at = rng.gen_range(0..=m.cols.len());
                let clause = if at == 0 {
                    format!("ALTER COLUMN {name} FIRST")
                } else {
                    format!("ALTER COLUMN {name} AFTER {}", m.cols[at - 1].1.name)
                };
                m.cols.insert(at, c);
                return clause;
            }
            6 => {
                let i = rng.gen_range(0..n);
                return format!("ALTER COLUMN {} DROP NOT NULL", m.cols[i].1.name);
            }
            _ => continue,
        }
    }
}

/// Rows for the model's current columns, appended to the model.
fn rows(rng: &mut StdRng, m: &mut Model, start: i64, count: usize) -> RecordBatch {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let mut values: Vec<BTreeMap<u32, Option<i64>>> = vec![BTreeMap::new(); count];
    for (id, c) in &m.cols {
        // A column with a (v3) default left out of the input takes its write-default.
        if let Some(d) = c.default {
            if rng.gen_bool(0.3) {
                for r in values.iter_mut() {
                    r.insert(*id, Some(d));
                }
                continue;
            }
        }
        let v: Vec<Option<i64>> = (0..count)
            .map(|r| {
                if *id == 0 {
                    Some(start + r as i64)
                } else if rng.gen_bool(0.2) {
                    None
                } else {
                    Some(rng.gen_range(-1000..1000))
                }
            })
            .collect();
        for (r, x) in v.iter().enumerate() {
            values[r].insert(*id, *x);
        }
        if c.long {
            fields.push(Field::new(&c.name, DataType::Int64, *id != 0));
            arrays.push(Arc::new(Int64Array::from(v)));
        } else {
            fields.push(Field::new(&c.name, DataType::Int32, *id != 0));
            arrays.push(Arc::new(Int32Array::from(
                v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>(),
            )));
        }
    }
    m.rows.extend(values);
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), arrays).unwrap()
}

/// A DELETE, an UPDATE (of a random column but `id`), a MERGE (updating matched rows'
/// column, inserting new ids; `next_id` numbers them) or a compaction of every file, picked at
/// random and applied to `t` and to the model; returns what it did.
async fn row_level(
    rng: &mut StdRng,
    m: &mut Model,
    cat: &floe::Catalog,
    t: &floe::Table,
    next_id: &mut i64,
) -> String {
    let (k, r) = (rng.gen_range(2..5i64), rng.gen_range(0..2i64));
    let hit = |row: &BTreeMap<u32, Option<i64>>| row[&0].is_some_and(|id| id % k == r);
    let name = t.name();
    // `id` may have been renamed.
    let key = m
        .cols
        .iter()
        .find(|(id, _)| *id == 0)
        .map(|(_, c)| c.name.clone())
        .unwrap();
    let others: Vec<(u32, Col)> = m.cols.iter().filter(|(id, _)| *id != 0).cloned().collect();
    let sql = match rng.gen_range(0..4) {
        3 if !others.is_empty() => {
            let (col_id, c) = others[rng.gen_range(0..others.len())].clone();
            // Two existing ids and two new ones.
            let mut ids: Vec<i64> = (0..2)
                .map(|_| m.rows[rng.gen_range(0..m.rows.len())][&0].unwrap())
                .collect();
            ids.dedup();
            ids.extend([*next_id, *next_id + 1]);
            *next_id += 2;
            let vals: Vec<i64> = ids.iter().map(|_| rng.gen_range(-50..50)).collect();
            for (&id, &v) in ids.iter().zip(&vals) {
                match m.rows.iter_mut().find(|row| row[&0] == Some(id)) {
                    Some(row) => {
                        row.insert(col_id, Some(v));
                    }
                    None => {
                        // Columns the INSERT leaves out take their (write-)default.
                        let mut row = BTreeMap::from([(0, Some(id)), (col_id, Some(v))]);
                        for (o, oc) in &m.cols {
                            row.entry(*o).or_insert(oc.default);
                        }
                        m.rows.push(row);
                    }
                }
            }
            let src = RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(ids)) as ArrayRef),
                ("val", Arc::new(Int64Array::from(vals)) as ArrayRef),
            ])
            .unwrap();
            let (col, cast) = (&c.name, if c.long { "" } else { "CAST(" });
            let val = if c.long {
                "s.val".to_string()
            } else {
                format!("{cast}s.val AS int)")
            };
            let sql = format!(
                "MERGE INTO {name} t USING src s ON t.{key} = s.k \
                 WHEN MATCHED THEN UPDATE SET {col} = {val} \
                 WHEN NOT MATCHED THEN INSERT ({key}, {col}) VALUES (s.k, {val})"
            );
            floe::dml::execute(cat, &sql, Some(vec![src]))
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            return sql;
        }
        0 => {
            m.rows.retain(|row| !hit(row));
            format!("DELETE FROM {name} WHERE {key} % {k} = {r}")
        }
        1 => {
            let Some((id, c)) = others.get(rng.gen_range(0..others.len().max(1))).cloned() else {
                return "nothing (only id left)".into();
            };
            let v = rng.gen_range(-50..50i64);
            for row in m.rows.iter_mut().filter(|row| hit(row)) {
                row.insert(id, Some(v));
            }
            format!("UPDATE {name} SET {} = {v} WHERE {key} % {k} = {r}", c.name)
        }
        2 => {
            let options: std::collections::HashMap<String, String> =
                [("rewrite-all", "true"), ("min-input-files", "1")]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
            floe::maintenance::rewrite_data_files(cat, t, None, &options, None)
                .await
                .unwrap_or_else(|e| panic!("rewrite-data-files: {e}"));
            return "rewrite-data-files".into();
        }
        _ => return "nothing (only id left)".into(),
    };
    floe::dml::execute(cat, &sql, None)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    sql
}

async fn random_sequence(seed: u64, v3: bool, steps: usize) -> (tempfile::TempDir, Vec<Check>) {
    let (dir, cat) = sqlite_catalog();
    let ident = parse_ident("db.evolve").unwrap();
    let schema = floe::spec::parse_schema("id long not null, a int").unwrap();
    let mut c = floe::TableCreation::new(schema.clone());
    c.format_version = if v3 {
        floe::spec::FormatVersion::V3
    } else {
        floe::spec::FormatVersion::V2
    };
    c.partition_spec = floe::spec::parse_partition_spec("bucket(4, id)", &schema).unwrap();
    let mode = if seed % 2 == 0 {
        "copy-on-write"
    } else {
        "merge-on-read"
    };
    for p in ["write.delete.mode", "write.update.mode"] {
        c = c.with_property(p, mode);
    }
    let mut t = cat.create_table(&ident, c).await.unwrap();
    let mut m = Model {
        cols: vec![
            (
                0,
                Col {
                    name: "id".into(),
                    long: true,
                    default: None,
                },
            ),
            (
                1,
                Col {
                    name: "a".into(),
                    long: false,
                    default: None,
                },
            ),
        ],
        rows: vec![],
        next: 2,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next_id = 0i64;
    let mut snapshots = Vec::new();
    for step in 0..steps {
        let clause = pick(&mut rng, &mut m, v3);
        let changes = parse_alter_clause(&clause).unwrap();
        t = floe::txn::alter_table(&cat, &ident, &changes)
            .await
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {clause}: {e}"))
            .table;
        if !m.rows.is_empty() && rng.gen_bool(0.5) {
            let what = row_level(&mut rng, &mut m, &cat, &t, &mut next_id).await;
            t = cat.load_table(&ident).await.unwrap();
            let got = floe_rows(&t, None).await;
            assert_eq!(
                got,
                m.expected(),
                "seed {seed} step {step}: {what} after {clause}"
            );
        }
        let n = rng.gen_range(1..4);
        let b = rows(&mut rng, &mut m, next_id, n);
        next_id += n as i64;
        t = floe::txn::append(&cat, &t, [Ok(b)]).await.unwrap().table;
        let got = floe_rows(&t, None).await;
        assert_eq!(got, m.expected(), "seed {seed} step {step} after {clause}");
        snapshots.push(t.current_snapshot().unwrap().snapshot_id());
    }
    // Each snapshot reads with the schema current now (Iceberg readers project the table's
    // schema): floe writes what the peers must read.
    let mut checks = Vec::new();
    for (i, s) in snapshots
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 == 2 || *i + 1 == steps)
    {
        let expected = dir.path().join(format!("expected-{seed}-{i}.parquet"));
        floe_expected(&t, Some(*s), &expected).await;
        checks.push(Check {
            name: format!("evolution seed {seed} v{} step {i}", if v3 { 3 } else { 2 }),
            metadata: t.metadata_location().to_string(),
            snapshot_id: Some(*s),
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    (dir, checks)
}

#[tokio::test]
async fn random_alter_sequences_agree_with_the_model_and_the_peers() {
    let mut dirs = Vec::new();
    let mut checks = Vec::new();
    for seed in 0..6u64 {
        // v2 sequences go to the peers; v3 ones (with column defaults) are checked against
        // the model only.
        let (dir, c) = random_sequence(seed, false, 12).await;
        checks.extend(c);
        dirs.push(dir);
        let _ = random_sequence(100 + seed, true, 12).await;
    }
    if let Some(py) = peers_python() {
        peer_check(&py, dirs[0].path(), &checks);
    }
}

#[tokio::test]
async fn partition_sort_and_property_changes_then_peers_read() {
    let (dir, cat) = sqlite_catalog();
    let wh = dir.path();
    let ident = parse_ident("db.layout").unwrap();
    let mut c = floe::TableCreation::new(cat_schema());
    c.partition_spec = floe::spec::parse_partition_spec("day(ts)", &cat_schema()).unwrap();
    cat.create_table(&ident, c).await.unwrap();
    let batch = |start: i64| rows_like(&cat_schema(), start, 50);
    let mut t = cat.load_table(&ident).await.unwrap();
    t = floe::txn::append(&cat, &t, [Ok(batch(0))])
        .await
        .unwrap()
        .table;
    for clause in [
        "ADD PARTITION FIELD bucket(8, id) AS shard",
        "REPLACE PARTITION FIELD ts_day WITH hour(ts)",
        "WRITE ORDERED BY v DESC NULLS LAST, id",
        "SET TBLPROPERTIES ('write.delete.mode'='merge-on-read', 'commit.retry.num-retries'='7')",
        "UNSET TBLPROPERTIES ('commit.retry.num-retries')",
        "SET IDENTIFIER FIELDS id",
        "DROP PARTITION FIELD shard",
    ] {
        t = floe::txn::alter_table(&cat, &ident, &parse_alter_clause(clause).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{clause}: {e}"))
            .table;
        let start = t
            .current_snapshot()
            .map(|s| s.sequence_number())
            .unwrap_or(0)
            * 1000;
        t = floe::txn::append(&cat, &t, [Ok(batch(start))])
            .await
            .unwrap()
            .table;
    }
    let md = t.metadata();
    assert_eq!(md.partition_specs_iter().count(), 4);
    let spec: Vec<String> = md
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(spec, ["ts_hour"]);
    // Field ids of partition fields are never reused.
    let mut ids: Vec<i32> = md
        .partition_specs_iter()
        .flat_map(|s| {
            s.fields()
                .iter()
                .map(|f| (f.field_id, f.name.clone()))
                .collect::<Vec<_>>()
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_keys()
        .collect();
    ids.dedup();
    assert_eq!(ids, [1000, 1001, 1002]);
    assert_eq!(md.default_sort_order().fields.len(), 2);
    assert_eq!(
        md.properties()
            .get("write.distribution-mode")
            .map(String::as_str),
        Some("range")
    );
    assert_eq!(
        md.properties().get("write.delete.mode").map(String::as_str),
        Some("merge-on-read")
    );
    assert!(!md.properties().contains_key("commit.retry.num-retries"));
    assert_eq!(
        md.current_schema()
            .identifier_field_ids()
            .collect::<Vec<_>>(),
        [1]
    );
    // A DELETE after the layout changes, then every reader agrees.
    floe::dml::execute(&cat, "DELETE FROM db.layout WHERE v % 3 = 0", None)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let n = count(&scan_rows(&t, SnapshotSelector::Current).await);
    assert!(n > 0 && n < 400, "{n}");
    if let Some(py) = peers_python() {
        let expected = wh.join("expected.parquet");
        floe_expected(&t, None, &expected).await;
        peer_check(
            &py,
            wh,
            &[Check {
                name: "layout evolution".into(),
                metadata: t.metadata_location().to_string(),
                snapshot_id: None,
                expected: expected.to_string_lossy().to_string(),
                engines: None,
                refuse: None,
            }],
        );
    }
}

fn cat_schema() -> floe::spec::Schema {
    floe::spec::parse_schema("id long not null, ts timestamptz, v long").unwrap()
}

#[tokio::test]
async fn mistakes_are_refused_and_nothing_is_committed() {
    let (_dir, cat) = sqlite_catalog();
    let ident = parse_ident("db.bad").unwrap();
    let schema = floe::spec::parse_schema("id long not null, v int, d date, s string").unwrap();
    let mut c = floe::TableCreation::new(schema.clone());
    c.partition_spec = floe::spec::parse_partition_spec("bucket(4, d)", &schema).unwrap();
    c.sort_order = Some(floe::spec::parse_sort_order("s", &schema).unwrap());
    c.primary_key = vec!["id".into()];
    cat.create_table(&ident, c).await.unwrap();
    let before = cat
        .load_table(&ident)
        .await
        .unwrap()
        .metadata_location()
        .to_string();
    for (clause, why) in [
        ("DROP COLUMN id", "identifier field"),
        ("DROP COLUMN d", "partition field"),
        ("DROP COLUMN s", "sort key"),
        (
            "ALTER COLUMN v TYPE string",
            "cannot change from int to string",
        ),
        ("ALTER COLUMN s TYPE long", "cannot change from string"),
        ("ALTER COLUMN d TYPE timestamp", "format v3"),
        ("ALTER COLUMN id DROP NOT NULL", "identifier field"),
        ("ADD COLUMN x long NOT NULL", "no value"),
        ("ADD COLUMN x long DEFAULT 3", "format v3"),
        ("ADD COLUMN v long", "exists"),
        ("RENAME COLUMN v TO s", "exists"),
        ("ADD COLUMN y long AFTER nope", "no such sibling"),
        ("DROP COLUMN nope", "no column 'nope'"),
        ("ADD PARTITION FIELD bucket(4, d)", "already partitioned"),
        ("DROP PARTITION FIELD id", "not partitioned by it"),
        ("SET TBLPROPERTIES ('format-version'='1')", "downgraded"),
        (
            "SET TBLPROPERTIES ('write.delete.mdoe'='x')",
            "unknown table property",
        ),
        ("UNSET TBLPROPERTIES ('nope')", "no property 'nope'"),
        (
            "SET TBLPROPERTIES ('floe.tombstones'='x')",
            "cannot be set by ALTER",
        ),
        (
            "SET TBLPROPERTIES ('floe.merge.version-column'='v')",
            "cannot be changed after create",
        ),
        (
            "SET TBLPROPERTIES ('floe.sink.s.checkpoint'='one')",
            "not a checkpoint",
        ),
    ] {
        let changes = match parse_alter_clause(clause) {
            Ok(c) => c,
            Err(e) => panic!("{clause}: did not parse: {e}"),
        };
        let e = floe::txn::alter_table(&cat, &ident, &changes)
            .await
            .err()
            .unwrap_or_else(|| panic!("{clause}: accepted"));
        assert!(e.to_string().contains(why), "{clause}: {e}");
        let now = cat.load_table(&ident).await.unwrap();
        assert_eq!(
            now.metadata_location(),
            before,
            "{clause} committed something"
        );
    }
    // Several changes in one ALTER: one refused, none applied.
    let changes = vec![
        TableChange::AddColumn {
            path: "ok".into(),
            ty: "long".into(),
            required: false,
            default: None,
            comment: None,
            position: ColumnPosition::Last,
        },
        TableChange::DropColumn("id".into()),
    ];
    assert!(floe::txn::alter_table(&cat, &ident, &changes)
        .await
        .is_err());
    let now = cat.load_table(&ident).await.unwrap();
    assert_eq!(now.metadata_location(), before);
    // Field ids are never reused: a dropped then re-added column gets a new id.
    let t = floe::txn::alter_table(&cat, &ident, &parse_alter_clause("DROP COLUMN v").unwrap())
        .await
        .unwrap()
        .table;
    let last = t.metadata().last_column_id();
    let t = floe::txn::alter_table(
        &cat,
        &ident,
        &parse_alter_clause("ADD COLUMN v int").unwrap(),
    )
    .await
    .unwrap()
    .table;
    assert_eq!(
        t.metadata().current_schema().field_by_name("v").unwrap().id,
        last + 1
    );
}

#[tokio::test]
async fn a_concurrent_schema_change_fails_an_alter_planned_before_it() {
    let (_dir, cat) = sqlite_catalog();
    let ident = parse_ident("db.race").unwrap();
    cat.create_table(
        &ident,
        floe::TableCreation::new(floe::spec::parse_schema("id long not null, v int").unwrap()),
    )
    .await
    .unwrap();
    let stale = cat.load_table(&ident).await.unwrap();
    floe::txn::alter_table(
        &cat,
        &ident,
        &parse_alter_clause("ADD COLUMN w long").unwrap(),
    )
    .await
    .unwrap();
    // Planned on `stale`, committed after the other ALTER: refused, not merged blindly.
    let basis = floe::spec::evolution::Basis::of(
        stale.metadata(),
        &parse_alter_clause("DROP COLUMN v").unwrap(),
    );
    let now = cat.load_table(&ident).await.unwrap();
    assert_eq!(basis.changed_in(now.metadata()), Some("the schema"));
    // A property change re-applies after any concurrent commit.
    let basis = floe::spec::evolution::Basis::of(
        stale.metadata(),
        &parse_alter_clause("SET TBLPROPERTIES ('a'='1')").unwrap(),
    );
    assert_eq!(basis.changed_in(now.metadata()), None);
}

/// An unpartitioned, unsorted table clustered in place: ALTER to `bucket(4, key)` sorted by
/// key, then a sort rewrite of every file. Afterwards every live file is in the new spec,
/// stamped with the sort order and sorted end to end, the rows are unchanged, and the peers
/// read them.
#[tokio::test]
async fn alter_then_sort_rewrite_clusters_a_table_in_place() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &["create", "db.c", "--schema", "key long not null, v long"],
    );
    let mut rng = StdRng::seed_from_u64(11);
    let mut sum = 0i64;
    for f in 0..3 {
        let keys: Vec<i64> = (0..500).map(|_| rng.gen_range(0..10_000)).collect();
        sum += keys.iter().sum::<i64>();
        let b = RecordBatch::try_from_iter([
            ("key", Arc::new(Int64Array::from(keys.clone())) as ArrayRef),
            ("v", Arc::new(Int64Array::from(keys)) as ArrayRef),
        ])
        .unwrap();
        let p = d.path().join(format!("in{f}.parquet"));
        write_parquet(&p, &[b]);
        ok(&wh, &["append", "db.c", p.to_str().unwrap()]);
    }
    ok(
        &wh,
        &[
            "alter",
            "db.c",
            "--partition-by",
            "bucket(4, key)",
            "--sort-by",
            "key",
        ],
    );
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
    let cat = floe::Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let t = cat.load_table(&parse_ident("db.c").unwrap()).await.unwrap();
    let files = floe::scan::read_metadata_table(&t, floe::scan::MetadataTable::DataFiles, None)
        .await
        .unwrap();
    let spec = i32_column(&files, "spec_id");
    let order = i32_column(&files, "sort_order_id");
    let paths = files
        .column_by_name("file_path")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap()
        .clone();
    assert!(
        files.num_rows() >= 2 && files.num_rows() <= 4,
        "{}",
        files.num_rows()
    );
    for r in 0..files.num_rows() {
        assert_eq!(spec.value(r), t.metadata().default_partition_spec_id());
        assert_eq!(order.value(r), t.metadata().default_sort_order_id() as i32);
        let path = paths
            .value(r)
            .strip_prefix("file://")
            .unwrap_or(paths.value(r));
        let f = std::fs::File::open(path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        let mut keys = Vec::new();
        for b in reader {
            let b = b.unwrap();
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            keys.extend(k.values().iter().copied());
        }
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "{path} is not sorted end to end"
        );
    }
    let batches = scan_rows(&t, SnapshotSelector::Current).await;
    assert_eq!(count(&batches), 1500);
    assert_eq!(sum_i64(&batches, "key"), sum);
    if let Some(py) = peers_python() {
        let expected = d.path().join("expected.parquet");
        floe_expected(&t, None, &expected).await;
        peer_check(
            &py,
            d.path(),
            &[Check {
                name: "clustered in place".into(),
                metadata: t.metadata_location().to_string(),
                snapshot_id: None,
                expected: expected.to_string_lossy().to_string(),
                engines: None,
                refuse: None,
            }],
        );
    }
}
