//! The snapshot producer: writes manifests and the manifest list, builds the snapshot and the
//! next table metadata. Iceberg-rust keeps its producer private; this one is ours.
//!
//! A change adds data and delete files and removes live files. Manifests holding removed files
//! are rewritten (kept entries become EXISTING, removed ones DELETED); the others are carried
//! over as they are.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::spec::{
    DataFile, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, Summary, TableMetadataBuilder,
};

use super::summary::SummaryCounts;
use crate::error::{Error, ErrorKind, Result};
use crate::spec::{
    data_file_builder, DataContentType, FormatVersion, ManifestContentType, TableMetadata,
};
use crate::storage::join;
use crate::table::Table;

/// An added file with its explicit data sequence number (`None`: the new snapshot's).
type AddedEntry = (DataFile, Option<i64>);

/// Identifies a live file to remove: its path and, for a deletion vector, its blob offset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    /// The file's path as the manifest records it.
    pub path: String,
    /// `content_offset` (deletion vectors share a Puffin file).
    pub offset: Option<i64>,
}

impl FileKey {
    /// The key of a manifest entry's file.
    pub(crate) fn of(f: &DataFile) -> Self {
        Self {
            path: f.file_path().to_string(),
            offset: f.content_offset(),
        }
    }
}

/// A staged change that becomes one snapshot. The snapshot id and the manifests of added
/// files are fixed on first use and reused by every retry.
#[derive(Debug)]
pub(crate) struct SnapshotProducer {
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    operation: Operation,
    /// Added files: the id of the partition spec they were written with, the file, and an
    /// explicit data sequence number (`None`: the new snapshot's).
    added: Vec<(i32, DataFile, Option<i64>)>,
    removed: HashSet<FileKey>,
    added_manifests: Option<Vec<ManifestFile>>,
    /// Manifests rewritten by the last attempt (deleted when it is discarded).
    rewritten: Vec<String>,
    properties: HashMap<String, String>,
    attempt: u32,
    last_list: Option<String>,
    expired_metadata: Vec<String>,
    removed_files: Vec<DataFile>,
    data_sequence_number: Option<i64>,
    /// `rewrite_manifests`: target manifest size; counts of the last attempt.
    cluster_manifests: Option<u64>,
    manifest_counts: BTreeMap<&'static str, u64>,
    /// Table property changes made with the snapshot, each checked against the base.
    property_updates: Vec<PropertyUpdate>,
    /// The commit intent this change removes.
    intent: Option<String>,
    /// A new current schema, committed with the snapshot if the base's current schema is
    /// still the one it was derived from (its id).
    new_schema: Option<(i32, iceberg::spec::Schema)>,
    /// Manifests of added files the last attempt merged into others (unused once it lands).
    merged_away: Vec<String>,
}

/// A table property change committed with a snapshot, conditional on the base: the commit
/// fails with a conflict unless the base's value of `key` is `expected` (`None`: unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PropertyUpdate {
    /// The property.
    pub key: String,
    /// Its value in the metadata the change was planned against.
    pub expected: Option<String>,
    /// Its new value (`None`: removed).
    pub value: Option<String>,
}

/// A positive random snapshot id, as Iceberg Java derives them.
pub(crate) fn new_snapshot_id() -> i64 {
    let u = uuid::Uuid::new_v4();
    let (hi, lo) = u.as_u64_pair();
    ((hi ^ lo) & (i64::MAX as u64)) as i64
}

/// A copy of `f` with `first_row_id` set (manifests do not hand it down in iceberg 0.10.1).
fn with_first_row_id(f: &DataFile, first_row_id: Option<i64>) -> Result<DataFile> {
    data_file_builder(f)
        .first_row_id(first_row_id)
        .build()
        .map_err(|e| Error::io(format!("copying entry of '{}': {e}", f.file_path())))
}

/// A live manifest entry, ready to be written again.
struct LiveEntry {
    file: DataFile,
    snapshot_id: i64,
    seq: i64,
    file_seq: i64,
}

