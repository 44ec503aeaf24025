//! [`Table`]: an identifier, its current metadata, where that metadata lives, and storage.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;

use crate::error::{Error, ErrorKind, Result};
use iceberg::spec::{Manifest, ManifestEntry, ManifestList};

use crate::codec::manifest::{Pick, Probe};
use crate::spec::{
    FormatVersion, ManifestFile, Snapshot, TableIdent, TableMetadata, TableProperties,
};
use crate::storage::{self, Storage};

/// A loaded table (immutable view of one metadata version).
#[derive(Debug, Clone)]
pub struct Table {
    ident: TableIdent,
    metadata: Arc<TableMetadata>,
    metadata_location: String,
    storage: Storage,
    /// The branch reads of the current state and writes go to (`None`: main).
    branch: Option<String>,
    /// Write-audit-publish: commits are staged (not made current) with this `wap.id`.
    wap_id: Option<String>,
    /// Background work (maintenance): commits retry longer against busy writers.
    patient: bool,
}

/// The table property that allows staged (write-audit-publish) commits, as in Iceberg Java.
pub const WRITE_WAP_ENABLED: &str = "write.wap.enabled";

/// The snapshot summary property a staged commit records its WAP id in (Java's
/// `SnapshotSummary.STAGED_WAP_ID_PROP`).
pub const STAGED_WAP_ID: &str = "wap.id";

impl Table {
    /// Assembles a table from parts.
    pub fn new(
        ident: TableIdent,
        metadata: TableMetadata,
        metadata_location: String,
        storage: Storage,
    ) -> Self {
        Self {
            ident,
            metadata: Arc::new(metadata),
            metadata_location,
            storage,
            branch: None,
            wap_id: None,
            patient: false,
        }
    }

    /// This table with its current state and writes on branch `name` (`main` is the
    /// default): scans of the current snapshot read the branch, commits move it, and
    /// conflicts are checked along its history. The branch must exist (`floe branch create`).
    pub fn on_branch(&self, name: &str) -> Result<Table> {
        if name == iceberg::spec::MAIN_BRANCH {
            return Ok(Table {
                branch: None,
                ..self.clone()
            });
        }
        match crate::spec::refs(&self.metadata)
            .into_iter()
            .find(|(n, _)| n == name)
        {
            Some((_, r)) if r.is_branch() => Ok(Table {
                branch: Some(name.to_string()),
                ..self.clone()
            }),
            Some(_) => Err(Error::invalid(format!(
                "table {}: '{name}' is a tag; tags cannot be written, only branches",
                self.name()
            ))),
            None => Err(Error::not_found(format!(
                "table {} has no branch '{name}'; create it with `floe branch create {} {name}`",
                self.name(),
                self.name()
            ))),
        }
    }

    /// The branch this handle reads and writes (`main` unless [`Table::on_branch`]).
    pub fn branch(&self) -> &str {
        self.branch.as_deref().unwrap_or(iceberg::spec::MAIN_BRANCH)
    }

    /// `fresh` (a newer load of this table) on the same branch, and staging with the same WAP
    /// id, as this handle.
    pub(crate) fn same_branch(&self, fresh: Table) -> Result<Table> {
        let t = match &self.branch {
            None => fresh,
            Some(b) => fresh.on_branch(b)?,
        };
        Ok(Table {
            wap_id: self.wap_id.clone(),
            patient: self.patient,
            ..t
        })
    }

    /// This handle for background work (maintenance): its commits keep retrying against
    /// writers that commit faster than one attempt takes (at least 40 attempts, waits of at
    /// most 2 s between them), where a user's command would give up after
    /// `commit.retry.num-retries`.
    pub(crate) fn patient(&self) -> Table {
        Table {
            patient: true,
            ..self.clone()
        }
    }

    /// Whether this handle's commits are [`Table::patient`].
    pub(crate) fn is_patient(&self) -> bool {
        self.patient
    }

