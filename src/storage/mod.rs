//! The only raw I/O of floe: every file goes through `object_store`.
//!
//! [`Storage`] offers what floe's engines need (get, ranges, head, list, put, create-only put,
//! delete) and also plugs into the `iceberg` crate's `FileIO`, so its manifest readers and
//! writers use the same stores.

mod durable;
mod iceberg_io;
mod location;
mod memo;
mod s3;
mod stats;

use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, ErrorKind, Result};
#[cfg(test)]
use std::collections::HashMap;

#[doc(hidden)]
pub use durable::FSYNC_ENV;
pub use location::check as check_location;
pub(crate) use location::{check_store, s3_parts, to_uri};
pub use location::{join, local_path, scheme};
pub use s3::{S3Options, CONDITIONAL_PUT_ENV};
pub use stats::RequestStats;

/// A listed object.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    /// Location in the same form the listing was asked for (`file:///…`).
    pub location: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time, milliseconds since the epoch.
    pub last_modified_ms: i64,
}

/// Access to table files (local and `s3://`), with optional read-only relocation of moved
/// tables.
#[derive(Clone, Debug)]
pub struct Storage {
    /// The local file system (writes synced to disk unless `FLOE_FSYNC=0`).
    local: Arc<dyn ObjectStore>,
    /// How `s3://` buckets are reached, or why the environment could not be read (reported
    /// when an S3 location is used).
    s3: Arc<std::result::Result<S3Options, String>>,
    /// Buckets given explicitly (tests), looked up before the shared cache.
    #[cfg(test)]
    buckets: HashMap<String, Arc<s3::Bucket>>,
    /// `(from, to)` prefix: locations under `from` are read from `to` (relocated tables).
    relocation: Option<Arc<(String, String)>>,
    /// Requests sent through this storage and its clones ([`Storage::request_stats`]).
    counters: Arc<stats::Counters>,
    /// Decoded immutable files (manifests), shared with the clones.
    memo: Arc<memo::Memo>,
}

/// What a location resolved to.
struct Target {
    store: Arc<dyn ObjectStore>,
    path: StorePath,
    /// The S3 bucket, when remote (create-only puts are checked per bucket).
    bucket: Option<Arc<s3::Bucket>>,
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

impl Storage {
    /// Storage for local files (all three local path forms) and `s3://` locations, reached
    /// as [`S3Options::from_env`] describes (the AWS SDK's environment variables).
    pub fn new() -> Self {
        Self::with_s3_result(S3Options::from_env().map_err(|e| e.to_string()))
    }

    /// Storage whose `s3://` locations are reached with `options` (not the environment).
    pub fn with_s3(options: S3Options) -> Self {
        Self::with_s3_result(Ok(options))
    }

    fn with_s3_result(s3: std::result::Result<S3Options, String>) -> Self {
        Self {
            local: if durable::enabled() {
                Arc::new(durable::Durable {
                    inner: Arc::new(LocalFileSystem::new()),
                })
            } else {
                Arc::new(LocalFileSystem::new())
            },
            s3: Arc::new(s3),
            #[cfg(test)]
            buckets: HashMap::new(),
            relocation: None,
            counters: Arc::default(),
            memo: Arc::default(),
        }
    }

    /// The requests this storage (and every clone of it, such as a catalog's tables) has sent
    /// so far, by kind; take two readings and [`RequestStats::since`] for one operation.
    pub fn request_stats(&self) -> RequestStats {
        self.counters.snapshot()
    }

    /// Sets the request counters of [`Storage::request_stats`] back to zero (for every clone).
    pub fn reset_request_stats(&self) {
        self.counters.reset()
    }

    /// `store`, counting its requests in this storage's [`RequestStats`].
    fn counted(&self, store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(stats::Counting {
            inner: store,
            counters: self.counters.clone(),
        })
    }

    /// The S3 settings of this storage (an error when the environment was invalid).
    pub fn s3_options(&self) -> Result<&S3Options> {
        self.s3
            .as_ref()
            .as_ref()
            .map_err(|e| Error::invalid(e.clone()))
    }

    /// The same storage with bucket `name` served by `store` (tests).
    #[cfg(test)]
    pub(crate) fn with_bucket(
        mut self,
        name: &str,
        store: Arc<dyn ObjectStore>,
        conditional_put: bool,
    ) -> Self {
        self.buckets.insert(
            name.to_string(),
            Arc::new(s3::Bucket::new(name, "test", store, conditional_put)),
        );
        self
    }

