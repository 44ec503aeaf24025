//! Tombstone files: per deleted key, the version that deleted it and when, so a late replay
//! of an older version cannot bring the key back. They are Parquet files under the table's
//! `metadata/` directory, listed in the table property `floe.tombstones` and so committed in
//! the same metadata swap as the snapshot that needs them. Readers of the table never see
//! them; a listed file that is missing is an error, never an empty set.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::row::RowConverter;
use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, FieldRef, Schema as ArrowSchema, SchemaRef};
use bytes::Bytes;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;

use super::fold::{key_converter, key_fields, Columns, KeyMap};
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::spec::keyed::KeyedSpec;
use crate::spec::keyed::{
    TombstoneFile, TombstoneList, TOMBSTONES, TOMBSTONE_DELETED, TOMBSTONE_DELETED_AT,
    TOMBSTONE_VERSION,
};
use crate::spec::TableIdent;
use crate::storage::join;
use crate::table::Table;
use crate::txn::{commit_properties, PropertyUpdate};

/// The latest record of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// The version of the change.
    pub version: i64,
    /// When it was committed (ms since the epoch).
    pub at_ms: i64,
    /// `true`: the key is deleted (a tombstone); `false`: it was brought back.
    pub deleted: bool,
}

/// Tombstone records folded per key (encoded key → latest record), with the key values.
pub(crate) struct Folded {
    /// Encoded key → its latest record.
    pub records: KeyMap<Box<[u8]>, Record>,
    /// The key columns of one row per key (any order), for rewriting.
    pub keys: Vec<ArrayRef>,
    /// Encoded key → row in `keys`.
    pub key_rows: KeyMap<Box<[u8]>, u32>,
}

/// The Arrow schema of a tombstone file with these key fields.
fn file_schema(key_fields: &[FieldRef]) -> SchemaRef {
    let mut fields: Vec<Field> = key_fields
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), false))
        .collect();
    fields.push(Field::new(TOMBSTONE_VERSION, DataType::Int64, false));
    fields.push(Field::new(TOMBSTONE_DELETED_AT, DataType::Int64, false));
    fields.push(Field::new(TOMBSTONE_DELETED, DataType::Boolean, false));
    Arc::new(ArrowSchema::new(fields))
}

fn missing(table: &Table, path: &str, e: Error) -> Error {
    Error::corrupt(format!(
        "tombstone file '{path}' of table {} cannot be read ({e}); it is listed in property {TOMBSTONES} \
         (another engine's orphan-file removal may have deleted it). floe writes no keyed change without it: \
         restore the file; or, accepting that replays of older versions may bring deleted keys back, \
         remove the property",
        table.name()
    ))
}

/// One batch of a tombstone file's records.
struct Records {
    keys: Vec<ArrayRef>,
    versions: Int64Array,
    at_ms: Int64Array,
    deleted: BooleanArray,
}

/// The records of tombstone file `path`, the key columns cast to `key_fields`' types.
async fn read_records(table: &Table, path: &str, key_fields: &[FieldRef]) -> Result<Vec<Records>> {
    let n_key = key_fields.len();
    let reader = table
        .storage()
        .parquet_reader(path, "tombstone file")
        .await
        .map_err(|e| missing(table, path, e))?;
    let mut out = Vec::new();
    for b in reader {
        let b = b.map_err(|e| missing(table, path, Error::corrupt(e.to_string())))?;
        if b.num_columns() != n_key + 3 {
            return Err(Error::corrupt(format!(
                "tombstone file '{path}' of table {} has {} columns; the primary key has {n_key} (was it changed?)",
                table.name(),
                b.num_columns()
            )));
        }
        let keys: Vec<ArrayRef> = (0..n_key)
            .map(|i| arrow_cast::cast(b.column(i), key_fields[i].data_type()))
            .collect::<std::result::Result<_, _>>()?;
        let col = |i: usize| b.column(n_key + i).clone();
        let versions = arrow_cast::cast(&col(0), &DataType::Int64)?;
        let at = arrow_cast::cast(&col(1), &DataType::Int64)?;
        let (Some(versions), Some(at_ms), Some(deleted)) = (
            versions.as_any().downcast_ref::<Int64Array>().cloned(),
            at.as_any().downcast_ref::<Int64Array>().cloned(),
            col(2).as_any().downcast_ref::<BooleanArray>().cloned(),
        ) else {
            return Err(Error::corrupt(format!(
                "tombstone file '{path}' of table {}: unexpected column types",
                table.name()
            )));
        };
        out.push(Records {
            keys,
            versions,
            at_ms,
            deleted,
        });
    }
    Ok(out)
}

