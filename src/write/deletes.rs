//! Delete file writers: position delete files (v2), deletion vectors in Puffin files (v3)
//! and equality delete files. Nothing here commits; see [`crate::txn::RowDelta`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::puffin::{Blob, CompressionCodec, PuffinWriter};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, NestedField, PartitionKey,
    PartitionSpec, PrimitiveType, Schema, Struct, Type,
};
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriterBuilder};
use roaring::RoaringTreemap;

use super::failed::write_failed;
use super::parquet_props::writer_properties;
use crate::codec::dv;
use crate::error::{Error, Result};
use crate::spec::reserved::{FILE_PATH_FIELD_ID, POS_FIELD_ID, ROW_POSITION_FIELD_ID};
use crate::spec::DataFile;
use crate::storage::join;
use crate::table::Table;

/// A data file, its spec id and the positions its deletion vector deletes.
type DeletionVector<'a> = (&'a DataFile, i32, RoaringTreemap);

/// Where a write puts its delete files and how it names them.
#[derive(Debug, Clone)]
pub(crate) struct DeleteFileWriter {
    table: Table,
    data_path: String,
    commit_uuid: uuid::Uuid,
    written: Vec<String>,
    seq: usize,
}

impl DeleteFileWriter {
    /// A writer for `table` (files go under `write.data.path`, default `<location>/data`).
    pub(crate) fn new(table: &Table) -> Result<Self> {
        let props = table.properties()?;
        let data_path = props
            .data_path
            .clone()
            .unwrap_or_else(|| join(table.metadata().location(), "data"));
        Ok(Self {
            table: table.clone(),
            data_path,
            commit_uuid: uuid::Uuid::now_v7(),
            written: Vec::new(),
            seq: 0,
        })
    }

    /// A new file's path: in the partition's directory, or the data root for `None`.
    fn location(&mut self, partition: Option<(&PartitionSpec, &Struct)>, suffix: &str) -> String {
        let dir = if let Some((spec, partition)) = partition.filter(|(s, _)| !s.is_unpartitioned())
        {
            let key = PartitionKey::new(
                spec.clone(),
                self.table.metadata().current_schema().clone(),
                partition.clone(),
            );
            join(&self.data_path, &key.to_path())
        } else {
            self.data_path.clone()
        };
        self.seq += 1;
        let p = join(
            &dir,
            &format!("{:05}-{}-{suffix}", self.seq, self.commit_uuid),
        );
        self.written.push(p.clone());
        p
    }

    /// Paths of every file written so far (to delete them if the commit fails).
    pub(crate) fn written(&self) -> &[String] {
        &self.written
    }