    /// The same storage, reading locations under `from` from `to` instead (moved tables).
    pub fn relocated(&self, from: &str, to: &str) -> Self {
        let mut s = self.clone();
        s.relocation = Some(Arc::new((from.to_string(), to.to_string())));
        s
    }

    fn bucket(&self, name: &str) -> Result<Arc<s3::Bucket>> {
        #[cfg(test)]
        if let Some(b) = self.buckets.get(name) {
            return Ok(b.clone());
        }
        s3::bucket(self.s3_options()?, name)
    }

    fn resolve(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, StorePath)> {
        let t = self.target(location)?;
        Ok((t.store, t.path))
    }

    fn target(&self, location: &str) -> Result<Target> {
        let relocated;
        let mut loc = location;
        if let Some(r) = &self.relocation {
            if let Some(l) = location::relocate(location, &r.0, &r.1) {
                relocated = l;
                loc = &relocated;
            }
        }
        let parse = |key: &str| {
            StorePath::parse(key)
                .map_err(|e| Error::invalid(format!("invalid location '{location}': {e}")))
        };
        match location::resolve(loc)? {
            location::Resolved::Local(key) => Ok(Target {
                store: self.counted(self.local.clone()),
                path: parse(&key)?,
                bucket: None,
            }),
            location::Resolved::S3 { bucket, key } => {
                let b = self.bucket(&bucket)?;
                Ok(Target {
                    store: self.counted(b.store.clone()),
                    path: parse(&key)?,
                    bucket: Some(b),
                })
            }
        }
    }

    /// The local file behind `location` (after relocation), when it is on local disk: lets
    /// hot read paths use plain positioned reads instead of the object-store API.
    pub fn local_file(&self, location: &str) -> Option<std::path::PathBuf> {
        let relocated = self
            .relocation
            .as_ref()
            .and_then(|r| location::relocate(location, &r.0, &r.1));
        let loc = relocated.as_deref().unwrap_or(location);
        match location::resolve(loc).ok()? {
            location::Resolved::Local(key) => Some(std::path::PathBuf::from(format!("/{key}"))),
            location::Resolved::S3 { .. } => None,
        }
    }

    fn wrap(e: object_store::Error, op: &str, location: &str) -> Error {
        let kind = match &e {
            object_store::Error::NotFound { .. } => ErrorKind::NotFound,
            object_store::Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            object_store::Error::Precondition { .. } => ErrorKind::Conflict,
            _ => ErrorKind::Io,
        };
        let hint = match kind {
            ErrorKind::NotFound => " (file is missing: was it deleted or moved?)",
            _ => "",
        };
        Error::new(kind, format!("{op} '{location}' failed{hint}")).with_source(e)
    }

    /// Reads a whole object.
    pub async fn get(&self, location: &str) -> Result<Bytes> {
        let (store, path) = self.resolve(location)?;
        let r = store
            .get(&path)
            .await
            .map_err(|e| Self::wrap(e, "read", location))?;
        r.bytes().await.map_err(|e| Self::wrap(e, "read", location))
    }

    /// A reader of the Parquet file at `location` (`what` names it in errors: "MERGE
    /// source", "staged key list"): a local file is read lazily, row group by row group; a
    /// remote one is fetched whole first.
    pub async fn parquet_reader(
        &self,
        location: &str,
        what: &str,
    ) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder as Builder;
        let unreadable = |e: parquet::errors::ParquetError| {
            Error::corrupt(format!(
                "{what} '{location}' is not a readable Parquet file ({e})"
            ))
        };
        if let Some(path) = self.local_file(location) {
            let f = std::fs::File::open(&path).map_err(|e| {
                let kind = match e.kind() {
                    std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                    _ => ErrorKind::Io,
                };
                Error::new(kind, format!("{what} '{location}' cannot be opened: {e}"))
            })?;
            return Builder::try_new(f)
                .and_then(|b| b.build())
                .map_err(unreadable);
        }
        let bytes = self
            .get(location)
            .await
            .map_err(|e| e.context(what.to_string()))?;
        Builder::try_new(bytes)
            .and_then(|b| b.build())
            .map_err(unreadable)
    }

    /// Every batch of the Parquet file at `location` ([`Self::parquet_reader`]), each
    /// error naming `what` and the file.
    pub async fn read_parquet(&self, location: &str, what: &str) -> Result<Vec<RecordBatch>> {
        self.parquet_reader(location, what)
            .await?
            .map(|b| b.map_err(|e| Error::corrupt(format!("{what} '{location}': {e}"))))
            .collect()
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, location: &str, range: Range<u64>) -> Result<Bytes> {
        let (store, path) = self.resolve(location)?;
        store
            .get_range(&path, range)
            .await
            .map_err(|e| Self::wrap(e, "read", location))
    }

