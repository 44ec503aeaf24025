//! Evolution inside a struct of a table with data, against an independent model: random
//! sequences of member changes (add with a position and a v3 default, drop, re-add under a
//! dropped name, rename, widen, move) with rows appended (some with the whole struct null),
//! merge-on-read and copy-on-write deletes on members, filtered scans and a final compaction.
//! Members are tracked by a model id (what Iceberg's field ids are), so a member re-added
//! under an old name must read as its default, not as the old member's values. DuckDB,
//! pyiceberg and Spark read the v2 tables as floe does.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema as ArrowSchema};
use floe::scan::Scan;
use floe::spec::parse_alter_clause;
use floe::table::parse_ident;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::common::*;

#[derive(Clone, Debug)]
struct Member {
    name: String,
    long: bool,
    default: Option<i64>,
}

/// A row: its id, and the struct's members by model id (`None`: the struct is null).
type Row = (i64, Option<BTreeMap<u32, Option<i64>>>);

#[derive(Default)]
struct Model {
    members: Vec<(u32, Member)>,
    rows: Vec<Row>,
    next: u32,
    /// Names of dropped members (re-added under them now and then).
    dropped: Vec<String>,
}

/// A row as read: the id and the members in the table's current order.
type Seen = (i64, Option<Vec<Option<i64>>>);

impl Model {
    fn value(&self, row: &Row, at: usize) -> Option<i64> {
        let (id, m) = &self.members[at];
        let s = row.1.as_ref()?;
        match s.get(id) {
            Some(v) => *v,
            None => m.default,
        }
    }

    fn seen(&self, row: &Row) -> Seen {
        (
            row.0,
            row.1.as_ref().map(|_| {
                (0..self.members.len())
                    .map(|i| self.value(row, i))
                    .collect()
            }),
        )
    }

    fn expected(&self, keep: impl Fn(&Row) -> bool) -> Vec<Seen> {
        let mut out: Vec<Seen> = self
            .rows
            .iter()
            .filter(|r| keep(r))
            .map(|r| self.seen(r))
            .collect();
        out.sort();
        out
    }

    /// Whether some row's struct is present but holds none of the current members as
    /// written (Iceberg Java reads it as NULL where its file lacks them all; a copy-on-write
    /// rewrite may have written them since, so this over-approximates).
    fn java_reads_null(&self) -> bool {
        self.rows.iter().any(|r| {
            r.1.as_ref()
                .is_some_and(|s| self.members.iter().all(|(id, _)| !s.contains_key(id)))
        })
    }

    fn index(&self, name: &str) -> usize {
        self.members
            .iter()
            .position(|(_, m)| m.name == name)
            .unwrap()
    }
}

fn long_value(c: &ArrayRef, r: usize) -> Option<i64> {
    if c.is_null(r) {
        return None;
    }
    if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
        Some(a.value(r))
    } else if let Some(a) = c.as_any().downcast_ref::<Int32Array>() {
        Some(a.value(r) as i64)
    } else {
        panic!("unexpected member type {:?}", c.data_type())
    }
}

async fn floe_rows(scan: Scan) -> Vec<Seen> {
    let mut out = Vec::new();
    for b in scan.to_batches().await.unwrap() {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let s = b.column(1).as_any().downcast_ref::<StructArray>().unwrap();
        for r in 0..b.num_rows() {
            let members =
                (!s.is_null(r)).then(|| s.columns().iter().map(|c| long_value(c, r)).collect());
            out.push((ids.value(r), members));
        }
    }
    out.sort();
    out
}

