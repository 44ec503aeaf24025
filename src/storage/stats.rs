//! Request counting: an `ObjectStore` wrapper that counts the requests a [`super::Storage`]
//! sends, by kind (what benchmarks report as "requests per commit").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

/// Requests sent through one [`super::Storage`] (and its clones) since it was made or since
/// [`super::Storage::reset_request_stats`], by kind. Counted above `object_store`, so a
/// request it retries counts once; the once-per-bucket create-only probe (two PUTs and a
/// DELETE, `src/storage/s3.rs`) is not counted. Local files count the same operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RequestStats {
    /// Object reads, whole or ranged (`GET`).
    pub get: u64,
    /// Metadata reads (`HEAD`).
    pub head: u64,
    /// Writes: single puts, and for multipart uploads the initiate, each part and the
    /// completion (`PUT`/`POST`).
    pub put: u64,
    /// Listing calls (`LIST`); one per call, though a listing of more than 1,000 keys takes
    /// several requests on S3.
    pub list: u64,
    /// Objects deleted (`DELETE`; S3 may batch them into fewer requests).
    pub delete: u64,
    /// Server-side copies and renames (`COPY`).
    pub copy: u64,
}

impl RequestStats {
    /// All requests together.
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.list + self.delete + self.copy
    }

    /// The requests sent since `earlier` (a previous reading of the same storage).
    pub fn since(&self, earlier: &RequestStats) -> RequestStats {
        RequestStats {
            get: self.get.saturating_sub(earlier.get),
            head: self.head.saturating_sub(earlier.head),
            put: self.put.saturating_sub(earlier.put),
            list: self.list.saturating_sub(earlier.list),
            delete: self.delete.saturating_sub(earlier.delete),
            copy: self.copy.saturating_sub(earlier.copy),
        }
    }
}

impl std::fmt::Display for RequestStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GET {} HEAD {} PUT {} LIST {} DELETE {} COPY {}",
            self.get, self.head, self.put, self.list, self.delete, self.copy
        )
    }
}

/// The shared atomic counters behind [`RequestStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    copy: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RequestStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestStats {
            get: r(&self.get),
            head: r(&self.head),
            put: r(&self.put),
            list: r(&self.list),
            delete: r(&self.delete),
            copy: r(&self.copy),
        }
    }

    pub(crate) fn reset(&self) {
        for c in [
            &self.get,
            &self.head,
            &self.put,
            &self.list,
            &self.delete,
            &self.copy,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// An `ObjectStore` that counts the requests it forwards to `inner`.
#[derive(Debug)]
pub(crate) struct Counting {
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) counters: Arc<Counters>,
}

impl std::fmt::Display for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &StorePath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Counters::add(&self.counters.put);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &StorePath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Counters::add(&self.counters.put);
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountingUpload {
            inner,
            counters: self.counters.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &StorePath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        Counters::add(if options.head {
            &self.counters.head
        } else {
            &self.counters.get
        });
        self.inner.get_opts(location, options).await
    }

    // `get_ranges` is the trait's default: it coalesces the ranges and reads each through
    // `get_opts` above, so every ranged GET sent is counted.

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<StorePath>>,
    ) -> BoxStream<'static, object_store::Result<StorePath>> {
        let counters = self.counters.clone();
        let counted = locations
            .map(move |l| {
                if l.is_ok() {
                    Counters::add(&counters.delete);
                }
                l
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(
        &self,
        prefix: Option<&StorePath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        Counters::add(&self.counters.list);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&StorePath>,
        offset: &StorePath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        Counters::add(&self.counters.list);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&StorePath>,
    ) -> object_store::Result<ListResult> {
        Counters::add(&self.counters.list);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &StorePath,
        to: &StorePath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        Counters::add(&self.counters.copy);
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload whose parts and completion are counted as PUTs.
#[derive(Debug)]
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    counters: Arc<Counters>,
}

#[async_trait::async_trait]
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        Counters::add(&self.counters.put);
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        Counters::add(&self.counters.put);
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn every_kind_of_request_is_counted() {
        let counters = Arc::new(Counters::default());
        let s = Counting {
            inner: Arc::new(InMemory::new()),
            counters: counters.clone(),
        };
        let p = StorePath::from("a/b");
        s.put(&p, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        s.get(&p).await.unwrap().bytes().await.unwrap();
        s.head(&p).await.unwrap();
        // Nearby ranges are coalesced into one GET.
        s.get_ranges(&p, &[0..1, 8..10]).await.unwrap();
        let listed: Vec<_> = s.list(None).collect().await;
        assert_eq!(listed.len(), 1);
        s.copy(&p, &StorePath::from("a/c")).await.unwrap();
        s.delete(&p).await.unwrap();
        let mut up = s.put_multipart(&StorePath::from("a/m")).await.unwrap();
        up.put_part(PutPayload::from_static(b"x")).await.unwrap();
        up.complete().await.unwrap();
        let got = counters.snapshot();
        assert_eq!(
            got,
            RequestStats {
                get: 1 + 1,
                head: 1,
                put: 1 + 3,
                list: 1,
                delete: 1,
                copy: 1,
            },
            "{got}"
        );
        assert_eq!(got.total(), 10);
        assert_eq!(got.since(&got), RequestStats::default());
        counters.reset();
        assert_eq!(counters.snapshot(), RequestStats::default());
    }
}