    /// Size of an object.
    pub async fn size(&self, location: &str) -> Result<u64> {
        let (store, path) = self.resolve(location)?;
        Ok(store
            .head(&path)
            .await
            .map_err(|e| Self::wrap(e, "stat", location))?
            .size)
    }

    /// Whether an object exists.
    pub async fn exists(&self, location: &str) -> Result<bool> {
        match self.size(location).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Decoded immutable files read through this storage and its clones.
    pub(crate) fn memo(&self) -> &memo::Memo {
        &self.memo
    }

    /// Writes an object, replacing any existing one.
    pub async fn put(&self, location: &str, bytes: Bytes) -> Result<()> {
        self.memo.forget(location);
        let (store, path) = self.resolve(location)?;
        store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| Self::wrap(e, "write", location))?;
        Ok(())
    }

    /// Writes an object only if none exists; `AlreadyExists` otherwise. On S3 the bucket is
    /// first checked (once) to honour create-only puts; with
    /// `FLOE_S3_CONDITIONAL_PUT=disabled` this refuses (nothing could stop an overwrite).
    pub async fn put_if_absent(&self, location: &str, bytes: Bytes) -> Result<()> {
        let t = self.target(location)?;
        if let Some(b) = &t.bucket {
            if !b.conditional_put {
                return Err(Error::unsupported(format!(
                    "cannot create '{location}' safely: {CONDITIONAL_PUT_ENV}=disabled, so S3 \
                     bucket '{}' cannot refuse an overwrite; a filesystem (Hadoop) catalog \
                     cannot commit there. Use a SQL catalog (sqlite:////abs/catalog.db) or a server \
                     that honours conditional puts",
                    b.name
                )));
            }
        }
        self.create_only(t, location, bytes).await
    }

    /// Writes a new object whose name is unique (a UUID in it): create-only where the store
    /// supports it, a plain write on S3 buckets with `FLOE_S3_CONDITIONAL_PUT=disabled`
    /// (safe because no other writer picks the same name). `AlreadyExists` otherwise.
    pub async fn put_unique(&self, location: &str, bytes: Bytes) -> Result<()> {
        let t = self.target(location)?;
        if t.bucket.as_ref().is_some_and(|b| !b.conditional_put) {
            return t
                .store
                .put(&t.path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|e| Self::wrap(e, "write", location));
        }
        self.create_only(t, location, bytes).await
    }

    async fn create_only(&self, t: Target, location: &str, bytes: Bytes) -> Result<()> {
        if let Some(b) = &t.bucket {
            b.ensure_conditional_put(t.path.as_ref())
                .await
                .map_err(|e| e.context(format!("creating '{location}'")))?;
        }
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        t.store
            .put_opts(&t.path, PutPayload::from(bytes), opts)
            .await
            .map_err(|e| Self::wrap(e, "create", location))?;
        Ok(())
    }