    /// This table with its writes staged for write-audit-publish, as Spark's `spark.wap.id`
    /// does: each commit adds its snapshot to the table's snapshots, with summary property
    /// `wap.id` = `wap_id`, but makes it current on no branch; `floe cherrypick`
    /// ([`crate::txn::cherrypick`]) publishes it onto main. The table must have
    /// `write.wap.enabled=true`, and the handle must be on main.
    pub fn with_wap_id(&self, wap_id: &str) -> Result<Table> {
        if wap_id.trim().is_empty() {
            return Err(Error::invalid(format!(
                "table {}: a WAP id cannot be empty",
                self.name()
            )));
        }
        if self.branch.is_some() {
            return Err(Error::invalid(format!(
                "table {}: a WAP write is staged off main's history; it cannot also write to \
                 branch '{}' (drop --branch or --wap-id)",
                self.name(),
                self.branch()
            )));
        }
        self.check_wap_enabled()?;
        Ok(Table {
            wap_id: Some(wap_id.to_string()),
            ..self.clone()
        })
    }

    /// The WAP id this handle's commits are staged with (`None`: commits are published).
    pub fn wap_id(&self) -> Option<&str> {
        self.wap_id.as_deref()
    }

    /// Refuses staging unless the table has `write.wap.enabled=true`.
    pub(crate) fn check_wap_enabled(&self) -> Result<()> {
        let on = self
            .metadata
            .properties()
            .get(WRITE_WAP_ENABLED)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if on {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "table {} does not allow staged (write-audit-publish) commits: set \
             {WRITE_WAP_ENABLED}=true first (`floe alter {} --set {WRITE_WAP_ENABLED}=true`); \
             nothing was committed",
            self.name(),
            self.name()
        )))
    }

    /// The table identifier.
    pub fn ident(&self) -> &TableIdent {
        &self.ident
    }
    /// The current metadata.
    pub fn metadata(&self) -> &TableMetadata {
        &self.metadata
    }

    /// The current schema as Arrow (each field carries its `PARQUET:field_id`): the schema
    /// scans return and appends are conformed to.
    pub fn arrow_schema(&self) -> Result<arrow_schema::SchemaRef> {
        Ok(Arc::new(crate::spec::arrow_schema(
            self.metadata.current_schema(),
        )?))
    }

    /// Location of the current metadata file.
    pub fn metadata_location(&self) -> &str {
        &self.metadata_location
    }
    /// Storage used for this table's files.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    /// Parsed table properties.
    pub fn properties(&self) -> Result<TableProperties> {
        TableProperties::parse(self.metadata.properties()).map_err(|e| e.context(self.name()))
    }
    /// Dotted display name.
    pub fn name(&self) -> String {
        ident_name(&self.ident)
    }
    /// The current snapshot of the branch this handle is on (`main` by default), if any.
    pub fn current_snapshot(&self) -> Option<&Arc<Snapshot>> {
        match &self.branch {
            None => self.metadata.current_snapshot(),
            Some(b) => self.metadata.snapshot_for_ref(b),
        }
    }

    /// The manifests a snapshot lists.
    pub async fn manifest_list(&self, snapshot: &Snapshot) -> Result<Vec<ManifestFile>> {
        let path = snapshot.manifest_list();
        // Decoded lists are kept in the storage's memo, as manifests are (a snapshot's list
        // never changes; Java's snapshots hold theirs once read).
        let version = self.metadata.format_version();
        let key = format!("{path}\nmanifest list v{}", version as u8);
        let memo = self.storage.memo();
        if let Some(list) = memo.get::<Vec<ManifestFile>>(&key) {
            return Ok(list.as_ref().clone());
        }
        let bytes = self
            .storage
            .get(path)
            .await
            .map_err(|e| e.context(format!("table {}", self.name())))?;
        let what = format!("manifest list '{path}' of table {}", self.name());
        let list = parse_manifest_list(&bytes, version, &what)?;
        memo.put(&key, bytes.len() as u64, Arc::new(list.clone()));
        Ok(list)
    }

    /// Reads one manifest (entries inherit sequence numbers and snapshot ids from `mf`).
    /// Decoded manifests are kept in the storage's memo: a manifest file never changes, and
    /// what its entries inherit is keyed with its path.
    pub(crate) async fn load_manifest(&self, mf: &ManifestFile) -> Result<Arc<Manifest>> {
        let key = manifest_key(mf);
        let memo = self.storage.memo();
        if let Some(m) = memo.get::<Manifest>(&key) {
            return Ok(m);
        }
        // Decoding is CPU work: on its own task, manifests planned together decode on every
        // core of the runtime (callers poll many loads at once).
        let (table, owned) = (self.clone(), mf.clone());
        let m = self
            .decode_on_runtime(mf, async move { table.decode_manifest(&owned).await })
            .await?;
        let m = Arc::new(m);
        memo.put(&key, mf.manifest_length.max(0) as u64, m.clone());
        Ok(m)
    }

    /// The entries of one manifest (inherited from `mf`) that `chooser` wants, in file order.
    /// A manifest held in the memo, or small enough to be worth holding (then decoded whole
    /// and held), is read from its decoded entries; a larger one is streamed block by block
    /// through `probe` ([`crate::codec::manifest::select_entries`]) and only the entries the
    /// chooser keeps are built, so planning a few files of a large table holds a few files,
    /// not the table. Returns the chooser with what it learnt.
    pub(crate) async fn select_manifest<C: EntryChooser>(
        &self,
        mf: &ManifestFile,
        probe: Option<Arc<Probe>>,
        mut chooser: C,
    ) -> Result<(Vec<ManifestEntry>, C)> {
        let memoized = self.storage.memo().get::<Manifest>(&manifest_key(mf));
        let probe = match probe {
            Some(p) if memoized.is_none() && mf.manifest_length > whole_manifest_bytes() => p,
            _ => {
                let m = match memoized {
                    Some(m) => m,
                    None => self.load_manifest(mf).await?,
                };
                let kept = choose(&m, &mut chooser);
                return Ok((kept, chooser));
            }
        };
        let (table, owned) = (self.clone(), mf.clone());
        let work = async move {
            let r = table.decode_selected(&owned, &probe, &mut chooser).await;
            r.map(|kept| (kept, chooser))
        };
        self.decode_on_runtime(mf, work).await
    }

    /// Runs the decoding of manifest `mf` on its own task of a multi-threaded runtime (so
    /// manifests planned together decode on every core), else in place.
    async fn decode_on_runtime<T: Send + 'static>(
        &self,
        mf: &ManifestFile,
        work: impl std::future::Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread => {
                rt.spawn(work).await.map_err(|e| {
                    Error::corrupt(format!(
                        "manifest '{}' of table {}: its decoding task failed: {e}",
                        mf.manifest_path,
                        self.name()
                    ))
                })?
            }
            _ => work.await,
        }
    }

    async fn decode_selected<C: EntryChooser>(
        &self,
        mf: &ManifestFile,
        probe: &Probe,
        chooser: &mut C,
    ) -> Result<Vec<ManifestEntry>> {
        if mf.key_metadata.is_none() {
            let bytes = self
                .storage
                .get(&mf.manifest_path)
                .await
                .map_err(|e| e.context(format!("table {}", self.name())))?;
            let what = format!("manifest '{}' of table {}", mf.manifest_path, self.name());
            let mut want = |e: &mut ManifestEntry| {
                inherit(e, mf);
                chooser.want(e)
            };
            if let Some((_, mut kept)) =
                parse_manifest_selected(&bytes, &what, Some(probe), &mut want)?
            {
                for e in &mut kept {
                    inherit(e, mf);
                }
                return Ok(kept);
            }
            chooser.restart();
        }
        let m = self.decode_manifest(mf).await?;
        Ok(choose(&m, chooser))
    }

    /// Decodes one manifest, not memoized (for tests that compare decoders).
    #[doc(hidden)]
    pub async fn decode_manifest_uncached(&self, mf: &ManifestFile) -> Result<Manifest> {
        self.decode_manifest(mf).await
    }

    /// Decodes one manifest by the `iceberg` crate's `load_manifest` (its inheritance of
    /// snapshot ids and sequence numbers included), for tests that compare the decoders.
    #[doc(hidden)]
    pub async fn decode_manifest_by_iceberg_crate(&self, mf: &ManifestFile) -> Result<Manifest> {
        self.decode_manifest_by_iceberg(mf).await
    }

    async fn decode_manifest(&self, mf: &ManifestFile) -> Result<Manifest> {
        if mf.key_metadata.is_some() {
            return self.decode_manifest_by_iceberg(mf).await;
        }
        let bytes = self
            .storage
            .get(&mf.manifest_path)
            .await
            .map_err(|e| e.context(format!("table {}", self.name())))?;
        let what = format!("manifest '{}' of table {}", mf.manifest_path, self.name());
        let (metadata, mut entries) = parse_manifest_parts(&bytes, &what)?;
        for e in &mut entries {
            inherit(e, mf);
        }
        Ok(Manifest::new(metadata, entries))
    }

    /// An encrypted manifest, through the `iceberg` crate.
    async fn decode_manifest_by_iceberg(&self, mf: &ManifestFile) -> Result<Manifest> {
        let read = AssertUnwindSafe(mf.load_manifest(&self.storage.file_io()))
            .catch_unwind()
            .await
            .map_err(|_| {
                Error::corrupt(format!(
                    "manifest '{}' of table {} is malformed: the Avro decoder failed on it",
                    mf.manifest_path,
                    self.name()
                ))
            })?;
        read.map_err(|e| {
            let kind = if e.message().contains("missing") || e.message().contains("NotFound") {
                ErrorKind::NotFound
            } else {
                ErrorKind::Corrupt
            };
            Error::new(
                kind,
                format!(
                    "manifest '{}' of table {} cannot be read: {}",
                    mf.manifest_path,
                    self.name(),
                    e.message()
                ),
            )
            .with_source(e)
        })
    }

    /// Opens a table without a catalog from a `*.metadata.json` path or a table directory
    /// (`metadata/version-hint.text`, else the highest `vN` / `NNNNN-` version). A table whose
    /// files were moved since it was written is read from where it lies (read-only).
    pub async fn open_static(storage: &Storage, path: &str) -> Result<Table> {
        let (meta_loc, dir) =
            if path.ends_with(".metadata.json") || path.ends_with(".metadata.json.gz") {
                let dir = path.rsplit_once("/metadata/").map(|(d, _)| d.to_string());
                (path.to_string(), dir)
            } else {
                (
                    find_latest_metadata(storage, path).await?,
                    Some(path.trim_end_matches('/').to_string()),
                )
            };
        let metadata = read_metadata(storage, &meta_loc).await?;
        let mut st = storage.clone();
        if let Some(dir) = dir {
            let loc = metadata.location().to_string();
            let same = match (storage::local_path(&loc), storage::local_path(&dir)) {
                (Some(a), Some(b)) => a.trim_end_matches('/') == b.trim_end_matches('/'),
                _ => loc == dir,
            };
            if !same {
                st = storage.relocated(&loc, &dir);
            }
        }
        let name = meta_loc.rsplit('/').nth(2).unwrap_or("table").to_string();
        let ident = TableIdent::from_strs(["static", name.as_str()]).map_err(Error::from)?;
        Ok(Table::new(ident, metadata, meta_loc, st))
    }
}