/// Reads the records of `list` (oldest file first) and folds them per key: the higher
/// version wins, a later record on ties. With `wanted`, only those keys are kept.
pub(crate) async fn load(
    table: &Table,
    list: &TombstoneList,
    key_fields: &[FieldRef],
    conv: &RowConverter,
    wanted: Option<&HashSet<Box<[u8]>>>,
) -> Result<Folded> {
    let n_key = key_fields.len();
    let mut out = Folded {
        records: KeyMap::default(),
        keys: Vec::new(),
        key_rows: KeyMap::default(),
    };
    let mut key_parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); n_key];
    let mut next_row = 0u32;
    for f in &list.files {
        for b in read_records(table, &f.path, key_fields).await? {
            let rows = conv.convert_columns(&b.keys)?;
            let mut take = Vec::new();
            for r in 0..rows.num_rows() {
                let k = rows.row(r);
                if wanted.is_some_and(|w| !w.contains(k.as_ref())) {
                    continue;
                }
                let rec = Record {
                    version: b.versions.value(r),
                    at_ms: b.at_ms.value(r),
                    deleted: b.deleted.value(r),
                };
                match out.records.get_mut(k.as_ref()) {
                    Some(old) if rec.version >= old.version => *old = rec,
                    Some(_) => {}
                    None => {
                        out.records.insert(k.as_ref().into(), rec);
                        out.key_rows.insert(k.as_ref().into(), next_row);
                        next_row += 1;
                        take.push(r as u32);
                    }
                }
            }
            let idx = UInt32Array::from(take);
            for (i, part) in key_parts.iter_mut().enumerate() {
                part.push(arrow_select::take::take(&b.keys[i], &idx, None)?);
            }
        }
    }
    for (i, part) in key_parts.into_iter().enumerate() {
        out.keys
            .push(concat_or_empty(&part, key_fields[i].data_type())?);
    }
    Ok(out)
}

