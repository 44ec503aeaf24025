//! A manifest decoder made for planning: the entries of a v2 / v3 manifest decoded straight
//! from the Avro blocks into the spec model, guided by the file's own writer schema, with no
//! intermediate Avro values (pure).
//!
//! The `iceberg` crate decodes every entry into a generic Avro value, resolves it against a
//! reader schema and deserializes it again; for manifests of many small files most of a plan's
//! time went there. This decoder reads each field where the writer put it, converts partition
//! values and bounds by the same rules as the `iceberg` crate (so both give equal manifests,
//! which the tests check), and bounds every length by the bytes left and every block's
//! expansion as [`super::avro::check_blocks`] does, so it is its own guard and each block is
//! inflated once. A shape it does not know (v1, maps stored as Avro maps, a partition field
//! the writer left out, an unusual physical type) gives `Ok(None)`: the caller decodes with the
//! `iceberg` crate instead.

use std::collections::HashMap;

use apache_avro::schema::{RecordSchema, Schema as Avro};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, Literal, ManifestEntry,
    ManifestStatus, PrimitiveLiteral, PrimitiveType, Schema, Struct, StructType, Type,
};

use super::avro::{inflate_block, Cursor};
use crate::error::{Error, Result};

/// Why the fast path stepped aside, or the file is malformed.
enum Stop {
    /// A shape this decoder leaves to the `iceberg` crate.
    Unsupported,
    /// Malformed: the reason.
    Bad(String),
}

type R<T> = std::result::Result<T, Stop>;

fn bad<T>(why: impl Into<String>) -> R<T> {
    Err(Stop::Bad(why.into()))
}

/// What a reader says of an entry it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Keep it.
    Keep,
    /// Leave it out.
    Skip,
    /// Leave it and every entry after it out: the reader has what it needs.
    Stop,
}

/// What a probe of an entry decodes: enough for a plan to decide whether it wants the entry,
/// which is then decoded whole. A probe leaves out column sizes, split offsets, key
/// metadata, equality ids, the referenced data file, the metrics of columns not in
/// `metric_ids` and, unless asked for, the partition tuple and the file path (they are empty
/// or unset).
#[derive(Debug, Clone, Default)]
pub(crate) struct Probe {
    /// Field ids whose counts and bounds a probe decodes (a filter's columns).
    pub(crate) metric_ids: Vec<i32>,
    /// Whether a probe decodes the partition tuple.
    pub(crate) partition: bool,
    /// Whether a probe decodes the file path.
    pub(crate) path: bool,
}

impl Probe {
    /// For a field a probe decodes differently from a whole entry: `Some` (with the metric
    /// ids it keeps); `None` for the fields it decodes as a whole entry does.
    fn leaves(&self, field: FileField) -> Option<Option<&[i32]>> {
        match field {
            FileField::Content
            | FileField::FileFormat
            | FileField::RecordCount
            | FileField::FileSizeInBytes
            | FileField::SortOrderId
            | FileField::FirstRowId
            | FileField::ContentOffset
            | FileField::ContentSizeInBytes
            | FileField::Skip => None,
            FileField::Partition if self.partition => None,
            FileField::FilePath if self.path => None,
            _ => Some(Some(self.metric_ids.as_slice())),
        }
    }
}

/// A manifest's bytes to decode and what its values are typed by.
pub(crate) struct Manifest<'a> {
    /// The writer schema of its Avro container.
    pub(crate) writer: &'a Avro,
    /// The table schema that types its bounds.
    pub(crate) schema: &'a Schema,
    /// The partition spec of its files.
    pub(crate) spec_id: i32,
    /// That spec's partition type.
    pub(crate) partition_type: &'a StructType,
    /// How errors name it.
    pub(crate) what: &'a str,
}