/// The live entries of manifest `m` (listed as `mf`), with v3 first row ids made explicit
/// where data files inherited them from the manifest.
fn live_entries(
    mf: &ManifestFile,
    m: &iceberg::spec::Manifest,
    v3: bool,
    default_snapshot: i64,
) -> Result<Vec<LiveEntry>> {
    Ok(merged_entries(mf, m, v3, default_snapshot)?
        .into_iter()
        .filter_map(|e| match e {
            MergedEntry::Existing(e) => Some(e),
            MergedEntry::Deleted(_) => None,
        })
        .collect())
}

/// How an entry of a manifest being merged is written again.
enum MergedEntry {
    /// Still live: an EXISTING entry.
    Existing(LiveEntry),
    /// Removed by this commit: a DELETED entry.
    Deleted(LiveEntry),
}

/// The entries of manifest `m` (listed as `mf`) as a merge writes them (Java's
/// `ManifestMergeManager`): live entries as EXISTING (v3 first row ids made explicit), the
/// entries this commit (`snapshot_id`) deleted as DELETED; deletes of earlier snapshots are
/// dropped.
fn merged_entries(
    mf: &ManifestFile,
    m: &iceberg::spec::Manifest,
    v3: bool,
    snapshot_id: i64,
) -> Result<Vec<MergedEntry>> {
    let deletes = mf.content == ManifestContentType::Deletes;
    let mut next_row_id = mf.first_row_id.map(|r| r as i64);
    let mut out = Vec::new();
    for e in m.entries() {
        let f = e.data_file();
        let inherited = if v3 && !deletes && f.first_row_id().is_none() {
            let id = next_row_id;
            if let Some(n) = next_row_id.as_mut() {
                *n += f.record_count() as i64;
            }
            id
        } else {
            f.first_row_id()
        };
        let seq = e.sequence_number().unwrap_or(0);
        let entry_snapshot = e.snapshot_id().unwrap_or(snapshot_id);
        let entry = |file: DataFile| LiveEntry {
            file,
            snapshot_id: entry_snapshot,
            seq,
            file_seq: e.file_sequence_number.unwrap_or(seq),
        };
        if !e.is_alive() {
            if entry_snapshot == snapshot_id {
                out.push(MergedEntry::Deleted(entry(f.clone())));
            }
            continue;
        }
        let file = if inherited != f.first_row_id() {
            with_first_row_id(f, inherited)?
        } else {
            f.clone()
        };
        out.push(MergedEntry::Existing(entry(file)));
    }
    Ok(out)
}

impl SnapshotProducer {
    /// A producer for `operation` adding data files written with the default partition spec.
    pub(crate) fn new(operation: Operation, added: Vec<DataFile>) -> Self {
        Self {
            snapshot_id: new_snapshot_id(),
            commit_uuid: uuid::Uuid::new_v4(),
            operation,
            added: added.into_iter().map(|f| (-1, f, None)).collect(),
            removed: HashSet::new(),
            added_manifests: None,
            rewritten: Vec::new(),
            properties: HashMap::new(),
            attempt: 0,
            last_list: None,
            expired_metadata: Vec::new(),
            removed_files: Vec::new(),
            data_sequence_number: None,
            cluster_manifests: None,
            manifest_counts: BTreeMap::new(),
            property_updates: Vec::new(),
            intent: None,
            new_schema: None,
            merged_away: Vec::new(),
        }
    }

    /// Adds `key=value` to the snapshot's summary.
    pub(crate) fn with_summary_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// Changes table properties in the same commit (each conditional on the base's value).
    pub(crate) fn with_property_updates(
        mut self,
        updates: impl IntoIterator<Item = PropertyUpdate>,
    ) -> Self {
        self.property_updates.extend(updates);
        self
    }

    /// Removes the commit intent `value` this change's maintainer set, in the same commit:
    /// the commit does not hold for it, and fails if it is no longer there.
    pub(crate) fn clearing_intent(mut self, value: &str) -> Self {
        self.clear_intent(value);
        self
    }

