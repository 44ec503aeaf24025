//! The table model: the `iceberg` crate's spec types (re-exported explicitly) plus floe's
//! typed properties and the text forms of schemas, partition specs and sort orders.

mod alter_sql;
mod ddl;
pub mod evolution;
pub mod keyed;
pub mod keyed_state;
mod layout;
pub mod maintain_policy;
mod merge_engine;
mod names;
mod properties;
mod property_keys;
pub mod reserved;
pub mod snapshot_refs;

pub use alter_sql::{is_alter_table, parse_alter_clause, parse_alter_table, parse_rename_table};
pub use ddl::{arrow_schema, parse_schema, schema_ddl, schema_from_arrow, with_primary_key};
pub(crate) use layout::{check_layout, check_transform};
pub use layout::{parse_partition_spec, parse_sort_order};
pub use names::{resolve_column, resolve_field};
pub use properties::{
    DeleteGranularity, DistributionMode, IsolationLevel, MetricsMode, TableProperties, WriteMode,
    MERGE_PARTITION_ALIGNED, MERGE_SOURCE_MEMORY_BYTES,
};
pub use property_keys::check_property_keys;

pub use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, Datum, FormatVersion, Literal, ManifestContentType,
    ManifestFile, ManifestStatus, NestedField, Operation, PartitionSpec, PrimitiveLiteral,
    PrimitiveType, Schema, SchemaRef, Snapshot, SnapshotReference, SortOrder, Struct,
    TableMetadata, Transform, Type, UnboundPartitionSpec,
};
pub use iceberg::{NamespaceIdent, TableIdent};

/// A builder holding every field of `f` (to change some and build a copy).
pub(crate) fn data_file_builder(f: &DataFile) -> iceberg::spec::DataFileBuilder {
    let mut b = iceberg::spec::DataFileBuilder::default();
    b.content(f.content_type())
        .file_path(f.file_path().to_string())
        .file_format(f.file_format())
        .partition(f.partition().clone())
        .record_count(f.record_count())
        .file_size_in_bytes(f.file_size_in_bytes())
        .column_sizes(f.column_sizes().clone())
        .value_counts(f.value_counts().clone())
        .null_value_counts(f.null_value_counts().clone())
        .nan_value_counts(f.nan_value_counts().clone())
        .lower_bounds(f.lower_bounds().clone())
        .upper_bounds(f.upper_bounds().clone())
        .key_metadata(f.key_metadata().map(|k| k.to_vec()))
        .split_offsets(f.split_offsets().map(|s| s.to_vec()))
        .equality_ids(f.equality_ids())
        .first_row_id(f.first_row_id())
        .referenced_data_file(f.referenced_data_file())
        .content_offset(f.content_offset())
        .content_size_in_bytes(f.content_size_in_bytes());
    if let Some(s) = f.sort_order_id() {
        b.sort_order_id(s);
    }
    b
}

/// The table's branches and tags by name (`main` included when the table has a snapshot).
/// The iceberg crate 0.10.1 has no iterator over refs; they are read from the metadata's JSON
/// form.
pub fn refs(md: &TableMetadata) -> Vec<(String, SnapshotReference)> {
    let mut out: Vec<(String, SnapshotReference)> = serde_json::to_value(md)
        .ok()
        .and_then(|v| v.get("refs").and_then(|r| r.as_object()).cloned())
        .map(|o| {
            o.iter()
                .filter_map(|(n, r)| {
                    serde_json::from_value::<SnapshotReference>(r.clone())
                        .ok()
                        .map(|r| (n.clone(), r))
                })
                .collect()
        })
        .unwrap_or_default();
    // Format v1 has no refs in its JSON form: `main` is the current snapshot.
    if !out.iter().any(|(n, _)| n == iceberg::spec::MAIN_BRANCH) {
        if let Some(id) = md.current_snapshot_id() {
            out.push((
                iceberg::spec::MAIN_BRANCH.to_string(),
                SnapshotReference::new(
                    id,
                    iceberg::spec::SnapshotRetention::branch(None, None, None),
                ),
            ));
        }
    }
    out
}