    /// Deletes an object; a missing object is not an error.
    pub async fn delete(&self, location: &str) -> Result<()> {
        self.memo.forget(location);
        let (store, path) = self.resolve(location)?;
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::wrap(e, "delete", location)),
        }
    }

    /// Whether any object lives under a directory-like prefix (stops at the first).
    pub async fn has_objects(&self, prefix: &str) -> Result<bool> {
        let (store, path) = self.resolve(prefix)?;
        let first = store
            .list(Some(&path))
            .next()
            .await
            .transpose()
            .map_err(|e| Self::wrap(e, "list", prefix))?;
        Ok(first.is_some())
    }

    /// Lists every object under a directory-like prefix, recursively.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let (store, path) = self.resolve(prefix)?;
        let base = prefix.trim_end_matches('/');
        let key_base = path.as_ref().to_string();
        let items: Vec<_> = store
            .list(Some(&path))
            .map_err(|e| Self::wrap(e, "list", prefix))
            .try_collect()
            .await?;
        Ok(items
            .into_iter()
            .map(|m| {
                let rel = m
                    .location
                    .as_ref()
                    .strip_prefix(&key_base)
                    .unwrap_or(m.location.as_ref());
                ObjectInfo {
                    location: join(base, rel),
                    size: m.size,
                    last_modified_ms: m.last_modified.timestamp_millis(),
                }
            })
            .collect())
    }

    /// Staging files of uploads that never completed (a process killed mid-write) under a
    /// local prefix: `object_store` writes `<name>#<n>` and renames it when done, and its
    /// listings skip such names. Object stores keep no such files (their incomplete multipart
    /// uploads are not objects), so elsewhere this is empty.
    pub fn list_partial_uploads(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let Some(root) = local_path(prefix) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut dirs = vec![std::path::PathBuf::from(root)];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let Ok(meta) = e.metadata() else { continue };
                if meta.is_dir() {
                    dirs.push(p);
                    continue;
                }
                let name = e.file_name().to_string_lossy().to_string();
                let partial = name
                    .rsplit_once('#')
                    .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if partial {
                    let modified = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(0);
                    out.push(ObjectInfo {
                        location: to_uri(&p),
                        size: meta.len(),
                        last_modified_ms: modified,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Removes a staging file [`Storage::list_partial_uploads`] found.
    pub fn remove_partial_upload(&self, location: &str) -> Result<()> {
        let Some(p) = local_path(location) else {
            return Ok(());
        };
        match std::fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("deleting {location}")).with_source(e)),
        }
    }

    /// Deletes everything under a prefix.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        let objs = self.list(prefix).await?;
        futures::stream::iter(objs)
            .map(|o| {
                let storage = self.clone();
                async move { storage.delete(&o.location).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        if let Some(p) = local_path(prefix) {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(())
    }

    /// A streaming writer for a new object (multipart, bounded memory).
    pub async fn writer(&self, location: &str) -> Result<object_store::buffered::BufWriter> {
        let (store, path) = self.resolve(location)?;
        Ok(object_store::buffered::BufWriter::new(store, path))
    }

    /// An `iceberg` crate `FileIO` backed by this storage (for the crate's readers and
    /// writers floe drives; not part of floe's API).
    pub(crate) fn file_io(&self) -> iceberg::io::FileIO {
        limit_avro_allocations();
        iceberg_io::file_io(self.clone())
    }
}

/// The largest Avro string, bytes or array/map length that manifests and manifest lists may
/// declare. `apache-avro` reserves memory for a declared length before reading the items
/// (512 MiB of elements by default, which a corrupt file turns into many GiB); real Iceberg
/// metadata stays far below this (the largest value is a table schema in a header).
const AVRO_MAX_DECLARED_LEN: usize = 8 << 20;

/// Sets the Avro declared-length limit; must run before the first Avro read (the limit is
/// process-wide and fixed by its first use), so every Avro read in floe goes through here.
#[doc(hidden)]
pub fn limit_avro_allocations() {
    apache_avro::util::max_allocation_bytes(AVRO_MAX_DECLARED_LEN);
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn s3_create_only_writes_are_checked_per_bucket() {
        // An honest bucket: create-only puts work and refuse overwrites.
        let st = Storage::with_s3(S3Options::default()).with_bucket(
            "good",
            Arc::new(InMemory::new()),
            true,
        );
        let loc = "s3://good/wh/t/metadata/00000-a.metadata.json";
        st.put_if_absent(loc, Bytes::from_static(b"1"))
            .await
            .unwrap();
        let e = st
            .put_if_absent(loc, Bytes::from_static(b"2"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert_eq!(&st.get(loc).await.unwrap()[..], b"1");
        let listed = st.list("s3://good/wh/t").await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].location, loc);

        // A bucket that ignores If-None-Match: detected before anything is written.
        let bad = Storage::with_s3(S3Options::default()).with_bucket(
            "bad",
            Arc::new(s3::tests::IgnoresConditions::default()),
            true,
        );
        let loc = "s3://bad/wh/t/metadata/00000-a.metadata.json";
        for write in [true, false] {
            let e = if write {
                bad.put_if_absent(loc, Bytes::from_static(b"1")).await
            } else {
                bad.put_unique(loc, Bytes::from_static(b"1")).await
            }
            .unwrap_err();
            assert!(e.to_string().contains(CONDITIONAL_PUT_ENV), "{e}");
        }
        assert!(!bad.exists(loc).await.unwrap());

        // With conditional puts disabled: unique names are written, create-only refuses.
        let off = Storage::with_s3(S3Options::default()).with_bucket(
            "off",
            Arc::new(s3::tests::IgnoresConditions::default()),
            false,
        );
        let loc = "s3://off/wh/t/metadata/00000-a.metadata.json";
        off.put_unique(loc, Bytes::from_static(b"1")).await.unwrap();
        let e = off
            .put_if_absent(loc, Bytes::from_static(b"2"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.to_string().contains("FLOE_S3_CONDITIONAL_PUT=disabled"),
            "{e}"
        );
        assert_eq!(&off.get(loc).await.unwrap()[..], b"1");
    }
}
