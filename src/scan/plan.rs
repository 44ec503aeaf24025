//! Scan planning over loaded manifests: which data files a scan reads. Pure: no I/O.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::expr::{BoundPredicate, Predicate};
#[cfg(test)]
use iceberg::spec::Manifest;
use iceberg::spec::{
    DataContentType, ManifestEntry, ManifestFile, ManifestStatus, PartitionSpec, Schema,
};

use super::delete_index::{DeleteEntry, DeleteIndex};
use crate::codec::manifest::{Pick, Probe};
use crate::error::{Error, Result};
use crate::expr::{
    field_ids, file_may_match_rewritten, manifest_may_match, partition_matches,
    project_to_partition,
};
use crate::spec::{DataFile, Struct};
use crate::table::EntryChooser;

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
/// the data files that may hold matching rows, each with the delete files that apply to it
/// (the planner over manifests already decoded, for tests).
#[cfg(test)]
pub(crate) fn plan_files(
    manifests: &[(Arc<PartitionSpec>, Arc<Manifest>, Option<i64>)],
    filter: Option<&BoundPredicate>,
    partition_filters: &PartitionFilters,
    table: &str,
) -> Result<(Vec<PlannedFile>, PlanStats)> {
    let filter = filter.cloned().map(Arc::new);
    let mut plan = Planned::default();
    for (spec, manifest, first_row_id) in manifests {
        let mut planner =
            ManifestPlanner::new(spec, partition_filters, filter.clone(), *first_row_id, None);
        let mut kept = Vec::new();
        for e in manifest.entries() {
            match planner.want(e) {
                Pick::Keep => kept.push(e.as_ref().clone()),
                Pick::Skip => {}
                Pick::Stop => break,
            }
        }
        plan.add(planner, kept, table)?;
    }
    Ok(plan.finish())
}

/// Decides, entry by entry as one manifest is decoded, what a scan plans of it: live delete
/// files, and the live data files its partition filter and column metrics cannot rule out
/// (up to `rows_wanted` certain rows when given). Used as an [`EntryChooser`], it sees each
/// entry as a [`Probe`] decodes it ([`plan_probe`]).
pub(crate) struct ManifestPlanner {
    spec: Arc<PartitionSpec>,
    partition: Option<Predicate>,
    filter: Option<Arc<BoundPredicate>>,
    manifest_first_row_id: Option<i64>,
    next_row_id: Option<i64>,
    /// Stop once kept data files hold this many certain rows (a limit with no filter).
    rows_wanted: Option<u64>,
    /// Rows of kept data files that no delete file applies to.
    rows_certain: u64,
    /// The snapshot's delete files, when a limited plan has deletes to consider: a data file
    /// they apply to adds no certain rows.
    deletes: Option<Arc<DeleteIndex>>,
    /// The first row id of each kept data file, in entry order.
    row_ids: Vec<Option<i64>>,
    stats: PlanStats,
}

impl ManifestPlanner {
    /// A planner of one manifest of `spec`, whose data files without a first row id take
    /// the manifest's (`first_row_id`), counted on in entry order.
    pub(crate) fn new(
        spec: &Arc<PartitionSpec>,
        partition_filters: &PartitionFilters,
        filter: Option<Arc<BoundPredicate>>,
        first_row_id: Option<i64>,
        rows_wanted: Option<u64>,
    ) -> Self {
        Self {
            spec: spec.clone(),
            partition: partition_filters.get(spec.spec_id()).cloned(),
            filter,
            manifest_first_row_id: first_row_id,
            next_row_id: first_row_id,
            rows_wanted,
            rows_certain: 0,
            deletes: None,
            row_ids: Vec::new(),
            stats: PlanStats::default(),
        }
    }

    /// Counts as certain only the rows of data files that none of `deletes` applies to (a
    /// limited plan whose snapshot has delete files; a probe must then decode paths and
    /// partitions).
    pub(crate) fn with_deletes(mut self, deletes: Arc<DeleteIndex>) -> Self {
        self.deletes = Some(deletes);
        self
    }

    /// The rows of the kept data files that no delete file applies to.
    pub(crate) fn rows_certain(&self) -> u64 {
        self.rows_certain
    }
}

