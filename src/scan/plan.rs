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
pub(crate) struct PartitionFilters {
    by_spec: HashMap<i32, Predicate>,
}

impl PartitionFilters {
    /// Projects `filter` onto every partitioned spec in `specs`.
    pub(crate) fn new<'a>(
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
    pub(crate) fn get(&self, spec_id: i32) -> Option<&Predicate> {
        self.by_spec.get(&spec_id)
    }

    /// May a data manifest hold matching files, judging by its partition summaries?
    pub(crate) fn manifest_may_match(
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
    /// Data manifests of the snapshot (with live files).
    pub data_manifests: usize,
    /// Of those, manifests skipped by their partition summaries (their files not counted
    /// below).
    pub pruned_data_manifests: usize,
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
pub(crate) fn plan_files(
    manifests: &[(Arc<PartitionSpec>, Arc<Manifest>, Option<i64>)],
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
                    file: Arc::new(f.clone()),
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

/// In-memory metadata for unit tests of planning and of the engines above it.
#[cfg(test)]
pub(crate) mod test_files {
    use super::*;
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, Datum, Literal, NestedField, PrimitiveType, Transform,
        Type,
    };

    /// Schema `id long, p int`.
    pub(crate) fn schema() -> Arc<Schema> {
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::required(2, "p", Type::Primitive(PrimitiveType::Int)).into(),
                ])
                .build()
                .unwrap(),
        )
    }

    /// Identity partitions on `p` (spec id 1).
    pub(crate) fn by_p(schema: &Arc<Schema>) -> Arc<PartitionSpec> {
        Arc::new(
            PartitionSpec::builder(schema.clone())
                .with_spec_id(1)
                .add_partition_field("p", "p", Transform::Identity)
                .unwrap()
                .build()
                .unwrap(),
        )
    }

    /// A file of `rows` rows, ids in `[lo, hi]`, in partition `p` (`None`: unpartitioned).
    pub(crate) fn file(
        path: &str,
        content: DataContentType,
        p: Option<i32>,
        rows: u64,
        ids: (i64, i64),
    ) -> DataFile {
        let partition = match p {
            Some(p) => Struct::from_iter([Some(Literal::int(p))]),
            None => Struct::empty(),
        };
        DataFileBuilder::default()
            .content(content)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(partition)
            .partition_spec_id(if p.is_some() { 1 } else { 0 })
            .record_count(rows)
            .file_size_in_bytes(1000)
            .lower_bounds([(1, Datum::long(ids.0))].into())
            .upper_bounds([(1, Datum::long(ids.1))].into())
            .build()
            .unwrap()
    }

    /// A planned data file with these delete files.
    pub(crate) fn planned(
        f: DataFile,
        spec: &Arc<PartitionSpec>,
        seq: i64,
        deletes: Vec<DataFile>,
    ) -> PlannedFile {
        PlannedFile {
            partition: f.partition().clone(),
            file: f,
            spec: spec.clone(),
            sequence_number: seq,
            deletes: deletes
                .into_iter()
                .map(|file| DeleteEntry {
                    file: Arc::new(file),
                    spec: spec.clone(),
                    sequence_number: seq,
                })
                .collect(),
            first_row_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_files::{by_p, file, schema};
    use super::*;
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{
        Datum, FormatVersion, ManifestContentType, ManifestEntry, ManifestMetadata,
    };

    fn manifest(
        spec: &Arc<PartitionSpec>,
        content: ManifestContentType,
        entries: Vec<(ManifestStatus, Option<i64>, DataFile)>,
    ) -> Arc<Manifest> {
        let md = ManifestMetadata::builder()
            .schema(schema())
            .schema_id(0)
            .partition_spec(spec.as_ref().clone())
            .format_version(FormatVersion::V3)
            .content(content)
            .build();
        let entries = entries
            .into_iter()
            .map(|(status, seq, f)| {
                ManifestEntry::builder()
                    .status(status)
                    .snapshot_id(1)
                    .sequence_number_opt(seq)
                    .file_sequence_number_opt(seq)
                    .data_file(f)
                    .build()
            })
            .collect();
        Arc::new(Manifest::new(md, entries))
    }

    fn bound(text: Predicate) -> BoundPredicate {
        text.bind(schema(), true).unwrap()
    }

    fn paths(files: &[PlannedFile]) -> Vec<&str> {
        files.iter().map(|f| f.file.file_path()).collect()
    }

    #[test]
    fn partitions_and_metrics_prune_files() {
        let s = schema();
        let spec = by_p(&s);
        let data = manifest(
            &spec,
            ManifestContentType::Data,
            vec![
                (
                    ManifestStatus::Added,
                    Some(1),
                    file("a", DataContentType::Data, Some(1), 10, (0, 9)),
                ),
                (
                    ManifestStatus::Added,
                    Some(1),
                    file("b", DataContentType::Data, Some(2), 10, (0, 9)),
                ),
                (
                    ManifestStatus::Existing,
                    Some(1),
                    file("c", DataContentType::Data, Some(1), 10, (10, 19)),
                ),
                (
                    ManifestStatus::Deleted,
                    Some(1),
                    file("gone", DataContentType::Data, Some(1), 10, (0, 9)),
                ),
            ],
        );
        let manifests = vec![(spec.clone(), data, None)];
        let filter = bound(
            Reference::new("p")
                .equal_to(Datum::int(1))
                .and(Reference::new("id").less_than(Datum::long(5))),
        );
        let pf = PartitionFilters::new(Some(&filter), [&spec]).unwrap();
        let (files, stats) = plan_files(&manifests, Some(&filter), &pf, "db.t").unwrap();
        assert_eq!(paths(&files), ["a"]);
        assert_eq!(
            (
                stats.data_files,
                stats.pruned_by_partition,
                stats.pruned_by_metrics
            ),
            (3, 1, 1)
        );
        // No filter: every live file, none pruned.
        let (files, stats) =
            plan_files(&manifests, None, &PartitionFilters::default(), "db.t").unwrap();
        assert_eq!(paths(&files), ["a", "b", "c"]);
        assert_eq!(stats.pruned_by_partition + stats.pruned_by_metrics, 0);
    }

    #[test]
    fn deletes_apply_by_sequence_number_and_partition() {
        let s = schema();
        let spec = by_p(&s);
        let data = manifest(
            &spec,
            ManifestContentType::Data,
            vec![
                (
                    ManifestStatus::Added,
                    Some(1),
                    file("old", DataContentType::Data, Some(1), 10, (0, 9)),
                ),
                (
                    ManifestStatus::Added,
                    Some(3),
                    file("new", DataContentType::Data, Some(1), 10, (0, 9)),
                ),
                (
                    ManifestStatus::Added,
                    Some(1),
                    file("other", DataContentType::Data, Some(2), 10, (0, 9)),
                ),
            ],
        );
        let deletes = manifest(
            &spec,
            ManifestContentType::Deletes,
            vec![(
                ManifestStatus::Added,
                Some(2),
                file("pos", DataContentType::PositionDeletes, Some(1), 1, (0, 0)),
            )],
        );
        let manifests = vec![(spec.clone(), data, None), (spec.clone(), deletes, None)];
        let (files, stats) =
            plan_files(&manifests, None, &PartitionFilters::default(), "db.t").unwrap();
        let with: Vec<(&str, usize)> = files
            .iter()
            .map(|f| (f.file.file_path(), f.deletes.len()))
            .collect();
        // Position deletes apply to data files of the same partition with a sequence number
        // at most theirs: not to the newer file, nor to another partition.
        assert_eq!(with, [("old", 1), ("new", 0), ("other", 0)]);
        assert_eq!((stats.delete_files, stats.files_with_deletes), (1, 1));
    }

    #[test]
    fn data_files_inherit_first_row_ids_in_entry_order() {
        let s = schema();
        let spec = by_p(&s);
        let data = manifest(
            &spec,
            ManifestContentType::Data,
            vec![
                (
                    ManifestStatus::Added,
                    Some(1),
                    file("a", DataContentType::Data, Some(1), 10, (0, 9)),
                ),
                (
                    ManifestStatus::Existing,
                    Some(1),
                    file("b", DataContentType::Data, Some(1), 5, (0, 9)),
                ),
                (
                    ManifestStatus::Deleted,
                    Some(1),
                    file("d", DataContentType::Data, Some(1), 7, (0, 9)),
                ),
            ],
        );
        let (files, _) = plan_files(
            &[(spec, data, Some(100))],
            None,
            &PartitionFilters::default(),
            "db.t",
        )
        .unwrap();
        let ids: Vec<Option<i64>> = files.iter().map(|f| f.first_row_id).collect();
        assert_eq!(ids, [Some(100), Some(110)]);
    }

    #[test]
    fn a_delete_file_without_a_sequence_number_is_corrupt() {
        let s = schema();
        let spec = by_p(&s);
        let deletes = manifest(
            &spec,
            ManifestContentType::Deletes,
            vec![(
                ManifestStatus::Existing,
                None,
                file("pos", DataContentType::PositionDeletes, Some(1), 1, (0, 0)),
            )],
        );
        let err = plan_files(
            &[(spec, deletes, None)],
            None,
            &PartitionFilters::default(),
            "db.t",
        )
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        assert!(
            err.to_string().contains("db.t") && err.to_string().contains("pos"),
            "{err}"
        );
    }
}