    /// [`Self::clearing_intent`] on a producer already built.
    pub(crate) fn clear_intent(&mut self, value: &str) {
        self.intent = Some(value.to_string());
        self.property_updates.push(PropertyUpdate {
            key: crate::spec::maintain_policy::COMMIT_INTENT.to_string(),
            expected: Some(value.to_string()),
            value: None,
        });
    }

    /// The commit intent this change removes ([`Self::clearing_intent`]).
    pub(crate) fn own_intent(&self) -> Option<&str> {
        self.intent.as_deref()
    }

    /// Makes `schema` the current schema in the same commit; the base's current schema must
    /// still be `from_schema_id`.
    pub(crate) fn with_schema(
        mut self,
        from_schema_id: i32,
        schema: iceberg::spec::Schema,
    ) -> Self {
        self.new_schema = Some((from_schema_id, schema));
        self
    }

    /// A `replace` snapshot that rewrites every manifest holding live entries into manifests
    /// clustered by partition of about `target_bytes` each (`rewrite_manifests`); no data
    /// changes.
    pub(crate) fn rewrite_manifests(target_bytes: u64) -> Self {
        let mut p = Self::new(Operation::Replace, vec![]);
        p.cluster_manifests = Some(target_bytes.max(1));
        p
    }

    /// Gives added files this data sequence number instead of the new snapshot's (a
    /// compaction keeps its starting snapshot's, so equality deletes committed meanwhile still
    /// apply to the rewritten rows).
    pub(crate) fn with_data_sequence_number(mut self, seq: i64) -> Self {
        self.data_sequence_number = Some(seq);
        self
    }

    /// Also adds files (data or delete) written with partition spec `spec_id`.
    pub(crate) fn add_files(
        mut self,
        spec_id: i32,
        files: impl IntoIterator<Item = DataFile>,
    ) -> Self {
        self.added
            .extend(files.into_iter().map(|f| (spec_id, f, None)));
        self
    }

    /// Also adds files with an explicit data sequence number (a rewritten delete file keeps
    /// the newest of the ones it replaces, so it applies to exactly the same data files).
    pub(crate) fn add_files_with_sequence_number(
        mut self,
        spec_id: i32,
        files: impl IntoIterator<Item = DataFile>,
        seq: i64,
    ) -> Self {
        self.added
            .extend(files.into_iter().map(|f| (spec_id, f, Some(seq))));
        self
    }

    /// Also removes live files (data or delete files). Each must be live in the table the
    /// change commits onto, else the commit fails with a conflict.
    pub(crate) fn remove_files(mut self, files: impl IntoIterator<Item = FileKey>) -> Self {
        self.removed.extend(files);
        self
    }

