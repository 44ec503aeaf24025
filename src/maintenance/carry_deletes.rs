//! Deletes committed to a compaction's input files while it ran, carried onto the files it
//! wrote, so that the compaction commits instead of losing the race.
//!
//! A CDC sink that deletes or updates rows in many files on every commit adds position
//! deletes (deletion vectors in v3) to files a compaction is rewriting; the compaction's new
//! files hold those rows live, so as it stands it must not commit (Iceberg Java's
//! `RewriteFiles` refuses it the same way) and it is redone, forever, while the sink runs.
//! Here the rows those deletes remove are found in the new files and deleted there too, in the
//! compaction's own commit: the positions deleted in each input file since the plan are read,
//! the rows at those positions are matched in the written files by identity — in v3 by row id
//! (a rewrite keeps every row's `_row_id`), in v2 by their values (rows equal in every column
//! are interchangeable) — and a deletion vector (v3) or a file-scoped position delete file (v2)
//! is written for each new file that holds one.
//!
//! An input file removed meanwhile counts as every row of it deleted (its rows, if kept, live
//! in the files that commit added). Anything else leaves the conflict as it was: every input
//! removed, an equality
//! delete added meanwhile (unless the new files keep the plan's sequence number and so stay
//! under it), a deletion vector that shrank, or a row that cannot be matched.

use std::collections::{HashMap, HashSet};

use arrow::row::{RowConverter, SortField};
use arrow_array::{Array, Int64Array, RecordBatch};
use futures::StreamExt;
use roaring::RoaringTreemap;

use super::rewrite_plan::removed_with_their_deletes;
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{PlannedFile, Scan, SnapshotSelector};
use crate::spec::{DataContentType, DataFile, FormatVersion};
use crate::table::Table;
use crate::txn::FileKey;
use crate::write::DeleteFileWriter;

/// What carrying the deletes produced: the new base to commit onto and the files to remove
/// and add on top of the rewrite's own.
pub(crate) struct Carried {
    /// The table the deletes were read from (the commit's new base).
    pub table: Table,
    /// The rewritten data files and the file-scoped delete files live for them in `table`.
    pub remove: Vec<FileKey>,
    /// How many of `remove` are delete files.
    pub removed_delete_files: usize,
    /// Delete files for the written files, with their partition spec ids.
    pub add: Vec<(i32, DataFile)>,
}

/// The deletes of one input file in one state of the table.
struct InputDeletes {
    file: PlannedFile,
    positions: RoaringTreemap,
    equality: HashSet<String>,
}

/// Deleted positions of the files `paths` in `table` (at `snapshot`, else its current one).
async fn input_deletes(
    table: &Table,
    snapshot: Option<i64>,
    paths: &HashSet<&str>,
) -> Result<HashMap<String, InputDeletes>> {
    let mut scan = Scan::new(table);
    if let Some(s) = snapshot {
        scan = scan.snapshot(SnapshotSelector::Id(s));
    }
    let mut plan = scan.plan().await?;
    plan.retain(|f| paths.contains(f.file.file_path()));
    plan.load_deletes(|_| true).await?;
    let mut out = HashMap::new();
    for (i, f) in plan.files.iter().enumerate() {
        let positions = plan
            .deleted_positions(i)
            .flatten()
            .cloned()
            .unwrap_or_default();
        let equality = f
            .deletes
            .iter()
            .filter(|d| d.file.content_type() == DataContentType::EqualityDeletes)
            .map(|d| d.file.file_path().to_string())
            .collect();
        out.insert(
            f.file.file_path().to_string(),
            InputDeletes {
                file: f.clone(),
                positions,
                equality,
            },
        );
    }
    Ok(out)
}

/// Each row's identity: its row id (v3) or its values in a comparable byte form (v2).
struct Identity {
    v3: bool,
    converter: Option<RowConverter>,
}

impl Identity {
    /// The identities of `batch`'s rows; `None` when a row has none (a row id missing).
    fn keys(&mut self, batch: &RecordBatch) -> Option<Vec<Vec<u8>>> {
        if self.v3 {
            let ids = batch
                .column_by_name("_row_id")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())?;
            if ids.null_count() > 0 {
                return None;
            }
            return Some(
                ids.values()
                    .iter()
                    .map(|v| v.to_le_bytes().to_vec())
                    .collect(),
            );
        }
        if self.converter.is_none() {
            let fields = batch
                .schema()
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            self.converter = Some(RowConverter::new(fields).ok()?);
        }
        let rows = self
            .converter
            .as_ref()?
            .convert_columns(batch.columns())
            .ok()?;
        Some(rows.iter().map(|r| r.as_ref().to_vec()).collect())
    }
}