/// `parts` as one array (an empty one of `data_type` when there are none).
fn concat_or_empty(parts: &[ArrayRef], data_type: &DataType) -> Result<ArrayRef> {
    if parts.is_empty() {
        return Ok(arrow_array::new_empty_array(data_type));
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(arrow_select::concat::concat(&refs)?)
}

/// Writes records (`keys`: the key columns; one version, time and flag per row) as a new
/// tombstone file of `table`.
pub(crate) async fn write(
    table: &Table,
    key_fields: &[FieldRef],
    keys: Vec<ArrayRef>,
    versions: Int64Array,
    at_ms: Int64Array,
    deleted: BooleanArray,
) -> Result<TombstoneFile> {
    let schema = file_schema(key_fields);
    let mut cols = keys;
    cols.push(Arc::new(versions));
    cols.push(Arc::new(at_ms));
    cols.push(Arc::new(deleted));
    let batch = RecordBatch::try_new(schema.clone(), cols)?;
    let records = batch.num_rows() as u64;
    let mut buf = Vec::new();
    {
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .build();
        let encode = |e: parquet::errors::ParquetError| {
            Error::io(format!(
                "encoding a tombstone file of table {}: {e}",
                table.name()
            ))
        };
        let mut w =
            parquet::arrow::ArrowWriter::try_new(&mut buf, schema, Some(props)).map_err(encode)?;
        w.write(&batch).map_err(encode)?;
        w.close().map_err(encode)?;
    }
    let path = join(
        table.metadata().location(),
        &format!("metadata/tombstones-{}.parquet", uuid::Uuid::new_v4()),
    );
    let size = buf.len() as u64;
    table.storage().put(&path, Bytes::from(buf)).await?;
    Ok(TombstoneFile {
        path,
        records,
        file_size_in_bytes: size,
    })
}

/// The list after adding `file`, its newest files merged by size tier: while the file
/// before the newest holds no more records than it, the two become one (a binary counter:
/// about log2(records) files, and each record rewritten about log2 times over its life, so
/// a batch's cost does not grow with the tombstones already held). The listed files merged
/// away stay where they are (the commit's snapshot names them, so a rollback can list them
/// again; snapshot expiry deletes them with the last snapshot that names them, unless a
/// clone lists them); the batch's own file, when merged at once, is deleted. Returns the new
/// list and the files written.
pub(crate) async fn with_file(
    table: &Table,
    list: &TombstoneList,
    file: Option<TombstoneFile>,
    key_fields: &[FieldRef],
    conv: &RowConverter,
) -> Result<(TombstoneList, Vec<String>)> {
    let mut next = list.clone();
    let mut written = Vec::new();
    if let Some(f) = file {
        written.push(f.path.clone());
        next.files.push(f);
    }
    let counts: Vec<u64> = next.files.iter().map(|f| f.records).collect();
    let from = merge_from(&counts);
    if next.files.len() - from < 2 {
        return Ok((next, written));
    }
    let run = TombstoneList {
        files: next.files.split_off(from),
    };
    // Records that bring a key back must stay while an older file may hold its tombstone.
    let merged = merge(table, &run, key_fields, conv, from > 0, |_| true).await?;
    // The batch's own file, merged before any list named it, is garbage already.
    for w in std::mem::take(&mut written) {
        let _ = table.storage().delete(&w).await;
    }
    written.extend(merged.files.iter().map(|f| f.path.clone()));
    next.files.extend(merged.files);
    Ok((next, written))
}

/// Where the run of newest files to merge starts, given each file's record count (oldest
/// first): the newest file, and each older one holding no more records than the run so far.
fn merge_from(records: &[u64]) -> usize {
    let mut from = records.len().saturating_sub(1);
    let mut run = records.last().copied().unwrap_or(0);
    while from >= 1 && records[from - 1] <= run {
        from -= 1;
        run += records[from];
    }
    from
}

/// Every record of `list` folded per key, keeping the tombstones `keep` accepts, written as
/// one file (an empty list when none is kept).
pub(crate) async fn rewrite(
    table: &Table,
    list: &TombstoneList,
    key_fields: &[FieldRef],
    conv: &RowConverter,
    keep: impl Fn(&Record) -> bool,
) -> Result<TombstoneList> {
    merge(table, list, key_fields, conv, false, keep).await
}

/// The records of `list` folded per key as one file: tombstones that `keep` accepts, and,
/// with `revivals`, records that brought a key back.
///
/// Folded by sorting the records by key (a single integer key by value, others by their
/// row encoding) rather than through a map of encoded keys: a merge folds every record of
/// the files it merges, and the map's per-key allocations made that the slowest part of a
/// keyed batch that merged a tier. The merged file is in key order.
async fn merge(
    table: &Table,
    list: &TombstoneList,
    key_fields: &[FieldRef],
    conv: &RowConverter,
    revivals: bool,
    keep: impl Fn(&Record) -> bool,
) -> Result<TombstoneList> {
    let mut batches = Vec::new();
    for f in &list.files {
        batches.extend(read_records(table, &f.path, key_fields).await?);
    }
    let keys = (0..key_fields.len())
        .map(|i| {
            let parts: Vec<ArrayRef> = batches.iter().map(|b| b.keys[i].clone()).collect();
            concat_or_empty(&parts, key_fields[i].data_type())
        })
        .collect::<Result<Vec<_>>>()?;
    let concat_of = |f: fn(&Records) -> ArrayRef| -> Result<ArrayRef> {
        let parts: Vec<ArrayRef> = batches.iter().map(f).collect();
        concat_or_empty(
            &parts,
            parts.first().map_or(&DataType::Int64, |a| a.data_type()),
        )
    };
    let versions = concat_of(|b| Arc::new(b.versions.clone()))?;
    let at_ms = concat_of(|b| Arc::new(b.at_ms.clone()))?;
    let deleted = concat_of(|b| Arc::new(b.deleted.clone()))?;
    let (versions, at_ms) = (
        versions.as_primitive::<Int64Type>(),
        at_ms.as_primitive::<Int64Type>(),
    );
    let deleted = deleted.as_boolean();
    // Record indexes grouped by key, in file order within a key.
    let n = versions.len() as u32;
    let long = single_long_key(&keys)?;
    let rows = match long {
        Some(_) => None,
        None => Some(conv.convert_columns(&keys)?),
    };
    let order: Vec<u32> = match (&long, &rows) {
        (Some(k), _) => {
            let mut o: Vec<(i64, u32)> = (0..n).map(|i| (k.value(i as usize), i)).collect();
            o.sort_unstable();
            o.into_iter().map(|(_, i)| i).collect()
        }
        (None, Some(rows)) => {
            let mut o: Vec<u32> = (0..n).collect();
            o.sort_unstable_by(|&a, &b| {
                rows.row(a as usize)
                    .cmp(&rows.row(b as usize))
                    .then(a.cmp(&b))
            });
            o
        }
        (None, None) => Vec::new(),
    };
    let same_key = |a: u32, b: u32| match (&long, &rows) {
        (Some(k), _) => k.value(a as usize) == k.value(b as usize),
        (None, Some(rows)) => rows.row(a as usize) == rows.row(b as usize),
        (None, None) => false,
    };
    let record = |i: u32| Record {
        version: versions.value(i as usize),
        at_ms: at_ms.value(i as usize),
        deleted: deleted.value(i as usize),
    };
    let winners: Vec<u32> = latest_per_key(&order, same_key, |i| versions.value(i as usize))
        .into_iter()
        .filter(|&i| {
            let r = record(i);
            (r.deleted || revivals) && keep(&r)
        })
        .collect();
    if winners.is_empty() {
        return Ok(TombstoneList::default());
    }
    let idx = UInt32Array::from(winners);
    let take = |a: &dyn Array| arrow_select::take::take(a, &idx, None);
    let keys = keys
        .iter()
        .map(|k| take(k.as_ref()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let f = write(
        table,
        key_fields,
        keys,
        take(versions)?.as_primitive::<Int64Type>().clone(),
        take(at_ms)?.as_primitive::<Int64Type>().clone(),
        take(deleted)?.as_boolean().clone(),
    )
    .await?;
    Ok(TombstoneList { files: vec![f] })
}

/// The latest record of each key, given record indexes grouped by key (`same_key`) and in
/// arrival order within a key: the highest version, the later record on ties.
fn latest_per_key(
    order: &[u32],
    same_key: impl Fn(u32, u32) -> bool,
    version: impl Fn(u32) -> i64,
) -> Vec<u32> {
    let mut out = Vec::new();
    let mut g = 0;
    while g < order.len() {
        let mut best = order[g];
        let mut e = g + 1;
        while e < order.len() && same_key(order[g], order[e]) {
            if version(order[e]) >= version(best) {
                best = order[e];
            }
            e += 1;
        }
        out.push(best);
        g = e;
    }
    out
}

/// The key as 64-bit integers when it is a single integer column.
fn single_long_key(keys: &[ArrayRef]) -> Result<Option<Int64Array>> {
    match keys {
        [k] if matches!(k.data_type(), DataType::Int64 | DataType::Int32) => Ok(Some(
            arrow_cast::cast(k, &DataType::Int64)?
                .as_primitive::<Int64Type>()
                .clone(),
        )),
        _ => Ok(None),
    }
}

/// A table's tombstones.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct TombstoneReport {
    /// Keys with a tombstone.
    pub count: u64,
    /// When the oldest and newest were committed (ms since the epoch).
    pub oldest_ms: Option<i64>,
    /// See `oldest_ms`.
    pub newest_ms: Option<i64>,
    /// Tombstone files.
    pub files: usize,
    /// With `list`: the keys (key columns, then `__floe_version` and
    /// `__floe_deleted_at_ms`), oldest first.
    #[serde(skip)]
    pub keys: Option<RecordBatch>,
}

/// A keyed table's key fields, their row encoding, and its tombstone list.
fn keys_of(table: &Table) -> Result<(Vec<FieldRef>, RowConverter, TombstoneList)> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    let schema = table.arrow_schema()?;
    let cols = Columns::of(&spec, &schema)?;
    let keys = key_fields(&schema, &cols);
    let conv = key_converter(&schema, &cols.key)?;
    Ok((keys, conv, TombstoneList::of(table.metadata(), &name)?))
}

/// Counts (and with `list`, lists) the tombstones of keyed table `table`.
pub async fn tombstones(table: &Table, list: bool) -> Result<TombstoneReport> {
    let (keys, conv, l) = keys_of(table)?;
    let all = load(table, &l, &keys, &conv, None).await?;
    let mut live: Vec<(u32, Record)> = all
        .records
        .iter()
        .filter(|(_, r)| r.deleted)
        .filter_map(|(k, r)| Some((*all.key_rows.get(k)?, *r)))
        .collect();
    live.sort_unstable_by_key(|(i, r)| (r.at_ms, *i));
    let batch = if list {
        let idx = arrow_array::UInt32Array::from_iter_values(live.iter().map(|(i, _)| *i));
        let mut fields: Vec<FieldRef> = keys.clone();
        let mut cols = all
            .keys
            .iter()
            .map(|k| arrow_select::take::take(k, &idx, None))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        fields.push(Arc::new(arrow_schema::Field::new(
            crate::spec::keyed::TOMBSTONE_VERSION,
            arrow_schema::DataType::Int64,
            false,
        )));
        fields.push(Arc::new(arrow_schema::Field::new(
            crate::spec::keyed::TOMBSTONE_DELETED_AT,
            arrow_schema::DataType::Int64,
            false,
        )));
        cols.push(Arc::new(Int64Array::from_iter_values(
            live.iter().map(|(_, r)| r.version),
        )));
        cols.push(Arc::new(Int64Array::from_iter_values(
            live.iter().map(|(_, r)| r.at_ms),
        )));
        Some(RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(fields)),
            cols,
        )?)
    } else {
        None
    };
    Ok(TombstoneReport {
        count: live.len() as u64,
        oldest_ms: live.first().map(|(_, r)| r.at_ms),
        newest_ms: live.last().map(|(_, r)| r.at_ms),
        files: l.files.len(),
        keys: batch,
    })
}