    /// The snapshot id this producer commits.
    pub(crate) fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }

    async fn write_added_manifests(&mut self, base: &Table) -> Result<Vec<ManifestFile>> {
        if let Some(m) = &self.added_manifests {
            return Ok(m.clone());
        }
        let md = base.metadata();
        // One manifest per (spec, data or deletes).
        let mut groups: BTreeMap<(i32, bool), Vec<AddedEntry>> = BTreeMap::new();
        for (spec_id, f, seq) in &self.added {
            let spec_id = if *spec_id < 0 {
                md.default_partition_spec_id()
            } else {
                *spec_id
            };
            let deletes = f.content_type() != DataContentType::Data;
            groups
                .entry((spec_id, deletes))
                .or_default()
                .push((f.clone(), *seq));
        }
        let mut out = Vec::new();
        for (i, ((spec_id, deletes), files)) in groups.into_iter().enumerate() {
            let path = join(
                md.location(),
                &format!("metadata/{}-m{i}.avro", self.commit_uuid),
            );
            let mut w = self.manifest_writer(base, spec_id, deletes, &path)?;
            for (f, seq) in files {
                // A negative sequence number leaves it null: inherited from the manifest list.
                w.add_file(f, seq.or(self.data_sequence_number).unwrap_or(-1))?;
            }
            out.push(w.write_manifest_file().await?);
        }
        self.added_manifests = Some(out.clone());
        Ok(out)
    }

    fn manifest_writer(
        &self,
        base: &Table,
        spec_id: i32,
        deletes: bool,
        path: &str,
    ) -> Result<iceberg::spec::ManifestWriter> {
        let md = base.metadata();
        let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
            Error::invalid(format!(
                "a file refers to partition spec {spec_id}, which table {} does not have",
                base.name()
            ))
        })?;
        let output = base.storage().file_io().new_output(path)?;
        let b = ManifestWriterBuilder::new(
            output,
            Some(self.snapshot_id),
            md.current_schema().clone(),
            spec.as_ref().clone(),
        );
        Ok(match (md.format_version(), deletes) {
            (FormatVersion::V1, false) => b.build_v1(),
            (FormatVersion::V1, true) => {
                return Err(Error::unsupported(format!(
                    "table {} is format v1, which has no delete files; upgrade it to v2 (format-version=2)",
                    base.name()
                )))
            }
            (FormatVersion::V2, false) => b.build_v2_data(),
            (FormatVersion::V2, true) => b.build_v2_deletes(),
            (FormatVersion::V3, false) => b.build_v3_data(),
            (FormatVersion::V3, true) => b.build_v3_deletes(),
        })
    }

    /// Carries the base's manifests over, rewriting those that hold removed files. A manifest
    /// without live entries (only files an earlier snapshot removed) is not carried: it
    /// belongs to the snapshot that wrote it, as in Iceberg Java's producers.
    async fn carry_over(
        &mut self,
        base: &Table,
        existing: Vec<ManifestFile>,
    ) -> Result<Vec<ManifestFile>> {
        let existing: Vec<ManifestFile> = existing
            .into_iter()
            .filter(|mf| mf.has_added_files() || mf.has_existing_files())
            .collect();
        if self.removed.is_empty() {
            return Ok(existing);
        }
        let v3 = base.metadata().format_version() == FormatVersion::V3;
        let mut out = Vec::with_capacity(existing.len());
        let mut found: HashSet<FileKey> = HashSet::new();
        for (i, mf) in existing.into_iter().enumerate() {
            let m = base.load_manifest(&mf).await?;
            let hits = m
                .entries()
                .iter()
                .filter(|e| e.is_alive() && self.removed.contains(&FileKey::of(e.data_file())))
                .count();
            if hits == 0 {
                out.push(mf);
                continue;
            }
            let path = join(
                base.metadata().location(),
                &format!("metadata/{}-r{}-{i}.avro", self.commit_uuid, self.attempt),
            );
            let deletes = mf.content == ManifestContentType::Deletes;
            let mut w = self.manifest_writer(base, mf.partition_spec_id, deletes, &path)?;
            self.rewritten.push(path);
            for e in live_entries(&mf, &m, v3, self.snapshot_id)? {
                let key = FileKey::of(&e.file);
                if self.removed.contains(&key) {
                    found.insert(key);
                    self.removed_files.push(e.file.clone());
                    w.add_delete_file(e.file, e.seq, Some(e.file_seq))?;
                } else {
                    w.add_existing_file(e.file, e.snapshot_id, e.seq, Some(e.file_seq))?;
                }
            }
            out.push(w.write_manifest_file().await?);
        }
        if let Some(missing) = self.removed.iter().find(|k| !found.contains(k)) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "file '{}' is no longer live in table {} (a concurrent commit removed it); redo the operation",
                    missing.path,
                    base.name()
                ),
            ));
        }
        Ok(out)
    }

    /// Merges small manifests as Iceberg Java's producers do on commit
    /// (`commit.manifest-merge.enabled`): manifests are grouped by content (data, deletes)
    /// and partition spec, never across; in each group, in list order (this commit's new
    /// manifests first), [`plan_merge`](super::manifest_merge::plan_merge) picks the bins
    /// written as one manifest. Entries keep their snapshot ids and sequence numbers; this
    /// commit's added files stay ADDED, its removals DELETED, older removals are dropped.
    async fn merge_manifests(
        &mut self,
        base: &Table,
        new: Vec<ManifestFile>,
        existing: Vec<ManifestFile>,
        target: u64,
        min_count: usize,
    ) -> Result<Vec<ManifestFile>> {
        use super::manifest_merge::{plan_merge, MergeStep};
        let md = base.metadata();
        let v3 = md.format_version() == FormatVersion::V3;
        let new_paths: HashSet<String> = new.iter().map(|m| m.manifest_path.clone()).collect();
        let mut groups: BTreeMap<(bool, std::cmp::Reverse<i32>), Vec<ManifestFile>> =
            BTreeMap::new();
        for m in new.into_iter().chain(existing) {
            let key = (
                m.content == ManifestContentType::Deletes,
                std::cmp::Reverse(m.partition_spec_id),
            );
            groups.entry(key).or_default().push(m);
        }
        self.merged_away.clear();
        let mut out = Vec::new();
        let mut n = 0;
        for ((deletes, std::cmp::Reverse(spec_id)), group) in groups {
            let lengths: Vec<u64> = group.iter().map(|m| m.manifest_length as u64).collect();
            for step in plan_merge(&lengths, target, min_count) {
                let bin = match step {
                    MergeStep::Keep(i) => {
                        out.push(group[i].clone());
                        continue;
                    }
                    MergeStep::Merge(bin) => bin,
                };
                let path = join(
                    md.location(),
                    &format!("metadata/{}-g{}-{n}.avro", self.commit_uuid, self.attempt),
                );
                n += 1;
                let mut w = self.manifest_writer(base, spec_id, deletes, &path)?;
                self.rewritten.push(path);
                for i in bin {
                    let mf = &group[i];
                    if new_paths.contains(&mf.manifest_path) {
                        // This commit's added files, as `write_added_manifests` wrote them.
                        for (s, f, seq) in &self.added {
                            let s = if *s < 0 {
                                md.default_partition_spec_id()
                            } else {
                                *s
                            };
                            if s == spec_id
                                && (f.content_type() != DataContentType::Data) == deletes
                            {
                                w.add_file(
                                    f.clone(),
                                    seq.or(self.data_sequence_number).unwrap_or(-1),
                                )?;
                            }
                        }
                        self.merged_away.push(mf.manifest_path.clone());
                        continue;
                    }
                    if self.rewritten.contains(&mf.manifest_path) {
                        // Rewritten by this attempt's carry-over, now merged: never listed.
                        self.merged_away.push(mf.manifest_path.clone());
                    }
                    let m = base.load_manifest(mf).await?;
                    for e in merged_entries(mf, &m, v3, self.snapshot_id)? {
                        match e {
                            MergedEntry::Existing(e) => {
                                w.add_existing_file(e.file, e.snapshot_id, e.seq, Some(e.file_seq))?
                            }
                            MergedEntry::Deleted(e) => {
                                w.add_delete_file(e.file, e.seq, Some(e.file_seq))?
                            }
                        }
                    }
                }
                out.push(w.write_manifest_file().await?);
            }
        }
        Ok(out)
    }

    /// Manifests this producer wrote that the committed snapshot does not list (merged into
    /// others by the last attempt): deleted once the commit has landed.
    pub(crate) fn unused_after_commit(&self) -> &[String] {
        &self.merged_away
    }

    /// Rewrites every manifest with live entries into new ones per (spec, content), entries
    /// ordered by partition, about `target` bytes each.
    async fn cluster(
        &mut self,
        base: &Table,
        existing: Vec<ManifestFile>,
        target: u64,
    ) -> Result<Vec<ManifestFile>> {
        let v3 = base.metadata().format_version() == FormatVersion::V3;
        let mut groups: BTreeMap<(i32, bool), (Vec<LiveEntry>, u64)> = BTreeMap::new();
        let (mut replaced, mut entries) = (0u64, 0u64);
        for mf in existing {
            if !mf.has_added_files() && !mf.has_existing_files() {
                replaced += 1;
                continue;
            }
            let m = base.load_manifest(&mf).await?;
            let live = live_entries(&mf, &m, v3, self.snapshot_id)?;
            replaced += 1;
            entries += live.len() as u64;
            let g = groups
                .entry((
                    mf.partition_spec_id,
                    mf.content == ManifestContentType::Deletes,
                ))
                .or_default();
            g.1 += mf.manifest_length as u64;
            g.0.extend(live);
        }
        let mut out = Vec::new();
        let mut n = 0;
        for ((spec_id, deletes), (mut live, bytes)) in groups {
            if live.is_empty() {
                continue;
            }
            live.sort_by_cached_key(|e| format!("{:?}", e.file.partition()));
            let per_entry = (bytes / live.len() as u64).max(1);
            let per_manifest = (target / per_entry).max(1) as usize;
            let mut rest = live.into_iter().peekable();
            while rest.peek().is_some() {
                let path = join(
                    base.metadata().location(),
                    &format!("metadata/{}-c{}-{n}.avro", self.commit_uuid, self.attempt),
                );
                n += 1;
                let mut w = self.manifest_writer(base, spec_id, deletes, &path)?;
                self.rewritten.push(path);
                for e in rest.by_ref().take(per_manifest) {
                    w.add_existing_file(e.file, e.snapshot_id, e.seq, Some(e.file_seq))?;
                }
                out.push(w.write_manifest_file().await?);
            }
        }
        self.manifest_counts = BTreeMap::from([
            ("manifests-created", out.len() as u64),
            ("manifests-replaced", replaced),
            ("manifests-kept", 0),
            ("entries-processed", entries),
        ]);
        Ok(out)
    }

    /// Metadata files the last produced version dropped from its metadata log
    /// (`write.metadata.previous-versions-max`).
    pub(crate) fn expired_metadata_files(&self) -> &[String] {
        &self.expired_metadata
    }

    /// Deletes the manifest list and rewritten manifests of the last (failed) attempt.
    pub(crate) async fn discard_attempt(&mut self, storage: &crate::storage::Storage) {
        if let Some(l) = self.last_list.take() {
            let _ = storage.delete(&l).await;
        }
        for m in self.rewritten.drain(..) {
            let _ = storage.delete(&m).await;
        }
    }

    /// Deletes every file this producer wrote (the change was not committed).
    pub(crate) async fn abort(&mut self, storage: &crate::storage::Storage) {
        self.discard_attempt(storage).await;
        for m in self.added_manifests.take().unwrap_or_default() {
            let _ = storage.delete(&m.manifest_path).await;
        }
    }

    /// Whether `base` still holds what the property updates and the schema change were
    /// planned against (a conflict otherwise: the change must be planned again).
    fn check_base(&self, base: &Table) -> Result<()> {
        let md = base.metadata();
        for u in &self.property_updates {
            let now = md.properties().get(&u.key);
            if now != u.expected.as_ref() {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "table {}: property {} was changed by a concurrent commit",
                        base.name(),
                        u.key
                    ),
                ));
            }
        }
        if let Some((from, _)) = &self.new_schema {
            if md.current_schema_id() != *from {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "table {}: the schema was changed by a concurrent commit",
                        base.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Produces the next metadata of `base` with this snapshot on the handle's branch (`main`
    /// by default), or, for a handle staging with a WAP id ([`Table::with_wap_id`]), with the
    /// snapshot added but current on no branch.
    pub(crate) async fn produce(&mut self, base: &Table) -> Result<TableMetadata> {
        let md = base.metadata();
        self.check_base(base)?;
        if let Some(wap_id) = base.wap_id() {
            // Checked again against the state committed onto (it may have been turned off).
            base.check_wap_enabled()?;
            if base.branch() != iceberg::spec::MAIN_BRANCH {
                return Err(Error::invalid(format!(
                    "table {}: a WAP write cannot also write to branch '{}'",
                    base.name(),
                    base.branch()
                )));
            }
            self.properties
                .insert(crate::table::STAGED_WAP_ID.to_string(), wap_id.to_string());
        }
        let io = base.storage().file_io();
        let new_manifests = self.write_added_manifests(base).await?;
        let parent = base.current_snapshot().cloned();
        let mut existing = Vec::new();
        if let Some(p) = &parent {
            existing = base.manifest_list(p).await?;
        }
        self.removed_files.clear();
        let existing = match self.cluster_manifests {
            Some(target) => self.cluster(base, existing, target).await?,
            None => self.carry_over(base, existing).await?,
        };
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
        // New manifests first (as Java does), then carried-over ones, merged unless turned
        // off (and not for `rewrite_manifests`, which lays them out itself); data before
        // deletes.
        let props = base.properties()?;
        let mut all: Vec<ManifestFile> =
            if props.manifest_merge_enabled && self.cluster_manifests.is_none() {
                self.merge_manifests(
                    base,
                    new_manifests,
                    existing,
                    props.manifest_target_size_bytes,
                    props.manifest_min_count_to_merge,
                )
                .await?
            } else {
                self.merged_away.clear();
                new_manifests.into_iter().chain(existing).collect()
            };
        all.sort_by_key(|m| matches!(m.content, ManifestContentType::Deletes));
        lw.add_manifests(all.into_iter())?;
        let next_row_id = lw.next_row_id();
        lw.close().await?;

        let mut counts = SummaryCounts::default();
        for (_, f, _) in &self.added {
            counts.add(f);
        }
        for f in &self.removed_files {
            counts.remove(f);
        }
        let mut props = counts.build(parent.as_ref().map(|p| &p.summary().additional_properties));
        props.extend(self.properties.clone());
        for (k, v) in &self.manifest_counts {
            props.insert(k.to_string(), v.to_string());
        }
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
            .with_schema_id(match &self.new_schema {
                Some((_, schema)) => schema.schema_id(),
                None => md.current_schema_id(),
            });
        let snapshot = if md.format_version() == FormatVersion::V3 {
            let added_rows = next_row_id.unwrap_or(first_row_id) - first_row_id;
            builder.with_row_range(first_row_id, added_rows).build()
        } else {
            builder.build()
        };
        let mut builder = TableMetadataBuilder::new_from_metadata(
            md.clone(),
            Some(base.metadata_location().to_string()),
        );
        let building = |e: iceberg::Error| {
            Error::invalid(format!("building metadata for table {}: {e}", base.name()))
        };
        if let Some((_, schema)) = &self.new_schema {
            builder = builder
                .add_current_schema(schema.clone())
                .map_err(building)?;
        }
        let (set, unset): (Vec<_>, Vec<_>) = self
            .property_updates
            .iter()
            .partition(|u| u.value.is_some());
        if !set.is_empty() {
            let set = set
                .iter()
                .filter_map(|u| Some((u.key.clone(), u.value.clone()?)))
                .collect();
            builder = builder.set_properties(set).map_err(building)?;
        }
        if !unset.is_empty() {
            let keys: Vec<String> = unset.iter().map(|u| u.key.clone()).collect();
            builder = builder.remove_properties(&keys).map_err(building)?;
        }
        let staged = base.wap_id().is_some();
        let r = builder
            .add_snapshot(snapshot)
            .and_then(|b| {
                if staged {
                    // Staged (write-audit-publish): in `snapshots`, current nowhere.
                    return Ok(b);
                }
                b.set_ref(
                    base.branch(),
                    // A new snapshot moves its branch, which keeps its retention.
                    SnapshotReference::new(
                        self.snapshot_id,
                        crate::spec::snapshot_refs::branch_retention_of(md, base.branch()),
                    ),
                )
            })
            .and_then(|b| b.build())
            .map_err(building)?;
        self.expired_metadata = r
            .expired_metadata_logs
            .iter()
            .map(|l| l.metadata_file.clone())
            .collect();
        Ok(r.metadata)
    }
}