/// A manifest at most this long is decoded whole and held in the memo when a plan reads it;
/// a longer one is streamed through a probe when the plan can say what it wants. The
/// environment variable `FLOE_MANIFEST_PROBE_BYTES` sets another length (the test suite
/// runs with 0, so its small tables are planned through probes too).
fn whole_manifest_bytes() -> i64 {
    static BYTES: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("FLOE_MANIFEST_PROBE_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(256 << 10)
    })
}

/// The memo key of a decoded manifest: its path and what its entries inherit.
fn manifest_key(mf: &ManifestFile) -> String {
    format!(
        "{}\n{},{},{},{}",
        mf.manifest_path,
        mf.sequence_number,
        mf.min_sequence_number,
        mf.added_snapshot_id,
        mf.manifest_length
    )
}

/// The entries of decoded manifest `m` that `chooser` keeps, in order.
fn choose(m: &Manifest, chooser: &mut impl EntryChooser) -> Vec<ManifestEntry> {
    let mut kept = Vec::new();
    for e in m.entries() {
        match chooser.want(e) {
            Pick::Keep => kept.push(e.as_ref().clone()),
            Pick::Skip => {}
            Pick::Stop => break,
        }
    }
    kept
}

/// Decides, entry by entry in file order, which entries of a manifest a reader keeps
/// ([`Table::select_manifest`]).
pub(crate) trait EntryChooser: Send + 'static {
    /// Whether `entry` (with what it inherits from its manifest list entry) is kept, or
    /// reading stops. With a probe, only the fields the probe decodes are set.
    fn want(&mut self, entry: &ManifestEntry) -> Pick;
    /// Forgets every answer given so far: the manifest is read again from its start.
    fn restart(&mut self);
}

