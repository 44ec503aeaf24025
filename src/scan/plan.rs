//! Scan planning over loaded manifests: which data files a scan reads. Pure: no I/O.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::expr::{BoundPredicate, Predicate};
use iceberg::spec::{
    DataContentType, Manifest, ManifestFile, ManifestStatus, PartitionSpec, Schema,
};

use super::delete_index::{DeleteEntry, DeleteIndex};
use crate::error::{Error, Result};
use crate::expr::{file_may_match, manifest_may_match, partition_matches, project_to_partition};
use crate::spec::{DataFile, Struct};

/// A row filter projected onto each partitioned spec, once per spec.
#[derive(Debug, Default)]
pub struct PartitionFilters {
    by_spec: HashMap<i32, Predicate>,
}

impl PartitionFilters {
    /// Projects `filter` onto every partitioned spec in `specs`.
    pub fn new<'a>(
        filter: Option<&BoundPredicate>,
        specs: impl IntoIterator<Item = &'a Arc<PartitionSpec>>,
    ) -> Result<Self> {
        let mut by_spec = HashMap::new();
        if let Some(f) = filter {
            for spec in specs.into_iter().filter(|s| !s.is_unpartitioned()) {
                by_spec.insert(spec.spec_id(), project_to_partition(f, spec)?);
            }
        }
        Ok(Self { by_spec })
    }

    /// The partition predicate of a spec (`None`: nothing to prune by).
    pub fn get(&self, spec_id: i32) -> Option<&Predicate> {
        self.by_spec.get(&spec_id)
    }

    /// May a data manifest hold matching files, judging by its partition summaries?
    pub fn manifest_may_match(
        &self,
        spec: &PartitionSpec,
        schema: &Schema,
        manifest: &ManifestFile,
    ) -> bool {
        match self.get(spec.spec_id()) {
            Some(p) => manifest_may_match(p, spec, schema, manifest.partitions.as_deref()),
            None => true,
        }
    }
}

/// A data file the scan must read, with what planning knows about it.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// The data file entry.
    pub file: DataFile,
    /// Its partition spec.
    pub spec: Arc<PartitionSpec>,
    /// Its partition tuple.
    pub partition: Struct,
    /// Its data sequence number.
    pub sequence_number: i64,
    /// The delete files that apply to it.
    pub deletes: Vec<DeleteEntry>,
    /// v3: the row id of its first row (its own, or inherited from its manifest).
    pub first_row_id: Option<i64>,
}

/// Counters of what planning skipped.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct PlanStats {
    /// Live data files considered.
    pub data_files: usize,
    /// Files skipped by partition values.
    pub pruned_by_partition: usize,
    /// Files skipped by column metrics.
    pub pruned_by_metrics: usize,
    /// Live delete files in the snapshot.
    pub delete_files: usize,
    /// Planned data files with at least one delete file to apply.
    pub files_with_deletes: usize,
}

/// Plans a scan of `manifests` (data and delete manifests of one snapshot) for `filter`:
/// the data files that may hold matching rows, each with the delete files that apply to it.
pub fn plan_files(
    manifests: &[(Arc<PartitionSpec>, Manifest, Option<i64>)],
    filter: Option<&BoundPredicate>,
    partition_filters: &PartitionFilters,
    table: &str,
) -> Result<(Vec<PlannedFile>, PlanStats)> {
    let mut stats = PlanStats::default();
    let mut deletes = Vec::new();
    let mut out = Vec::new();
    for (spec, manifest, manifest_first_row_id) in manifests {
        let part_pred = partition_filters.get(spec.spec_id());
        // Data files without a first row id take the manifest's, counted on in entry order.
        let mut next_row_id = *manifest_first_row_id;
        for entry in manifest.entries() {
            let f = entry.data_file();
            let first_row_id = match f.first_row_id() {
                None if f.content_type() == DataContentType::Data => {
                    let id = next_row_id;
                    if let Some(n) = next_row_id.as_mut() {
                        *n += f.record_count() as i64;
                    }
                    id
                }
                own => own,
            };
            if entry.status() == ManifestStatus::Deleted {
                continue;
            }
            if f.content_type() != DataContentType::Data {
                let sequence_number = entry.sequence_number().ok_or_else(|| {
                    Error::corrupt(format!(
                        "table {table}: delete file '{}' has no sequence number",
                        f.file_path()
                    ))
                })?;
                deletes.push(DeleteEntry {
                    file: f.clone(),
                    spec: spec.clone(),
                    sequence_number,
                });
                continue;
            }
            stats.data_files += 1;
            if let Some(pp) = &part_pred {
                if !partition_matches(pp, spec, f.partition()) {
                    stats.pruned_by_partition += 1;
                    continue;
                }
            }
            if let Some(flt) = filter {
                if !file_may_match(flt, f) {
                    stats.pruned_by_metrics += 1;
                    continue;
                }
            }
            out.push(PlannedFile {
                file: f.clone(),
                spec: spec.clone(),
                partition: f.partition().clone(),
                sequence_number: entry.sequence_number().unwrap_or(0),
                deletes: Vec::new(),
                first_row_id,
            });
        }
    }
    stats.delete_files = deletes.len();
    if !deletes.is_empty() {
        let index = DeleteIndex::new(deletes);
        for p in &mut out {
            p.deletes = index
                .for_data_file(
                    p.file.file_path(),
                    p.sequence_number,
                    p.spec.spec_id(),
                    &p.partition,
                )
                .into_iter()
                .cloned()
                .collect();
            if !p.deletes.is_empty() {
                stats.files_with_deletes += 1;
            }
        }
    }
    Ok((out, stats))
}
