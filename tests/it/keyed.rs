//! Keyed tables: a primary key stored as the schema's identifier fields, as Flink, pyiceberg's
//! `upsert` and Spark's `SET IDENTIFIER FIELDS` read it.

use crate::catalog::pyice;
use crate::common::*;

#[test]
fn a_primary_key_is_the_schemas_identifier_fields_for_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.users",
            "--schema",
            "user_id long not null, region string not null, plan string, ver long",
            "--primary-key",
            "region,USER_ID",
            "--format-version",
            "3",
        ],
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "db.users", "--json"])).unwrap();
    assert_eq!(
        v["primary_key"],
        serde_json::json!(["region", "user_id"]),
        "{v}"
    );
    let ids = v["schema"]["identifier-field-ids"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(ids, 2, "{v}");
    assert!(ok(&wh, &["describe", "db.users"]).contains("primary key   region, user_id"));
    // pyiceberg opens the table through the same SQLite catalog and sees the same key.
    let uri = format!("sqlite:///{}", wh.join("catalog.db").display());
    if let Some(listed) = pyice(&["list", &uri, wh.to_str().unwrap()]) {
        let t = &listed["tables"][0];
        assert_eq!(
            t["identifier_fields"],
            serde_json::json!(["region", "user_id"]),
            "{listed}"
        );
    }
}

#[test]
fn bad_primary_keys_are_refused_and_create_nothing() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let schema = "id long not null, opt long, d double not null, tags list<string>";
    for (key, why) in [
        ("opt", "must be required"),
        ("nope", "no such column"),
        ("d", "float and double"),
        ("tags", "primitive"),
        ("id,id", "named twice"),
    ] {
        let o = floe(
            &wh,
            &["create", "db.t", "--schema", schema, "--primary-key", key],
        );
        assert_eq!(o.status.code(), Some(2), "{key}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why) && err.contains("db.t"), "{key}: {err}");
        // Refused before the catalog is opened: not even the catalog file is made.
        assert!(!wh.exists(), "{key}: left {:?}", paths_under(&wh));
    }
}

// ------------------------------------------------------------------ the keyed upsert
//
// Every batch applied by `floe::keyed::upsert` is checked, right after it commits, against an
// independent model of ClickHouse's ReplacingMergeTree(ver, is_deleted) rule (written from
// the rule, below), including the upsert's counters and the tombstone count. ClickHouse
// itself (chdb, tools/peers/chdb_replacing.py) loads the same Parquet change files into a real
// ReplacingMergeTree and its `FINAL` rows after every batch must be the same; on v2 tables
// it also reads floe's table at every snapshot (icebergLocal). DuckDB, pyiceberg and Spark
// read the live rows at the end of each scenario (one peer_check per test).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use floe::catalog::{Catalog, TableCreation};
use floe::keyed::{ChangeBatch, UpsertOptions, UpsertResult};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_schema, FormatVersion, TableIdent};
use floe::table::parse_ident;
use floe::Table;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const KEYED_DDL: &str = "user_id long not null, plan string, score long, ver long, is_deleted int";
const COLUMNS: [&str; 5] = ["user_id", "plan", "score", "ver", "is_deleted"];
/// The composite-key table: key (region, user_id); a model key k is region
/// `REGIONS[k mod 3]`, user_id `k div 3`.
const COMPOSITE_DDL: &str =
    "region string not null, user_id long not null, plan string, score long, ver long, is_deleted int";
const COMPOSITE_COLUMNS: [&str; 6] = ["region", "user_id", "plan", "score", "ver", "is_deleted"];
const REGIONS: [&str; 3] = ["eu-west", "ap", "us"];

/// A composite-key row (region, user_id, ...) as a model row (key, ...).
fn from_composite(mut r: Row) -> Row {
    let region = r.remove(0);
    let i = REGIONS.iter().position(|x| region == json!(x)).unwrap() as i64;
    r[0] = json!(r[0].as_i64().unwrap() * 3 + i);
    r
}

/// A row as compared: the values of [`COLUMNS`] as JSON.
type Row = Vec<Value>;

/// One change: an upsert of the whole row, or a delete of its key.
#[derive(Clone, Debug, PartialEq)]
struct Change {
    key: i64,
    ver: i64,
    del: bool,
    plan: Option<String>,
    score: Option<i64>,
}

/// An upsert of `key` at version `ver`.
fn up(key: i64, ver: i64, plan: &str) -> Change {
    Change {
        key,
        ver,
        del: false,
        plan: Some(plan.to_string()),
        score: Some((key * 1000).wrapping_add(ver)),
    }
}

/// A delete of `key` at version `ver`.
fn del(key: i64, ver: i64) -> Change {
    Change {
        key,
        ver,
        del: true,
        plan: None,
        score: None,
    }
}

impl Change {
    fn row(&self) -> Row {
        vec![
            json!(self.key),
            json!(self.plan),
            json!(self.score),
            json!(self.ver),
            json!(self.del as i32),
        ]
    }
}

/// Changes as one Arrow batch (the table's columns; `is_deleted` 0/1).
fn part_batch(changes: &[Change]) -> RecordBatch {
    keyed_batch(changes, false)
}

/// Changes as one Arrow batch of the plain or the composite-key table.
fn keyed_batch(changes: &[Change], composite: bool) -> RecordBatch {
    if composite {
        let b = part_batch(changes);
        let region = StringArray::from_iter_values(
            changes
                .iter()
                .map(|c| REGIONS[c.key.rem_euclid(3) as usize]),
        );
        let id = Int64Array::from_iter_values(changes.iter().map(|c| c.key.div_euclid(3)));
        let mut cols: Vec<(&str, ArrayRef)> =
            vec![("region", Arc::new(region)), ("user_id", Arc::new(id))];
        for n in &COLUMNS[1..] {
            cols.push((n, b.column(b.schema().index_of(n).unwrap()).clone()));
        }
        return RecordBatch::try_from_iter(cols).unwrap();
    }
    RecordBatch::try_from_iter(vec![
        (
            "user_id",
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.key))) as ArrayRef,
        ),
        (
            "plan",
            Arc::new(StringArray::from_iter(
                changes.iter().map(|c| c.plan.as_deref()),
            )) as _,
        ),
        (
            "score",
            Arc::new(Int64Array::from_iter(changes.iter().map(|c| c.score))) as _,
        ),
        (
            "ver",
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.ver))) as _,
        ),
        (
            "is_deleted",
            Arc::new(Int32Array::from_iter_values(
                changes.iter().map(|c| c.del as i32),
            )) as _,
        ),
    ])
    .unwrap()
}

/// How a part's file is laid out.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Shape {
    /// Every column, in the table's order.
    Full,
    /// No `score` column (its changes carry none: a missing optional column is NULL, for
    /// ClickHouse as for a full-row upsert), the others in another order.
    NoScore,
}

fn shaped_batch(changes: &[Change], shape: Shape, composite: bool) -> RecordBatch {
    let b = keyed_batch(changes, composite);
    match shape {
        Shape::Full => b,
        Shape::NoScore => {
            assert!(changes.iter().all(|c| c.score.is_none()));
            let s = b.schema();
            let idx: Vec<usize> = ["ver", "is_deleted", "user_id", "plan", "region"]
                .iter()
                .filter_map(|n| s.index_of(n).ok())
                .collect();
            b.project(&idx).unwrap()
        }
    }
}

/// The ReplacingMergeTree(ver, is_deleted) rule, from its definition: per key the change with
/// the highest version wins; among equal versions the later arrival (a later batch, a later
/// part of a batch, a later row of a part). A winning delete hides the key but keeps its
/// version (a tombstone), so older changes arriving later stay ignored.
#[derive(Default, Clone)]
struct Model {
    /// key -> (version, deleted, the winning change)
    state: BTreeMap<i64, (i64, bool, Change)>,
    /// sink -> committed checkpoint
    checkpoints: HashMap<String, i64>,
}

/// What a batch does per key, as the upsert reports it.
#[derive(Debug, Default, PartialEq, Clone, Copy)]
struct Counts {
    keys: u64,
    inserted: u64,
    updated: u64,
    deleted: u64,
    deleted_absent: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.keys += o.keys;
        self.inserted += o.inserted;
        self.updated += o.updated;
        self.deleted += o.deleted;
        self.deleted_absent += o.deleted_absent;
        self.ignored += o.ignored;
    }

    fn of(r: &UpsertResult) -> Self {
        Counts {
            keys: r.keys,
            inserted: r.inserted,
            updated: r.updated,
            deleted: r.deleted,
            deleted_absent: r.deleted_absent,
            ignored: r.ignored,
        }
    }

    /// The counters of `floe upsert --json` (the JSON vocabulary's `*_count` names).
    fn of_json(v: &Value) -> Self {
        Counts {
            keys: json_count(v, "keys_count"),
            inserted: json_count(v, "inserted_records_count"),
            updated: json_count(v, "updated_records_count"),
            deleted: json_count(v, "deleted_records_count"),
            deleted_absent: json_count(v, "deleted_absent_keys_count"),
            ignored: json_count(v, "stale_records_count"),
        }
    }
}