/// Decodes the entries of manifest `bytes` for which `want` says yes, in file order. `want`
/// sees every entry: decoded whole without a `probe`, else as the probe decodes it (only the
/// wanted ones are then decoded whole), so a plan that keeps few files of a large manifest
/// builds few. `Ok(None)`: not a shape this decoder handles, found out possibly after some
/// entries went to `want` (the caller forgets what they told it, decodes the file otherwise
/// and asks again).
pub(crate) fn select_entries(
    bytes: &[u8],
    m: &Manifest<'_>,
    probe: Option<&Probe>,
    want: &mut dyn FnMut(&mut ManifestEntry) -> Pick,
) -> Result<Option<Vec<ManifestEntry>>> {
    let Manifest {
        writer,
        schema,
        spec_id,
        partition_type,
        what,
    } = *m;
    let plan = match EntryPlan::of(writer, partition_type) {
        Some(p) => p,
        None => return Ok(None),
    };
    let fail = |why: String| Error::corrupt(format!("{what} is malformed: {why}"));
    let mut c = Cursor::new(bytes);
    let codec = match c.header() {
        Ok(Some(codec)) => codec,
        Ok(None) => return Ok(None),
        Err(why) => return Err(fail(why)),
    };
    let ctx = Ctx {
        schema,
        spec_id,
        partition_type,
    };
    let mut out = Vec::new();
    while !c.at_end() {
        let (Some(count), Some(size)) = (c.long(), c.long()) else {
            return Err(fail("a block header is cut short".into()));
        };
        let block = usize::try_from(size)
            .ok()
            .and_then(|n| c.take(n))
            .ok_or_else(|| fail(format!("a block declares {size} bytes past the file's end")))?;
        let data = inflate_block(&codec, block, what)?;
        let Some(data) = data else {
            return Ok(None);
        };
        // The `iceberg` crate's Avro reader ends the file at a block of no objects; a
        // non-empty one is malformed here rather than a silently shorter manifest.
        if count == 0 && !data.is_empty() {
            return Err(fail(format!(
                "a block declares no objects in {} bytes",
                data.len()
            )));
        }
        if count < 0 || count as u64 > data.len() as u64 {
            return Err(fail(format!(
                "a block declares {count} objects in {} bytes",
                data.len()
            )));
        }
        let mut b = Cursor::new(&data);
        for i in 0..count {
            let start = b;
            let picked =
                plan.entry(&mut b, &ctx, probe)
                    .and_then(|mut e| match (want(&mut e), probe) {
                        (Pick::Keep, None) => Ok(Pick::Keep).map(|p| (p, Some(e))),
                        (Pick::Keep, Some(_)) => plan
                            .entry(&mut { start }, &ctx, None)
                            .map(|e| (Pick::Keep, Some(e))),
                        (pick, _) => Ok((pick, None)),
                    });
            match picked {
                Ok((_, Some(e))) => out.push(e),
                Ok((Pick::Stop, _)) => return Ok(Some(out)),
                Ok(_) => {}
                Err(Stop::Unsupported) => return Ok(None),
                Err(Stop::Bad(why)) => {
                    return Err(fail(format!("entry {i} of a {count}-entry block: {why}")))
                }
            }
        }
        if c.take(16).is_none() {
            return Err(fail("a block's sync marker is missing".into()));
        }
    }
    Ok(Some(out))
}

/// The length of the container header of `bytes` (magic, metadata, sync marker); `None`
/// when it cannot be followed.
pub(crate) fn header_len(bytes: &[u8]) -> Option<usize> {
    let mut c = Cursor::new(bytes);
    match c.header() {
        Ok(Some(_)) => Some(bytes.len() - c.left()),
        _ => None,
    }
}

/// What the entries' values are converted with.
struct Ctx<'a> {
    schema: &'a Schema,
    spec_id: i32,
    partition_type: &'a StructType,
}

/// A field of a record in the writer's order: what it is to the decoder, and its schema.
struct Field<'a, K> {
    kind: K,
    schema: &'a Avro,
}