/// Parses a manifest list's bytes; `what` names it in errors. Declared lengths are bounded
/// and a panic in the Avro decoder becomes a corrupt-file error.
#[doc(hidden)]
pub fn parse_manifest_list(
    bytes: &[u8],
    version: FormatVersion,
    what: &str,
) -> Result<Vec<ManifestFile>> {
    let list = guard_avro(bytes, what, || {
        ManifestList::parse_with_version(bytes, version)
    })?;
    Ok(list.consume_entries().into_iter().collect())
}

/// Parses a manifest's bytes (without inheriting from its manifest list entry), guarded as
/// [`parse_manifest_list`] is: v2 / v3 manifests of the usual shape by the planning decoder
/// ([`crate::codec::manifest`]), others by the `iceberg` crate.
#[doc(hidden)]
pub fn parse_manifest(bytes: &[u8], what: &str) -> Result<Manifest> {
    let (metadata, entries) = parse_manifest_parts(bytes, what)?;
    Ok(Manifest::new(metadata, entries))
}

/// Parses a manifest by the `iceberg` crate alone (guarded), for tests and benchmarks that
/// compare the decoders.
#[doc(hidden)]
pub fn parse_manifest_by_iceberg(bytes: &[u8], what: &str) -> Result<Manifest> {
    guard_avro(bytes, what, || Manifest::parse_avro(bytes))
}