/// A member change the model says is legal, applied to the model; the ALTER clause.
fn pick(rng: &mut StdRng, m: &mut Model, v3: bool) -> String {
    let n = m.members.len();
    loop {
        match rng.gen_range(0..7) {
            0 | 1 => {
                let id = m.next;
                m.next += 1;
                let name = if !m.dropped.is_empty() && rng.gen_bool(0.5) {
                    m.dropped.remove(rng.gen_range(0..m.dropped.len()))
                } else {
                    format!("c{id}")
                };
                let long = rng.gen_bool(0.5);
                let default = (v3 && rng.gen_bool(0.6)).then(|| rng.gen_range(-5..5i64));
                let at = rng.gen_range(0..=n);
                let (pos, idx) = match at {
                    0 => (" FIRST".to_string(), 0),
                    i if i == n => (String::new(), n),
                    i => (format!(" AFTER {}", m.members[i - 1].1.name), i),
                };
                let dflt = default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default();
                let ty = if long { "long" } else { "int" };
                m.members.insert(
                    idx,
                    (
                        id,
                        Member {
                            name: name.clone(),
                            long,
                            default,
                        },
                    ),
                );
                return format!("ADD COLUMN s.{name} {ty}{dflt}{pos}");
            }
            2 if n > 1 => {
                let (_, c) = m.members.remove(rng.gen_range(0..n));
                m.dropped.push(c.name.clone());
                return format!("DROP COLUMN s.{}", c.name);
            }
            3 => {
                let i = rng.gen_range(0..n);
                let to = format!("r{}", m.next);
                m.next += 1;
                let from = std::mem::replace(&mut m.members[i].1.name, to.clone());
                return format!("RENAME COLUMN s.{from} TO {to}");
            }
            4 => {
                let Some(i) = (0..n).find(|&i| !m.members[i].1.long) else {
                    continue;
                };
                m.members[i].1.long = true;
                return format!("ALTER COLUMN s.{} TYPE long", m.members[i].1.name);
            }
            5 if n > 1 => {
                let c = m.members.remove(rng.gen_range(0..n));
                let name = c.1.name.clone();
                let at = rng.gen_range(0..=m.members.len());
                let clause = if at == 0 {
                    format!("ALTER COLUMN s.{name} FIRST")
                } else {
                    format!("ALTER COLUMN s.{name} AFTER {}", m.members[at - 1].1.name)
                };
                m.members.insert(at, c);
                return clause;
            }
            _ => continue,
        }
    }
}

/// Rows for the model's current members (a fifth with the struct null), added to the model.
fn rows(rng: &mut StdRng, m: &mut Model, start: i64, count: usize) -> RecordBatch {
    // A member with a (v3) default is now and then left out of the input struct: it takes
    // its write-default (the model reads a member a row lacks as its default). At least one
    // member stays in the input.
    let mut absent: Vec<u32> = m
        .members
        .iter()
        .filter(|(_, c)| c.default.is_some() && rng.gen_bool(0.3))
        .map(|(mid, _)| *mid)
        .collect();
    if absent.len() == m.members.len() {
        absent.pop();
    }
    let mut new: Vec<Row> = (0..count)
        .map(|r| {
            let id = start + r as i64;
            if rng.gen_bool(0.2) {
                return (id, None);
            }
            let values = m
                .members
                .iter()
                .filter(|(mid, _)| !absent.contains(mid))
                .map(|(mid, _)| {
                    let v = (!rng.gen_bool(0.2)).then(|| rng.gen_range(-1000..1000));
                    (*mid, v)
                })
                .collect();
            (id, Some(values))
        })
        .collect();
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (mid, c) in m.members.iter().filter(|(mid, _)| !absent.contains(mid)) {
        let v: Vec<Option<i64>> = new
            .iter()
            .map(|r| r.1.as_ref().and_then(|s| s[mid]))
            .collect();
        if c.long {
            fields.push(Field::new(&c.name, DataType::Int64, true));
            arrays.push(Arc::new(Int64Array::from(v)));
        } else {
            fields.push(Field::new(&c.name, DataType::Int32, true));
            arrays.push(Arc::new(Int32Array::from(
                v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>(),
            )));
        }
    }
    let valid = NullBuffer::from(new.iter().map(|r| r.1.is_some()).collect::<Vec<_>>());
    let s = StructArray::try_new(Fields::from(fields.clone()), arrays, Some(valid)).unwrap();
    let schema = ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Struct(Fields::from(fields)), true),
    ]);
    let ids: Vec<i64> = new.iter().map(|r| r.0).collect();
    let b = RecordBatch::try_new(
        Arc::new(schema),
        vec![Arc::new(Int64Array::from(ids)), Arc::new(s)],
    )
    .unwrap();
    m.rows.append(&mut new);
    b
}