/// Carries the deletes committed to a rewrite's input files since its plan onto the files it
/// wrote, once per commit round: what does not change between rounds (the inputs' deletes at
/// the plan, the identities of input rows already looked up, and in v3 where each row id
/// landed in the written files) is read once, so a round costs the deletes added since the
/// last one.
pub(crate) struct Carrier<'a> {
    catalog: &'a Catalog,
    base: &'a Table,
    plan_snapshot: i64,
    rewritten: HashSet<&'a str>,
    ignore_equality_deletes: bool,
    v3: bool,
    /// The written files, with their partition spec ids.
    outputs: Vec<(i32, &'a DataFile)>,
    /// The inputs' deletes at the plan's snapshot.
    then: Option<HashMap<String, InputDeletes>>,
    /// Identities of input rows read so far, by input file and position.
    known: HashMap<String, HashMap<u64, Vec<u8>>>,
    /// v3: every written row's row id with its file (index into `outputs`) and position,
    /// sorted by row id.
    row_ids: Option<Vec<(i64, u32, u64)>>,
    /// v2, written files of at most [`VALUE_CACHE_ROWS`] rows: where each row value is in
    /// them (file index, position), read once.
    values: Option<ValuePlaces>,
}

/// Row values (their comparable bytes) and where each is in the written files: (file index,
/// position), in read order.
type ValuePlaces = HashMap<Vec<u8>, Vec<(u32, u64)>>;

/// Written rows up to which a v2 carrier keeps their values between rounds (beyond, each
/// round reads the written files again).
const VALUE_CACHE_ROWS: u64 = 4_000_000;

