//! The direct read path: a delete-free, unfiltered scan of a file whose columns carry the
//! table's field ids with the table's types is decoded straight by the async Parquet reader
//! (no per-batch schema transformation). Anything else goes through the general reader.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef as ArrowSchemaRef;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::arrow::{ProjectionMask, PARQUET_FIELD_ID_META_KEY};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::arrow_layout::{relabel, same_layout};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// Byte ranges of one Parquet file through [`Storage`].
struct StoreFile {
    storage: Storage,
    path: String,
    size: u64,
}

fn perr(e: Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for StoreFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.storage.get_range(&self.path, range).await.map_err(perr) }.boxed()
    }

    fn get_metadata<'a>(&'a mut self, _options: Option<&'a ArrowReaderOptions>) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let tail_len = 8u64;
            if self.size < tail_len {
                return Err(ParquetError::General(format!("'{}' is too small to be Parquet", self.path)));
            }
            // One read for the footer and (usually) all of the metadata.
            let guess = self.size.min(64 * 1024);
            let tail = self.storage.get_range(&self.path, self.size - guess..self.size).await.map_err(perr)?;
            let footer: [u8; 8] = tail[tail.len() - 8..].try_into().map_err(|_| ParquetError::General("short footer".into()))?;
            let len = parquet::file::metadata::FooterTail::try_new(&footer)?.metadata_length() as u64;
            let meta = if len + 8 <= guess {
                let start = (guess - 8 - len) as usize;
                ParquetMetaDataReader::decode_metadata(&tail[start..tail.len() - 8])?
            } else {
                if len + 8 > self.size {
                    return Err(ParquetError::General(format!("'{}' has a corrupt footer", self.path)));
                }
                let buf = self.storage.get_range(&self.path, self.size - 8 - len..self.size - 8).await.map_err(perr)?;
                ParquetMetaDataReader::decode_metadata(&buf)?
            };
            Ok(Arc::new(meta))
        }
        .boxed()
    }
}

/// Plans the direct read of a file: which file root column feeds each target column, or
/// `None` when the file needs the general reader.
fn roots_for(file_schema: &arrow_schema::Schema, target: &ArrowSchemaRef) -> Option<Vec<usize>> {
    let mut roots = Vec::with_capacity(target.fields().len());
    for tf in target.fields() {
        let id = tf.metadata().get(PARQUET_FIELD_ID_META_KEY)?;
        let i = file_schema.fields().iter().position(|ff| ff.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(id))?;
        if !same_layout(file_schema.field(i).data_type(), tf.data_type()) {
            return None;
        }
        roots.push(i);
    }
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == roots.len()).then_some(roots)
}

/// Reorders and relabels a decoded batch (file column order) into the target schema.
fn shape(b: &RecordBatch, order: &[usize], target: &ArrowSchemaRef, path: &str) -> Result<RecordBatch> {
    let cols = order.iter().zip(target.fields()).map(|(i, f)| relabel(b.column(*i), f.data_type())).collect::<Result<Vec<_>>>()?;
    let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    RecordBatch::try_new_with_options(target.clone(), cols, &opts).map_err(|e| Error::corrupt(format!("data file '{path}': {e}")))
}

/// A local file is decoded with the synchronous reader on a blocking thread (positioned
/// reads, no per-range object-store requests); batches come back through a channel.
fn open_local(
    local: std::path::PathBuf,
    path: &str,
    target: &ArrowSchemaRef,
    batch_size: usize,
) -> Result<Option<futures::stream::BoxStream<'static, Result<RecordBatch>>>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let corrupt = |e: ParquetError| Error::corrupt(format!("data file '{path}': {e}"));
    let file = std::fs::File::open(&local).map_err(|e| Error::not_found(format!("data file '{path}' cannot be opened: {e}")))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(corrupt)?;
    let Some(roots) = roots_for(builder.schema(), target) else { return Ok(None) };
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    let order: Vec<usize> = roots.iter().map(|r| sorted.iter().position(|s| s == r).unwrap_or(0)).collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), sorted.iter().copied());
    let reader = builder.with_projection(mask).with_batch_size(batch_size).build().map_err(corrupt)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
    let (target, p) = (target.clone(), path.to_string());
    tokio::task::spawn_blocking(move || {
        for b in reader {
            let item = b.map_err(|e| Error::corrupt(format!("data file '{p}': {e}"))).and_then(|b| shape(&b, &order, &target, &p));
            let stop = item.is_err();
            if tx.blocking_send(item).is_err() || stop {
                return;
            }
        }
    });
    Ok(Some(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) }).boxed()))
}

/// A stream of `target`-shaped batches of the file, or `None` when the file needs the general
/// reader (missing field ids, other types, schema evolution).
pub(super) async fn open(
    storage: &Storage,
    path: &str,
    size: u64,
    target: &ArrowSchemaRef,
    batch_size: usize,
) -> Result<Option<futures::stream::BoxStream<'static, Result<RecordBatch>>>> {
    if let Some(local) = storage.local_file(path) {
        return open_local(local, path, target, batch_size);
    }
    let mut file = StoreFile { storage: storage.clone(), path: path.to_string(), size };
    let meta = file.get_metadata(None).await.map_err(|e| Error::corrupt(format!("data file '{path}': {e}")))?;
    let arm = ArrowReaderMetadata::try_new(meta, ArrowReaderOptions::new()).map_err(|e| Error::corrupt(format!("data file '{path}': {e}")))?;
    let Some(roots) = roots_for(arm.schema(), target) else { return Ok(None) };
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    let order: Vec<usize> = roots.iter().map(|r| sorted.iter().position(|s| s == r).unwrap_or(0)).collect();
    let mask = ProjectionMask::roots(arm.parquet_schema(), sorted.iter().copied());
    let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(file, arm)
        .with_projection(mask)
        .with_batch_size(batch_size)
        .build()
        .map_err(|e| Error::corrupt(format!("data file '{path}': {e}")))?;
    let (target, p) = (target.clone(), path.to_string());
    Ok(Some(
        stream
            .map(move |b| b.map_err(|e| Error::corrupt(format!("data file '{p}': {e}"))).and_then(|b| shape(&b, &order, &target, &p)))
            .boxed(),
    ))
}