async fn random_sequence(seed: u64, v3: bool, steps: usize) -> (tempfile::TempDir, Vec<Check>) {
    let (dir, cat) = sqlite_catalog();
    let checks = run_sequence(&cat, "db", dir.path(), seed, v3, steps).await;
    (dir, checks)
}

/// One random sequence on a table of `cat` in namespace `ns`; the peers' checks of some of
/// its snapshots (their expected rows written under `work`).
/// `DELETE WHERE s.<name> > bound` on the table and the model.
async fn delete_where(
    cat: &floe::catalog::Catalog,
    t: &floe::Table,
    m: &mut Model,
    name: &str,
    bound: i64,
    ctx: &str,
) -> floe::Table {
    let cond = format!("s.{name} > {bound}");
    let p = floe::expr::parse_expr(&cond).unwrap();
    let t = floe::dml::delete(cat, t, Some(&p))
        .await
        .unwrap_or_else(|e| panic!("{ctx}: DELETE WHERE {cond}: {e}"))
        .table;
    let i = m.index(name);
    let gone: Vec<bool> = m
        .rows
        .iter()
        .map(|r| m.value(r, i).is_some_and(|v| v > bound))
        .collect();
    let mut k = gone.iter();
    m.rows.retain(|_| !k.next().unwrap());
    t
}