    /// Writes one position delete file holding `deletes` (data file path → positions) of data
    /// files in one partition, sorted by path then position. `referenced_data_file` is set
    /// when it covers a single data file.
    pub(crate) async fn write_position_deletes(
        &mut self,
        spec: &PartitionSpec,
        partition: &Struct,
        deletes: &[(String, RoaringTreemap)],
    ) -> Result<DataFile> {
        let mut sorted: Vec<&(String, RoaringTreemap)> = deletes.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let total: u64 = sorted.iter().map(|(_, p)| p.len()).sum();
        let mut paths = Vec::with_capacity(total as usize);
        let mut positions = Vec::with_capacity(total as usize);
        for (path, p) in &sorted {
            for pos in p.iter() {
                paths.push(path.as_str());
                positions.push(i64::try_from(pos).map_err(|_| {
                    Error::invalid(format!("position {pos} in '{path}' is out of range"))
                })?);
            }
        }
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(
                        FILE_PATH_FIELD_ID,
                        "file_path",
                        Type::Primitive(PrimitiveType::String),
                    )
                    .into(),
                    NestedField::required(
                        POS_FIELD_ID,
                        "pos",
                        Type::Primitive(PrimitiveType::Long),
                    )
                    .into(),
                ])
                .build()?,
        );
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        let batch = RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(StringArray::from(paths)) as ArrayRef,
                Arc::new(Int64Array::from(positions)),
            ],
        )?;
        let (path, mut fb) = self
            .write_parquet(
                "position delete file",
                "deletes.parquet",
                spec,
                partition,
                schema,
                &batch,
            )
            .await?;
        fb.content(DataContentType::PositionDeletes)
            .file_format(DataFileFormat::Parquet)
            .partition(partition.clone())
            .partition_spec_id(spec.spec_id());
        if sorted.len() == 1 {
            fb.referenced_data_file(Some(sorted[0].0.clone()));
        }
        let f = fb
            .build()
            .map_err(|e| Error::io(format!("building delete file entry for '{path}': {e}")))?;
        crate::progress::with_current(|p| p.add_bytes_written(f.file_size_in_bytes()));
        // Full `file_path` bounds (readers match delete files to data files by them).
        let (mut lower, mut upper) = (f.lower_bounds().clone(), f.upper_bounds().clone());
        if let (Some(first), Some(last)) = (sorted.first(), sorted.last()) {
            lower.insert(FILE_PATH_FIELD_ID, Datum::string(first.0.clone()));
            upper.insert(FILE_PATH_FIELD_ID, Datum::string(last.0.clone()));
        }
        crate::spec::data_file_builder(&f)
            .lower_bounds(lower)
            .upper_bounds(upper)
            .partition_spec_id(spec.spec_id())
            .build()
            .map_err(|e| Error::io(format!("building delete file entry for '{path}': {e}")))
    }

    /// Writes `batch` as one Parquet delete file (`what`, named `…-<suffix>`) in `partition`
    /// of `spec`; returns its path and its entry, to be completed by the caller.
    async fn write_parquet(
        &mut self,
        what: &str,
        suffix: &str,
        spec: &PartitionSpec,
        partition: &Struct,
        schema: Arc<Schema>,
        batch: &RecordBatch,
    ) -> Result<(String, iceberg::spec::DataFileBuilder)> {
        let props = writer_properties(&self.table.properties()?, &[])?;
        let path = self.location(Some((spec, partition)), suffix);
        let failed = |e: iceberg::Error| write_failed(what, &path, e);
        let out = self
            .table
            .storage()
            .file_io()
            .new_output(&path)
            .map_err(failed)?;
        let mut w = ParquetWriterBuilder::new(props, schema)
            .build(out)
            .await
            .map_err(failed)?;
        w.write(batch).await.map_err(failed)?;
        let fb = w
            .close()
            .await
            .map_err(failed)?
            .pop()
            .ok_or_else(|| Error::io(format!("{what} '{path}' was not written")))?;
        Ok((path, fb))
    }

    /// Writes a deletion vector per data file (each `(data file, spec id, positions)`) into
    /// Puffin files, and returns one delete file entry per vector.
    ///
    /// The blobs of one file are stored by strictly increasing length, so vectors of equal
    /// length go to separate files (see [`puffin_groups`]): DuckDB 1.5.5 reads a blob from
    /// its cache of the file and, when that cached range starts at an earlier blob, decodes
    /// the earlier blob instead; a range that starts at a blob never covers a longer one.
    pub(crate) async fn write_deletion_vectors(
        &mut self,
        vectors: &[(&DataFile, i32, RoaringTreemap)],
    ) -> Result<Vec<DataFile>> {
        let blobs = vectors
            .iter()
            .map(|(_, _, positions)| dv::encode(positions))
            .collect::<Result<Vec<_>>>()?;
        let lengths: Vec<usize> = blobs.iter().map(Vec::len).collect();
        let mut blobs: Vec<Option<Vec<u8>>> = blobs.into_iter().map(Some).collect();
        let mut entries = Vec::with_capacity(vectors.len());
        for group in puffin_groups(&lengths) {
            let mut members = Vec::with_capacity(group.len());
            for i in group {
                let bytes = blobs[i]
                    .take()
                    .ok_or_else(|| Error::io("a deletion vector was placed in two Puffin files"))?;
                members.push((&vectors[i], bytes));
            }
            entries.extend(self.write_puffin(members).await?);
        }
        Ok(entries)
    }

    /// Writes one Puffin file holding `blobs` (each a vector and its encoded
    /// `deletion-vector-v1` blob) in the order given.
    async fn write_puffin(
        &mut self,
        blobs: Vec<(&DeletionVector<'_>, Vec<u8>)>,
    ) -> Result<Vec<DataFile>> {
        let path = self.location(None, "deletes.puffin");
        let failed = |e: iceberg::Error| write_failed("deletion vector file", &path, e);
        let out = self
            .table
            .storage()
            .file_io()
            .new_output(&path)
            .map_err(failed)?;
        let mut w = PuffinWriter::new(
            &out,
            HashMap::from([(
                iceberg::puffin::CREATED_BY_PROPERTY.to_string(),
                format!("floe {}", env!("CARGO_PKG_VERSION")),
            )]),
            false,
        )
        .await
        .map_err(failed)?;
        // Blobs are stored uncompressed one after another after the 4-byte magic.
        let mut offset = 4i64;
        let mut entries = Vec::with_capacity(blobs.len());
        for ((data, spec_id, positions), bytes) in blobs {
            let data_path = data.file_path().to_string();
            let len = bytes.len() as i64;
            let blob = Blob::builder()
                .r#type(dv::DELETION_VECTOR_V1.to_string())
                .fields(vec![ROW_POSITION_FIELD_ID])
                .snapshot_id(-1)
                .sequence_number(-1)
                .data(bytes)
                .properties(HashMap::from([
                    (dv::PROP_REFERENCED_DATA_FILE.to_string(), data_path.clone()),
                    (
                        dv::PROP_CARDINALITY.to_string(),
                        positions.len().to_string(),
                    ),
                ]))
                .build();
            w.add(blob, CompressionCodec::None).await.map_err(failed)?;
            let mut fb = DataFileBuilder::default();
            fb.content(DataContentType::PositionDeletes)
                .file_path(path.clone())
                .file_format(DataFileFormat::Puffin)
                .partition(data.partition().clone())
                .partition_spec_id(*spec_id)
                .record_count(positions.len())
                .referenced_data_file(Some(data_path))
                .content_offset(Some(offset))
                .content_size_in_bytes(Some(len));
            offset += len;
            entries.push(fb);
        }
        w.close().await.map_err(failed)?;
        let size = self.table.storage().size(&path).await?;
        crate::progress::with_current(|p| p.add_bytes_written(size));
        entries
            .into_iter()
            .map(|mut fb| {
                fb.file_size_in_bytes(size).build().map_err(|e| {
                    Error::io(format!("building deletion vector entry for '{path}': {e}"))
                })
            })
            .collect()
    }

    /// Writes one equality delete file of `rows` (columns named as the table's, carrying its
    /// field ids) comparing `equality_ids`, in one partition of `spec`.
    pub(crate) async fn write_equality_deletes(
        &mut self,
        spec: &PartitionSpec,
        partition: &Struct,
        equality_ids: &[i32],
        rows: &RecordBatch,
    ) -> Result<DataFile> {
        let schema = self.table.metadata().current_schema();
        let fields = equality_ids
            .iter()
            .map(|id| {
                schema.field_by_id(*id).cloned().ok_or_else(|| {
                    Error::invalid(format!(
                        "equality field id {id} is not in table {}",
                        self.table.name()
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let eq_schema = Arc::new(Schema::builder().with_fields(fields).build()?);
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&eq_schema)?);
        let cols = arrow
            .fields()
            .iter()
            .map(|f| {
                let c = rows.column_by_name(f.name()).ok_or_else(|| {
                    Error::invalid(format!("equality delete rows lack column '{}'", f.name()))
                })?;
                Ok(arrow_cast::cast(c, f.data_type())?)
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(arrow, cols)?;
        let (path, mut fb) = self
            .write_parquet(
                "equality delete file",
                "eq-deletes.parquet",
                spec,
                partition,
                eq_schema,
                &batch,
            )
            .await?;
        fb.content(DataContentType::EqualityDeletes)
            .file_format(DataFileFormat::Parquet)
            .partition(partition.clone())
            .partition_spec_id(spec.spec_id())
            .equality_ids(Some(equality_ids.to_vec()));
        let f = fb
            .build()
            .map_err(|e| Error::io(format!("building delete file entry for '{path}': {e}")))?;
        crate::progress::with_current(|p| p.add_bytes_written(f.file_size_in_bytes()));
        Ok(f)
    }

    /// Deletes every file written (the change was not committed).
    pub(crate) async fn abort(&mut self) {
        for p in self.written.drain(..) {
            let _ = self.table.storage().delete(&p).await;
        }
    }
}

/// Splits blobs of `lengths` into Puffin files: indices per file, each file's blobs by strictly
/// increasing length (the first file takes the first blob of each length, the second file the
/// second, and so on), so no file holds two blobs of the same length.
///
/// Why: DuckDB 1.5.5 (iceberg extension 45163a28) grows a read of blob `k` up to the next
/// range it has cached (the footer trailer, or a blob read earlier) when the gap is at most the
/// blob's own length, and later decodes any blob inside that grown range from the range's
/// start, that is as blob `k`. The grown range ends before blob `k + 1` ends unless `k + 1` is
/// no longer than `k`, so with strictly increasing lengths no blob is misread, whatever order
/// the blobs are read in.
fn puffin_groups(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| (lengths[i], i));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let open = groups
            .iter_mut()
            .find(|g| g.last().is_some_and(|&j| lengths[j] < lengths[i]));
        match open {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::puffin_groups;

    #[test]
    fn puffin_files_hold_strictly_increasing_blob_lengths() {
        assert!(puffin_groups(&[]).is_empty());
        assert_eq!(puffin_groups(&[30]), vec![vec![0]]);
        // The repro's shape: a long blob before a shorter one is reordered, not split.
        assert_eq!(puffin_groups(&[28_032, 8_232]), vec![vec![1, 0]]);
        assert_eq!(puffin_groups(&[26_902, 8_232, 16_432]), vec![vec![1, 2, 0]]);
        // Equal lengths never share a file.
        assert_eq!(puffin_groups(&[59, 59]), vec![vec![0], vec![1]]);
        assert_eq!(
            puffin_groups(&[40, 8_232, 40, 40, 9_000, 8_232]),
            vec![vec![0, 1, 4], vec![2, 5], vec![3]]
        );
        for lengths in [
            vec![5, 5, 5, 1, 2, 3, 3, 9],
            vec![7; 6],
            (0..50).rev().collect(),
        ] {
            let groups = puffin_groups(&lengths);
            let mut all: Vec<usize> = groups.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..lengths.len()).collect::<Vec<_>>());
            for g in &groups {
                assert!(g.windows(2).all(|w| lengths[w[0]] < lengths[w[1]]), "{g:?}");
            }
        }
    }
}
