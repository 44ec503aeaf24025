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

use super::data::writer_properties;
use super::failed::write_failed;
use crate::codec::dv;
use crate::error::{Error, Result};
use crate::scan::{FILE_PATH_FIELD_ID, POS_FIELD_ID};
use crate::spec::DataFile;
use crate::storage::join;
use crate::table::Table;

/// The reserved field id of a row's position (the field of a deletion vector blob).
const ROW_POSITION_FIELD_ID: i32 = 2147483645;

/// Where a write puts its delete files and how it names them.
#[derive(Debug, Clone)]
pub struct DeleteFileWriter {
    table: Table,
    data_path: String,
    commit_uuid: uuid::Uuid,
    written: Vec<String>,
    seq: usize,
}

impl DeleteFileWriter {
    /// A writer for `table` (files go under `write.data.path`, default `<location>/data`).
    pub fn new(table: &Table) -> Result<Self> {
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
    pub fn written(&self) -> &[String] {
        &self.written
    }

    /// Writes one position delete file holding `deletes` (data file path → positions) of data
    /// files in one partition, sorted by path then position. `referenced_data_file` is set
    /// when it covers a single data file.
    pub async fn write_position_deletes(
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
        let props = writer_properties(&self.table.properties()?, &[])?;
        let path = self.location(Some((spec, partition)), "deletes.parquet");
        let failed = |e: iceberg::Error| write_failed("position delete file", &path, e);
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
        w.write(&batch).await.map_err(failed)?;
        let mut built = w.close().await.map_err(failed)?;
        let mut fb = built
            .pop()
            .ok_or_else(|| Error::io(format!("position delete file '{path}' was not written")))?;
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

    /// Writes one Puffin file holding a deletion vector per data file (each `(data file,
    /// positions)`), and returns one delete file entry per vector.
    pub async fn write_deletion_vectors(
        &mut self,
        vectors: &[(&DataFile, i32, RoaringTreemap)],
    ) -> Result<Vec<DataFile>> {
        if vectors.is_empty() {
            return Ok(vec![]);
        }
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
        let mut entries = Vec::with_capacity(vectors.len());
        for (data, spec_id, positions) in vectors {
            let data_path = data.file_path().to_string();
            let bytes = dv::encode(positions)?;
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
    pub async fn write_equality_deletes(
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
        let props = writer_properties(&self.table.properties()?, &[])?;
        let path = self.location(Some((spec, partition)), "eq-deletes.parquet");
        let failed = |e: iceberg::Error| write_failed("equality delete file", &path, e);
        let out = self
            .table
            .storage()
            .file_io()
            .new_output(&path)
            .map_err(failed)?;
        let mut w = ParquetWriterBuilder::new(props, eq_schema)
            .build(out)
            .await
            .map_err(failed)?;
        w.write(&batch).await.map_err(failed)?;
        let mut fb =
            w.close().await.map_err(failed)?.pop().ok_or_else(|| {
                Error::io(format!("equality delete file '{path}' was not written"))
            })?;
        fb.content(DataContentType::EqualityDeletes)
            .file_format(DataFileFormat::Parquet)
            .partition(partition.clone())
            .partition_spec_id(spec.spec_id())
            .equality_ids(Some(equality_ids.to_vec()));
        fb.build()
            .map_err(|e| Error::io(format!("building delete file entry for '{path}': {e}")))
    }

    /// Deletes every file written (the change was not committed).
    pub async fn abort(&mut self) {
        for p in self.written.drain(..) {
            let _ = self.table.storage().delete(&p).await;
        }
    }
}