/// What expiring tombstones did.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct ExpireTombstonesResult {
    /// Tombstones removed (or, in a dry run, that would be).
    pub removed: u64,
    /// Tombstones kept.
    pub kept: u64,
    /// Whether anything was committed.
    pub committed: bool,
}

/// Removes the tombstones of `ident` committed before `older_than_ms`. Once removed, a
/// replay of an older version of such a key brings it back: expire only what no pipeline
/// can replay any more. With `dry_run` nothing is written.
pub async fn expire_tombstones(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: i64,
    dry_run: bool,
) -> Result<ExpireTombstonesResult> {
    compact_tombstones(catalog, ident, Some(older_than_ms), false, dry_run, ("", 0)).await
}

/// Rewrites the tombstone files of `ident` as one file (what `maintain` does once there
/// are many), dropping the tombstones committed before `older_than_ms` when given.
/// `committed` says whether anything changed; with `dry_run` nothing is written.
pub async fn merge_tombstones(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: Option<i64>,
    dry_run: bool,
) -> Result<ExpireTombstonesResult> {
    compact_tombstones(catalog, ident, older_than_ms, true, dry_run, ("", 0)).await
}

/// [`merge_tombstones`] as `maintain` runs it: after a lost attempt it asks floe writers, as
/// `holder`, to hold their commits for up to `pause_ms` (see
/// [`crate::txn::ask_writers_to_hold`]).
pub(crate) async fn merge_tombstones_holding(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: Option<i64>,
    dry_run: bool,
    (holder, pause_ms): (&str, i64),
) -> Result<ExpireTombstonesResult> {
    let pause = (holder, pause_ms);
    compact_tombstones(catalog, ident, older_than_ms, true, dry_run, pause).await
}

