//! The only raw I/O of floe: every file goes through `object_store`.
//!
//! [`Storage`] offers what floe's engines need (get, ranges, head, list, put, create-only put,
//! delete) and also plugs into the `iceberg` crate's `FileIO`, so its manifest readers and
//! writers use the same stores.

mod iceberg_io;
mod location;

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Error, ErrorKind, Result};

pub use location::{join, local_path, to_uri};

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

/// Access to table files, with optional read-only relocation of moved tables.
#[derive(Clone, Debug)]
pub struct Storage {
    local: Arc<LocalFileSystem>,
    /// `(from, to)` prefix: locations under `from` are read from `to` (relocated tables).
    relocation: Option<Arc<(String, String)>>,
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

impl Storage {
    /// Storage for local files (all three local path forms).
    pub fn new() -> Self {
        Self {
            local: Arc::new(LocalFileSystem::new()),
            relocation: None,
        }
    }

    /// The same storage, reading locations under `from` from `to` instead (moved tables).
    pub fn relocated(&self, from: &str, to: &str) -> Self {
        Self {
            local: self.local.clone(),
            relocation: Some(Arc::new((from.to_string(), to.to_string()))),
        }
    }

    fn resolve(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, StorePath)> {
        let relocated;
        let mut loc = location;
        if let Some(r) = &self.relocation {
            if let Some(l) = location::relocate(location, &r.0, &r.1) {
                relocated = l;
                loc = &relocated;
            }
        }
        match location::resolve(loc)? {
            location::Resolved::Local(key) => {
                let path = StorePath::parse(&key)
                    .map_err(|e| Error::invalid(format!("invalid location '{location}': {e}")))?;
                Ok((self.local.clone(), path))
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

    /// Writes an object, replacing any existing one.
    pub async fn put(&self, location: &str, bytes: Bytes) -> Result<()> {
        let (store, path) = self.resolve(location)?;
        store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| Self::wrap(e, "write", location))?;
        Ok(())
    }

    /// Writes an object only if none exists; `AlreadyExists` otherwise.
    pub async fn put_if_absent(&self, location: &str, bytes: Bytes) -> Result<()> {
        let (store, path) = self.resolve(location)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        store
            .put_opts(&path, PutPayload::from(bytes), opts)
            .await
            .map_err(|e| Self::wrap(e, "create", location))?;
        Ok(())
    }

    /// Deletes an object; a missing object is not an error.
    pub async fn delete(&self, location: &str) -> Result<()> {
        let (store, path) = self.resolve(location)?;
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::wrap(e, "delete", location)),
        }
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
            .map(|o| async move { self.delete(&o.location).await })
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

    /// An `iceberg` crate `FileIO` backed by this storage.
    pub fn file_io(&self) -> iceberg::io::FileIO {
        iceberg_io::file_io(self.clone())
    }
}
