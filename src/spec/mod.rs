//! The table model: the `iceberg` crate's spec types (re-exported explicitly) plus floe's
//! typed properties and the text forms of schemas, partition specs and sort orders.

mod ddl;
mod layout;
mod properties;

pub use ddl::{parse_schema, schema_from_arrow};
pub use layout::{parse_partition_spec, parse_sort_order};
pub use properties::{DeleteGranularity, IsolationLevel, MetricsMode, TableProperties, WriteMode};

pub use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, Datum, FormatVersion, Literal, ManifestContentType,
    ManifestFile, ManifestStatus, NestedField, Operation, PartitionSpec, PrimitiveLiteral,
    PrimitiveType, Schema, SchemaRef, Snapshot, SnapshotReference, SortOrder, Struct,
    TableMetadata, Transform, Type, UnboundPartitionSpec,
};
pub use iceberg::{NamespaceIdent, TableIdent};
