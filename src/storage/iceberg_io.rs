//! Adapter: floe's [`Storage`] as the `iceberg` crate's `Storage`/`StorageFactory`.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, StorageConfig,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::Storage;

fn to_ice(e: crate::Error) -> iceberg::Error {
    let kind = match e.kind() {
        crate::ErrorKind::NotFound => iceberg::ErrorKind::DataInvalid,
        _ => iceberg::ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, e.to_string()).with_source(e)
}

/// Serializable description of a [`Storage`] (what typetag needs).
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
struct Repr {
    relocation: Option<(String, String)>,
    s3: Option<super::S3Options>,
}

impl From<Repr> for IceStorage {
    fn from(r: Repr) -> Self {
        let s = match r.s3 {
            Some(o) => Storage::with_s3(o),
            None => Storage::new(),
        };
        let inner = match &r.relocation {
            Some((f, t)) => s.relocated(f, t),
            None => s,
        };
        IceStorage { inner }
    }
}

impl From<IceStorage> for Repr {
    fn from(s: IceStorage) -> Self {
        Repr {
            relocation: s
                .inner
                .relocation
                .as_ref()
                .map(|r| (r.0.clone(), r.1.clone())),
            s3: s.inner.s3_options().ok().cloned(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "Repr", into = "Repr")]
struct IceStorage {
    inner: Storage,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct IceFactory {
    storage: IceStorage,
}

pub(super) fn file_io(storage: Storage) -> FileIO {
    FileIOBuilder::new(Arc::new(IceFactory {
        storage: IceStorage { inner: storage },
    }))
    .build()
}

#[typetag::serde(name = "floe_object_store")]
impl iceberg::io::StorageFactory for IceFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn iceberg::io::Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

struct Reader {
    storage: Storage,
    location: String,
}

#[async_trait::async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        self.storage
            .get_range(&self.location, range)
            .await
            .map_err(to_ice)
    }
}

struct Writer {
    inner: Option<object_store::buffered::BufWriter>,
    location: String,
}

#[async_trait::async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
        let w = self.inner.as_mut().ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{} already closed", self.location),
            )
        })?;
        w.put(bs)
            .await
            .map_err(|e| to_ice(crate::Error::from(e).context(&self.location)))
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        let mut w = self.inner.take().ok_or_else(|| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("{} already closed", self.location),
            )
        })?;
        w.shutdown().await.map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("closing {}", self.location),
            )
            .with_source(e)
        })
    }
}

#[async_trait::async_trait]
#[typetag::serde(name = "floe_object_store_storage")]
impl iceberg::io::Storage for IceStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.inner.exists(path).await.map_err(to_ice)
    }
    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        Ok(FileMetadata {
            size: self.inner.size(path).await.map_err(to_ice)?,
        })
    }
    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.inner.get(path).await.map_err(to_ice)
    }
    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        Ok(Box::new(Reader {
            storage: self.inner.clone(),
            location: path.to_string(),
        }))
    }
    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.inner.put(path, bs).await.map_err(to_ice)
    }
    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        let w = self.inner.writer(path).await.map_err(to_ice)?;
        Ok(Box::new(Writer {
            inner: Some(w),
            location: path.to_string(),
        }))
    }
    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.inner.delete(path).await.map_err(to_ice)
    }
    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.inner.delete_prefix(path).await.map_err(to_ice)
    }
    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(p) = paths.next().await {
            self.inner.delete(&p).await.map_err(to_ice)?;
        }
        Ok(())
    }
    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }
    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}
