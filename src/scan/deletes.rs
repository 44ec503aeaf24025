//! Loading delete files: position delete files and deletion vectors become per-data-file
//! position bitmaps, equality delete files a hash set of encoded keys. Each delete file is
//! read once per scan, however many data files it applies to.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use arrow::row::{RowConverter, SortField};
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::DataType;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataContentType, DataFileFormat};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use roaring::RoaringTreemap;

use super::delete_index::{canonical_path, DeleteEntry};
use crate::codec::dv;
use crate::error::{Error, Result};
use crate::expr::column_by_field_id;
use crate::spec::reserved::{FILE_PATH_FIELD_ID, POS_FIELD_ID};
use crate::spec::Schema;
use crate::storage::Storage;

/// The deletes that apply to one data file, ready to apply while reading it.
#[derive(Debug, Default, Clone)]
pub(crate) struct FileDeletes {
    /// Deleted row positions (from position delete files and deletion vectors).
    pub positions: Option<RoaringTreemap>,
    /// Equality delete sets.
    pub equality: Vec<Arc<EqualityDeletes>>,
}

impl FileDeletes {
    /// Whether nothing is deleted.
    pub(crate) fn is_empty(&self) -> bool {
        self.positions.as_ref().is_none_or(|p| p.is_empty()) && self.equality.is_empty()
    }

    /// Field ids the equality deletes compare.
    pub(crate) fn equality_field_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .equality
            .iter()
            .flat_map(|e| e.field_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Rows of `batch` that no equality delete removes (`None`: all survive).
    pub(crate) fn equality_survivors(&self, batch: &RecordBatch) -> Result<Option<BooleanArray>> {
        let mut keep: Option<BooleanArray> = None;
        for e in &self.equality {
            let m = e.survivors(batch)?;
            keep = Some(match keep {
                None => m,
                Some(k) => arrow_arith::boolean::and(&k, &m)?,
            });
        }
        Ok(keep)
    }
}

/// The keys of one equality delete file.
#[derive(Debug)]
pub(crate) struct EqualityDeletes {
    /// The compared field ids.
    pub field_ids: Vec<i32>,
    types: Vec<DataType>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

impl EqualityDeletes {
    fn columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.field_ids
            .iter()
            .zip(&self.types)
            .map(|(id, t)| {
                let c = column_by_field_id(batch, *id)?;
                Ok(if c.data_type() == t {
                    c
                } else {
                    arrow_cast::cast(&c, t)?
                })
            })
            .collect()
    }

    /// `false` for rows whose key is deleted (NULL keys match NULL).
    pub(crate) fn survivors(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let rows = self.converter.convert_columns(&self.columns(batch)?)?;
        Ok(rows
            .iter()
            .map(|r| Some(!self.keys.contains(r.as_ref())))
            .collect())
    }
}

/// A delete file decoded (position deletes and deletion vectors are shared with the
/// storage's memo: delete files never change).
enum Loaded {
    Positions(Arc<HashMap<String, RoaringTreemap>>),
    Vector(Arc<RoaringTreemap>),
    Equality(Arc<EqualityDeletes>),
}

/// Delete files of a scan, loaded.
#[derive(Default)]
pub(crate) struct LoadedDeletes {
    files: HashMap<String, Loaded>,
}

impl std::fmt::Debug for LoadedDeletes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedDeletes({} files)", self.files.len())
    }
}

fn key(e: &DeleteEntry) -> String {
    format!(
        "{}#{}",
        e.file.file_path(),
        e.file.content_offset().unwrap_or(-1)
    )
}