#[derive(Clone, Copy)]
enum EntryField {
    Status,
    SnapshotId,
    SequenceNumber,
    FileSequenceNumber,
    DataFile,
    Skip,
}

#[derive(Clone, Copy)]
enum FileField {
    Content,
    FilePath,
    FileFormat,
    Partition,
    RecordCount,
    FileSizeInBytes,
    ColumnSizes,
    ValueCounts,
    NullValueCounts,
    NanValueCounts,
    LowerBounds,
    UpperBounds,
    KeyMetadata,
    SplitOffsets,
    EqualityIds,
    SortOrderId,
    FirstRowId,
    ReferencedDataFile,
    ContentOffset,
    ContentSizeInBytes,
    Skip,
}

/// The writer schema, compiled: the manifest_entry record's fields, the data_file record's
/// and, per writer partition field, the partition type field it fills.
struct EntryPlan<'a> {
    entry: Vec<Field<'a, EntryField>>,
    file: Vec<Field<'a, FileField>>,
    /// Per writer partition field: its index in the partition type (`None`: not in it).
    partition: Vec<(Option<usize>, &'a Avro)>,
}

/// The record a schema is, through a nullable union.
fn record(s: &Avro) -> Option<&RecordSchema> {
    match s {
        Avro::Record(r) => Some(r),
        _ => None,
    }
}

impl<'a> EntryPlan<'a> {
    fn of(writer: &'a Avro, partition_type: &StructType) -> Option<Self> {
        let entry_rec = record(writer)?;
        let mut entry = Vec::new();
        let mut file = Vec::new();
        let mut partition = Vec::new();
        let mut seen_file = false;
        for f in &entry_rec.fields {
            let kind = match f.name.as_str() {
                "status" => EntryField::Status,
                "snapshot_id" => EntryField::SnapshotId,
                "sequence_number" => EntryField::SequenceNumber,
                "file_sequence_number" => EntryField::FileSequenceNumber,
                "data_file" => EntryField::DataFile,
                _ => EntryField::Skip,
            };
            if let EntryField::DataFile = kind {
                seen_file = true;
                let rec = record(&f.schema)?;
                for df in &rec.fields {
                    let k = match df.name.as_str() {
                        "content" => FileField::Content,
                        "file_path" => FileField::FilePath,
                        "file_format" => FileField::FileFormat,
                        "partition" => FileField::Partition,
                        "record_count" => FileField::RecordCount,
                        "file_size_in_bytes" => FileField::FileSizeInBytes,
                        "column_sizes" => FileField::ColumnSizes,
                        "value_counts" => FileField::ValueCounts,
                        "null_value_counts" => FileField::NullValueCounts,
                        "nan_value_counts" => FileField::NanValueCounts,
                        "lower_bounds" => FileField::LowerBounds,
                        "upper_bounds" => FileField::UpperBounds,
                        "key_metadata" => FileField::KeyMetadata,
                        "split_offsets" => FileField::SplitOffsets,
                        "equality_ids" => FileField::EqualityIds,
                        "sort_order_id" => FileField::SortOrderId,
                        "first_row_id" => FileField::FirstRowId,
                        "referenced_data_file" => FileField::ReferencedDataFile,
                        "content_offset" => FileField::ContentOffset,
                        "content_size_in_bytes" => FileField::ContentSizeInBytes,
                        _ => FileField::Skip,
                    };
                    if let FileField::Partition = k {
                        let p = record(&df.schema)?;
                        for pf in &p.fields {
                            let at = partition_type
                                .fields()
                                .iter()
                                .position(|t| t.name == pf.name);
                            partition.push((at, &pf.schema));
                        }
                        // A partition field the writer left out: the iceberg crate's reader
                        // schema decides what it becomes.
                        let covered = partition_type
                            .fields()
                            .iter()
                            .all(|t| p.fields.iter().any(|pf| pf.name == t.name));
                        if !covered {
                            return None;
                        }
                    }
                    file.push(Field {
                        kind: k,
                        schema: &df.schema,
                    });
                }
            }
            entry.push(Field {
                kind,
                schema: &f.schema,
            });
        }
        seen_file.then_some(Self {
            entry,
            file,
            partition,
        })
    }

