//! The snapshot producer: writes manifests and the manifest list, builds the snapshot and the
//! next table metadata. Iceberg-rust keeps its producer private; this one is ours.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::{
    DataFile, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, Summary, TableMetadataBuilder, MAIN_BRANCH,
};

use super::summary::SummaryCounts;
use crate::error::{Error, Result};
use crate::spec::{FormatVersion, ManifestContentType, TableMetadata};
use crate::storage::join;
use crate::table::Table;

/// A staged change that becomes one snapshot. The snapshot id and the manifests of added
/// files are fixed on first use and reused by every retry.
#[derive(Debug)]
pub struct SnapshotProducer {
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    operation: Operation,
    added: Vec<DataFile>,
    added_manifests: Option<Vec<ManifestFile>>,
    properties: HashMap<String, String>,
    attempt: u32,
    last_list: Option<String>,
    expired_metadata: Vec<String>,
}

/// A positive random snapshot id, as Iceberg Java derives them.
pub fn new_snapshot_id() -> i64 {
    let u = uuid::Uuid::new_v4();
    let (hi, lo) = u.as_u64_pair();
    ((hi ^ lo) & (i64::MAX as u64)) as i64
}

impl SnapshotProducer {
    /// A producer for `operation` adding `files`.
    pub fn new(operation: Operation, added: Vec<DataFile>) -> Self {
        Self {
            snapshot_id: new_snapshot_id(),
            commit_uuid: uuid::Uuid::new_v4(),
            operation,
            added,
            added_manifests: None,
            properties: HashMap::new(),
            attempt: 0,
            last_list: None,
            expired_metadata: Vec::new(),
        }
    }

    /// Extra summary properties (for example `engine-name`).
    pub fn with_summary_properties(mut self, props: HashMap<String, String>) -> Self {
        self.properties = props;
        self
    }