impl LoadedDeletes {
    /// Reads every delete file in `entries` (each once; up to 8 at a time).
    pub(crate) async fn load<'a>(
        storage: &Storage,
        schema: &Schema,
        entries: impl IntoIterator<Item = &'a DeleteEntry>,
        table: &str,
    ) -> Result<Self> {
        let mut unique: HashMap<String, DeleteEntry> = HashMap::new();
        for e in entries {
            unique.entry(key(e)).or_insert_with(|| e.clone());
        }
        let arrow_schema = std::sync::Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?);
        let schema = std::sync::Arc::new(schema.clone());
        // Each future owns what it reads with (a borrowing closure would make the scan's
        // future not `Send`).
        let files = futures::stream::iter(unique)
            .map(|(k, e)| {
                let (storage, schema, arrow_schema) =
                    (storage.clone(), schema.clone(), arrow_schema.clone());
                let table = table.to_string();
                async move {
                    let loaded = load_one(&storage, &schema, &arrow_schema, &e)
                        .await
                        .map_err(|err| err.context(format!("table {table}")))?;
                    Ok::<_, Error>((k, loaded))
                }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
        Ok(Self { files })
    }

    /// The deletes of one data file, given the delete files that apply to it.
    pub(crate) fn for_file(&self, data_path: &str, deletes: &[DeleteEntry]) -> FileDeletes {
        let path = canonical_path(data_path);
        let mut out = FileDeletes::default();
        let mut add = |bm: &RoaringTreemap| match &mut out.positions {
            Some(p) => *p |= bm,
            None => out.positions = Some(bm.clone()),
        };
        for d in deletes {
            match self.files.get(&key(d)) {
                Some(Loaded::Positions(m)) => {
                    if let Some(bm) = m.get(path) {
                        add(bm)
                    }
                }
                Some(Loaded::Vector(bm)) => add(bm),
                Some(Loaded::Equality(e)) => out.equality.push(e.clone()),
                None => {}
            }
        }
        out
    }
}

/// The positions a position delete file or deletion vector deletes, by canonical data file
/// path.
pub(crate) async fn read_positions(
    storage: &Storage,
    e: &DeleteEntry,
) -> Result<HashMap<String, RoaringTreemap>> {
    let schema = Schema::builder().build()?;
    let arrow = arrow_schema::Schema::empty();
    match load_one(storage, &schema, &arrow, e).await? {
        Loaded::Positions(m) => Ok(Arc::unwrap_or_clone(m)),
        Loaded::Vector(bm) => Ok(e
            .file
            .referenced_data_file()
            .map(|r| HashMap::from([(canonical_path(&r).to_string(), Arc::unwrap_or_clone(bm))]))
            .unwrap_or_default()),
        Loaded::Equality(_) => Err(Error::invalid(format!(
            "'{}' is an equality delete file, not position deletes",
            e.file.file_path()
        ))),
    }
}

async fn load_one(
    storage: &Storage,
    schema: &Schema,
    arrow_schema: &arrow_schema::Schema,
    e: &DeleteEntry,
) -> Result<Loaded> {
    let f = &e.file;
    let path = f.file_path();
    let memo_key = format!(
        "{path}\n{},{},{}",
        f.file_size_in_bytes(),
        f.content_offset().unwrap_or(-1),
        f.record_count()
    );
    match (f.content_type(), f.file_format()) {
        (DataContentType::PositionDeletes, DataFileFormat::Puffin) => {
            if let Some(bm) = storage.memo().get::<RoaringTreemap>(&memo_key) {
                return Ok(Loaded::Vector(bm));
            }
            let range = dv_range(path, f.content_offset(), f.content_size_in_bytes())?;
            let blob = storage
                .get_range(path, range.clone())
                .await
                .map_err(|err| err.context(format!("deletion vector file '{path}'")))?;
            let weight = blob.len() as u64;
            let bm = Arc::new(decode_dv(&blob, range, f.record_count(), path)?);
            storage.memo().put(&memo_key, weight, bm.clone());
            Ok(Loaded::Vector(bm))
        }
        (DataContentType::PositionDeletes, _) => {
            if let Some(m) = storage
                .memo()
                .get::<HashMap<String, RoaringTreemap>>(&memo_key)
            {
                return Ok(Loaded::Positions(m));
            }
            let bytes = read_bytes(storage, path).await?;
            let weight = bytes.len() as u64;
            let p = path.to_string();
            let m = Arc::new(blocking(move || decode_position_deletes(bytes, &p)).await?);
            storage.memo().put(&memo_key, weight, m.clone());
            Ok(Loaded::Positions(m))
        }
        (DataContentType::EqualityDeletes, _) => {
            let ids = f.equality_ids().unwrap_or_default();
            if ids.is_empty() {
                return Err(Error::corrupt(format!(
                    "equality delete file '{path}' has no equality_ids"
                )));
            }
            let mut types = Vec::new();
            for id in &ids {
                let field = schema.field_by_id(*id).ok_or_else(|| {
                    Error::unsupported(format!(
                        "equality delete file '{path}' compares field id {id}, which the table schema does not have"
                    ))
                })?;
                let t = arrow_schema
                    .fields()
                    .iter()
                    .find(|af| af.name() == &field.name)
                    .map(|af| af.data_type().clone())
                    .ok_or_else(|| {
                        Error::unsupported(format!(
                            "equality delete file '{path}': nested equality field '{}' is not supported",
                            field.name
                        ))
                    })?;
                types.push(t);
            }
            let converter =
                RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
            let mut set = EqualityDeletes {
                field_ids: ids,
                types,
                converter,
                keys: HashSet::new(),
            };
            let bytes = read_bytes(storage, path).await?;
            let p = path.to_string();
            for b in blocking(move || parquet_batches(bytes, &p)).await? {
                let cols = set
                    .columns(&b)
                    .map_err(|err| err.context(format!("equality delete file '{path}'")))?;
                let rows = set.converter.convert_columns(&cols)?;
                for r in rows.iter() {
                    set.keys.insert(r.as_ref().into());
                }
            }
            Ok(Loaded::Equality(Arc::new(set)))
        }
        (DataContentType::Data, _) => Err(Error::corrupt(format!(
            "data file '{path}' listed in a delete manifest"
        ))),
    }
}

