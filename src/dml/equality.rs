//! Deletes by key with equality delete files (the CDC way: no read of the table). Each row of
//! `keys` deletes every row with the same values in `columns` (NULL matches NULL) that was
//! committed before; rows committed later with those values survive.

use arrow_array::{new_null_array, ArrayRef, RecordBatch};
use iceberg::spec::Operation;

use super::statement::columns_in_table_order;
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::spec::resolve_column;
use crate::spec::{FormatVersion, Struct, WriteMode};
use crate::table::Table;
use crate::txn::RowLevelResult;
use crate::txn::{commit, NoValidation, SnapshotProducer};
use crate::write::{DeleteFileWriter, Partitioner};

/// Writes equality delete files for `keys` on `columns` and commits them as a `delete`
/// snapshot. In a partitioned table the partition source columns must be among `columns`
/// (each file is scoped to one partition); in an unpartitioned one the file is global.
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int64Array, RecordBatch};
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// # let ident = floe::table::parse_ident("db.t")?;
/// # let schema = floe::spec::parse_schema("id long, v long")?;
/// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
/// #     ("id", Arc::new(Int64Array::from_iter_values(r.clone())) as _),
/// #     ("v", Arc::new(Int64Array::from_iter_values(r)) as _),
/// # ])?) };
/// # let table = floe::txn::append(&cat, &table, [rows(0..100)]).await?.table;
/// // Equality delete files for these keys; the table is not read.
/// let keys = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![3, 4])) as _)])?;
/// let r = floe::dml::delete_by_key(&cat, &table, &["id"], &keys).await?;
/// let left: usize = floe::scan::Scan::new(&r.table).to_batches().await?.iter().map(|b| b.num_rows()).sum();
/// assert_eq!(left, 98);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn delete_by_key(
    catalog: &Catalog,
    table: &Table,
    columns: &[&str],
    keys: &RecordBatch,
) -> Result<RowLevelResult> {
    let name = table.name();
    let md = table.metadata();
    if md.format_version() == FormatVersion::V1 {
        return Err(Error::unsupported(format!(
            "table {name} is format v1, which has no delete files; upgrade it to v2"
        )));
    }
    let schema = md.current_schema().clone();
    let arrow = table.arrow_schema()?;
    let cols = columns_in_table_order(&arrow, columns.iter().map(|c| c.to_string()))?;
    if cols.len() != columns.len() {
        return Err(Error::invalid(format!(
            "equality delete on table {name}: unknown column among {columns:?}"
        )));
    }
    let ids: Vec<i32> = cols
        .iter()
        .filter_map(|c| schema.field_by_name(c).map(|f| f.id))
        .collect();
    let spec = md.default_partition_spec().clone();
    for pf in spec.fields() {
        if !ids.contains(&pf.source_id) {
            return Err(Error::invalid(format!(
                "equality delete on table {name}: partition source column of '{}' must be one of the key columns",
                pf.name
            )));
        }
    }
    // A batch shaped like the table (other columns NULL), for the partitioner.
    let full: Vec<ArrayRef> = arrow
        .fields()
        .iter()
        .map(|f| {
            let key_names = keys.schema();
            let key_names = key_names.fields().iter().map(|k| k.name().as_str());
            match resolve_column(key_names, f.name())? {
                Some(i) => Ok(arrow_cast::cast(keys.column(i), f.data_type())?),
                None => Ok(new_null_array(f.data_type(), keys.num_rows())),
            }
        })
        .collect::<Result<_>>()?;
    let nullable = super::statement::nullable(&arrow);
    let full = RecordBatch::try_new(nullable, full)?;
    let pieces: Vec<(Struct, RecordBatch)> = if spec.is_unpartitioned() {
        vec![(Struct::empty(), full)]
    } else {
        Partitioner::new(&spec, schema.clone())?
            .split(&full)?
            .into_iter()
            .map(|(k, b)| (k.data().clone(), b))
            .collect()
    };
    let mut w = DeleteFileWriter::new(table)?;
    let mut files = Vec::new();
    for (partition, rows) in pieces {
        match w
            .write_equality_deletes(&spec, &partition, &ids, &rows)
            .await
        {
            Ok(f) => files.push(f),
            Err(e) => {
                w.abort().await;
                return Err(e);
            }
        }
    }
    let written_bytes = files.iter().map(|f| f.file_size_in_bytes()).sum();
    let n = files.len();
    let mut producer =
        SnapshotProducer::new(Operation::Delete, vec![]).add_files(spec.spec_id(), files);
    let t = match commit(catalog, table, &mut producer, &NoValidation).await {
        Ok(t) => t,
        Err(e) => {
            if e.kind() != crate::ErrorKind::CommitStateUnknown {
                w.abort().await;
            }
            return Err(e);
        }
    };
    Ok(RowLevelResult {
        table: t,
        snapshot_id: Some(producer.snapshot_id()),
        mode: WriteMode::MergeOnRead,
        removed_rows: 0,
        written_rows: 0,
        rewritten_rows: 0,
        removed_data_files: 0,
        added_data_files: 0,
        added_delete_files: n,
        written_bytes,
        aligned: None,
        merged: None,
    })
}
