//! `rewrite_position_delete_files`: per partition, merges position delete files into one
//! (v2) and drops positions of data files that are gone; in v3, folds position delete files
//! into one deletion vector per data file and drops deletion vectors of removed data files.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iceberg::spec::Operation;
use roaring::RoaringTreemap;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{canonical_path, read_positions, DeleteEntry};
use crate::spec::{DataContentType, DataFile, FormatVersion, PartitionSpec};
use crate::table::Table;
use crate::txn::{commit, FileKey, NoValidation, SnapshotProducer};
use crate::write::DeleteFileWriter;

/// What `rewrite_position_delete_files` did (the Spark procedure's result columns).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RewriteDeletesResult {
    /// The table at the new version.
    #[serde(skip)]
    pub table: Option<Table>,
    /// The `replace` snapshot (`None`: nothing to do).
    pub snapshot_id: Option<i64>,
    /// Delete files replaced or dropped.
    pub rewritten_delete_files_count: usize,
    /// Delete files written.
    pub added_delete_files_count: usize,
    /// Bytes of the replaced delete files.
    pub rewritten_bytes_count: u64,
    /// Bytes written.
    pub added_bytes_count: u64,
}

/// Options: `rewrite-all` (default false) and `min-input-files` (default 2: a partition with
/// at least this many position delete files is rewritten; one with dangling deletes always).
pub async fn rewrite_position_delete_files(
    catalog: &Catalog,
    table: &Table,
    options: &HashMap<String, String>,
) -> Result<RewriteDeletesResult> {
    let mut rewrite_all = false;
    let mut min_input_files = 2usize;
    for (k, v) in options {
        match k.as_str() {
            "rewrite-all" => rewrite_all = v.trim() == "true",
            "min-input-files" => {
                min_input_files = v.trim().parse().map_err(|_| {
                    Error::invalid(format!("option min-input-files='{v}' is not a number"))
                })?
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown rewrite_position_delete_files option '{k}'; known: rewrite-all, min-input-files"
                )))
            }
        }
    }
    let mut result = RewriteDeletesResult {
        table: Some(table.clone()),
        snapshot_id: None,
        rewritten_delete_files_count: 0,
        added_delete_files_count: 0,
        rewritten_bytes_count: 0,
        added_bytes_count: 0,
    };
    let Some(snap) = table.current_snapshot().cloned() else {
        return Ok(result);
    };
    let md = table.metadata();
    // Live data files (canonical path → file, spec) and live position delete files.
    let mut data: HashMap<String, (DataFile, Arc<PartitionSpec>)> = HashMap::new();
    let mut deletes: Vec<DeleteEntry> = Vec::new();
    for mf in table.manifest_list(&snap).await? {
        let spec = md
            .partition_spec_by_id(mf.partition_spec_id)
            .cloned()
            .ok_or_else(|| {
                Error::corrupt(format!("unknown partition spec {}", mf.partition_spec_id))
            })?;
        for e in table.load_manifest(&mf).await?.entries() {
            if !e.is_alive() {
                continue;
            }
            let f = e.data_file();
            match f.content_type() {
                DataContentType::Data => {
                    data.insert(
                        canonical_path(f.file_path()).to_string(),
                        (f.clone(), spec.clone()),
                    );
                }
                DataContentType::PositionDeletes => deletes.push(DeleteEntry {
                    file: Arc::new(f.clone()),
                    spec: spec.clone(),
                    sequence_number: e.sequence_number().unwrap_or(0),
                }),
                DataContentType::EqualityDeletes => {}
            }
        }
    }
    let v3 = md.format_version() == FormatVersion::V3;
    let mut groups: BTreeMap<String, Vec<DeleteEntry>> = BTreeMap::new();
    for d in deletes {
        let key = format!("{}:{:?}", d.spec.spec_id(), d.file.partition());
        groups.entry(key).or_default().push(d);
    }
    let storage = table.storage();
    let mut removed: Vec<FileKey> = Vec::new();
    let mut writer = DeleteFileWriter::new(table)?;
    let mut added: Vec<(i32, DataFile, i64)> = Vec::new();
    let mut vectors: Vec<(DataFile, i32, RoaringTreemap, i64)> = Vec::new();
    let outcome = async {
        for (_, group) in groups {
            let (spec, partition) = (group[0].spec.clone(), group[0].file.partition().clone());
            let mut by_file: BTreeMap<String, RoaringTreemap> = BTreeMap::new();
            let mut dangling = false;
            for d in &group {
                for (path, bm) in read_positions(storage, d).await? {
                    if data.contains_key(&path) {
                        *by_file.entry(path).or_default() |= bm;
                    } else {
                        dangling = true;
                    }
                }
            }
            let parquet_files = group.iter().filter(|d| !d.is_dv()).count();
            let rewrite = rewrite_all
                || dangling
                || (!v3 && parquet_files >= min_input_files)
                || (v3 && parquet_files > 0);
            if !rewrite {
                continue;
            }
            let seq = group.iter().map(|d| d.sequence_number).max().unwrap_or(0);
            for d in &group {
                removed.push(FileKey::of(&d.file));
                result.rewritten_delete_files_count += 1;
                result.rewritten_bytes_count += d.file.file_size_in_bytes();
            }
            if by_file.is_empty() {
                continue;
            }
            if v3 {
                for (path, bm) in by_file {
                    let (f, s) = &data[&path];
                    vectors.push((f.clone(), s.spec_id(), bm, seq));
                }
            } else {
                let entries: Vec<(String, RoaringTreemap)> = by_file
                    .into_iter()
                    .map(|(p, bm)| (data[&p].0.file_path().to_string(), bm))
                    .collect();
                let f = writer
                    .write_position_deletes(&spec, &partition, &entries)
                    .await?;
                added.push((spec.spec_id(), f, seq));
            }
        }
        if !vectors.is_empty() {
            let refs: Vec<(&DataFile, i32, RoaringTreemap)> = vectors
                .iter()
                .map(|(f, s, bm, _)| (f, *s, bm.clone()))
                .collect();
            for dv in writer.write_deletion_vectors(&refs).await? {
                let (_, s, _, seq) = vectors
                    .iter()
                    .find(|(f, ..)| Some(f.file_path().to_string()) == dv.referenced_data_file())
                    .ok_or_else(|| Error::io("deletion vector without its data file"))?;
                added.push((*s, dv, *seq));
            }
        }
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = outcome {
        writer.abort().await;
        return Err(e);
    }
    if removed.is_empty() {
        return Ok(result);
    }
    let mut seen = std::collections::HashSet::new();
    result.added_delete_files_count = added.len();
    result.added_bytes_count = added
        .iter()
        .filter(|(_, f, _)| seen.insert(f.file_path().to_string()))
        .map(|(_, f, _)| f.file_size_in_bytes())
        .sum();
    let mut producer = SnapshotProducer::new(Operation::Replace, vec![]).remove_files(removed);
    for (s, f, seq) in added {
        producer = producer.add_files_with_sequence_number(s, [f], seq);
    }
    match commit(catalog, table, &mut producer, &NoValidation).await {
        Ok(t) => {
            result.table = Some(t);
            result.snapshot_id = Some(producer.snapshot_id());
            Ok(result)
        }
        Err(e) => {
            if e.kind() != crate::ErrorKind::CommitStateUnknown {
                writer.abort().await;
            }
            Err(e)
        }
    }
}