/// The byte range of a deletion vector from its manifest entry's `content_offset` and
/// `content_size_in_bytes` (both required, non-negative, the end within 2^63).
#[doc(hidden)]
pub fn dv_range(path: &str, offset: Option<i64>, size: Option<i64>) -> Result<Range<u64>> {
    let (Some(off), Some(len)) = (offset, size) else {
        return Err(Error::corrupt(format!(
            "deletion vector in '{path}' has no content_offset/content_size_in_bytes"
        )));
    };
    match (u64::try_from(off), u64::try_from(len), off.checked_add(len)) {
        (Ok(off), Ok(len), Some(_)) => Ok(off..off + len),
        _ => Err(Error::corrupt(format!(
            "deletion vector in '{path}' has an impossible content_offset {off} / \
             content_size_in_bytes {len}"
        ))),
    }
}

/// Decodes the deletion vector `blob` read from `range` of the Puffin file `path`; its
/// cardinality must be the manifest entry's `record_count`.
#[doc(hidden)]
pub fn decode_dv(
    blob: &[u8],
    range: Range<u64>,
    record_count: u64,
    path: &str,
) -> Result<RoaringTreemap> {
    let (off, len) = (range.start, range.end - range.start);
    if blob.len() as u64 != len {
        return Err(Error::corrupt(format!(
            "deletion vector file '{path}' is truncated (wanted {len} bytes at {off})"
        )));
    }
    dv::decode(
        blob,
        Some(record_count),
        &format!("at offset {off} of '{path}'"),
    )
}

/// The positions a position delete file's bytes delete, by canonical data file path.
///
/// `file_path` is read as a dictionary where the file has one (the usual case: a
/// partition-scoped file repeats a few paths over many rows), so each run of one path costs an
/// integer comparison per row, not a string's decoding and comparison.
#[doc(hidden)]
pub fn decode_position_deletes(
    bytes: Bytes,
    path: &str,
) -> Result<HashMap<String, RoaringTreemap>> {
    let mut m: HashMap<String, RoaringTreemap> = HashMap::new();
    for b in read_batches_with(bytes, path, Some(FILE_PATH_FIELD_ID))? {
        let files =
            column_by_field_id(&b, FILE_PATH_FIELD_ID).or_else(|_| by_name(&b, "file_path"))?;
        let pos = column_by_field_id(&b, POS_FIELD_ID).or_else(|_| by_name(&b, "pos"))?;
        let pos = pos
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| bad_pos(path))?;
        if files.null_count() > 0 || pos.null_count() > 0 || pos.values().iter().any(|p| *p < 0) {
            return Err(bad_pos(path));
        }
        let pos = pos.values();
        // Rows are sorted by file path: each run of one path becomes one bitmap.
        for (run, file) in path_runs(&files, path)? {
            let run = &pos[run];
            // Sorted runs in bulk; unsorted ones, or ones repeating a position, one by one.
            let each = || run.iter().map(|p| *p as u64);
            let positions =
                RoaringTreemap::from_sorted_iter(each()).unwrap_or_else(|_| each().collect());
            let fp = canonical_path(&file);
            match m.get_mut(fp) {
                Some(bm) => *bm |= positions,
                None => {
                    m.insert(fp.to_string(), positions);
                }
            }
        }
    }
    Ok(m)
}