/// Parses a manifest by the planning decoder alone: `Ok(None)` when it leaves the file to
/// the `iceberg` crate (for tests and benchmarks that compare the decoders).
#[doc(hidden)]
pub fn parse_manifest_planned(bytes: &[u8], what: &str) -> Result<Option<Manifest>> {
    Ok(parse_manifest_fast(bytes, what)?.map(|(m, e)| Manifest::new(m, e)))
}

/// Decodes manifest `bytes` through a [`Probe`] of these fields (for tests of the probe):
/// every entry as the probe decoded it, and the entries whose index `keep` picks, decoded
/// whole. `Ok(None)` when the planning decoder leaves the file to the `iceberg` crate.
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn parse_manifest_probed(
    bytes: &[u8],
    what: &str,
    metric_ids: &[i32],
    partition: bool,
    path: bool,
    keep: impl Fn(usize) -> bool,
) -> Result<Option<(Vec<ManifestEntry>, Vec<ManifestEntry>)>> {
    let probe = Probe {
        metric_ids: metric_ids.to_vec(),
        partition,
        path,
    };
    let mut probes = Vec::new();
    let mut want = |e: &mut ManifestEntry| {
        let pick = if keep(probes.len()) {
            Pick::Keep
        } else {
            Pick::Skip
        };
        probes.push(e.clone());
        pick
    };
    let kept = parse_manifest_selected(bytes, what, Some(&probe), &mut want)?;
    Ok(kept.map(|(_, kept)| (probes, kept)))
}

