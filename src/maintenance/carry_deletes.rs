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
//! Anything else leaves the conflict as it was: an input file removed meanwhile, an equality
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

/// Carries the deletes committed to `rewritten` (read at `plan_snapshot` of `base`) since the
/// plan onto `written`. `None`: there is nothing to carry, or it cannot be carried (the
/// conflict stands).
pub(crate) async fn carry_deletes(
    catalog: &Catalog,
    base: &Table,
    plan_snapshot: i64,
    rewritten: &[&PlannedFile],
    written: &[(i32, Vec<DataFile>)],
    ignore_equality_deletes: bool,
) -> Result<Option<Carried>> {
    let latest = base.same_branch(catalog.load_table(base.ident()).await?)?;
    let paths: HashSet<&str> = rewritten.iter().map(|f| f.file.file_path()).collect();
    let now = input_deletes(&latest, None, &paths).await?;
    if now.len() != paths.len() {
        return Ok(None);
    }
    let then = input_deletes(base, Some(plan_snapshot), &paths).await?;
    let mut newly: Vec<(&InputDeletes, RoaringTreemap)> = Vec::new();
    for (path, n) in &now {
        let Some(t) = then.get(path) else {
            return Ok(None);
        };
        if !ignore_equality_deletes && !n.equality.is_subset(&t.equality) {
            return Ok(None);
        }
        if !t.positions.is_subset(&n.positions) {
            return Ok(None);
        }
        let d = &n.positions - &t.positions;
        if !d.is_empty() {
            newly.push((n, d));
        }
    }
    if newly.is_empty() {
        return Ok(None);
    }
    let v3 = latest.metadata().format_version() >= FormatVersion::V3;
    let scan = if v3 {
        Scan::new(&latest).in_current_schema().with_row_lineage()
    } else {
        Scan::new(&latest).in_current_schema()
    };
    // The identities of the rows deleted since the plan, with how many of each.
    let inputs: Vec<PlannedFile> = newly.iter().map(|(n, _)| n.file.clone()).collect();
    let plan = Scan::plan_of_files(&latest, inputs)?;
    let mut identity = Identity {
        v3,
        converter: None,
    };
    let mut wanted: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut stream = scan.read_positioned(plan, true)?;
    while let Some(item) = stream.next().await {
        let (j, (batch, positions)) = item?;
        let positions =
            positions.ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        let deleted = &newly[j].1;
        let Some(keys) = identity.keys(&batch) else {
            return Ok(None);
        };
        for (r, key) in keys.into_iter().enumerate() {
            if deleted.contains(positions.value(r)) {
                *wanted.entry(key).or_default() += 1;
            }
        }
    }
    drop(stream);
    let rows: u64 = newly.iter().map(|(_, d)| d.len()).sum();
    if wanted.values().sum::<u64>() != rows {
        return Ok(None);
    }
    // Where those rows are in the written files.
    let outputs: Vec<(i32, &DataFile)> = written
        .iter()
        .flat_map(|(spec, files)| files.iter().map(move |f| (*spec, f)))
        .collect();
    let mut planned = Vec::with_capacity(outputs.len());
    for (spec_id, f) in &outputs {
        let spec = latest
            .metadata()
            .partition_spec_by_id(*spec_id)
            .cloned()
            .ok_or_else(|| Error::corrupt(format!("written file names unknown spec {spec_id}")))?;
        planned.push(PlannedFile {
            file: (*f).clone(),
            spec,
            partition: f.partition().clone(),
            sequence_number: 0,
            deletes: Vec::new(),
            first_row_id: None,
        });
    }
    let plan = Scan::plan_of_files(&latest, planned)?;
    let mut found: Vec<RoaringTreemap> = vec![RoaringTreemap::new(); outputs.len()];
    let mut left = rows;
    let mut stream = scan.read_positioned(plan, true)?;
    while let Some(item) = stream.next().await {
        let (j, (batch, positions)) = item?;
        let positions =
            positions.ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
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
    drop(stream);
    if left != 0 {
        return Ok(None);
    }
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
    let (remove, removed_delete_files) = removed_with_their_deletes(now.values().map(|n| &n.file));
    Ok(Some(Carried {
        table: latest,
        remove,
        removed_delete_files,
        add,
    }))
}