/// The runs of rows of one path in a position delete file's `file_path` column (a
/// dictionary or plain strings, no nulls), each with its path.
fn path_runs(files: &ArrayRef, path: &str) -> Result<Vec<(Range<usize>, String)>> {
    let mut runs: Vec<(Range<usize>, String)> = Vec::new();
    let mut push = |i: usize, same: bool, value: &str| match runs.last_mut() {
        Some(last) if same => last.0.end = i + 1,
        _ => runs.push((i..i + 1, value.to_string())),
    };
    if let Some(d) = files.as_any().downcast_ref::<DictionaryArray<Int32Type>>() {
        let values = d
            .values()
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad_pos(path))?;
        let keys = d.keys().values();
        for (i, k) in keys.iter().enumerate() {
            let k = usize::try_from(*k)
                .ok()
                .filter(|k| *k < values.len())
                .ok_or_else(|| bad_pos(path))?;
            push(i, i > 0 && keys[i - 1] == keys[i], values.value(k));
        }
    } else {
        let files = arrow_cast::cast(files, &DataType::Utf8)?;
        let files = files
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| bad_pos(path))?;
        for i in 0..files.len() {
            let same = i > 0 && files.value(i - 1) == files.value(i);
            push(i, same, files.value(i));
        }
    }
    Ok(runs)
}

fn bad_pos(path: &str) -> Error {
    Error::corrupt(format!(
        "position delete file '{path}' is malformed: it needs non-null file_path (string) and pos (long) columns"
    ))
}

fn by_name(b: &RecordBatch, name: &str) -> Result<ArrayRef> {
    b.column_by_name(name)
        .cloned()
        .ok_or_else(|| Error::corrupt(format!("position delete file has no '{name}' column")))
}

async fn read_bytes(storage: &Storage, path: &str) -> Result<Bytes> {
    storage
        .get(path)
        .await
        .map_err(|e| e.context(format!("delete file '{path}'")))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::io("delete file reader task failed").with_source(e))?
}

/// The record batches of a (small) delete file's bytes. Column chunk offsets and sizes are
/// checked against the file first (the parquet crate asserts on negative ones); a panic in
/// the decoders (parquet, or arrow-ipc reading the embedded Arrow schema) still becomes a
/// corrupt-file error.
fn parquet_batches(bytes: Bytes, path: &str) -> Result<Vec<RecordBatch>> {
    read_batches_with(bytes, path, None)
}

/// [`parquet_batches`], the string column of field id `dictionary` (if any) read as a
/// dictionary where its pages are dictionary-encoded.
fn read_batches_with(
    bytes: Bytes,
    path: &str,
    dictionary: Option<i32>,
) -> Result<Vec<RecordBatch>> {
    std::panic::catch_unwind(|| read_batches(bytes, path, dictionary)).unwrap_or_else(|_| {
        Err(Error::corrupt(format!(
            "delete file '{path}' is malformed: the Parquet decoder failed on it"
        )))
    })
}

fn read_batches(bytes: Bytes, path: &str, dictionary: Option<i32>) -> Result<Vec<RecordBatch>> {
    let corrupt = |e: parquet::errors::ParquetError| {
        Error::corrupt(format!("delete file '{path}' cannot be read: {e}"))
    };
    let size = bytes.len() as i64;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).map_err(corrupt)?;
    for rg in builder.metadata().row_groups() {
        for c in rg.columns() {
            let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
            let len = c.compressed_size();
            if start < 0 || len < 0 || start.checked_add(len).is_none_or(|end| end > size) {
                return Err(Error::corrupt(format!(
                    "delete file '{path}' is malformed: column chunk '{}' claims bytes \
                     {start}..+{len} of a {size}-byte file",
                    c.column_path()
                )));
            }
            // Page headers whose declared counts do not fit (parquet 58 would skip through
            // them for minutes).
            let chunk = bytes.slice(start as usize..(start + len) as usize);
            crate::codec::parquet_pages::check_column_chunk(&chunk).map_err(|e| {
                Error::corrupt(format!(
                    "delete file '{path}' is malformed: column chunk '{}': {}",
                    c.column_path(),
                    e.0
                ))
            })?;
        }
    }
    let builder = match dictionary.and_then(|id| dictionary_hint(builder.schema(), id)) {
        Some(schema) => {
            let options = ArrowReaderOptions::new().with_schema(schema);
            ParquetRecordBatchReaderBuilder::try_new_with_options(bytes, options)
                .map_err(corrupt)?
        }
        None => builder,
    };
    builder
        .with_batch_size(65536)
        .build()
        .map_err(corrupt)?
        .map(|b| b.map_err(|e| Error::corrupt(format!("delete file '{path}': {e}"))))
        .collect::<Result<Vec<_>>>()
}