fn parse_manifest_parts(
    bytes: &[u8],
    what: &str,
) -> Result<(iceberg::spec::ManifestMetadata, Vec<ManifestEntry>)> {
    if let Some(parts) = parse_manifest_fast(bytes, what)? {
        return Ok(parts);
    }
    let (entries, metadata) = guard_avro(bytes, what, || Manifest::parse_avro(bytes))?.into_parts();
    let entries = entries.into_iter().map(Arc::unwrap_or_clone).collect();
    Ok((metadata, entries))
}

/// The planning decoder: the header's metadata parsed by the `iceberg` crate, the entries
/// by [`crate::codec::manifest::select_entries`]. `Ok(None)`: leave it to the `iceberg` crate.
fn parse_manifest_fast(
    bytes: &[u8],
    what: &str,
) -> Result<Option<(iceberg::spec::ManifestMetadata, Vec<ManifestEntry>)>> {
    parse_manifest_selected(bytes, what, None, &mut |_| Pick::Keep)
}

/// [`parse_manifest_fast`] keeping only the entries `want` says yes to, each first decoded
/// as `probe` says ([`crate::codec::manifest::select_entries`]).
fn parse_manifest_selected(
    bytes: &[u8],
    what: &str,
    probe: Option<&Probe>,
    want: &mut dyn FnMut(&mut ManifestEntry) -> Pick,
) -> Result<Option<(iceberg::spec::ManifestMetadata, Vec<ManifestEntry>)>> {
    storage::limit_avro_allocations();
    crate::codec::avro::check_header(bytes, what)?;
    let Some(head) = crate::codec::manifest::header_len(bytes).map(|n| &bytes[..n]) else {
        return Ok(None);
    };
    let header = std::panic::catch_unwind(|| {
        apache_avro::Reader::new(head)
            .map(|r| (r.writer_schema().clone(), r.user_metadata().clone()))
    });
    let Ok(Ok((schema, user_metadata))) = header else {
        return Ok(None);
    };
    crate::codec::avro::check_writer_schema(&schema, what)?;
    let Ok(metadata) = iceberg::spec::ManifestMetadata::parse(&user_metadata) else {
        return Ok(None);
    };
    if metadata.format_version == FormatVersion::V1 {
        return Ok(None);
    }
    let Ok(partition_type) = metadata.partition_spec.partition_type(&metadata.schema) else {
        return Ok(None);
    };
    let m = crate::codec::manifest::Manifest {
        writer: &schema,
        schema: &metadata.schema,
        spec_id: metadata.partition_spec.spec_id(),
        partition_type: &partition_type,
        what,
    };
    let entries = crate::codec::manifest::select_entries(bytes, &m, probe, want)?;
    Ok(entries.map(|e| (metadata, e)))
}

/// What an entry inherits from its manifest list entry (the spec's rules, as the `iceberg`
/// crate applies them): the snapshot id, and for added files (or a manifest of the first
/// sequence number) the data and file sequence numbers.
fn inherit(e: &mut ManifestEntry, mf: &ManifestFile) {
    if e.snapshot_id.is_none() {
        e.snapshot_id = Some(mf.added_snapshot_id);
    }
    let inherits = e.status == iceberg::spec::ManifestStatus::Added || mf.sequence_number == 0;
    if e.sequence_number.is_none() && inherits {
        e.sequence_number = Some(mf.sequence_number);
    }
    if e.file_sequence_number.is_none() && inherits {
        e.file_sequence_number = Some(mf.sequence_number);
    }
}

