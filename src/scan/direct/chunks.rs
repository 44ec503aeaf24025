//! Where the direct reader's bytes come from: a local file's mapped bytes and a remote
//! file's ranged reads, both counting what the decoder fetches, and a file's bloom filters.

use super::DirectOptions;
use crate::error::Result;
use crate::storage::Storage;

/// Counts the bytes a decoder fetches from a file (column chunks and pages, not the footer
/// read before counting starts) in a filtered read's counters.
#[derive(Clone, Default)]
pub(super) struct Fetched {
    counters: Option<std::sync::Arc<crate::scan::ReadCounters>>,
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Fetched {
    pub(super) fn new(o: &DirectOptions) -> Self {
        Self {
            counters: o.row_groups.as_ref().map(|f| f.counters.clone()),
            on: Default::default(),
        }
    }

    /// Counts from now on (the footer and page index have been read).
    pub(super) fn start(&self) {
        self.on.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn add(&self, n: usize) {
        if let Some(c) = &self.counters {
            if self.on.load(std::sync::atomic::Ordering::Relaxed) {
                c.add_bytes(n as u64);
            }
        }
    }
}

/// A local file's bytes as the decoder's chunk reader, counting what it fetches.
#[derive(Clone)]
pub(super) struct CountedBytes {
    pub data: bytes::Bytes,
    pub fetched: Fetched,
}

impl parquet::file::reader::Length for CountedBytes {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

impl parquet::file::reader::ChunkReader for CountedBytes {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let r = self.data.get_read(start)?;
        self.fetched.add(r.get_ref().len());
        Ok(r)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        self.fetched.add(length);
        self.data.get_bytes(start, length)
    }
}

/// Where a file's bloom filters are read from.
pub(super) enum Blooms {
    /// The whole file is at hand.
    File(bytes::Bytes),
    /// Fetched ahead: each filter's bytes, by their offset in the file.
    Fetched(std::collections::HashMap<u64, bytes::Bytes>),
}

impl Blooms {
    /// The bloom filter of a column chunk, if it can be read.
    pub(super) fn read(
        &self,
        chunk: &parquet::file::metadata::ColumnChunkMetaData,
    ) -> Option<parquet::bloom_filter::Sbbf> {
        use parquet::bloom_filter::Sbbf;
        let read = match self {
            Blooms::File(data) => Sbbf::read_from_column_chunk(chunk, data),
            Blooms::Fetched(map) => {
                let start = u64::try_from(chunk.bloom_filter_offset()?).ok()?;
                let bytes = map.get(&start)?.clone();
                Sbbf::read_from_column_chunk(chunk, &Slice { start, bytes })
            }
        };
        read.ok().flatten()
    }
}

/// Bytes of a file starting at offset `start`, read as the file at those offsets.
pub(super) struct Slice {
    start: u64,
    bytes: bytes::Bytes,
}

impl parquet::file::reader::Length for Slice {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl parquet::file::reader::ChunkReader for Slice {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self.get_bytes(start, self.bytes.len())?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let from = start
            .checked_sub(self.start)
            .map(|f| f as usize)
            .filter(|f| *f <= self.bytes.len())
            .ok_or_else(|| {
                parquet::errors::ParquetError::General("bloom filter out of range".into())
            })?;
        Ok(self
            .bytes
            .slice(from..(from + length).min(self.bytes.len())))
    }
}

/// Fetches the bloom filters a filter may consult (of the columns it reads, in the row groups
/// their statistics keep), one ranged read each.
pub(super) async fn fetch_blooms(
    storage: &Storage,
    path: &str,
    meta: &parquet::file::metadata::ParquetMetaData,
    filter: &crate::scan::RowGroupFilter,
) -> Result<Blooms> {
    let mut ids = Vec::new();
    crate::expr::field_ids(&filter.predicate, &mut ids);
    let descr = meta.file_metadata().schema_descr();
    let columns: Vec<usize> = (0..descr.num_columns())
        .filter(|&c| {
            let col = descr.column(c);
            let info = col.self_type().get_basic_info();
            col.path().parts().len() == 1 && info.has_id() && ids.contains(&info.id())
        })
        .collect();
    let metrics = crate::expr::row_group_metrics(meta, &filter.schema, &filter.nan_free);
    let mut map = std::collections::HashMap::new();
    for (i, rg) in meta.row_groups().iter().enumerate() {
        if metrics
            .get(i)
            .is_some_and(|m| !crate::expr::may_match(&filter.predicate, m))
        {
            continue;
        }
        for &c in &columns {
            let chunk = rg.column(c);
            let (Some(offset), Some(length)) =
                (chunk.bloom_filter_offset(), chunk.bloom_filter_length())
            else {
                continue;
            };
            let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length)) else {
                continue;
            };
            let bytes = storage.get_range(path, offset..offset + length).await?;
            map.insert(offset, bytes);
        }
    }
    Ok(Blooms::Fetched(map))
}

/// A remote data file read by byte ranges through the table's storage.
#[derive(Clone)]
pub(super) struct RangeReader {
    pub storage: Storage,
    pub path: String,
    pub size: u64,
    pub fetched: Fetched,
}

impl parquet::arrow::async_reader::AsyncFileReader for RangeReader {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        self.fetched.add((range.end - range.start) as usize);
        Box::pin(async move {
            self.storage
                .get_range(&self.path, range)
                .await
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a parquet::arrow::arrow_reader::ArrowReaderOptions>,
    ) -> futures::future::BoxFuture<
        'a,
        parquet::errors::Result<std::sync::Arc<parquet::file::metadata::ParquetMetaData>>,
    > {
        Box::pin(async move {
            let size = self.size;
            use parquet::file::metadata::PageIndexPolicy;
            let (columns, offsets) = match options {
                Some(o) => (o.column_index_policy(), o.offset_index_policy()),
                None => (PageIndexPolicy::Skip, PageIndexPolicy::Skip),
            };
            let meta = parquet::file::metadata::ParquetMetaDataReader::new()
                .with_column_index_policy(columns)
                .with_offset_index_policy(offsets)
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .load_and_finish(self, size)
                .await?;
            Ok(std::sync::Arc::new(meta))
        })
    }
}

/// Bytes read from the end of a remote file in the first request (footer and metadata).
pub(super) const FOOTER_PREFETCH: usize = 64 * 1024;