async fn compact_tombstones(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: Option<i64>,
    merge_files: bool,
    dry_run: bool,
    pause: (&str, i64),
) -> Result<ExpireTombstonesResult> {
    let mut intent: Option<String> = None;
    let r = compact_tombstones_rounds(
        catalog,
        ident,
        older_than_ms,
        merge_files,
        dry_run,
        pause,
        &mut intent,
    )
    .await;
    if let (Some(v), Err(_)) = (&intent, &r) {
        if let Ok(t) = catalog.load_table(ident).await {
            let _ = crate::txn::withdraw_intent(catalog, &t, v).await;
        }
    }
    r
}

async fn compact_tombstones_rounds(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: Option<i64>,
    merge_files: bool,
    dry_run: bool,
    (holder, pause_ms): (&str, i64),
    intent: &mut Option<String>,
) -> Result<ExpireTombstonesResult> {
    let cutoff = older_than_ms.unwrap_or(i64::MIN);
    let mut attempt = 0;
    loop {
        attempt += 1;
        if attempt > 1 && pause_ms > 0 && intent.is_none() {
            let t = catalog.load_table(ident).await?;
            *intent = Some(crate::txn::ask_writers_to_hold(catalog, &t, holder, pause_ms).await?);
        }
        let table = catalog.load_table(ident).await?;
        let report = tombstones(&table, true).await?;
        let at = report
            .keys
            .as_ref()
            .and_then(|b| {
                b.column(b.num_columns() - 1)
                    .as_primitive_opt::<arrow_array::types::Int64Type>()
                    .cloned()
            })
            .unwrap_or_else(|| Int64Array::from(Vec::<i64>::new()));
        let removed = at.iter().flatten().filter(|&t| t < cutoff).count() as u64;
        let out = ExpireTombstonesResult {
            removed,
            kept: report.count - removed,
            committed: false,
        };
        let merges = merge_files && report.files > 1;
        if dry_run || (removed == 0 && !merges) {
            return Ok(out);
        }
        let (keys, conv, list) = keys_of(&table)?;
        let next = rewrite(&table, &list, &keys, &conv, |r| r.at_ms >= cutoff).await?;
        let mut updates = vec![PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: table.metadata().properties().get(TOMBSTONES).cloned(),
            value: (!next.files.is_empty()).then(|| next.to_property()),
        }];
        if let Some(v) = intent.as_deref() {
            updates.push(PropertyUpdate {
                key: crate::spec::maintain_policy::COMMIT_INTENT.to_string(),
                expected: Some(v.to_string()),
                value: None,
            });
        }
        match commit_properties(catalog, &table, &updates).await {
            Ok(_) => {
                return Ok(ExpireTombstonesResult {
                    committed: true,
                    ..out
                })
            }
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < 10 => {
                for f in &next.files {
                    let _ = table.storage().delete(&f.path).await;
                }
            }
            Err(e) => {
                if e.kind() != ErrorKind::CommitStateUnknown {
                    for f in &next.files {
                        let _ = table.storage().delete(&f.path).await;
                    }
                }
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{latest_per_key, merge_from};

    #[test]
    fn latest_per_key_matches_a_map_fold() {
        // Records (key, version) in arrival order, with repeated keys and tied versions.
        let mut x = 0x9e37_79b9_u64;
        let recs: Vec<(i64, i64)> = (0..5_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % 300) as i64 - 150, ((x >> 20) % 4) as i64)
            })
            .collect();
        let mut model: std::collections::HashMap<i64, (i64, u32)> = Default::default();
        for (i, &(k, v)) in recs.iter().enumerate() {
            match model.get(&k) {
                Some(&(old, _)) if v < old => {}
                _ => {
                    model.insert(k, (v, i as u32));
                }
            }
        }
        let mut order: Vec<(i64, u32)> = recs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.0, i as u32))
            .collect();
        order.sort_unstable();
        let order: Vec<u32> = order.into_iter().map(|o| o.1).collect();
        let got = latest_per_key(
            &order,
            |a, b| recs[a as usize].0 == recs[b as usize].0,
            |i| recs[i as usize].1,
        );
        assert_eq!(got.len(), model.len());
        for i in got {
            assert_eq!(model[&recs[i as usize].0].1, i);
        }
    }

    #[test]
    fn newest_files_merge_by_size_tier() {
        assert_eq!(merge_from(&[]), 0);
        assert_eq!(merge_from(&[5]), 0, "one file: nothing to merge");
        assert_eq!(merge_from(&[10, 10]), 0, "equal tiers merge");
        assert_eq!(merge_from(&[20, 10]), 1, "an older, larger file waits");
        assert_eq!(merge_from(&[20, 10, 10]), 0, "the merge cascades");
        assert_eq!(
            merge_from(&[1000, 40, 5, 5]),
            2,
            "the two 5s merge; 40 waits"
        );
        // A steady stream keeps about log2(batches) files.
        let mut files: Vec<u64> = Vec::new();
        for _ in 0..1000 {
            files.push(100);
            let from = merge_from(&files);
            if files.len() - from >= 2 {
                let merged: u64 = files.drain(from..).sum();
                files.push(merged);
            }
            assert!(files.len() <= 11, "{files:?}");
        }
        assert_eq!(files.iter().sum::<u64>(), 100_000);
    }
}