/// Decodes an Avro container with `f`: declared lengths bounded, the header, the writer
/// schema and the blocks checked first ([`crate::codec::avro::check_header`],
/// [`crate::codec::avro::check_writer_schema`],
/// [`crate::codec::avro::check_blocks`]), decoder panics turned into errors.
fn guard_avro<T>(bytes: &[u8], what: &str, f: impl FnOnce() -> iceberg::Result<T>) -> Result<T> {
    storage::limit_avro_allocations();
    crate::codec::avro::check_header(bytes, what)?;
    let header = std::panic::catch_unwind(|| {
        apache_avro::Reader::new(bytes).map(|r| r.writer_schema().clone())
    });
    // A header the reader rejects is reported by the decoder below, with its own message.
    if let Ok(Ok(schema)) = header {
        crate::codec::avro::check_writer_schema(&schema, what)?;
        crate::codec::avro::check_blocks(bytes, &schema, what)?;
    }
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .map_err(|_| {
            Error::corrupt(format!(
                "{what} is malformed: the Avro decoder failed on it"
            ))
        })?
        .map_err(|e| Error::corrupt(format!("{what} is malformed: {e}")).with_source(e))
}

/// `ns1.ns2.table`.
pub fn ident_name(ident: &TableIdent) -> String {
    let mut parts: Vec<String> = ident.namespace().iter().cloned().collect();
    parts.push(ident.name().to_string());
    parts.join(".")
}

/// Parses `ns.table` (the last dot separates the table name); a bare name goes to `default`.
/// A part that is empty or holds `/`, `\`, `.` or a control character is an error (it could
/// alias or escape a table location).
pub fn parse_ident(name: &str) -> Result<TableIdent> {
    let parts: Vec<&str> = name.split('.').collect();
    let parts = if parts.len() == 1 {
        vec!["default", parts[0]]
    } else {
        parts
    };
    for p in &parts {
        check_name_part("table name", name, p)?;
    }
    TableIdent::from_strs(parts).map_err(Error::from)
}

/// Refuses an identifier whose namespace or table name could alias or escape a table
/// location (`<warehouse>/<ns…>/<table>`) or a SQL catalog's dotted namespace: an empty part,
/// or one holding `/`, `\`, `.` (`..` included) or a control character. Tables with such
/// names written by other engines still load; floe does not create them.
pub(crate) fn check_ident(ident: &TableIdent) -> Result<()> {
    let name = ident_name(ident);
    for p in ident.namespace().iter() {
        check_name_part("table name", &name, p)?;
    }
    check_name_part("table name", &name, ident.name())
}

/// [`check_ident`] for a dotted namespace name (`db`, `a.b`).
pub(crate) fn check_namespace(ns: &str) -> Result<()> {
    for p in ns.split('.') {
        check_name_part("namespace", ns, p)?;
    }
    Ok(())
}

fn check_name_part(what: &str, whole: &str, part: &str) -> Result<()> {
    let bad = if part.is_empty() {
        Some("an empty part".to_string())
    } else {
        part.chars()
            .find(|c| matches!(c, '/' | '\\' | '.') || c.is_control())
            .map(|c| format!("'{}' in '{part}'", c.escape_default()))
    };
    match bad {
        Some(b) => Err(Error::invalid(format!(
            "{what} '{}' has {b}: a namespace or table name must not be empty nor contain '/', \
             '\\', '.' or control characters (it would alias or escape another table's \
             location); use letters, digits and '_'",
            whole.escape_default()
        ))),
        None => Ok(()),
    }
}

/// Reads and parses a metadata JSON file (plain or gzip), naming the file on failure.
pub async fn read_metadata(storage: &Storage, location: &str) -> Result<TableMetadata> {
    let bytes = storage.get(location).await.map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            Error::not_found(format!(
                "metadata file '{location}' does not exist; the catalog points at a deleted file — \
                 restore it or re-register the table with a surviving metadata file"
            ))
        } else {
            e
        }
    })?;
    parse_metadata(location, &bytes)
}