    /// The snapshot id this producer commits.
    pub fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }

    async fn write_added_manifests(&mut self, base: &Table) -> Result<Vec<ManifestFile>> {
        if let Some(m) = &self.added_manifests {
            return Ok(m.clone());
        }
        let md = base.metadata();
        let io = base.storage().file_io();
        // Added files are written with the table's default partition spec.
        let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
        if !self.added.is_empty() {
            by_spec.insert(md.default_partition_spec_id(), self.added.clone());
        }
        let schema = md.current_schema().clone();
        let mut out = Vec::new();
        for (i, (spec_id, files)) in by_spec.into_iter().enumerate() {
            let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
                Error::invalid(format!(
                    "data file refers to partition spec {spec_id}, which table {} does not have",
                    base.name()
                ))
            })?;
            let path = join(
                md.location(),
                &format!("metadata/{}-m{i}.avro", self.commit_uuid),
            );
            let output = io.new_output(&path)?;
            let b = ManifestWriterBuilder::new(
                output,
                Some(self.snapshot_id),
                schema.clone(),
                spec.as_ref().clone(),
            );
            let mut w = match md.format_version() {
                FormatVersion::V1 => b.build_v1(),
                FormatVersion::V2 => b.build_v2_data(),
                FormatVersion::V3 => b.build_v3_data(),
            };
            for f in files {
                // A negative sequence number leaves it null: inherited from the manifest list.
                w.add_file(f, -1)?;
            }
            out.push(w.write_manifest_file().await?);
        }
        self.added_manifests = Some(out.clone());
        Ok(out)
    }

    /// Metadata files the last produced version dropped from its metadata log
    /// (`write.metadata.previous-versions-max`).
    pub fn expired_metadata_files(&self) -> &[String] {
        &self.expired_metadata
    }

    /// Deletes the manifest list of the last (failed) attempt.
    pub async fn discard_attempt(&mut self, storage: &crate::storage::Storage) {
        if let Some(l) = self.last_list.take() {
            let _ = storage.delete(&l).await;
        }
    }

    /// Deletes every file this producer wrote (the change was not committed).
    pub async fn abort(&mut self, storage: &crate::storage::Storage) {
        self.discard_attempt(storage).await;
        for m in self.added_manifests.take().unwrap_or_default() {
            let _ = storage.delete(&m.manifest_path).await;
        }
    }

    /// Produces the next metadata of `base` with this snapshot on `main`.
    pub async fn produce(&mut self, base: &Table) -> Result<TableMetadata> {
        let md = base.metadata();
        let io = base.storage().file_io();
        let new_manifests = self.write_added_manifests(base).await?;
        let parent = md.current_snapshot().cloned();
        let mut existing = Vec::new();
        if let Some(p) = &parent {
            let bytes = base.storage().get(p.manifest_list()).await?;
            let list = iceberg::spec::ManifestList::parse_with_version(&bytes, md.format_version())
                .map_err(|e| {
                    Error::corrupt(format!(
                        "manifest list '{}' of table {}: {e}",
                        p.manifest_list(),
                        base.name()
                    ))
                })?;
            existing = list.consume_entries().into_iter().collect::<Vec<_>>();
        }
        let seq = md.next_sequence_number();
        let list_path = join(
            md.location(),
            &format!(
                "metadata/snap-{}-{}-{}.avro",
                self.snapshot_id, self.attempt, self.commit_uuid
            ),
        );
        self.attempt += 1;
        self.last_list = Some(list_path.clone());
        let writer = io.new_output(&list_path)?.writer().await?;
        let parent_id = parent.as_ref().map(|p| p.snapshot_id());
        let first_row_id = md.next_row_id();
        let mut lw = match md.format_version() {
            FormatVersion::V1 => ManifestListWriter::v1(writer, self.snapshot_id, parent_id),
            FormatVersion::V2 => ManifestListWriter::v2(writer, self.snapshot_id, parent_id, seq),
            FormatVersion::V3 => {
                ManifestListWriter::v3(writer, self.snapshot_id, parent_id, seq, Some(first_row_id))
            }
        };
        // New manifests first (as Java does), then carried-over ones; data before deletes.
        let mut all: Vec<ManifestFile> = new_manifests;
        all.extend(existing);
        all.sort_by_key(|m| matches!(m.content, ManifestContentType::Deletes));
        lw.add_manifests(all.into_iter())?;
        let next_row_id = lw.next_row_id();
        lw.close().await?;

        let mut counts = SummaryCounts::default();
        for f in &self.added {
            counts.add(f);
        }
        let mut props = counts.build(parent.as_ref().map(|p| &p.summary().additional_properties));
        props.extend(self.properties.clone());
        let now = chrono::Utc::now()
            .timestamp_millis()
            .max(md.last_updated_ms() + 1);
        let builder = Snapshot::builder()
            .with_snapshot_id(self.snapshot_id)
            .with_parent_snapshot_id(parent_id)
            .with_sequence_number(seq)
            .with_timestamp_ms(now)
            .with_manifest_list(list_path)
            .with_summary(Summary {
                operation: self.operation.clone(),
                additional_properties: props,
            })
            .with_schema_id(md.current_schema_id());
        let snapshot = if md.format_version() == FormatVersion::V3 {
            let added_rows = next_row_id.unwrap_or(first_row_id) - first_row_id;
            builder.with_row_range(first_row_id, added_rows).build()
        } else {
            builder.build()
        };
        let r = TableMetadataBuilder::new_from_metadata(
            md.clone(),
            Some(base.metadata_location().to_string()),
        )
        .add_snapshot(snapshot)
        .and_then(|b| {
            b.set_ref(
                MAIN_BRANCH,
                SnapshotReference::new(
                    self.snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            )
        })
        .and_then(|b| b.build())
        .map_err(|e| Error::invalid(format!("building metadata for table {}: {e}", base.name())))?;
        self.expired_metadata = r
            .expired_metadata_logs
            .iter()
            .map(|l| l.metadata_file.clone())
            .collect();
        Ok(r.metadata)
    }
}