    fn entry(&self, c: &mut Cursor<'_>, ctx: &Ctx<'_>, probe: Option<&Probe>) -> R<ManifestEntry> {
        let mut status = None;
        let (mut snapshot_id, mut seq, mut file_seq) = (None, None, None);
        let mut data_file = None;
        for f in &self.entry {
            match f.kind {
                EntryField::Status => status = Some(c.int(f.schema)?),
                EntryField::SnapshotId => snapshot_id = c.opt(f.schema, Cursor::long_of)?,
                EntryField::SequenceNumber => seq = c.opt(f.schema, Cursor::long_of)?,
                EntryField::FileSequenceNumber => file_seq = c.opt(f.schema, Cursor::long_of)?,
                EntryField::DataFile => data_file = Some(self.data_file(c, ctx, probe)?),
                EntryField::Skip => c.skip(f.schema)?,
            }
        }
        let status = status.ok_or(Stop::Unsupported)?;
        let status = ManifestStatus::try_from(status)
            .map_err(|_| Stop::Bad(format!("status {status} is not 0, 1 or 2")))?;
        let data_file = data_file.ok_or(Stop::Unsupported)?;
        Ok(ManifestEntry {
            status,
            snapshot_id,
            sequence_number: seq,
            file_sequence_number: file_seq,
            data_file,
        })
    }