/// Parses the bytes of a metadata JSON file (plain or gzip) read from `location`.
#[doc(hidden)]
pub fn parse_metadata(location: &str, bytes: &Bytes) -> Result<TableMetadata> {
    let raw: Vec<u8>;
    let data: &[u8] = if location.ends_with(".gz") || bytes.starts_with(&[0x1f, 0x8b]) {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| {
                Error::corrupt(format!("metadata file '{location}' is not valid gzip"))
                    .with_source(e)
            })?;
        raw = out;
        &raw
    } else {
        bytes
    };
    // The iceberg crate validates while deserializing; its arithmetic on timestamps can
    // overflow (a panic in debug builds) on corrupt values.
    std::panic::catch_unwind(|| serde_json::from_slice::<TableMetadata>(data))
        .map_err(|_| {
            Error::corrupt(format!(
                "metadata file '{location}' is malformed (its values are out of range); restore \
                 it from a backup or point the catalog at the previous metadata file"
            ))
        })?
        .map_err(|e| {
            Error::corrupt(format!(
                "metadata file '{location}' is malformed or truncated ({e}); restore it from a \
                 backup or point the catalog at the previous metadata file"
            ))
            .with_source(e)
        })
}

/// Finds the current metadata file of a table directory.
pub(crate) async fn find_latest_metadata(storage: &Storage, dir: &str) -> Result<String> {
    let mdir = storage::join(dir, "metadata");
    let hint = storage::join(&mdir, "version-hint.text");
    if let Ok(b) = storage.get(&hint).await {
        let text = String::from_utf8_lossy(&b).trim().to_string();
        if let Ok(n) = text.parse::<u64>() {
            let version = |n: u64| storage::join(&mdir, &format!("v{n}.metadata.json"));
            if storage.exists(&version(n)).await? {
                // The hint may lag: a writer stopped after linking vN+1 but before rewriting
                // the hint (or a slower writer rewrote it last). As Iceberg Java's Hadoop
                // tables do, the versions after the hint's are the newer ones.
                let mut n = n;
                while storage.exists(&version(n + 1)).await? {
                    n += 1;
                }
                return Ok(version(n));
            }
        }
    }
    let files = storage.list(&mdir).await?;
    let mut best: Option<(u64, String)> = None;
    for f in files {
        let Some(name) = f.location.rsplit('/').next() else {
            continue;
        };
        if name.starts_with('.')
            || !(name.ends_with(".metadata.json") || name.ends_with(".metadata.json.gz"))
        {
            continue;
        }
        let v = name
            .strip_prefix('v')
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse().ok())
            .or_else(|| name.split('-').next().and_then(|n| n.parse().ok()));
        if let Some(v) = v {
            if best.as_ref().map(|(b, _)| v > *b).unwrap_or(true) {
                best = Some((v, f.location.clone()));
            }
        }
    }
    best.map(|(_, l)| l).ok_or_else(|| {
        Error::not_found(format!(
            "no metadata file found under '{mdir}': is '{dir}' an Iceberg table directory?"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idents() {
        assert_eq!(ident_name(&parse_ident("a.b.c").unwrap()), "a.b.c");
        assert_eq!(ident_name(&parse_ident("t").unwrap()), "default.t");
        assert!(parse_ident("a..b").is_err());
    }

    #[test]
    fn names_that_alias_or_escape_a_location_are_refused() {
        for bad in [
            "db.a/b", "db.a\\b", "a/b", "db..t", ".t", "t.", "", "db.t\n", "a/..", "db./x",
        ] {
            let e = parse_ident(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert!(e.to_string().contains("alias"), "{e}");
        }
        for bad in [vec!["db", "a/b"], vec!["..", "t"], vec!["a.b", "t"]] {
            let id = TableIdent::from_strs(bad.clone()).unwrap();
            assert!(check_ident(&id).is_err(), "{bad:?}");
        }
        check_ident(&parse_ident("db.a_b-1 ü").unwrap()).unwrap();
        assert!(check_namespace("a/b").is_err());
        assert!(check_namespace("a..b").is_err());
        check_namespace("a.b").unwrap();
    }

    #[test]
    fn truncated_metadata_is_corrupt() {
        let e = parse_metadata(
            "/x/v1.metadata.json",
            &Bytes::from_static(b"{\"format-version\": 2, "),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(e.to_string().contains("/x/v1.metadata.json"));
    }
}
