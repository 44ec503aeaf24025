//! The `manifests` and `all_manifests` metadata tables.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields};
use iceberg::spec::ManifestContentType;

use super::{batch, snapshot_of};
use crate::error::{Error, Result};
use crate::table::Table;

pub(super) async fn manifests(
    table: &Table,
    snapshot: Option<i64>,
    all: bool,
) -> Result<RecordBatch> {
    let md = table.metadata();
    let snaps: Vec<Arc<iceberg::spec::Snapshot>> = if all {
        md.snapshots().cloned().collect()
    } else {
        snapshot_of(table, snapshot)?.into_iter().collect()
    };
    let mut content = Int32Builder::new();
    let mut path = StringBuilder::new();
    let mut length = Int64Builder::new();
    let mut spec = Int32Builder::new();
    let mut added_snap = Int64Builder::new();
    let mut counts: [Int32Builder; 6] = std::array::from_fn(|_| Int32Builder::new());
    let mut refs = Int64Builder::new();
    let summary_fields = Fields::from(vec![
        Field::new("contains_null", DataType::Boolean, false),
        Field::new("contains_nan", DataType::Boolean, true),
        Field::new("lower_bound", DataType::Utf8, true),
        Field::new("upper_bound", DataType::Utf8, true),
    ]);
    let mut partition_summaries =
        ListBuilder::new(StructBuilder::from_fields(summary_fields.clone(), 0));
    let mut seen = HashSet::new();
    for s in snaps {
        for mf in table.manifest_list(&s).await? {
            if all && !seen.insert(mf.manifest_path.clone()) {
                continue;
            }
            let data = mf.content == ManifestContentType::Data;
            content.append_value(if data { 0 } else { 1 });
            path.append_value(&mf.manifest_path);
            length.append_value(mf.manifest_length);
            spec.append_value(mf.partition_spec_id);
            added_snap.append_value(mf.added_snapshot_id);
            let c = [
                mf.added_files_count,
                mf.existing_files_count,
                mf.deleted_files_count,
            ];
            for (i, n) in c.iter().enumerate() {
                let n = n.map(|n| n as i32).unwrap_or(0);
                counts[i].append_value(if data { n } else { 0 });
                counts[i + 3].append_value(if data { 0 } else { n });
            }
            refs.append_value(s.snapshot_id());
            let pspec = md.partition_spec_by_id(mf.partition_spec_id);
            let pt = pspec.and_then(|p| p.partition_type(md.current_schema()).ok());
            let st = partition_summaries.values();
            for (i, fs) in mf.partitions.iter().flatten().enumerate() {
                let ty = pt
                    .as_ref()
                    .and_then(|t| t.fields().get(i))
                    .and_then(|f| f.field_type.as_primitive_type().cloned());
                // Java's human form of a bound (a string without quotes).
                let human = |b: Option<&[u8]>| -> Option<String> {
                    let (b, ty) = (b?, ty.as_ref()?);
                    let d = iceberg::spec::Datum::try_from_bytes(b, ty.clone()).ok()?;
                    Some(match d.literal() {
                        iceberg::spec::PrimitiveLiteral::String(s) => s.clone(),
                        _ => d.to_string(),
                    })
                };
                st.field_builder::<BooleanBuilder>(0)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_value(fs.contains_null);
                st.field_builder::<BooleanBuilder>(1)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(fs.contains_nan);
                st.field_builder::<StringBuilder>(2)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(human(fs.lower_bound.as_deref().map(|v| v.as_slice())));
                st.field_builder::<StringBuilder>(3)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(human(fs.upper_bound.as_deref().map(|v| v.as_slice())));
                st.append(true);
            }
            partition_summaries.append(true);
        }
    }
    let mut fields = vec![
        Field::new("content", DataType::Int32, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("length", DataType::Int64, false),
        Field::new("partition_spec_id", DataType::Int32, false),
        Field::new("added_snapshot_id", DataType::Int64, false),
    ];
    for n in [
        "added_data_files_count",
        "existing_data_files_count",
        "deleted_data_files_count",
        "added_delete_files_count",
        "existing_delete_files_count",
        "deleted_delete_files_count",
    ] {
        fields.push(Field::new(n, DataType::Int32, false));
    }
    let summaries = partition_summaries.finish();
    fields.push(Field::new(
        "partition_summaries",
        summaries.data_type().clone(),
        true,
    ));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(content.finish()),
        Arc::new(path.finish()),
        Arc::new(length.finish()),
        Arc::new(spec.finish()),
        Arc::new(added_snap.finish()),
    ];
    for mut c in counts {
        columns.push(Arc::new(c.finish()));
    }
    columns.push(Arc::new(summaries));
    if all {
        fields.push(Field::new("reference_snapshot_id", DataType::Int64, false));
        columns.push(Arc::new(refs.finish()));
    }
    batch(fields, columns)
}