    fn data_file(&self, c: &mut Cursor<'_>, ctx: &Ctx<'_>, probe: Option<&Probe>) -> R<DataFile> {
        let mut b = DataFileBuilder::default();
        b.partition_spec_id(ctx.spec_id);
        let mut content = 0i32;
        let (mut path, mut format, mut partition) = (None, None, None);
        let (mut records, mut size) = (None, None);
        for f in &self.file {
            let s = f.schema;
            if let Some(p) = probe {
                if let Some(only) = p.leaves(f.kind) {
                    if only.is_some_and(<[i32]>::is_empty) {
                        c.skip(s)?;
                        if let FileField::FilePath = f.kind {
                            path = Some(String::new());
                        }
                        continue;
                    }
                    match f.kind {
                        FileField::FilePath => {
                            c.skip(s)?;
                            path = Some(String::new());
                        }
                        FileField::Partition if !p.partition => c.skip(s)?,
                        FileField::ValueCounts => {
                            b.value_counts(c.opt(s, |c, s| c.counts(s, only))?.unwrap_or_default());
                        }
                        FileField::NullValueCounts => {
                            b.null_value_counts(
                                c.opt(s, |c, s| c.counts(s, only))?.unwrap_or_default(),
                            );
                        }
                        FileField::NanValueCounts => {
                            b.nan_value_counts(
                                c.opt(s, |c, s| c.counts(s, only))?.unwrap_or_default(),
                            );
                        }
                        FileField::LowerBounds => {
                            let m = c.opt(s, |c, s| c.bounds(s, ctx.schema, only))?;
                            b.lower_bounds(m.unwrap_or_default());
                        }
                        FileField::UpperBounds => {
                            let m = c.opt(s, |c, s| c.bounds(s, ctx.schema, only))?;
                            b.upper_bounds(m.unwrap_or_default());
                        }
                        _ => c.skip(s)?,
                    }
                    continue;
                }
            }
            match f.kind {
                FileField::Content => content = c.int(s)?,
                FileField::FilePath => path = Some(c.string(s)?),
                FileField::FileFormat => format = Some(c.string(s)?),
                FileField::Partition => partition = Some(self.partition(c, s, ctx)?),
                FileField::RecordCount => records = Some(c.long_of(s)?),
                FileField::FileSizeInBytes => size = Some(c.long_of(s)?),
                FileField::ColumnSizes => {
                    b.column_sizes(c.opt(s, |c, s| c.counts(s, None))?.unwrap_or_default());
                }
                FileField::ValueCounts => {
                    b.value_counts(c.opt(s, |c, s| c.counts(s, None))?.unwrap_or_default());
                }
                FileField::NullValueCounts => {
                    b.null_value_counts(c.opt(s, |c, s| c.counts(s, None))?.unwrap_or_default());
                }
                FileField::NanValueCounts => {
                    b.nan_value_counts(c.opt(s, |c, s| c.counts(s, None))?.unwrap_or_default());
                }
                FileField::LowerBounds => {
                    let m = c.opt(s, |c, s| c.bounds(s, ctx.schema, None))?;
                    b.lower_bounds(m.unwrap_or_default());
                }
                FileField::UpperBounds => {
                    let m = c.opt(s, |c, s| c.bounds(s, ctx.schema, None))?;
                    b.upper_bounds(m.unwrap_or_default());
                }
                FileField::KeyMetadata => {
                    b.key_metadata(c.opt(s, |c, s| c.bytes_of(s).map(<[u8]>::to_vec))?);
                }
                FileField::SplitOffsets => {
                    b.split_offsets(c.opt(s, |c, s| c.array(s, Cursor::long_of))?);
                }
                FileField::EqualityIds => {
                    b.equality_ids(c.opt(s, |c, s| c.array(s, Cursor::int))?);
                }
                FileField::SortOrderId => {
                    if let Some(v) = c.opt(s, Cursor::int)? {
                        b.sort_order_id(v);
                    }
                }
                FileField::FirstRowId => {
                    b.first_row_id(c.opt(s, Cursor::long_of)?);
                }
                FileField::ReferencedDataFile => {
                    b.referenced_data_file(c.opt(s, Cursor::string)?);
                }
                FileField::ContentOffset => {
                    b.content_offset(c.opt(s, Cursor::long_of)?);
                }
                FileField::ContentSizeInBytes => {
                    b.content_size_in_bytes(c.opt(s, Cursor::long_of)?);
                }
                FileField::Skip => c.skip(s)?,
            }
        }
        let (Some(path), Some(format), Some(records), Some(size)) = (path, format, records, size)
        else {
            return Err(Stop::Unsupported);
        };
        let content = DataContentType::try_from(content)
            .map_err(|_| Stop::Bad(format!("content {content} is not 0, 1 or 2")))?;
        let format: DataFileFormat = match format.as_str() {
            "PARQUET" | "parquet" => DataFileFormat::Parquet,
            other => other.parse().map_err(|_| {
                Stop::Bad(format!("file format '{format}' is not one Iceberg knows"))
            })?,
        };
        let records = u64::try_from(records)
            .map_err(|_| Stop::Bad(format!("record count {records} is negative")))?;
        let size =
            u64::try_from(size).map_err(|_| Stop::Bad(format!("file size {size} is negative")))?;
        b.content(content)
            .file_path(path)
            .file_format(format)
            .partition(partition.unwrap_or_else(Struct::empty))
            .record_count(records)
            .file_size_in_bytes(size);
        b.build().map_err(|e| Stop::Bad(e.to_string()))
    }

    /// The partition tuple, in the partition type's order.
    fn partition(&self, c: &mut Cursor<'_>, s: &Avro, ctx: &Ctx<'_>) -> R<Struct> {
        // The writer's partition record (a nullable union around it is not Iceberg's).
        if record(s).is_none() {
            return Err(Stop::Unsupported);
        }
        let fields = ctx.partition_type.fields();
        let mut values: Vec<Option<Literal>> = vec![None; fields.len()];
        for (at, fs) in &self.partition {
            match at {
                Some(i) => values[*i] = c.opt(fs, |c, s| c.literal(s, &fields[*i].field_type))?,
                None => c.skip(fs)?,
            }
        }
        Ok(Struct::from_iter(values))
    }
}

