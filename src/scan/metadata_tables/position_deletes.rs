//! The `position_deletes` metadata table: one row per position deleted by a live position
//! delete file or deletion vector of the snapshot read (Java's `PositionDeletesTable`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{new_null_array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field};
use iceberg::spec::{DataContentType, FormatVersion};

use super::batch;
use super::files::{entries_of, manifests_of, EntryRow, PartitionType, Scope};
use crate::error::{Error, Result};
use crate::scan::delete_index::{canonical_path, DeleteEntry};
use crate::table::Table;

/// `position_deletes` at `snapshot` (default: the current one): file_path, pos, row (null:
/// floe's delete files carry no rows), partition (when partitioned), spec_id,
/// delete_file_path, and for v3 tables content_offset and content_size_in_bytes (set for
/// deletion vectors).
pub(super) async fn position_deletes(table: &Table, snapshot: Option<i64>) -> Result<RecordBatch> {
    let md = table.metadata();
    let pt = PartitionType::of(md)?;
    let manifests = manifests_of(table, Scope::Snapshot(snapshot)).await?;
    // The data files' paths as the manifests spell them (delete files may name them in a
    // canonical form).
    let data = entries_of(table, &manifests, true, false, true).await?;
    let spelled: HashMap<String, String> = data
        .iter()
        .map(|r| {
            let p = r.entry.data_file().file_path();
            (canonical_path(p).to_string(), p.to_string())
        })
        .collect();
    let deletes = entries_of(table, &manifests, false, true, true).await?;
    let mut path = StringBuilder::new();
    let mut pos = Int64Builder::new();
    let mut spec = Int32Builder::new();
    let mut delete_path = StringBuilder::new();
    let (mut offset, mut size) = (Int64Builder::new(), Int64Builder::new());
    let mut partitions = Vec::new();
    for EntryRow {
        entry: e, spec_id, ..
    } in &deletes
    {
        let f = e.data_file();
        if f.content_type() != DataContentType::PositionDeletes {
            continue;
        }
        let pspec = md.partition_spec_by_id(*spec_id).cloned().ok_or_else(|| {
            Error::corrupt(format!(
                "delete file '{}' of table {} names partition spec {spec_id}, which the table \
                 does not have",
                f.file_path(),
                table.name()
            ))
        })?;
        let entry = DeleteEntry {
            file: Arc::new(f.clone()),
            spec: pspec,
            sequence_number: e.sequence_number().unwrap_or(0),
        };
        let by_file = crate::scan::read_positions(table.storage(), &entry)
            .await
            .map_err(|err| err.context(format!("{}.position_deletes", table.name())))?;
        let mut by_file: Vec<_> = by_file.into_iter().collect();
        by_file.sort_by(|a, b| a.0.cmp(&b.0));
        let tuple = pt.coerce(md, *spec_id, f);
        for (data_path, positions) in by_file {
            let shown = spelled.get(&data_path).unwrap_or(&data_path);
            for p in positions.iter() {
                path.append_value(shown);
                pos.append_value(p as i64);
                spec.append_value(*spec_id);
                delete_path.append_value(f.file_path());
                offset.append_option(f.content_offset());
                size.append_option(f.content_size_in_bytes());
                partitions.push(tuple.clone());
            }
        }
    }
    let n = partitions.len();
    let row_type = DataType::Struct(
        iceberg::arrow::schema_to_arrow_schema(md.current_schema())?
            .fields()
            .clone(),
    );
    let mut out: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("file_path", DataType::Utf8, false),
            Arc::new(path.finish()),
        ),
        (
            Field::new("pos", DataType::Int64, false),
            Arc::new(pos.finish()),
        ),
        (
            Field::new("row", row_type.clone(), true),
            new_null_array(&row_type, n),
        ),
    ];
    if !pt.is_empty() {
        out.push(pt.column(&partitions)?);
    }
    out.push((
        Field::new("spec_id", DataType::Int32, false),
        Arc::new(spec.finish()),
    ));
    out.push((
        Field::new("delete_file_path", DataType::Utf8, false),
        Arc::new(delete_path.finish()),
    ));
    if md.format_version() >= FormatVersion::V3 {
        out.push((
            Field::new("content_offset", DataType::Int64, true),
            Arc::new(offset.finish()),
        ));
        out.push((
            Field::new("content_size_in_bytes", DataType::Int64, true),
            Arc::new(size.finish()),
        ));
    }
    let (fields, columns) = out.into_iter().unzip();
    batch(fields, columns)
}