/// `schema` with its top-level string column of field id `id` read as a dictionary of
/// strings; `None` when there is no such column.
fn dictionary_hint(schema: &arrow_schema::SchemaRef, id: i32) -> Option<arrow_schema::SchemaRef> {
    let is_id = |f: &arrow_schema::Field| {
        f.metadata()
            .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
            .is_some_and(|v| v.parse() == Ok(id))
            || (id == FILE_PATH_FIELD_ID && f.name() == "file_path")
    };
    let at = schema
        .fields()
        .iter()
        .position(|f| is_id(f) && f.data_type() == &DataType::Utf8)?;
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i != at {
                return f.clone();
            }
            let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
            Arc::new(f.as_ref().clone().with_data_type(dict))
        })
        .collect();
    Some(Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_dv_ranges_are_corrupt() {
        // Found by the fuzzer (target puffin): -1 or an end past i64::MAX overflowed `off + len`.
        assert_eq!(dv_range("p", Some(4), Some(10)).unwrap(), 4..14);
        for (off, len) in [(-1, 10), (4, -1), (i64::MAX, 1), (1, i64::MAX)] {
            let e = dv_range("p", Some(off), Some(len)).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{off} {len}");
        }
        assert!(dv_range("p", None, Some(1)).is_err());
        assert!(decode_dv(&[0; 3], 0..4, 0, "p").is_err());
    }

    /// A position delete file of `rows` (path, pos), with or without dictionary pages.
    fn position_delete_file(rows: &[(&str, i64)], dictionary: bool) -> Bytes {
        use std::collections::HashMap as Map;
        let id = |n: i32| Map::from([("PARQUET:field_id".to_string(), n.to_string())]);
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("file_path", DataType::Utf8, false)
                .with_metadata(id(FILE_PATH_FIELD_ID)),
            arrow_schema::Field::new("pos", DataType::Int64, false).with_metadata(id(POS_FIELD_ID)),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .set_max_row_group_row_count(Some(7))
            .build();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        Bytes::from(out)
    }

    #[test]
    fn position_deletes_decode_alike_from_dictionaries_and_plain_strings() {
        let mut x = 7u64;
        let paths = ["file:/w/a.parquet", "/w/b.parquet", "s3://b/c.parquet"];
        let mut rows = Vec::new();
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Runs of one path, sorted positions or not, paths repeated out of order.
            let path = paths[(x % 3) as usize];
            for j in 0..(x % 9) as i64 {
                // Ascending, descending, or repeating a position.
                let pos = match x % 3 {
                    0 => j * 3,
                    1 => 40 - j,
                    _ => j / 2,
                };
                rows.push((path, pos + (x % 1000) as i64));
            }
        }
        let mut want: HashMap<String, RoaringTreemap> = HashMap::new();
        for (p, pos) in &rows {
            want.entry(canonical_path(p).to_string())
                .or_default()
                .insert(*pos as u64);
        }
        for dictionary in [true, false] {
            let file = position_delete_file(&rows, dictionary);
            // The path column is read as a dictionary (either way: plain pages are gathered
            // into one).
            let b = read_batches_with(file.clone(), "d", Some(FILE_PATH_FIELD_ID)).unwrap();
            assert!(matches!(
                b[0].column(0).data_type(),
                DataType::Dictionary(..)
            ));
            let got = decode_position_deletes(file, "d").unwrap();
            assert_eq!(got, want, "dictionary {dictionary}");
        }
        // A negative position is refused either way.
        for dictionary in [true, false] {
            let bad =
                position_delete_file(&[("/w/a.parquet", 1), ("/w/a.parquet", -1)], dictionary);
            assert!(decode_position_deletes(bad, "d").is_err());
        }
    }

    #[test]
    fn parquet_garbage_is_corrupt() {
        let e = decode_position_deletes(Bytes::from_static(b"PAR1xxxxPAR1"), "p").unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt);
    }
}