async fn run_sequence(
    cat: &floe::catalog::Catalog,
    ns: &str,
    work: &std::path::Path,
    seed: u64,
    v3: bool,
    steps: usize,
) -> Vec<Check> {
    let ident = parse_ident(&format!("{ns}.nested_{seed}")).unwrap();
    let schema = floe::spec::parse_schema("id long not null, s struct<a: int, b: long>").unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = floe::TableCreation::new(schema.clone());
    c.format_version = if v3 {
        floe::spec::FormatVersion::V3
    } else {
        floe::spec::FormatVersion::V2
    };
    c.partition_spec = floe::spec::parse_partition_spec("bucket(2, id)", &schema).unwrap();
    let mode = if rng.gen_bool(0.5) {
        "merge-on-read"
    } else {
        "copy-on-write"
    };
    c.properties
        .insert("write.delete.mode".into(), mode.to_string());
    let mut t = cat.create_table(&ident, c).await.unwrap();
    let member = |name: &str, long| Member {
        name: name.into(),
        long,
        default: None,
    };
    let mut m = Model {
        members: vec![(0, member("a", false)), (1, member("b", true))],
        next: 2,
        ..Model::default()
    };
    let mut next_id = 0i64;
    let b = rows(&mut rng, &mut m, next_id, 6);
    next_id += 6;
    t = floe::txn::append(cat, &t, [Ok(b)]).await.unwrap().table;
    let mut snapshots = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} v3 {v3} {mode} step {step}");
        let clause = pick(&mut rng, &mut m, v3);
        t = floe::txn::alter_table(cat, &ident, &parse_alter_clause(&clause).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {clause}: {e}"))
            .table;
        assert_eq!(
            floe_rows(Scan::new(&t)).await,
            m.expected(|_| true),
            "{ctx} after {clause}"
        );
        if rng.gen_bool(0.3) {
            // Right after the ALTER: the last snapshot still has the old schema.
            let at = rng.gen_range(0..m.members.len());
            let name = m.members[at].1.name.clone();
            t = delete_where(cat, &t, &mut m, &name, rng.gen_range(-300..600), &ctx).await;
            assert_eq!(
                floe_rows(Scan::new(&t)).await,
                m.expected(|_| true),
                "{ctx}: DELETE right after {clause}"
            );
        }
        let n = rng.gen_range(1..5);
        let b = rows(&mut rng, &mut m, next_id, n);
        next_id += n as i64;
        t = floe::txn::append(cat, &t, [Ok(b)]).await.unwrap().table;
        // A filter on a member (through the reader's own filtering).
        let at = rng.gen_range(0..m.members.len());
        let (name, bound) = (m.members[at].1.name.clone(), rng.gen_range(-600..600));
        let cond = format!("s.{name} < {bound}");
        let filtered = Scan::new(&t).filter(floe::expr::parse_expr(&cond).unwrap());
        assert_eq!(
            floe_rows(filtered).await,
            m.expected(|r| m.value(r, at).is_some_and(|v| v < bound)),
            "{ctx}: WHERE {cond}"
        );
        if rng.gen_bool(0.3) {
            t = delete_where(cat, &t, &mut m, &name, bound + 300, &ctx).await;
        }
        assert_eq!(
            floe_rows(Scan::new(&t)).await,
            m.expected(|_| true),
            "{ctx} after rows"
        );
        snapshots.push((
            t.current_snapshot().unwrap().snapshot_id(),
            m.java_reads_null(),
        ));
    }
    // Compaction reads every old file through the projection and writes the current shape.
    let opts = [("rewrite-all".to_string(), "true".to_string())].into();
    let r = floe::maintenance::rewrite_data_files(cat, &t, None, &opts, None)
        .await
        .unwrap();
    t = cat.load_table(&ident).await.unwrap();
    assert!(
        r.rewritten_data_files_count > 0,
        "seed {seed}: nothing rewritten"
    );
    assert_eq!(
        floe_rows(Scan::new(&t)).await,
        m.expected(|_| true),
        "seed {seed} v3 {v3} after compaction"
    );
    snapshots.push((t.current_snapshot().unwrap().snapshot_id(), false));
    let mut checks = Vec::new();
    for (i, (s, java_null)) in snapshots.iter().enumerate().filter(|(i, _)| i % 4 == 3) {
        let expected = work.join(format!("expected-{seed}-{i}.parquet"));
        floe_expected(&t, Some(*s), &expected).await;
        checks.push(Check {
            name: format!("nested evolution seed {seed} step {i}"),
            metadata: t.metadata_location().to_string(),
            snapshot_id: Some(*s),
            expected: expected.to_string_lossy().to_string(),
            // See docs/src/testing.md, "Known differences": Java reads such structs as NULL.
            engines: java_null.then(|| vec!["duckdb".into(), "pyiceberg".into()]),
            refuse: None,
        });
    }
    checks
}

#[tokio::test]
async fn random_struct_member_changes_agree_with_the_model_and_the_peers() {
    let mut dirs = Vec::new();
    let mut checks = Vec::new();
    for seed in 0..4u64 {
        // v2 tables go to the peers; v3 ones (with member defaults) to the model only.
        let (dir, c) = random_sequence(seed, false, 10).await;
        checks.extend(c);
        dirs.push(dir);
        let _ = random_sequence(200 + seed, true, 10).await;
    }
    if let Some(py) = peers_python() {
        peer_check(&py, dirs[0].path(), &checks);
    }
}

/// The same sequences on S3: remote files go through the ranged reader, which projects
/// by field id as the local one does (checked against the model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_struct_member_changes_on_s3_agree_with_the_model() {
    let Some(env) = crate::s3::s3_env() else {
        return;
    };
    let Some(c) = crate::s3::s3_catalog_of(&env, crate::s3::CatalogKind::Sqlite) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    for (seed, v3) in [(300u64, true), (301, false)] {
        run_sequence(&c.cat, &c.ns, work.path(), seed, v3, 6).await;
    }
}