impl<'a> Carrier<'a> {
    /// A carrier for the rewrite of `rewritten` (read at `plan_snapshot` of `base`) into
    /// `written`.
    pub(crate) fn new(
        catalog: &'a Catalog,
        base: &'a Table,
        plan_snapshot: i64,
        rewritten: &[&'a PlannedFile],
        written: &'a [(i32, Vec<DataFile>)],
        ignore_equality_deletes: bool,
    ) -> Self {
        Self {
            catalog,
            base,
            plan_snapshot,
            rewritten: rewritten.iter().map(|f| f.file.file_path()).collect(),
            ignore_equality_deletes,
            v3: base.metadata().format_version() >= FormatVersion::V3,
            outputs: written
                .iter()
                .flat_map(|(spec, files)| files.iter().map(move |f| (*spec, f)))
                .collect(),
            then: None,
            known: HashMap::new(),
            row_ids: None,
            values: None,
        }
    }

    /// The written files as a plan of `table` (no deletes apply to them yet).
    fn output_plan(&self, table: &Table) -> Result<crate::scan::ScanPlan> {
        let mut planned = Vec::with_capacity(self.outputs.len());
        for (spec_id, f) in &self.outputs {
            let spec = table
                .metadata()
                .partition_spec_by_id(*spec_id)
                .cloned()
                .ok_or_else(|| {
                    Error::corrupt(format!("written file names unknown spec {spec_id}"))
                })?;
            planned.push(PlannedFile {
                file: (*f).clone(),
                spec,
                partition: f.partition().clone(),
                sequence_number: 0,
                deletes: Vec::new(),
                first_row_id: None,
            });
        }
        Scan::plan_of_files(table, planned)
    }

    /// A scan of `table` returning rows' identities (v3: the row id only).
    fn identity_scan(&self, table: &Table) -> Scan {
        if self.v3 {
            Scan::new(table).in_current_schema().select(["_row_id"])
        } else {
            Scan::new(table).in_current_schema()
        }
    }

    /// v2: the written rows' values and where they are, read on the first call when there
    /// are at most [`VALUE_CACHE_ROWS`] of them (`None` past that, or when a value cannot be
    /// taken).
    async fn output_values(&mut self, table: &Table) -> Result<Option<&ValuePlaces>> {
        let rows: u64 = self.outputs.iter().map(|(_, f)| f.record_count()).sum();
        if self.values.is_none() && rows <= VALUE_CACHE_ROWS {
            let mut identity = Identity {
                v3: false,
                converter: None,
            };
            let mut values = ValuePlaces::new();
            let plan = self.output_plan(table)?;
            let mut stream = self.identity_scan(table).read_positioned(plan, true)?;
            while let Some(item) = stream.next().await {
                let (j, (batch, positions)) = item?;
                let positions = positions
                    .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
                let j = u32::try_from(j).map_err(|_| Error::io("too many written files"))?;
                let Some(keys) = identity.keys(&batch) else {
                    return Ok(None);
                };
                for (r, key) in keys.into_iter().enumerate() {
                    values.entry(key).or_default().push((j, positions.value(r)));
                }
            }
            self.values = Some(values);
        }
        Ok(self.values.as_ref())
    }

    /// Carries the deletes committed since the plan, as the table is now. `None`: there is
    /// nothing to carry, or it cannot be carried (the conflict stands).
    pub(crate) async fn carry(&mut self) -> Result<Option<Carried>> {
        let latest = self
            .base
            .same_branch(self.catalog.load_table(self.base.ident()).await?)?;
        let paths = self.rewritten.clone();
        let now = input_deletes(&latest, None, &paths).await?;
        if now.is_empty() {
            // Every input is gone: nothing of the rewrite would be left to commit.
            return Ok(None);
        }
        if self.then.is_none() {
            self.then = Some(input_deletes(self.base, Some(self.plan_snapshot), &paths).await?);
        }
        let then = self
            .then
            .as_ref()
            .ok_or_else(|| Error::io("carry: no plan state"))?;
        if then.len() != paths.len() {
            return Ok(None);
        }
        // The positions of each input deleted since the plan. An input a later commit removed
        // (a writer dropping a file whose rows it deleted, a copy-on-write rewrite, another
        // compaction) no longer holds any of its rows, wherever they went: all its positions
        // count as deleted, so none of them stays live in the written files.
        let mut newly: Vec<(PlannedFile, RoaringTreemap)> = Vec::new();
        for (path, t) in then {
            let Some(n) = now.get(path) else {
                let mut all = RoaringTreemap::new();
                all.insert_range(0..t.file.file.record_count());
                let d = &all - &t.positions;
                if !d.is_empty() {
                    newly.push((t.file.clone(), d));
                }
                continue;
            };
            if !self.ignore_equality_deletes && !n.equality.is_subset(&t.equality) {
                return Ok(None);
            }
            if !t.positions.is_subset(&n.positions) {
                return Ok(None);
            }
            let d = &n.positions - &t.positions;
            if !d.is_empty() {
                newly.push((n.file.clone(), d));
            }
        }
        if newly.is_empty() {
            return Ok(None);
        }
        let mut identity = Identity {
            v3: self.v3,
            converter: None,
        };
        // The identities of the rows deleted since the plan: read for the positions not
        // looked up in an earlier round.
        let missing: Vec<(PlannedFile, RoaringTreemap)> = newly
            .iter()
            .filter_map(|(f, d)| {
                let known = self.known.get(f.file.file_path());
                let m: RoaringTreemap = d
                    .iter()
                    .filter(|p| known.is_none_or(|k| !k.contains_key(p)))
                    .collect();
                (!m.is_empty()).then(|| (f.clone(), m))
            })
            .collect();
        if !missing.is_empty() {
            let inputs: Vec<PlannedFile> = missing.iter().map(|(f, _)| f.clone()).collect();
            let plan = Scan::plan_of_files(&latest, inputs)?;
            let mut stream = self.identity_scan(&latest).read_positioned(plan, true)?;
            while let Some(item) = stream.next().await {
                let (j, (batch, positions)) = item?;
                let positions = positions
                    .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
                let (file, wanted) = &missing[j];
                let Some(keys) = identity.keys(&batch) else {
                    return Ok(None);
                };
                let known = self
                    .known
                    .entry(file.file.file_path().to_string())
                    .or_default();
                for (r, key) in keys.into_iter().enumerate() {
                    let p = positions.value(r);
                    if wanted.contains(p) {
                        known.insert(p, key);
                    }
                }
            }
        }
        let mut wanted: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut rows = 0u64;
        for (f, d) in &newly {
            let Some(known) = self.known.get(f.file.file_path()) else {
                return Ok(None);
            };
            for p in d {
                let Some(key) = known.get(&p) else {
                    return Ok(None);
                };
                *wanted.entry(key.clone()).or_default() += 1;
                rows += 1;
            }
        }
        // Where those rows are in the written files.
        let mut found: Vec<RoaringTreemap> = vec![RoaringTreemap::new(); self.outputs.len()];
        if self.v3 {
            if self.row_ids.is_none() {
                let plan = self.output_plan(&latest)?;
                let mut ids = Vec::new();
                let mut stream = self.identity_scan(&latest).read_positioned(plan, true)?;
                while let Some(item) = stream.next().await {
                    let (j, (batch, positions)) = item?;
                    let positions = positions.ok_or_else(|| {
                        Error::io("row positions were not returned by the reader")
                    })?;
                    let Some(col) = batch
                        .column_by_name("_row_id")
                        .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                        .filter(|c| c.null_count() == 0)
                    else {
                        return Ok(None);
                    };
                    let j = u32::try_from(j).map_err(|_| Error::io("too many written files"))?;
                    ids.extend(
                        col.values()
                            .iter()
                            .enumerate()
                            .map(|(r, id)| (*id, j, positions.value(r))),
                    );
                }
                ids.sort_unstable();
                self.row_ids = Some(ids);
            }
            let ids = self.row_ids.as_deref().unwrap_or_default();
            for (key, n) in &wanted {
                let Ok(bytes) = <[u8; 8]>::try_from(key.as_slice()) else {
                    return Ok(None);
                };
                let id = i64::from_le_bytes(bytes);
                let from = ids.partition_point(|e| e.0 < id);
                let run: Vec<_> = ids[from..].iter().take_while(|e| e.0 == id).collect();
                if (run.len() as u64) < *n {
                    return Ok(None);
                }
                for e in run.into_iter().take(*n as usize) {
                    found[e.1 as usize].insert(e.2);
                }
            }
        } else if let Some(values) = self.output_values(&latest).await? {
            for (key, n) in &wanted {
                let Some(at) = values.get(key).filter(|at| at.len() as u64 >= *n) else {
                    return Ok(None);
                };
                for (j, p) in at.iter().take(*n as usize) {
                    found[*j as usize].insert(*p);
                }
            }
        } else {
            let plan = self.output_plan(&latest)?;
            let mut left = rows;
            let mut stream = self.identity_scan(&latest).read_positioned(plan, true)?;
            while let Some(item) = stream.next().await {
                let (j, (batch, positions)) = item?;
                let positions = positions
                    .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
                let Some(keys) = identity.keys(&batch) else {
                    return Ok(None);
                };
                for (r, key) in keys.into_iter().enumerate() {
                    if let Some(n) = wanted.get_mut(&key) {
                        if *n > 0 {
                            *n -= 1;
                            left -= 1;
                            found[j].insert(positions.value(r));
                        }
                    }
                }
            }
            if left != 0 {
                return Ok(None);
            }
        }
        let outputs = &self.outputs;
        let v3 = self.v3;
        // Delete files for the written files that hold such rows.
        let mut writer = DeleteFileWriter::new(&latest)?;
        let mut add = Vec::new();
        let result = async {
            if v3 {
                let vectors: Vec<(&DataFile, i32, RoaringTreemap)> = outputs
                    .iter()
                    .zip(&found)
                    .filter(|(_, p)| !p.is_empty())
                    .map(|((spec, f), p)| (*f, *spec, p.clone()))
                    .collect();
                let files = writer.write_deletion_vectors(&vectors).await?;
                for ((_, spec, _), d) in vectors.iter().zip(files) {
                    add.push((*spec, d));
                }
            } else {
                for ((spec_id, f), p) in outputs.iter().zip(&found) {
                    if p.is_empty() {
                        continue;
                    }
                    let spec = latest
                        .metadata()
                        .partition_spec_by_id(*spec_id)
                        .cloned()
                        .ok_or_else(|| Error::corrupt(format!("unknown spec {spec_id}")))?;
                    let d = writer
                        .write_position_deletes(
                            &spec,
                            f.partition(),
                            &[(f.file_path().to_string(), p.clone())],
                        )
                        .await?;
                    add.push((*spec_id, d));
                }
            }
            Ok::<_, Error>(())
        }
        .await;
        if let Err(e) = result {
            for p in writer.written() {
                let _ = latest.storage().delete(p).await;
            }
            return Err(e);
        }
        let (remove, removed_delete_files) =
            removed_with_their_deletes(now.values().map(|n| &n.file));
        Ok(Some(Carried {
            table: latest,
            remove,
            removed_delete_files,
            add,
        }))
    }
}