impl EntryChooser for ManifestPlanner {
    fn want(&mut self, entry: &ManifestEntry) -> Pick {
        let f = entry.data_file();
        let first_row_id = match f.first_row_id() {
            None if f.content_type() == DataContentType::Data => {
                let id = self.next_row_id;
                if let Some(n) = self.next_row_id.as_mut() {
                    *n += f.record_count() as i64;
                }
                id
            }
            own => own,
        };
        if entry.status() == ManifestStatus::Deleted {
            return Pick::Skip;
        }
        if f.content_type() != DataContentType::Data {
            return Pick::Keep;
        }
        if self.rows_wanted.is_some_and(|n| self.rows_certain >= n) {
            return Pick::Stop;
        }
        self.stats.data_files += 1;
        if let Some(pp) = &self.partition {
            if !partition_matches(pp, &self.spec, f.partition()) {
                self.stats.pruned_by_partition += 1;
                return Pick::Skip;
            }
        }
        if let Some(flt) = &self.filter {
            if !file_may_match_rewritten(flt, f) {
                self.stats.pruned_by_metrics += 1;
                return Pick::Skip;
            }
        }
        let deleted = self.deletes.as_ref().is_some_and(|ix| {
            let seq = entry.sequence_number().unwrap_or(0);
            !ix.for_data_file(f.file_path(), seq, self.spec.spec_id(), f.partition())
                .is_empty()
        });
        if !deleted {
            self.rows_certain += f.record_count();
        }
        self.row_ids.push(first_row_id);
        Pick::Keep
    }

    fn restart(&mut self) {
        self.next_row_id = self.manifest_first_row_id;
        self.rows_certain = 0;
        self.row_ids.clear();
        self.stats = PlanStats::default();
    }
}

/// The probe a plan with `filter` decodes entries by: the partition tuple and the metrics of
/// the filter's columns. `None` without a filter: every live entry is kept, and a probe
/// would only decode them twice.
pub(crate) fn plan_probe(filter: Option<&BoundPredicate>) -> Option<Arc<Probe>> {
    let filter = filter?;
    let mut metric_ids = Vec::new();
    field_ids(filter, &mut metric_ids);
    Some(Arc::new(Probe {
        metric_ids,
        partition: true,
        path: false,
    }))
}

/// A plan gathered manifest by manifest.
#[derive(Debug, Default)]
pub(crate) struct Planned {
    files: Vec<PlannedFile>,
    deletes: Vec<DeleteEntry>,
    stats: PlanStats,
}

impl Planned {
    /// Adds what `planner` kept of its manifest (`kept`: the entries it said yes to, in
    /// order, decoded whole).
    pub(crate) fn add(
        &mut self,
        planner: ManifestPlanner,
        kept: Vec<ManifestEntry>,
        table: &str,
    ) -> Result<()> {
        let s = planner.stats;
        self.stats.data_files += s.data_files;
        self.stats.pruned_by_partition += s.pruned_by_partition;
        self.stats.pruned_by_metrics += s.pruned_by_metrics;
        let mut row_ids = planner.row_ids.into_iter();
        for entry in kept {
            let sequence_number = entry.sequence_number();
            let f = entry.data_file;
            if f.content_type() != DataContentType::Data {
                let sequence_number = sequence_number.ok_or_else(|| {
                    Error::corrupt(format!(
                        "table {table}: delete file '{}' has no sequence number",
                        f.file_path()
                    ))
                })?;
                self.deletes.push(DeleteEntry {
                    file: Arc::new(f),
                    spec: planner.spec.clone(),
                    sequence_number,
                });
                continue;
            }
            let first_row_id = row_ids.next().ok_or_else(|| {
                Error::corrupt(format!(
                    "table {table}: a manifest's entries changed while it was planned"
                ))
            })?;
            self.files.push(PlannedFile {
                partition: f.partition().clone(),
                file: f,
                spec: planner.spec.clone(),
                sequence_number: sequence_number.unwrap_or(0),
                deletes: Vec::new(),
                first_row_id,
            });
        }
        Ok(())
    }

    /// The delete files gathered so far, indexed.
    pub(crate) fn delete_index(&self) -> DeleteIndex {
        DeleteIndex::new(self.deletes.clone())
    }

    /// The planned files with the delete files that apply to each, and the counters.
    pub(crate) fn finish(self) -> (Vec<PlannedFile>, PlanStats) {
        let Planned {
            files: mut out,
            deletes,
            mut stats,
        } = self;
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
        (out, stats)
    }
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