fn json_count(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

impl Model {
    /// Applies one batch (parts in arrival order). The counters describe each key's winning
    /// change of the batch against the state before the batch.
    fn apply(&mut self, parts: &[Vec<Change>]) -> Counts {
        let mut winners: BTreeMap<i64, &Change> = BTreeMap::new();
        for c in parts.iter().flatten() {
            match winners.get(&c.key) {
                Some(w) if w.ver > c.ver => {}
                _ => {
                    winners.insert(c.key, c);
                }
            }
        }
        let mut n = Counts {
            keys: winners.len() as u64,
            ..Counts::default()
        };
        for (k, w) in &winners {
            match self.state.get(k) {
                Some((v, _, _)) if *v > w.ver => n.ignored += 1,
                Some((_, false, _)) if w.del => n.deleted += 1,
                Some((_, false, _)) => n.updated += 1,
                _ if w.del => n.deleted_absent += 1,
                _ => n.inserted += 1,
            }
        }
        // The state itself: change after change, in arrival order.
        for c in parts.iter().flatten() {
            match self.state.get(&c.key) {
                Some((v, _, _)) if *v > c.ver => {}
                _ => {
                    self.state.insert(c.key, (c.ver, c.del, c.clone()));
                }
            }
        }
        n
    }

    fn live(&self) -> Vec<Change> {
        self.state
            .values()
            .filter(|(_, d, _)| !d)
            .map(|(_, _, c)| c.clone())
            .collect()
    }

    fn live_rows(&self) -> Vec<Row> {
        self.live().iter().map(Change::row).collect()
    }

    fn tombstones(&self) -> u64 {
        self.state.values().filter(|(_, d, _)| *d).count() as u64
    }
}

fn sort_rows(rows: &mut [Row]) {
    rows.sort_by(|a, b| {
        (
            a[0].as_i64(),
            a.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        )
            .cmp(&(b[0].as_i64(), b.iter().map(|v| v.to_string()).collect()))
    });
}

/// floe's rows of `t` (at `snapshot`, else the current one), sorted by key.
async fn floe_rows(t: &Table, snapshot: Option<i64>) -> Vec<Row> {
    let composite = t
        .metadata()
        .current_schema()
        .field_by_name("region")
        .is_some();
    let names: &[&str] = if composite {
        &COMPOSITE_COLUMNS
    } else {
        &COLUMNS
    };
    let mut s = Scan::new(t);
    if let Some(id) = snapshot {
        s = s.snapshot(SnapshotSelector::Id(id));
    }
    let mut rows = Vec::new();
    for b in s.to_batches().await.unwrap() {
        let cols: Vec<ArrayRef> = names
            .iter()
            .map(|n| {
                let c = b.column(b.schema().index_of(n).unwrap());
                let to = if *n == "plan" || *n == "region" {
                    DataType::Utf8
                } else {
                    DataType::Int64
                };
                arrow::compute::cast(c, &to).unwrap()
            })
            .collect();
        for i in 0..b.num_rows() {
            let row: Row = cols
                .iter()
                .map(|c| {
                    if c.is_null(i) {
                        Value::Null
                    } else if let Some(a) = c.as_any().downcast_ref::<StringArray>() {
                        json!(a.value(i))
                    } else {
                        json!(c.as_any().downcast_ref::<Int64Array>().unwrap().value(i))
                    }
                })
                .collect();
            rows.push(if composite { from_composite(row) } else { row });
        }
    }
    sort_rows(&mut rows);
    rows
}

/// Panics unless `want` and `got` hold the same rows, naming the keys that differ.
fn assert_rows(want: &[Row], got: &[Row], what: &str) {
    if want == got {
        return;
    }
    let by_key = |rows: &[Row]| {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in rows {
            m.entry(r[0].to_string())
                .or_default()
                .push(Value::Array(r.clone()).to_string());
        }
        m
    };
    let (w, g) = (by_key(want), by_key(got));
    let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| w.get(*k) != g.get(*k))
        .map(|k| format!("  key {k}: expected {:?}, got {:?}", w.get(k), g.get(k)))
        .collect();
    panic!(
        "{what}: {} rows expected, {} got; {} keys differ:\n{}",
        want.len(),
        got.len(),
        diffs.len(),
        diffs
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A batch applied to a table: its files (for ClickHouse), the model's rows after it and the
/// snapshot it left.
#[derive(Clone)]
struct Applied {
    files: Vec<String>,
    live: Vec<Row>,
    snapshot: Option<i64>,
}

/// One keyed table under test, with its model.
struct Run {
    label: String,
    cat: Catalog,
    ident: TableIdent,
    table: Table,
    work: PathBuf,
    model: Model,
    step: usize,
    applied: Vec<Applied>,
    checks: Vec<Check>,
    v2: bool,
    upsert_secs: f64,
    totals: Counts,
    /// Batches go through a `KeyedWriter` per sink (its key index) instead of `upsert`.
    writer: bool,
    writers: HashMap<Option<String>, floe::keyed::KeyedWriter>,
    /// In writer mode, every n-th batch goes through `upsert` (another writer).
    external_every: Option<usize>,
    /// Compare ClickHouse's FINAL (off for a second run of batches already compared).
    chdb_final: bool,
    /// Shapes of the next batch's parts (default: all full).
    shapes: Vec<Shape>,
    /// The composite-key table (region, user_id).
    composite: bool,
    /// Batches are distributed upserts: each batch's changes (in arrival order) cut at
    /// random into 1 to 4 tasks, each staged ([`floe::keyed::stage_upsert`]), then
    /// committed at once.
    tasks: Option<StdRng>,
}

async fn keyed_table(
    cat: &Catalog,
    ident: &TableIdent,
    fv: FormatVersion,
    mode: &str,
    partition: Option<&str>,
) -> Table {
    let composite =
        partition.is_some_and(|p| p.contains("region")) || ident.name().contains("composite");
    let (ddl, key) = if composite {
        (
            COMPOSITE_DDL,
            vec!["region".to_string(), "user_id".to_string()],
        )
    } else {
        (KEYED_DDL, vec!["user_id".to_string()])
    };
    let schema = parse_schema(ddl).unwrap();
    let mut c = TableCreation::new(schema.clone())
        .with_primary_key(&key)
        .with_format_version(fv)
        .with_property("floe.merge.version-column", "ver")
        .with_property("floe.merge.delete-column", "is_deleted");
    for p in ["write.merge.mode", "write.update.mode", "write.delete.mode"] {
        c = c.with_property(p, mode);
    }
    if let Some(p) = partition {
        c = c.with_partition_spec(floe::spec::parse_partition_spec(p, &schema).unwrap());
    }
    // Keyed v2 tables default to partition-scoped position deletes; a table named
    // `*_file_deletes` keeps Java's default of one delete file per data file.
    if ident.name().ends_with("_file_deletes") {
        c = c.with_property("write.delete.granularity", "file");
    }
    let t = cat.create_table(ident, c).await.unwrap();
    let granularity = t.metadata().properties().get("write.delete.granularity");
    let want = match fv {
        FormatVersion::V2 if !ident.name().ends_with("_file_deletes") => Some("partition"),
        FormatVersion::V2 => Some("file"),
        _ => None,
    };
    assert_eq!(granularity.map(String::as_str), want, "{ident}");
    t
}

impl Run {
    async fn new(cat: &Catalog, work: &Path, label: &str, fv: FormatVersion, mode: &str) -> Run {
        Self::with(cat, work, label, fv, mode, None, false).await
    }

    async fn with(
        cat: &Catalog,
        work: &Path,
        label: &str,
        fv: FormatVersion,
        mode: &str,
        partition: Option<&str>,
        writer: bool,
    ) -> Run {
        let ident = parse_ident(&format!("keyed.{label}")).unwrap();
        let table = keyed_table(cat, &ident, fv, mode, partition).await;
        let composite = table
            .metadata()
            .current_schema()
            .field_by_name("region")
            .is_some();
        Run {
            label: label.to_string(),
            cat: cat.clone(),
            ident,
            table,
            work: work.to_path_buf(),
            model: Model::default(),
            step: 0,
            applied: Vec::new(),
            checks: Vec::new(),
            v2: fv == FormatVersion::V2,
            upsert_secs: 0.0,
            totals: Counts::default(),
            writer,
            writers: HashMap::new(),
            external_every: None,
            chdb_final: true,
            shapes: Vec::new(),
            composite,
            tasks: None,
        }
    }

    /// The batch as a distributed upsert: its parts cut into tasks (each task's rows
    /// contiguous in arrival order), staged in turn, committed together; nothing staged is
    /// left behind.
    async fn staged(
        &mut self,
        batches: Vec<RecordBatch>,
        opts: &UpsertOptions,
    ) -> floe::Result<UpsertResult> {
        let rng = self.tasks.as_mut().unwrap();
        let rows: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
        let total: usize = rows.iter().map(|b| b.num_rows()).sum();
        let n = rng.gen_range(1..=4usize).min(total.max(1));
        let mut cuts: Vec<usize> = (0..n - 1).map(|_| rng.gen_range(0..=total)).collect();
        cuts.sort_unstable();
        cuts.push(total);
        let mut tasks: Vec<ChangeBatch> = vec![ChangeBatch::new(); cuts.len()];
        let (mut at, mut task) = (0usize, 0usize);
        for (i, b) in rows.iter().enumerate() {
            let mut from = 0;
            while from < b.num_rows() {
                while cuts[task] <= at && task + 1 < cuts.len() {
                    task += 1;
                }
                let len = (cuts[task] - at).min(b.num_rows() - from).max(1);
                tasks[task].push(format!("part {}", i + 1), b.slice(from, len));
                (from, at) = (from + len, at + len);
            }
        }
        let mut staged = Vec::new();
        let job = floe::txn::StagingJob::new();
        for t in &tasks {
            staged.push(floe::pending::stage_upsert(&self.table, t, &job).await?);
        }
        let r = commit_upserts(&self.cat, &staged, opts).await;
        let t = self.cat.load_table(&self.ident).await.unwrap();
        let left = floe::maintenance::discard_staging_job(&self.cat, &t, &job)
            .await
            .unwrap();
        assert!(
            left.is_empty(),
            "{} batch {}: the job's files left after its commit: {left:?}",
            self.label,
            self.step
        );
        let orphans = floe::maintenance::remove_orphan_files(&self.cat, &t, Some(i64::MAX), true)
            .await
            .unwrap();
        let staged_left: Vec<&String> = orphans
            .orphan_file_locations
            .iter()
            // Superseded metadata and tombstone files are not the staging's.
            .filter(|p| p.contains("/metadata/staged-") || !p.contains("/metadata/"))
            .collect();
        assert!(
            staged_left.is_empty(),
            "{} batch {}: a distributed upsert left {staged_left:?}",
            self.label,
            self.step
        );
        r
    }

    /// Writes the parts of the next batch as Parquet files (what ClickHouse loads).
    fn files(&mut self, parts: &[Vec<Change>]) -> (ChangeBatch, Vec<RecordBatch>, Vec<String>) {
        self.step += 1;
        let shapes = std::mem::take(&mut self.shapes);
        let mut batch = ChangeBatch::new();
        let mut batches = Vec::new();
        let mut files = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let f = self.work.join(format!(
                "{}-b{:02}-p{}.parquet",
                self.label,
                self.step,
                i + 1
            ));
            let b = shaped_batch(
                p,
                shapes.get(i).copied().unwrap_or(Shape::Full),
                self.composite,
            );
            write_parquet(&f, std::slice::from_ref(&b));
            batch.push(
                f.file_name().unwrap().to_string_lossy().to_string(),
                b.clone(),
            );
            batches.push(b);
            files.push(f.to_string_lossy().to_string());
        }
        (batch, batches, files)
    }

    /// Applies one batch and checks the table against the model.
    async fn batch(&mut self, parts: Vec<Vec<Change>>, sink: Option<(&str, i64)>) -> UpsertResult {
        let (batch, batches, files) = self.files(&parts);
        let opts = match sink {
            Some((s, n)) => UpsertOptions::default().with_checkpoint(s, n),
            None => UpsertOptions::default(),
        };
        let before = self.table.metadata_location().to_string();
        let t0 = Instant::now();
        let external = self.external_every.is_some_and(|n| self.step % n == 0);
        let r = if self.writer && !external {
            let (cat, ident) = (&self.cat, &self.ident);
            let w = self
                .writers
                .entry(sink.map(|(s, _)| s.to_string()))
                .or_insert_with(|| {
                    let w = floe::keyed::KeyedWriter::new(cat, ident.clone());
                    match sink {
                        Some((s, _)) => w.with_sink_id(s),
                        None => w,
                    }
                });
            w.apply(batches, sink.map(|(_, n)| n)).await
        } else if self.tasks.is_some() {
            self.staged(batches, &opts).await
        } else {
            floe::keyed::upsert(&self.cat, &self.ident, &batch, &opts).await
        }
        .unwrap_or_else(|e| panic!("{} batch {}: {e:?}", self.label, self.step));
        self.upsert_secs += t0.elapsed().as_secs_f64();
        let what = format!("{} batch {}", self.label, self.step);
        let stale =
            sink.is_some_and(|(s, n)| self.model.checkpoints.get(s).is_some_and(|c| n <= *c));
        self.table = self.cat.load_table(&self.ident).await.unwrap();
        if stale {
            assert!(
                r.already_committed,
                "{what}: a committed checkpoint was applied again: {r:?}"
            );
            assert_eq!(r.snapshot_id, None, "{what}: {r:?}");
            assert_eq!(
                self.table.metadata_location(),
                before,
                "{what}: a no-op replay changed the table"
            );
        } else {
            assert!(!r.already_committed, "{what}: {r:?}");
            let want = self.model.apply(&parts);
            if let Some((s, n)) = sink {
                self.model.checkpoints.insert(s.to_string(), n);
            }
            assert_eq!(
                Counts::of(&r),
                want,
                "{what}: the upsert's counters differ from the model's"
            );
            self.totals.add(want);
        }
        let snapshot = self.table.current_snapshot().map(|s| s.snapshot_id());
        self.verify(&what, snapshot).await;
        for (s, n) in &self.model.checkpoints {
            assert_eq!(
                floe::keyed::committed_checkpoint(&self.table, s).unwrap(),
                Some(*n),
                "{what}: committed checkpoint of sink {s}"
            );
        }
        if !stale {
            self.applied.push(Applied {
                files,
                live: self.model.live_rows(),
                snapshot,
            });
        }
        r
    }

    /// A batch committed by a concurrent writer as `snapshot`, in commit order: the model
    /// applies it, its counters (planned against the state it committed onto) and floe's
    /// rows at that snapshot must equal the model's.
    async fn settle(
        &mut self,
        parts: &[Vec<Change>],
        files: Vec<String>,
        got: Counts,
        snapshot: i64,
    ) {
        self.step += 1;
        let what = format!("{} commit {} (snapshot {snapshot})", self.label, self.step);
        let want = self.model.apply(parts);
        assert_eq!(
            got, want,
            "{what}: the upsert's counters differ from the model's"
        );
        self.totals.add(want);
        self.verify(&what, Some(snapshot)).await;
        self.applied.push(Applied {
            files,
            live: self.model.live_rows(),
            snapshot: Some(snapshot),
        });
    }

    /// Another writer compacts the table (every data file rewritten, deletes applied): the
    /// rows stay the model's.
    async fn compact(&mut self) {
        let opts: HashMap<String, String> =
            [("rewrite-all".to_string(), "true".to_string())].into();
        let r = floe::maintenance::rewrite_data_files(&self.cat, &self.table, None, &opts, None)
            .await
            .unwrap_or_else(|e| panic!("{}: compaction: {e:?}", self.label));
        assert!(
            r.rewritten_data_files_count > 0,
            "{}: nothing compacted",
            self.label
        );
        self.table = self.cat.load_table(&self.ident).await.unwrap();
        let snapshot = self.table.current_snapshot().map(|s| s.snapshot_id());
        let what = format!("{} after compaction", self.label);
        self.verify(&what, snapshot).await;
    }

    /// Another writer runs SQL on the table: a DELETE of the live keys `k % 10 = 0` (rows
    /// gone, no tombstones: a later change of any version inserts them again) and an UPDATE
    /// of the plan of the live keys `k % 10 = 1` (versions kept).
    async fn sql(&mut self) {
        assert!(!self.composite);
        let t = format!("keyed.{}", self.label);
        for sql in [
            format!("DELETE FROM {t} WHERE user_id % 10 = 0"),
            format!("UPDATE {t} SET plan = 'sql' WHERE user_id % 10 = 1"),
        ] {
            floe::dml::execute(&self.cat, &sql, None)
                .await
                .unwrap_or_else(|e| panic!("{}: `{sql}`: {e:?}", self.label));
        }
        self.model
            .state
            .retain(|k, (_, deleted, _)| *deleted || k % 10 != 0);
        for (k, (_, deleted, c)) in self.model.state.iter_mut() {
            if !*deleted && k % 10 == 1 {
                c.plan = Some("sql".to_string());
            }
        }
        self.table = self.cat.load_table(&self.ident).await.unwrap();
        let snapshot = self.table.current_snapshot().map(|s| s.snapshot_id());
        let what = format!("{} after SQL DELETE and UPDATE", self.label);
        self.verify(&what, snapshot).await;
    }

    /// floe's scan (at `snapshot`) and tombstone count equal the model's.
    async fn verify(&self, what: &str, snapshot: Option<i64>) {
        let got = floe_rows(&self.table, snapshot).await;
        assert_rows(
            &self.model.live_rows(),
            &got,
            &format!("{what}: floe's scan vs the model"),
        );
        if snapshot == self.table.current_snapshot().map(|s| s.snapshot_id()) {
            let stones = floe::keyed::tombstones(&self.table, false).await.unwrap();
            assert_eq!(stones.count, self.model.tombstones(), "{what}: tombstones");
        }
    }

    /// Queues the peer check of the current snapshot: exactly the model's live rows.
    fn peer(&mut self) {
        let expected = self
            .work
            .join(format!("{}-expected-{}.parquet", self.label, self.step));
        write_parquet(
            &expected,
            &[keyed_batch(&self.model.live(), self.composite)],
        );
        self.checks.push(Check {
            name: format!("{}@{}", self.label, self.step),
            metadata: self.table.metadata_location().to_string(),
            snapshot_id: self.table.current_snapshot().map(|s| s.snapshot_id()),
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }

    /// Queues the ClickHouse comparison of this run (see [`Oracle`]).
    fn chdb(&self, oracle: &mut Oracle) {
        if !self.chdb_final && !self.v2 {
            return;
        }
        let dir = self
            .table
            .metadata()
            .location()
            .trim_start_matches("file://")
            .to_string();
        let reads: Vec<Value> = if self.v2 {
            self.applied
                .iter()
                .enumerate()
                .filter_map(|(i, a)| {
                    a.snapshot
                        .map(|s| json!({"dir": dir, "snapshot_id": s, "name": i.to_string()}))
                })
                .collect()
        } else {
            vec![]
        };
        let (key, columns): (&[&str], &[&str]) = if self.composite {
            (&["region", "user_id"], &COMPOSITE_COLUMNS)
        } else {
            (&["user_id"], &COLUMNS)
        };
        let mut spec = json!({
            "key": key, "version": "ver", "delete": "is_deleted", "columns": columns,
            "batches": self.applied.iter().map(|a| a.files.clone()).collect::<Vec<_>>(),
            "read_iceberg": reads,
        });
        if !self.chdb_final {
            spec.as_object_mut().unwrap().remove("batches");
        }
        oracle.jobs.push(Job {
            label: self.label.clone(),
            spec,
            applied: self.applied.clone(),
            chdb_final: self.chdb_final,
            v2: self.v2,
        });
    }
}

/// ClickHouse as the oracle, for many runs in one process (tools/peers/chdb_replacing.py):
/// its ReplacingMergeTree over each run's batch files must hold the model's rows after every
/// batch, and on v2 tables its icebergLocal reads each snapshot floe committed.
#[derive(Default)]
struct Oracle {
    jobs: Vec<Job>,
}

struct Job {
    label: String,
    spec: Value,
    applied: Vec<Applied>,
    chdb_final: bool,
    v2: bool,
}

impl Oracle {
    /// Runs every queued comparison (none without the peers' Python).
    fn check(&self, py: Option<&Path>, work: &Path) {
        let Some(py) = py else { return };
        let t0 = Instant::now();
        // The ClickHouse behaviour the oracle relies on (ties, deletes, replays).
        let out = std::process::Command::new(py)
            .arg(repo().join("tools/peers/chdb_replacing.py"))
            .arg("--self-test")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "chdb_replacing.py --self-test (run `bash tools/peers/setup.sh`: the peers need chdb):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let spec = json!({"runs": self.jobs.iter().map(|j| j.spec.clone()).collect::<Vec<_>>()});
        let lines = chdb_run(py, work, &spec);
        let mut finals = 0;
        let mut reads = 0;
        for (ri, job) in self.jobs.iter().enumerate() {
            let mine: Vec<&Value> = lines.iter().filter(|l| l["run"] == json!(ri)).collect();
            let (batches, iceberg): (Vec<&Value>, Vec<&Value>) =
                mine.into_iter().partition(|l| l.get("batch").is_some());
            if job.chdb_final {
                assert_eq!(
                    batches.len(),
                    job.applied.len(),
                    "{}: chdb output",
                    job.label
                );
            }
            for (i, (l, a)) in batches.iter().zip(&job.applied).enumerate() {
                assert_rows(
                    &a.live,
                    &json_rows(&l["live"]),
                    &format!(
                        "{} batch {}: ClickHouse FINAL vs the model",
                        job.label,
                        i + 1
                    ),
                );
                finals += 1;
            }
            if job.v2 {
                assert_eq!(
                    iceberg.len(),
                    job.applied.iter().filter(|a| a.snapshot.is_some()).count(),
                    "{}: icebergLocal reads",
                    job.label
                );
            }
            for l in iceberg {
                let i: usize = l["name"].as_str().unwrap().parse().unwrap();
                assert_rows(
                    &job.applied[i].live,
                    &json_rows(&l["live"]),
                    &format!(
                        "{} batch {}: ClickHouse icebergLocal of floe's table vs the model",
                        job.label,
                        i + 1
                    ),
                );
                reads += 1;
            }
        }
        eprintln!(
            "ClickHouse agrees: {} runs, {finals} batches (FINAL), {reads} snapshots of v2 tables \
             (icebergLocal), {:.1} s",
            self.jobs.len(),
            t0.elapsed().as_secs_f64()
        );
    }
}

fn json_rows(v: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .map(|r| {
            if r.len() == COMPOSITE_COLUMNS.len() {
                from_composite(r)
            } else {
                r
            }
        })
        .collect();
    sort_rows(&mut rows);
    rows
}

/// Runs tools/peers/chdb_replacing.py on `spec`: its JSON lines.
fn chdb_run(py: &Path, work: &Path, spec: &Value) -> Vec<Value> {
    let file = work.join(format!("chdb-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, serde_json::to_vec(spec).unwrap()).unwrap();
    let out = std::process::Command::new(py)
        .arg(repo().join("tools/peers/chdb_replacing.py"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chdb_replacing.py failed (run `bash tools/peers/setup.sh`: the peers need chdb):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// ---------------------------------------------------------------- scenarios

/// Every change of 40 keys (versions 1..6, some deletes), shuffled, in 4 batches of 2 parts.
fn shuffled(seed: u64) -> Vec<Vec<Vec<Change>>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut all = Vec::new();
    for k in 0..40 {
        for v in 1..=6 {
            all.push(if v % 3 == 0 && k % 4 == 0 {
                del(k, v)
            } else {
                up(k, v, &format!("s{k}.{v}"))
            });
        }
    }
    all.shuffle(&mut rng);
    all.chunks(60)
        .map(|b| b.chunks(30).map(|p| p.to_vec()).collect())
        .collect()
}

/// One key updated many times inside one batch, in and out of version order.
fn many_updates(seed: u64) -> Vec<Vec<Vec<Change>>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut one: Vec<Change> = (1..=100).map(|v| up(1, v, &format!("one.{v}"))).collect();
    one.shuffle(&mut rng);
    let ascending: Vec<Change> = (1..=50).map(|v| up(2, v, &format!("asc.{v}"))).collect();
    let descending: Vec<Change> = (1..=50)
        .rev()
        .map(|v| up(3, v, &format!("desc.{v}")))
        .collect();
    // Key 4: updates with a delete at the highest version arriving in the middle.
    let mut four: Vec<Change> = (1..=20).map(|v| up(4, v, &format!("four.{v}"))).collect();
    four.insert(10, del(4, 21));
    let b1 = vec![
        one[..40].iter().chain(&ascending).cloned().collect(),
        one[40..]
            .iter()
            .chain(&descending)
            .chain(&four)
            .cloned()
            .collect(),
    ];
    // Again: lower versions (ignored), then one above; key 4 re-inserted above its tombstone.
    let b2 = vec![
        (50..80).map(|v| up(1, v, &format!("low.{v}"))).collect(),
        vec![
            up(1, 101, "top"),
            up(4, 20, "below-stone"),
            up(4, 22, "above-stone"),
        ],
        (51..=60).map(|v| up(2, v, &format!("asc2.{v}"))).collect(),
    ];
    vec![b1, b2]
}

/// Deletes, then late replays of older versions: the keys stay deleted.
fn late_replays() -> Vec<Vec<Vec<Change>>> {
    let ins: Vec<Change> = (0..20).map(|k| up(k, 10, "v10")).collect();
    let mid: Vec<Change> = (0..20).map(|k| up(k, 15, "v15")).collect();
    vec![
        vec![ins.clone()],
        vec![mid[..10].to_vec(), (0..10).map(|k| del(k, 20)).collect()],
        // Replays of versions 10 and 15 of the deleted keys; a delete of a key never
        // written (a tombstone without a row).
        vec![ins[..10].to_vec(), mid[..10].to_vec(), vec![del(100, 5)]],
        // Older and equal version on the never-written key; the delete replayed.
        vec![
            vec![up(100, 3, "older"), del(3, 20)],
            vec![up(100, 4, "older2")],
        ],
        vec![ins.clone(), mid.clone()],
    ]
}

/// Deletes, then higher versions re-insert; deletes and re-inserts in one batch.
fn reinserts() -> Vec<Vec<Vec<Change>>> {
    vec![
        vec![(0..10).map(|k| up(k, 1, "first")).collect()],
        vec![(0..10).map(|k| del(k, 2)).collect()],
        vec![
            (0..5).map(|k| up(k, 3, "back")).collect(),
            // Equal to the tombstone's version and later: re-inserted.
            (5..8).map(|k| up(k, 2, "tie-back")).collect(),
            // Lower: stays deleted.
            (8..10).map(|k| up(k, 1, "low")).collect(),
        ],
        vec![
            vec![del(0, 4), up(1, 5, "up-then-del"), del(1, 6)],
            vec![up(0, 5, "del-then-up"), del(2, 7)],
            vec![up(2, 6, "after-del-lower")],
        ],
        vec![vec![up(8, 3, "finally"), up(9, 2, "tie-stone")]],
    ]
}

/// Equal versions: the later arrival wins, inside a part, across parts and across batches.
fn ties() -> Vec<Vec<Vec<Change>>> {
    vec![
        vec![
            vec![up(1, 1, "a"), up(1, 1, "b"), up(2, 1, "p1"), up(1, 1, "c")],
            vec![up(2, 1, "p2"), up(3, 1, "x")],
        ],
        vec![vec![up(1, 1, "d"), up(3, 1, "y")], vec![del(3, 1)]],
        vec![
            vec![del(2, 1), up(4, 2, "four")],
            vec![up(2, 1, "after-delete")],
        ],
        vec![
            vec![up(3, 1, "z"), del(4, 2)],
            vec![up(4, 2, "four-again"), del(4, 2)],
        ],
        vec![
            vec![up(5, 7, "e"), up(5, 7, "f")],
            vec![up(5, 7, "g"), del(5, 7), up(5, 7, "h")],
        ],
    ]
}

/// Versions at the ends of the range, zero and below; an empty part and an empty batch.
fn edges() -> Vec<Vec<Vec<Change>>> {
    vec![
        vec![
            vec![up(1, -5, "neg"), up(2, i64::MAX, "max"), del(3, 0)],
            vec![],
        ],
        vec![
            vec![up(1, -3, "neg2"), up(1, i64::MIN, "min"), del(2, i64::MAX)],
            vec![up(3, -1, "below-zero-stone")],
        ],
        vec![],
        vec![vec![
            up(2, i64::MAX, "max-again"),
            up(3, 0, "zero"),
            up(4, i64::MIN, "min"),
        ]],
    ]
}

/// A part without the `score` column (columns in another order): its changes' score is
/// NULL, the whole row is replaced.
fn no_score(key: i64, ver: i64, plan: &str) -> Change {
    Change {
        score: None,
        ..up(key, ver, plan)
    }
}

async fn scenarios(
    oracle: &mut Oracle,
    cat: &Catalog,
    work: &Path,
    fv: FormatVersion,
    tag: &str,
    writer: bool,
    staged: bool,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let new_run = |name: &str| {
        let label = format!("{name}_{tag}");
        async move {
            let mut r = Run::with(cat, work, &label, fv, "merge-on-read", None, writer).await;
            // A writer's (or distributed) runs repeat batches whose ClickHouse FINAL was
            // compared already.
            r.chdb_final = !writer && !staged;
            r.tasks = staged.then(|| StdRng::seed_from_u64(seed() + label.len() as u64));
            r
        }
    };
    let cases: Vec<(&str, Vec<Vec<Vec<Change>>>)> = vec![
        ("shuffled", shuffled(11)),
        ("many_updates", many_updates(12)),
        ("late_replays", late_replays()),
        ("reinserts", reinserts()),
        ("ties", ties()),
        ("edges", edges()),
    ];
    for (name, batches) in cases {
        let mut run = new_run(name).await;
        for b in batches {
            run.batch(b, None).await;
        }
        run.chdb(oracle);
        run.peer();
        checks.extend(run.checks);
    }

    // Parts without a column: a full-row replace with NULL there.
    let mut run = new_run("partial_columns").await;
    run.batch(vec![(0..6).map(|k| up(k, 1, "full")).collect()], None)
        .await;
    run.shapes = vec![Shape::NoScore, Shape::Full];
    run.batch(
        vec![
            (0..3).map(|k| no_score(k, 2, "no-score")).collect(),
            vec![up(3, 2, "full2"), no_score(9, 1, "absent")],
        ],
        None,
    )
    .await;
    run.shapes = vec![Shape::Full, Shape::NoScore];
    run.batch(
        vec![
            vec![up(0, 3, "full3"), del(4, 2)],
            vec![
                no_score(0, 3, "tie-no-score"),
                no_score(4, 1, "below-stone"),
            ],
        ],
        None,
    )
    .await;
    run.chdb(oracle);
    run.peer();
    checks.extend(run.checks);

    // Replays of whole committed batches: without a checkpoint they are applied again (equal
    // versions arriving later win, lower ones are ignored); with one they are no-ops.
    let mut run = new_run("replays").await;
    let a = vec![(0..30).map(|k| up(k, 1, "a")).collect::<Vec<_>>()];
    let b = vec![
        (0..10)
            .map(|k| up(k, 2, "b"))
            .chain((10..15).map(|k| del(k, 2)))
            .collect::<Vec<_>>(),
        (20..30).map(|k| up(k, 1, "b-tie")).collect(),
    ];
    let c = vec![(5..25).map(|k| up(k, 3, "c")).collect::<Vec<_>>()];
    run.batch(a.clone(), Some(("sinkA", 1))).await;
    run.batch(b.clone(), Some(("sinkA", 2))).await;
    for (parts, n) in [(&a, 1), (&b, 2), (&a, 0)] {
        let r = run.batch(parts.clone(), Some(("sinkA", n))).await;
        assert!(
            r.already_committed && r.committed_checkpoint == Some(2),
            "{r:?}"
        );
    }
    // Another sink counts its own checkpoints.
    run.batch(c.clone(), Some(("sinkB", 1))).await;
    run.batch(c.clone(), Some(("sinkB", 1))).await;
    // Without checkpoints: applied again.
    run.batch(a.clone(), None).await;
    run.batch(b.clone(), None).await;
    run.batch(a.clone(), Some(("sinkA", 3))).await;
    run.batch(b, Some(("sinkA", 3))).await;
    // A batch whose changes are all ignored, and an empty batch, still record their
    // checkpoints (the harness checks committed_checkpoint after every batch).
    run.batch(
        vec![vec![up(0, 1, "stale"), up(12, 1, "stale")]],
        Some(("sinkA", 4)),
    )
    .await;
    let r = run.batch(vec![], Some(("sinkA", 5))).await;
    assert_eq!(r.committed_checkpoint, Some(5), "{r:?}");
    let r = run.batch(vec![], Some(("sinkA", 5))).await;
    assert!(r.already_committed, "{r:?}");
    run.chdb(oracle);
    run.peer();
    checks.extend(run.checks);
    checks
}

/// Random batches: `n` batches of `per` changes over `keys` keys, 70% updates, 20% inserts,
/// 10% deletes; 5% of the changes are late replays of an older change, 3% of the updates tie
/// the key's last version; a third of the batches arrive shuffled; 1 to 3 parts per batch.
fn random_batches(seed: u64, n: usize, per: usize, keys: i64) -> Vec<Vec<Vec<Change>>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut last: HashMap<i64, i64> = HashMap::new();
    let mut live: BTreeSet<i64> = BTreeSet::new();
    let mut history: Vec<Change> = Vec::new();
    let mut out = Vec::new();
    for b in 0..n {
        let mut changes = Vec::with_capacity(per);
        for i in 0..per {
            if rng.gen_bool(0.05) && !history.is_empty() {
                let old = history[rng.gen_range(0..history.len())].clone();
                changes.push(old);
                continue;
            }
            // Deletes and updates pick a live key; inserts any key (a live one makes it an
            // update), so deleted keys stay deleted for a while (about half the keys).
            let r = rng.gen_range(0..100);
            let live_keys: Vec<i64> = live.iter().copied().collect();
            let (key, is_del) = if r < 10 && !live_keys.is_empty() {
                (*live_keys.choose(&mut rng).unwrap(), true)
            } else if r < 30 || live_keys.is_empty() {
                (rng.gen_range(0..keys), false)
            } else {
                (*live_keys.choose(&mut rng).unwrap(), false)
            };
            let prev = last.get(&key).copied();
            let ver = match prev {
                Some(v) if !is_del && rng.gen_bool(0.03) => v,
                Some(v) => v + rng.gen_range(1..=3),
                None => rng.gen_range(1..=3),
            };
            last.insert(key, ver);
            let c = if is_del {
                live.remove(&key);
                del(key, ver)
            } else {
                live.insert(key);
                // Plans from a small set (a partition by plan moves rows), scores unique
                // per change (ties stay visible); some of each NULL.
                let plan = ["free", "pro", "team", "enterprise"][rng.gen_range(0..4)];
                Change {
                    key,
                    ver,
                    del: false,
                    plan: (!rng.gen_bool(0.1)).then(|| plan.to_string()),
                    score: (!rng.gen_bool(0.1)).then_some((b * per + i) as i64),
                }
            };
            history.push(c.clone());
            changes.push(c);
        }
        if rng.gen_bool(1.0 / 3.0) {
            changes.shuffle(&mut rng);
        }
        let parts = rng.gen_range(1..=3);
        let mut cuts: Vec<usize> = (0..parts - 1).map(|_| rng.gen_range(0..=per)).collect();
        cuts.sort_unstable();
        let mut batch = Vec::new();
        let mut from = 0;
        for c in cuts.into_iter().chain([per]) {
            batch.push(changes[from..c].to_vec());
            from = c;
        }
        batch.retain(|p| !p.is_empty());
        out.push(batch);
    }
    out
}

fn seed() -> u64 {
    std::env::var("FLOE_KEYED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// A sink's batches for the concurrency runs: [`random_batches`] over `keys` keys from
/// `offset`, versions mapped to `2 v + sink` so two sinks never share a (key, version).
fn sink_batches(seed: u64, sink: i64, offset: i64, keys: i64, n: usize) -> Vec<Vec<Vec<Change>>> {
    random_batches(seed, n, 60, keys)
        .into_iter()
        .map(|b| {
            b.into_iter()
                .map(|p| {
                    p.into_iter()
                        .map(|mut c| {
                            c.key += offset;
                            c.ver = 2 * c.ver + sink;
                            c
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The snapshots of `t` in commit order.
fn commit_order(t: &Table) -> Vec<i64> {
    let mut s: Vec<(i64, i64)> = t
        .metadata()
        .snapshots()
        .map(|s| (s.sequence_number(), s.snapshot_id()))
        .collect();
    s.sort_unstable();
    s.into_iter().map(|(_, id)| id).collect()
}

/// Two sinks (threads of one process) upsert overlapping key ranges of one table at the same time; the
/// table must be the batches applied one after the other in commit order.
async fn concurrent_tasks(
    oracle: &mut Oracle,
    cat: &Catalog,
    work: &Path,
    writer: bool,
) -> Vec<Check> {
    // Writers (each its own key index) on a v2 table; upserts on a v3 table.
    let (label, fv) = if writer {
        ("concurrent_writers", FormatVersion::V2)
    } else {
        ("concurrent_upserts", FormatVersion::V3)
    };
    let mut run = Run::new(cat, work, label, fv, "merge-on-read").await;
    let mut sinks = Vec::new();
    for (sink, offset) in [(1i64, 0i64), (2, 100)] {
        let batches = sink_batches(30 + sink as u64, sink, offset, 150, 8);
        let mut prepared = Vec::new();
        for parts in batches {
            let (cb, batches, files) = run.files(&parts);
            prepared.push((cb, batches, parts, files));
        }
        sinks.push((format!("sink{sink}"), prepared));
    }
    run.step = 0;
    let t0 = Instant::now();
    // One thread and runtime per sink: `floe::keyed::upsert`'s future is not `Send` (the
    // scan-based staging holds a `&dyn RowChanger` across an await; `floe::dml::execute`
    // too), so it cannot be `tokio::spawn`ed. Threads also run the sinks truly in parallel.
    let tasks: Vec<_> = sinks
        .into_iter()
        .map(|(sink, prepared)| {
            let (cat, ident) = (cat.clone(), run.ident.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let w = floe::keyed::KeyedWriter::new(&cat, ident.clone()).with_sink_id(&sink);
                let mut out = Vec::new();
                for (i, (cb, batches, parts, files)) in prepared.into_iter().enumerate() {
                    let n = i as i64 + 1;
                    let r = if writer {
                        rt.block_on(w.apply(batches, Some(n)))
                    } else {
                        let opts = UpsertOptions::default().with_checkpoint(sink.clone(), n);
                        rt.block_on(floe::keyed::upsert(&cat, &ident, &cb, &opts))
                    }
                    .unwrap_or_else(|e| panic!("{sink} batch {n}: {e:?}"));
                    out.push((r, parts, files));
                }
                out
            })
        })
        .collect();
    let mut done = HashMap::new();
    let mut attempts = 0;
    for t in tasks {
        for (r, parts, files) in t.join().unwrap() {
            attempts += r.attempts;
            let id = r.snapshot_id.expect("every batch changes the table");
            done.insert(id, (Counts::of(&r), parts, files));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    run.table = cat.load_table(&run.ident).await.unwrap();
    let order = commit_order(&run.table);
    assert_eq!(order.len(), done.len(), "one snapshot per batch");
    for id in order {
        let (counts, parts, files) = done.remove(&id).unwrap();
        run.settle(&parts, files, counts, id).await;
    }
    for s in ["sink1", "sink2"] {
        assert_eq!(
            floe::keyed::committed_checkpoint(&run.table, s).unwrap(),
            Some(8),
            "{s}"
        );
    }
    eprintln!(
        "{label}: 16 batches in {secs:.1} s, {attempts} plannings; totals {:?}",
        run.totals
    );
    run.chdb(oracle);
    run.peer();
    run.checks
}

/// Two `floe upsert` processes (sinks) at the same time on one v2 table (SQLite catalog):
/// the table must be their batches applied one after the other in commit order.
async fn concurrent_processes(oracle: &mut Oracle, work: &Path) -> Vec<Check> {
    let wh = work.join("cli-wh");
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let mut run = Run::new(
        &cat,
        work,
        "concurrent_cli",
        FormatVersion::V2,
        "merge-on-read",
    )
    .await;
    let mut sinks = Vec::new();
    for (sink, offset) in [(1i64, 0i64), (2, 50)] {
        let batches = sink_batches(40 + sink as u64, sink, offset, 100, 6);
        let mut prepared = Vec::new();
        for parts in batches {
            let (_, _, files) = run.files(&parts);
            prepared.push((parts, files));
        }
        sinks.push((format!("cli{sink}"), prepared));
    }
    run.step = 0;
    let t0 = Instant::now();
    let threads: Vec<_> = sinks
        .into_iter()
        .map(|(sink, prepared)| {
            let wh = wh.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for (i, (parts, files)) in prepared.into_iter().enumerate() {
                    let n = (i + 1).to_string();
                    let mut args = vec!["upsert", "keyed.concurrent_cli"];
                    args.extend(files.iter().map(|f| f.as_str()));
                    args.extend(["--sink-id", &sink, "--checkpoint", &n, "--json"]);
                    let o = floe(&wh, &args);
                    assert!(o.status.success(), "{sink} batch {n}: {}", text(&o));
                    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
                    out.push((v, parts, files));
                }
                out
            })
        })
        .collect();
    let mut done = HashMap::new();
    let mut attempts = 0;
    for t in threads {
        for (v, parts, files) in t.join().unwrap() {
            attempts += json_count(&v, "attempts_count");
            let id = v["snapshot_id"]
                .as_i64()
                .expect("every batch changes the table");
            done.insert(id, (Counts::of_json(&v), parts, files));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    run.table = cat.load_table(&run.ident).await.unwrap();
    let order = commit_order(&run.table);
    assert_eq!(order.len(), done.len(), "one snapshot per batch");
    for id in order {
        let (counts, parts, files) = done.remove(&id).unwrap();
        run.settle(&parts, files, counts, id).await;
    }
    // A replayed checkpoint is a no-op for the CLI too.
    let last = run.applied.last().unwrap().files.clone();
    let mut args = vec!["upsert", "keyed.concurrent_cli"];
    args.extend(last.iter().map(|f| f.as_str()));
    args.extend(["--sink-id", "cli1", "--checkpoint", "6", "--json"]);
    let v: Value = serde_json::from_str(&ok(&wh, &args)).unwrap();
    assert_eq!(v["already_committed"], json!(true), "{v}");
    let now = cat.load_table(&run.ident).await.unwrap();
    assert_eq!(now.metadata_location(), run.table.metadata_location());
    eprintln!(
        "concurrent_cli: 12 batches in {secs:.1} s, {attempts} plannings; totals {:?}",
        run.totals
    );
    run.chdb(oracle);
    run.peer();
    run.checks
}

/// The keyed upsert against the model after every batch, ClickHouse (FINAL after every
/// batch; icebergLocal of every v2 snapshot) and, at the ends, DuckDB, pyiceberg and Spark
/// (one peer_check). Scenarios on v3 (deletion vectors) and v2 (position deletes)
/// merge-on-read tables: shuffled arrivals, many updates of a key in one batch, deletes and
/// late replays, re-inserts, ties, replays with and without checkpoints. Then the most
/// important one: random batches (20 x 200 changes over 300 keys, seeded; FLOE_KEYED_SEED
/// picks another seed) on v3 and v2 merge-on-read and v2 copy-on-write tables, the peers
/// reading after batches 10 and 20. Then two concurrent sinks: threads of this process, and
/// `floe upsert` processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_match_the_model_clickhouse_and_the_peers() {
    let t0 = Instant::now();
    let py = peers_python();
    let py = py.as_deref();
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let w = work.path();
    let mut oracle = Oracle::default();
    let mut checks = Vec::new();
    for (fv, tag, writer, staged) in [
        (FormatVersion::V3, "v3", false, false),
        (FormatVersion::V2, "v2", false, false),
        (FormatVersion::V3, "v3w", true, false),
        (FormatVersion::V2, "v2w", true, false),
        (FormatVersion::V3, "v3s", false, true),
        (FormatVersion::V2, "v2s", false, true),
    ] {
        checks.extend(scenarios(&mut oracle, &cat, w, fv, tag, writer, staged).await);
    }
    eprintln!("keyed scenarios: {:.1} s", t0.elapsed().as_secs_f64());

    let seed = seed();
    eprintln!("random upserts: seed {seed} (FLOE_KEYED_SEED)");
    let batches = random_batches(seed, 20, 200, 300);
    // Batch sets of more than 200 keys each: the stored rows are found by key range.
    let wide = random_batches(seed + 1000, 8, 600, 3000);
    struct Config<'a> {
        label: &'a str,
        fv: FormatVersion,
        mode: &'a str,
        partition: Option<&'a str>,
        writer: bool,
        batches: &'a [Vec<Vec<Change>>],
        chdb_final: bool,
        /// Distributed upserts (staged tasks, one commit).
        staged: bool,
    }
    let mor = "merge-on-read";
    let v2 = FormatVersion::V2;
    let v3 = FormatVersion::V3;
    let configs = [
        Config {
            label: "random_v3_mor",
            fv: v3,
            mode: mor,
            partition: None,
            writer: false,
            batches: &batches,
            chdb_final: true,
            staged: false,
        },
        Config {
            label: "random_v2_mor_file_deletes",
            fv: v2,
            mode: mor,
            partition: None,
            writer: false,
            batches: &batches,
            chdb_final: false,
            staged: false,
        },
        Config {
            label: "random_v2_cow",
            fv: v2,
            mode: "copy-on-write",
            partition: None,
            writer: false,
            batches: &batches,
            chdb_final: false,
            staged: false,
        },
        // A KeyedWriter (key index), with another writer's upserts and a compaction between
        // its batches.
        Config {
            label: "random_v3_writer",
            fv: v3,
            mode: mor,
            partition: None,
            writer: true,
            batches: &batches,
            chdb_final: false,
            staged: false,
        },
        Config {
            label: "random_v2_writer_by_plan",
            fv: v2,
            mode: mor,
            partition: Some("plan"),
            writer: true,
            batches: &batches,
            chdb_final: false,
            staged: false,
        },
        Config {
            label: "wide_v3_bucket",
            fv: v3,
            mode: mor,
            partition: Some("bucket(4, user_id)"),
            writer: false,
            batches: &wide,
            chdb_final: true,
            staged: false,
        },
        Config {
            label: "wide_v2_writer",
            fv: v2,
            mode: mor,
            partition: None,
            writer: true,
            batches: &wide,
            chdb_final: false,
            staged: false,
        },
    ];
    let configs = configs.into_iter().chain([
        // Distributed upserts: each batch staged by 1 to 4 tasks, committed once.
        Config {
            label: "random_v3_staged",
            fv: v3,
            mode: mor,
            partition: None,
            writer: false,
            batches: &batches,
            chdb_final: false,
            staged: true,
        },
        Config {
            label: "random_v2_cow_staged_by_plan",
            fv: v2,
            mode: "copy-on-write",
            partition: Some("plan"),
            writer: false,
            batches: &batches,
            chdb_final: false,
            staged: true,
        },
        Config {
            label: "wide_composite_v2_staged",
            fv: v2,
            mode: mor,
            partition: Some("bucket(4, user_id)"),
            writer: false,
            batches: &wide,
            chdb_final: false,
            staged: true,
        },
        // A composite key (region string, user_id): string keys, two key columns.
        Config {
            label: "random_composite_v3_writer",
            fv: v3,
            mode: mor,
            partition: None,
            writer: true,
            batches: &batches,
            chdb_final: true,
            staged: false,
        },
        Config {
            label: "wide_composite_v2_by_region",
            fv: v2,
            mode: mor,
            partition: Some("region"),
            writer: false,
            batches: &wide,
            chdb_final: true,
            staged: false,
        },
    ]);
    for c in configs {
        let t1 = Instant::now();
        let label = c.label;
        let mut run = Run::with(&cat, w, label, c.fv, c.mode, c.partition, c.writer).await;
        run.chdb_final = c.chdb_final;
        run.tasks = c
            .staged
            .then(|| StdRng::seed_from_u64(seed ^ label.len() as u64));
        if c.writer {
            run.external_every = Some(7);
        }
        let n = c.batches.len();
        for (i, b) in c.batches.iter().enumerate() {
            run.batch(b.clone(), None).await;
            if i + 1 == n / 2 {
                run.peer();
                if c.writer {
                    run.compact().await;
                }
            }
            if i + 1 == n * 3 / 4 && c.writer && !run.composite {
                run.sql().await;
            }
        }
        run.peer();
        run.chdb(&mut oracle);
        eprintln!(
            "{label}: {n} batches in {:.1} s ({:.1} s applying); \
             {} live keys, {} tombstones; totals {:?}",
            t1.elapsed().as_secs_f64(),
            run.upsert_secs,
            run.model.live().len(),
            run.model.tombstones(),
            run.totals
        );
        checks.extend(run.checks);
    }
    checks.extend(concurrent_tasks(&mut oracle, &cat, w, false).await);
    checks.extend(concurrent_tasks(&mut oracle, &cat, w, true).await);
    checks.extend(concurrent_processes(&mut oracle, w).await);
    oracle.check(py, w);
    eprintln!(
        "keyed upserts: {:.1} s before the peers",
        t0.elapsed().as_secs_f64()
    );
    if let Some(py) = py {
        peer_check(py, w, &checks);
    }
    eprintln!("keyed upserts: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Bad input is refused and commits nothing: a null key, a null version, a delete flag of 2,
/// an unknown column, a missing key column (each in the second part, after a good one), and
/// a checkpoint without a sink id (library and CLI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_changes_are_refused_and_commit_nothing() {
    use arrow::array::RecordBatch as B;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let cat = Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap();
    let ident = parse_ident("keyed.bad").unwrap();
    keyed_table(&cat, &ident, FormatVersion::V3, "merge-on-read", None).await;
    let good = part_batch(&[up(1, 1, "a"), up(2, 1, "b"), up(3, 1, "c")]);
    floe::keyed::upsert(
        &cat,
        &ident,
        &ChangeBatch::from_batches([good.clone()]),
        &UpsertOptions::default(),
    )
    .await
    .unwrap();
    let base = cat.load_table(&ident).await.unwrap();
    let rows = floe_rows(&base, None).await;
    assert_eq!(rows.len(), 3);

    let ids = |v: Vec<Option<i64>>| Arc::new(Int64Array::from(v)) as ArrayRef;
    let plans = |n: usize| Arc::new(StringArray::from(vec![Some("x"); n])) as ArrayRef;
    let flags = |v: Vec<i32>| Arc::new(Int32Array::from(v)) as ArrayRef;
    let bad: Vec<(&str, B, &[&str])> = vec![
        (
            "null key",
            B::try_from_iter([
                ("user_id", ids(vec![Some(4), None])),
                ("plan", plans(2)),
                ("ver", ids(vec![Some(2), Some(2)])),
                ("is_deleted", flags(vec![0, 0])),
            ])
            .unwrap(),
            &["user_id", "bad.parquet"],
        ),
        (
            "null version",
            B::try_from_iter([
                ("user_id", ids(vec![Some(4), Some(5)])),
                ("plan", plans(2)),
                ("ver", ids(vec![Some(2), None])),
                ("is_deleted", flags(vec![0, 0])),
            ])
            .unwrap(),
            &["ver", "bad.parquet"],
        ),
        (
            "delete flag 2",
            B::try_from_iter([
                ("user_id", ids(vec![Some(4), Some(1)])),
                ("plan", plans(2)),
                ("ver", ids(vec![Some(2), Some(5)])),
                ("is_deleted", flags(vec![0, 2])),
            ])
            .unwrap(),
            &["is_deleted", "bad.parquet"],
        ),
        (
            "unknown column",
            B::try_from_iter([
                ("user_id", ids(vec![Some(4)])),
                ("plan", plans(1)),
                ("ver", ids(vec![Some(2)])),
                ("is_deleted", flags(vec![0])),
                ("nope", ids(vec![Some(1)])),
            ])
            .unwrap(),
            &["nope", "bad.parquet"],
        ),
        (
            "missing key column",
            B::try_from_iter([
                ("plan", plans(1)),
                ("ver", ids(vec![Some(2)])),
                ("is_deleted", flags(vec![1])),
            ])
            .unwrap(),
            &["user_id"],
        ),
    ];
    for (what, b, names) in bad {
        let mut batch = ChangeBatch::new();
        batch.push(
            "good.parquet",
            part_batch(&[up(1, 9, "would-win"), del(2, 9)]),
        );
        batch.push("bad.parquet", b.clone());
        let e = floe::keyed::upsert(&cat, &ident, &batch, &UpsertOptions::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        let msg = e.to_string();
        eprintln!("{what}: {msg}");
        for n in names {
            assert!(
                msg.contains(n),
                "{what}: the error does not name {n}: {msg}"
            );
        }
        let now = cat.load_table(&ident).await.unwrap();
        assert_eq!(
            now.metadata_location(),
            base.metadata_location(),
            "{what}: committed"
        );
        assert_eq!(floe_rows(&now, None).await, rows, "{what}");
        // The CLI refuses the same file.
        let f = d.path().join("bad.parquet");
        write_parquet(&f, &[b]);
        let o = floe(&wh, &["upsert", "keyed.bad", f.to_str().unwrap()]);
        assert!(
            !o.status.success(),
            "{what}: the CLI accepted it: {}",
            text(&o)
        );
        let now = cat.load_table(&ident).await.unwrap();
        assert_eq!(
            now.metadata_location(),
            base.metadata_location(),
            "{what}: the CLI committed"
        );
    }
    // A checkpoint needs its sink id.
    let mut opts = UpsertOptions::default();
    opts.checkpoint = Some(7);
    let batch = ChangeBatch::from_batches([part_batch(&[up(1, 9, "x")])]);
    let e = floe::keyed::upsert(&cat, &ident, &batch, &opts)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("sink id"), "{e}");
    let f = d.path().join("one.parquet");
    write_parquet(&f, &[part_batch(&[up(1, 9, "x")])]);
    let o = floe(
        &wh,
        &[
            "upsert",
            "keyed.bad",
            f.to_str().unwrap(),
            "--checkpoint",
            "7",
        ],
    );
    assert!(
        !o.status.success(),
        "--checkpoint without --sink-id: {}",
        text(&o)
    );
    let now = cat.load_table(&ident).await.unwrap();
    assert_eq!(
        now.metadata_location(),
        base.metadata_location(),
        "checkpoint without sink id"
    );
}

/// A distributed upsert refuses what it cannot do and leaves nothing behind: a task's bad
/// row (named), a table whose merge engine folds rows, staged upserts of another table; a
/// concurrent commit between staging and committing is planned against (the tasks staged
/// against an older state, the driver decides against the newest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_upserts_refuse_bad_input_and_plan_against_the_newest_state() {
    let (d, cat) = fs_catalog();
    let fv = FormatVersion::V3;
    let ident = parse_ident("keyed.staged_bad").unwrap();
    let t = keyed_table(&cat, &ident, fv, "merge-on-read", None).await;
    // Data files and staged key lists on disk.
    fn files_under(p: &Path) -> usize {
        let mut n = 0;
        for e in std::fs::read_dir(p).unwrap().flatten() {
            let path = e.path();
            let name = path.to_string_lossy().to_string();
            if path.is_dir() {
                n += files_under(&path);
            } else if !name.contains("/metadata/") || name.contains("/metadata/staged-keys-") {
                n += 1;
            }
        }
        n
    }
    // A null key in the second part of a task: refused, naming it; nothing written.
    let mut bad = keyed_batch(&[up(1, 1, "a"), up(2, 1, "b")], false);
    let cols: Vec<ArrayRef> =
        std::iter::once(Arc::new(Int64Array::from(vec![Some(3), None])) as ArrayRef)
            .chain(bad.columns()[1..].iter().cloned())
            .collect();
    let fields: Vec<arrow::datatypes::Field> = bad
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    bad = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols).unwrap();
    let mut changes = ChangeBatch::new();
    changes.push("good.parquet", part_batch(&[up(5, 1, "x")]));
    changes.push("bad.parquet", bad);
    let job = floe::txn::StagingJob::new();
    let e = floe::pending::stage_upsert(&t, &changes, &job)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("row 2 of bad.parquet") && e.contains("'user_id'") && e.contains("null"),
        "{e}"
    );
    assert_eq!(files_under(d.path()), 0, "a refused task wrote data files");

    // Two tasks stage; another writer commits between staging and the driver's commit.
    let a = floe::pending::stage_upsert(
        &t,
        &ChangeBatch::from_batches([part_batch(&[up(1, 2, "task1"), up(2, 2, "task1")])]),
        &job,
    )
    .await
    .unwrap();
    let b = floe::pending::stage_upsert(
        &t,
        &ChangeBatch::from_batches([part_batch(&[up(2, 3, "task2"), del(3, 1)])]),
        &job,
    )
    .await
    .unwrap();
    let other = ChangeBatch::from_batches([part_batch(&[up(1, 5, "newer"), up(3, 0, "old")])]);
    floe::keyed::upsert(&cat, &ident, &other, &UpsertOptions::default())
        .await
        .unwrap();
    let r = commit_upserts(&cat, &[a, b], &UpsertOptions::default())
        .await
        .unwrap();
    // key 1: the stored version 5 beats task 1's 2; key 2: task 2's version 3 wins; key 3
    // deleted at version 1 over the stored 0.
    assert_eq!(
        (r.keys, r.inserted, r.updated, r.deleted, r.ignored),
        (3, 1, 0, 1, 1),
        "{r:?}"
    );
    let t = cat.load_table(&ident).await.unwrap();
    let got = floe_rows(&t, None).await;
    let want: Vec<Row> = vec![up(1, 5, "newer").row(), up(2, 3, "task2").row()];
    assert_rows(&want, &got, "staged upserts after a concurrent commit");

    // Another table's staged upsert is refused and left to that table's driver.
    let other_ident = parse_ident("keyed.staged_other").unwrap();
    let o = keyed_table(&cat, &other_ident, fv, "merge-on-read", None).await;
    let mine = floe::pending::stage_upsert(
        &t,
        &ChangeBatch::from_batches([part_batch(&[up(8, 1, "m")])]),
        &job,
    )
    .await
    .unwrap();
    let before = files_under(d.path());
    let s = floe::pending::stage_upsert(
        &o,
        &ChangeBatch::from_batches([part_batch(&[up(9, 1, "o")])]),
        &job,
    )
    .await
    .unwrap();
    assert_eq!(
        files_under(d.path()),
        before + 2,
        "a data file and a key list"
    );
    let e = commit_upserts(&cat, &[mine.clone(), s.clone()], &UpsertOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is of table keyed.staged_other") && e.contains("nothing was committed"),
        "{e}"
    );
    let e = floe::pending::discard_pending(&t, &[s])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be discarded through table"), "{e}");
    assert_eq!(
        files_under(d.path()),
        before + 2,
        "another table's staging was touched"
    );
    // A change naming a file outside the table (a tampered JSON) deletes nothing.
    let mut tampered = mine.clone();
    let outside = d.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    tampered.files.push(outside.to_string_lossy().to_string());
    let e = floe::pending::discard_pending(&t, &[tampered])
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the table's location"), "{e}");
    assert!(outside.exists());
    std::fs::remove_file(&outside).unwrap();
    floe::pending::discard_pending(&t, &[mine]).await.unwrap();
    assert_eq!(
        files_under(d.path()),
        before,
        "a discarded change left files"
    );
    assert_eq!(
        cat.load_table(&ident)
            .await
            .unwrap()
            .metadata()
            .snapshots()
            .count(),
        t.metadata().snapshots().count()
    );

    // A merge engine that folds rows: the task is refused.
    let agg = parse_ident("keyed.staged_sum").unwrap();
    let schema = parse_schema("id long not null, hits long").unwrap();
    let c = TableCreation::new(schema)
        .with_primary_key(&["id".to_string()])
        .with_property("floe.merge-engine", "sum")
        .with_property("floe.aggregate.hits", "sum");
    let s = cat.create_table(&agg, c).await.unwrap();
    let rows = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("hits", Arc::new(Int64Array::from(vec![1])) as _),
    ])
    .unwrap();
    let e = floe::pending::stage_upsert(&s, &ChangeBatch::from_batches([rows]), &job)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("merge engine 'sum'"), "{e}");
    // Pre-folding is for those engines: refused on the replace engine, and for a
    // partial-update ordered by a version column (not associative).
    let one = ChangeBatch::from_batches([part_batch(&[up(1, 9, "x")])]);
    let e = floe::keyed::pre_fold(&t, &one).await.unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::Unsupported, "{e}");
    let opts = UpsertOptions::default().with_pre_folded(true);
    let e = floe::keyed::upsert(&cat, &ident, &one, &opts)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), floe::ErrorKind::Unsupported, "{e}");
    let pu = parse_ident("keyed.staged_pu").unwrap();
    let c = TableCreation::new(parse_schema("id long not null, v string, ver long").unwrap())
        .with_primary_key(&["id".to_string()])
        .with_property("floe.merge-engine", "partial-update")
        .with_property("floe.merge.version-column", "ver");
    let p = cat.create_table(&pu, c).await.unwrap();
    let e = floe::keyed::pre_fold(&p, &one).await.unwrap_err();
    assert!(e.to_string().contains("version column 'ver'"), "{e}");
}

/// Staged upserts commit across schema changes made between the tasks' staging and the
/// driver's commit (a renamed, a widened, a dropped and an added column, a new partition
/// field): the task files the driver keeps and those it rewrites (rows that lost to a later
/// task) are read by field id, as every reader reads them, so each value stays in its column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_upserts_commit_across_a_schema_change() {
    let (_d, cat) = fs_catalog();
    for (fv, mode) in [
        (FormatVersion::V3, "merge-on-read"),
        (FormatVersion::V2, "copy-on-write"),
    ] {
        let ident = parse_ident(&format!("keyed.staged_evolved_{}", fv as u8)).unwrap();
        let schema = parse_schema("id long not null, v string, n int, gone string").unwrap();
        let c = TableCreation::new(schema)
            .with_primary_key(&["id".to_string()])
            .with_format_version(fv)
            .with_property("write.merge.mode", mode);
        let t = cat.create_table(&ident, c).await.unwrap();
        let rows = |ids: &[i64], tag: &str, n: i32| {
            RecordBatch::try_from_iter([
                ("id", Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef),
                (
                    "v",
                    Arc::new(StringArray::from_iter_values(
                        ids.iter().map(|i| format!("{tag}{i}")),
                    )) as _,
                ),
                (
                    "n",
                    Arc::new(Int32Array::from_iter_values(
                        ids.iter().map(|&i| n + i as i32),
                    )) as _,
                ),
                (
                    "gone",
                    Arc::new(StringArray::from(vec!["g"; ids.len()])) as _,
                ),
            ])
            .unwrap()
        };
        let stored = ChangeBatch::from_batches([rows(&[1, 2, 3, 4], "s", 0)]);
        floe::keyed::upsert(&cat, &ident, &stored, &UpsertOptions::default())
            .await
            .unwrap();
        let job = floe::txn::StagingJob::new();
        let stage = |ids: &'static [i64], tag: &'static str, n: i32| {
            let t = t.clone();
            let job = job.clone();
            async move {
                floe::pending::stage_upsert(
                    &t,
                    &ChangeBatch::from_batches([rows(ids, tag, n)]),
                    &job,
                )
                .await
                .unwrap()
            }
        };
        // Task a's file keeps 3, 4, 7 and loses 5, 6 to task b (rewritten); b's is kept whole.
        let a = stage(&[3, 4, 5, 6, 7], "a", 100).await;
        let b = stage(&[5, 6], "b", 200).await;
        for clause in [
            "RENAME COLUMN v TO w",
            "ALTER COLUMN n TYPE long",
            "DROP COLUMN gone",
            "ADD COLUMN extra string",
            "ADD PARTITION FIELD bucket(2, id)",
        ] {
            floe::txn::alter_table(
                &cat,
                &ident,
                &floe::spec::parse_alter_clause(clause).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("{clause}: {e}"));
        }
        let r = commit_upserts(&cat, &[a, b], &UpsertOptions::default())
            .await
            .unwrap();
        assert_eq!((r.inserted, r.updated), (3, 2), "{r:?}");
        let t = cat.load_table(&ident).await.unwrap();
        let mut got: Vec<(i64, String, i64, Option<String>)> = Vec::new();
        let cols = ["id", "w", "n", "extra"].map(String::from).to_vec();
        for b in Scan::new(&t).select(cols).to_batches().await.unwrap() {
            let id = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let w = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            let n = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            let x = b.column(3).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                let extra = (!arrow::array::Array::is_null(x, i)).then(|| x.value(i).to_string());
                got.push((id.value(i), w.value(i).to_string(), n.value(i), extra));
            }
        }
        got.sort();
        let want: Vec<(i64, String, i64, Option<String>)> = [
            (1, "s1", 1),
            (2, "s2", 2),
            (3, "a3", 103),
            (4, "a4", 104),
            (5, "b5", 205),
            (6, "b6", 206),
            (7, "a7", 107),
        ]
        .into_iter()
        .map(|(i, w, n)| (i, w.to_string(), n, None))
        .collect();
        assert_eq!(got, want, "format {fv:?} {mode}");
    }
}

/// Commits the tasks' staged upserts through the one commit path.
async fn commit_upserts(
    cat: &floe::Catalog,
    staged: &[floe::pending::PendingChange],
    opts: &UpsertOptions,
) -> floe::Result<floe::keyed::UpsertResult> {
    let options = floe::pending::CommitPendingOptions::new().with_upsert(opts.clone());
    match floe::pending::commit_pending(cat, staged, &options).await? {
        floe::pending::PendingCommit::Upsert(r) => Ok(r),
        other => panic!("an upsert committed as {other:?}"),
    }
}
