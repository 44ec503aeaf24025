//! Durable local writes: a file written to local disk is synced (`fsync`), with the
//! directory entries that name it, before the write returns, so a catalog never points at a
//! metadata file, manifest or data file that a power cut could still take away. Object
//! stores (S3) are durable when a PUT returns; only the local file system needs this.
//!
//! Every new file's directory is synced (it gained an entry); each directory's entry in its
//! parent is synced once per process, the first time a file is written under it (a
//! directory made by this write gained its entry there). `FLOE_FSYNC=0` turns it off (tests,
//! scratch tables on a disk whose loss does not matter).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use object_store::path::Path as StorePath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

/// The environment variable that turns syncing off (`0`).
pub const FSYNC_ENV: &str = "FLOE_FSYNC";

/// Whether local writes are synced (unless `FLOE_FSYNC=0`).
pub(crate) fn enabled() -> bool {
    std::env::var(FSYNC_ENV).map_or(true, |v| v != "0")
}

/// Directories whose entry in their parent was synced by this process.
static SYNCED_DIRS: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Syncs `file` and its directory (which gained its entry), and, up the tree, each
/// directory's parent until one whose entry is known to be synced (a directory this write
/// created gained its entry in its parent).
fn sync_path(file: &Path) -> std::io::Result<()> {
    std::fs::File::open(file)?.sync_all()?;
    let Some(parent) = file.parent() else {
        return Ok(());
    };
    std::fs::File::open(parent)?.sync_all()?;
    let mut dir = parent;
    while let Some(up) = dir.parent() {
        {
            let mut known = SYNCED_DIRS
                .lock()
                .map_err(|_| std::io::Error::other("a lock of synced directories is poisoned"))?;
            if !known
                .get_or_insert_with(HashSet::new)
                .insert(dir.to_path_buf())
            {
                break;
            }
        }
        std::fs::File::open(up)?.sync_all()?;
        dir = up;
    }
    Ok(())
}

/// Syncs the local file behind `location` on a blocking thread.
async fn sync(location: &StorePath) -> object_store::Result<()> {
    let file = PathBuf::from(format!("/{location}"));
    tokio::task::spawn_blocking(move || sync_path(&file))
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(e),
        })?
        .map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: format!("syncing '/{location}' to disk: {e}").into(),
        })
}

/// A local `ObjectStore` whose writes are synced to disk before they return.
#[derive(Debug)]
pub(crate) struct Durable {
    pub(crate) inner: Arc<dyn ObjectStore>,
}

impl std::fmt::Display for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Durable({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Durable {
    async fn put_opts(
        &self,
        location: &StorePath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let r = self.inner.put_opts(location, payload, opts).await?;
        sync(location).await?;
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &StorePath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(DurableUpload {
            inner,
            location: location.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &StorePath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<StorePath>>,
    ) -> BoxStream<'static, object_store::Result<StorePath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&StorePath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&StorePath>,
        offset: &StorePath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&StorePath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &StorePath,
        to: &StorePath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await?;
        sync(to).await
    }
}

/// A multipart upload whose completed file is synced before `complete` returns.
#[derive(Debug)]
struct DurableUpload {
    inner: Box<dyn MultipartUpload>,
    location: StorePath,
}

#[async_trait::async_trait]
impl MultipartUpload for DurableUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let r = self.inner.complete().await?;
        sync(&self.location).await?;
        Ok(r)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::local::LocalFileSystem;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn writes_land_and_read_back_through_the_durable_store() {
        let d = tempfile::tempdir().unwrap();
        let store = Durable {
            inner: Arc::new(LocalFileSystem::new()),
        };
        let dir = d
            .path()
            .to_string_lossy()
            .trim_start_matches('/')
            .to_string();
        let one = StorePath::from(format!("{dir}/new/deeper/one.bin"));
        store
            .put(&one, PutPayload::from_static(b"one"))
            .await
            .unwrap();
        let mut up = store
            .put_multipart_opts(
                &StorePath::from(format!("{dir}/new/two.bin")),
                PutMultipartOptions::default(),
            )
            .await
            .unwrap();
        up.put_part(PutPayload::from_static(b"tw")).await.unwrap();
        up.put_part(PutPayload::from_static(b"o")).await.unwrap();
        up.complete().await.unwrap();
        assert_eq!(
            std::fs::read(d.path().join("new/deeper/one.bin")).unwrap(),
            b"one"
        );
        assert_eq!(std::fs::read(d.path().join("new/two.bin")).unwrap(), b"two");
        // The new directories were synced (and remembered) on the way up.
        let known = SYNCED_DIRS.lock().unwrap().clone().unwrap_or_default();
        assert!(known.contains(&d.path().join("new")), "{known:?}");
        assert!(known.contains(&d.path().join("new/deeper")), "{known:?}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let e = sync_path(Path::new("/nonexistent-floe-dir/x.bin")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