impl<'a> Cursor<'a> {
    /// A nullable value: `None` for a union's null branch, else `f` of the branch.
    fn opt<T>(&mut self, s: &Avro, f: impl FnOnce(&mut Self, &Avro) -> R<T>) -> R<Option<T>> {
        match s {
            Avro::Union(u) => {
                let i = self.zlong()?;
                let v = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| {
                        Stop::Bad(format!("union branch {i} of {}", u.variants().len()))
                    })?;
                match v {
                    Avro::Null => Ok(None),
                    v => f(self, v).map(Some),
                }
            }
            Avro::Null => Ok(None),
            s => f(self, s).map(Some),
        }
    }

    fn zlong(&mut self) -> R<i64> {
        self.long()
            .ok_or_else(|| Stop::Bad("a number is cut short or runs past 10 bytes".into()))
    }

    fn long_of(&mut self, s: &Avro) -> R<i64> {
        match s {
            Avro::Int | Avro::Long => self.zlong(),
            _ => Err(Stop::Unsupported),
        }
    }

    fn int(&mut self, s: &Avro) -> R<i32> {
        match s {
            Avro::Int => {
                let v = self.zlong()?;
                i32::try_from(v).map_err(|_| Stop::Bad(format!("int {v} out of range")))
            }
            _ => Err(Stop::Unsupported),
        }
    }

    fn bytes_of(&mut self, s: &Avro) -> R<&'a [u8]> {
        match s {
            Avro::Bytes | Avro::String => {
                let left = self.left();
                self.bytes()
                    .ok_or_else(|| Stop::Bad(format!("a length runs past the {left} bytes left")))
            }
            _ => Err(Stop::Unsupported),
        }
    }

    fn string(&mut self, s: &Avro) -> R<String> {
        let b = self.bytes_of(s)?;
        String::from_utf8(b.to_vec()).map_err(|_| Stop::Bad("a string is not UTF-8".into()))
    }

    /// The items of an array, each decoded by `f`.
    fn array<T>(&mut self, s: &Avro, mut f: impl FnMut(&mut Self, &Avro) -> R<T>) -> R<Vec<T>> {
        let mut out = Vec::new();
        self.each(s, |c, items, n| {
            out.reserve(n);
            for _ in 0..n {
                out.push(f(c, items)?);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Walks the blocks of an array: `f` gets each block's item schema and item count (the
    /// count bounded by the bytes left) and reads that many items.
    fn each(&mut self, s: &Avro, mut f: impl FnMut(&mut Self, &Avro, usize) -> R<()>) -> R<()> {
        let Avro::Array(a) = s else {
            return Err(Stop::Unsupported);
        };
        loop {
            let mut n = self.zlong()?;
            if n == 0 {
                return Ok(());
            }
            if n < 0 {
                n = n
                    .checked_neg()
                    .ok_or_else(|| Stop::Bad("an impossible item count".into()))?;
                self.zlong()?;
            }
            let left = self.left();
            if n as u64 > left as u64 {
                return bad(format!("{n} items declared where {left} bytes remain"));
            }
            f(self, &a.items, n as usize)?;
        }
    }

    /// A `key: int, value` record of an array of them.
    fn pair<T>(
        &mut self,
        s: &Avro,
        mut value: impl FnMut(&mut Self, &Avro) -> R<T>,
    ) -> R<(i32, T)> {
        let rec = record(s).ok_or(Stop::Unsupported)?;
        let [k, v] = rec.fields.as_slice() else {
            return Err(Stop::Unsupported);
        };
        if k.name != "key" || v.name != "value" {
            return Err(Stop::Unsupported);
        }
        let key = self.int(&k.schema)?;
        Ok((key, value(self, &v.schema)?))
    }

    /// A column-id map of counts (negative counts dropped, as the `iceberg` crate does), of
    /// the ids in `only` when given.
    fn counts(&mut self, s: &Avro, only: Option<&[i32]>) -> R<HashMap<i32, u64>> {
        let mut m = HashMap::new();
        self.each(s, |c, items, n| {
            if only.is_none() {
                m.reserve(n);
            }
            for _ in 0..n {
                let (k, v) = c.pair(items, Cursor::long_of)?;
                if only.is_none_or(|ids| ids.contains(&k)) {
                    if let Ok(v) = u64::try_from(v) {
                        m.insert(k, v);
                    }
                }
            }
            Ok(())
        })?;
        Ok(m)
    }

    /// A column-id map of bounds, each typed by its field in `schema` (or a reserved
    /// metadata column), of the ids in `only` when given; bounds of fields no longer in the
    /// schema are dropped.
    fn bounds(
        &mut self,
        s: &Avro,
        schema: &Schema,
        only: Option<&[i32]>,
    ) -> R<HashMap<i32, Datum>> {
        let mut pairs = Vec::new();
        self.each(s, |c, items, n| {
            for _ in 0..n {
                let (k, v) = c.pair(items, Cursor::bytes_of)?;
                if only.is_none_or(|ids| ids.contains(&k)) {
                    pairs.push((k, v));
                }
            }
            Ok(())
        })?;
        let mut m = HashMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            let field = schema
                .field_by_id(k)
                .or_else(|| iceberg::metadata_columns::get_metadata_field(k).ok());
            let Some(field) = field else { continue };
            let ty = field.field_type.as_primitive_type().ok_or_else(|| {
                Stop::Bad(format!(
                    "a bound of field {k}, which is not a primitive type"
                ))
            })?;
            let d = Datum::try_from_bytes(v, ty.clone())
                .map_err(|e| Stop::Bad(format!("the bound of field {k}: {e}")))?;
            m.insert(k, d);
        }
        Ok(m)
    }

    /// A partition value written as `s`, of Iceberg type `ty` (the `iceberg` crate's rules).
    fn literal(&mut self, s: &Avro, ty: &Type) -> R<Literal> {
        let Type::Primitive(p) = ty else {
            return Err(Stop::Unsupported);
        };
        let mismatch = || Stop::Bad(format!("a partition value written as {s:?} for a {p}"));
        Ok(match s {
            Avro::Int | Avro::Date => {
                let v = self.int(&Avro::Int)?;
                match p {
                    PrimitiveType::Int => Literal::int(v),
                    PrimitiveType::Long => Literal::long(i64::from(v)),
                    PrimitiveType::Date => Literal::date(v),
                    _ => return Err(mismatch()),
                }
            }
            Avro::Long | Avro::TimeMicros | Avro::TimestampMicros | Avro::LocalTimestampMicros => {
                let v = self.zlong()?;
                match p {
                    PrimitiveType::Int => Literal::int(i32::try_from(v).map_err(|_| mismatch())?),
                    PrimitiveType::Date => Literal::date(i32::try_from(v).map_err(|_| mismatch())?),
                    PrimitiveType::Long => Literal::long(v),
                    PrimitiveType::Time => Literal::time(v),
                    PrimitiveType::Timestamp => Literal::timestamp(v),
                    PrimitiveType::Timestamptz => Literal::timestamptz(v),
                    _ => return Err(mismatch()),
                }
            }
            Avro::Boolean => {
                let b = self
                    .take(1)
                    .ok_or_else(|| Stop::Bad("a boolean is cut short".into()))?;
                Literal::bool(b[0] != 0)
            }
            Avro::Float => {
                let b = self
                    .take(4)
                    .ok_or_else(|| Stop::Bad("a float is cut short".into()))?;
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                match p {
                    PrimitiveType::Float => Literal::float(v),
                    PrimitiveType::Double => Literal::double(f64::from(v)),
                    _ => return Err(mismatch()),
                }
            }
            Avro::Double => {
                let b = self
                    .take(8)
                    .ok_or_else(|| Stop::Bad("a double is cut short".into()))?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                match p {
                    PrimitiveType::Double => Literal::double(f64::from_le_bytes(a)),
                    _ => return Err(Stop::Unsupported),
                }
            }
            Avro::String => {
                let v = self.string(s)?;
                match p {
                    PrimitiveType::String => Literal::string(v),
                    _ => return Err(Stop::Unsupported),
                }
            }
            Avro::Bytes | Avro::Fixed(_) | Avro::Decimal(_) => {
                let raw = match s {
                    Avro::Decimal(d) => d.inner.as_ref(),
                    s => s,
                };
                let v = match raw {
                    Avro::Fixed(f) => self
                        .take(f.size)
                        .ok_or_else(|| Stop::Bad("a fixed value is cut short".into()))?,
                    Avro::Bytes => self.bytes_of(raw)?,
                    _ => return Err(Stop::Unsupported),
                };
                match p {
                    PrimitiveType::Binary => Literal::binary(v.to_vec()),
                    PrimitiveType::Fixed(n) if v.len() as u64 == *n => Literal::fixed(v.to_vec()),
                    PrimitiveType::Uuid if v.len() == 16 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(v);
                        Literal::uuid(uuid::Uuid::from_bytes(a))
                    }
                    PrimitiveType::Decimal { precision, .. } => {
                        let need = Type::decimal_required_bytes(*precision)
                            .map_err(|_| Stop::Unsupported)?
                            as usize;
                        if v.len() != need || need > 16 {
                            return Err(Stop::Unsupported);
                        }
                        let fill = if v.first().is_some_and(|b| b & 0x80 != 0) {
                            0xff
                        } else {
                            0
                        };
                        let mut a = [fill; 16];
                        a[16 - need..].copy_from_slice(v);
                        Literal::Primitive(PrimitiveLiteral::Int128(i128::from_be_bytes(a)))
                    }
                    _ => return Err(Stop::Unsupported),
                }
            }
            _ => return Err(Stop::Unsupported),
        })
    }

    /// Skips a value of `s` (a field this decoder does not keep).
    fn skip(&mut self, s: &Avro) -> R<()> {
        match s {
            Avro::Null => Ok(()),
            Avro::Boolean => self.step(1),
            Avro::Int
            | Avro::Long
            | Avro::Enum(_)
            | Avro::Date
            | Avro::TimeMillis
            | Avro::TimeMicros
            | Avro::TimestampMillis
            | Avro::TimestampMicros
            | Avro::TimestampNanos
            | Avro::LocalTimestampMillis
            | Avro::LocalTimestampMicros
            | Avro::LocalTimestampNanos => self.zlong().map(|_| ()),
            Avro::Float => self.step(4),
            Avro::Double => self.step(8),
            Avro::Bytes | Avro::String => self.bytes_of(s).map(|_| ()),
            Avro::BigDecimal => self.bytes_of(&Avro::Bytes).map(|_| ()),
            Avro::Decimal(d) => self.skip(&d.inner),
            Avro::Duration => self.step(12),
            Avro::Fixed(f) => self.step(f.size),
            Avro::Union(_) => self.opt(s, |c, v| c.skip(v)).map(|_| ()),
            Avro::Array(_) => self.array(s, |c, v| c.skip(v)).map(|_| ()),
            Avro::Record(r) => r.fields.iter().try_for_each(|f| self.skip(&f.schema)),
            _ => Err(Stop::Unsupported),
        }
    }

    fn step(&mut self, n: usize) -> R<()> {
        self.take(n)
            .map(|_| ())
            .ok_or_else(|| Stop::Bad(format!("{n} bytes declared past the block's end")))
    }
}
