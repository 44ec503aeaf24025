//! Keyed tables: the primary key (the schema's identifier fields), the merge rule's version
//! and delete columns, and the table properties that record tombstones and sink checkpoints.
//! Pure.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::{PrimitiveType, Schema, TableMetadata, Type};

/// `floe.merge.version-column`: per key the highest value wins.
pub const VERSION_COLUMN: &str = "floe.merge.version-column";
/// `floe.merge.delete-column`: 1 / true marks a change that deletes its key.
pub const DELETE_COLUMN: &str = "floe.merge.delete-column";
/// `floe.tombstones`: the table's tombstone files (JSON, see [`TombstoneList`]).
pub const TOMBSTONES: &str = "floe.tombstones";

/// The property (and snapshot summary key) holding sink `sink`'s last committed checkpoint.
pub fn sink_checkpoint_key(sink: &str) -> String {
    format!("floe.sink.{sink}.checkpoint")
}

/// Checks a sink id: letters, digits, `-`, `_` and `.` (it becomes part of a property name).
pub fn check_sink_id(sink: &str) -> Result<()> {
    let ok = !sink.is_empty()
        && sink
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "sink id '{sink}': use letters, digits, '-', '_' or '.'"
        )))
    }
}

/// Whether property `key` defines a keyed table's merge rule (the engine, its version and
/// delete columns, its functions): fixed at create. (`floe.merge.partition-aligned` and
/// `floe.merge.source-memory-bytes` tune MERGE statements and are not part of it.)
pub fn defines_rule(key: &str) -> bool {
    [MERGE_ENGINE, VERSION_COLUMN, DELETE_COLUMN, DROP_ZERO_ROWS].contains(&key)
        || key.starts_with(AGGREGATE_PREFIX)
}

/// Whether a table of `schema` and `props` is keyed: it has a primary key (identifier
/// fields) or a property of a merge rule.
pub fn is_keyed(schema: &Schema, props: &std::collections::HashMap<String, String>) -> bool {
    schema.identifier_field_ids().next().is_some() || props.keys().any(|k| defines_rule(k))
}

pub use super::merge_engine::{
    with_state_columns, Aggregate, Function, MergeEngine, AGGREGATE_PREFIX, DROP_ZERO_ROWS,
    MERGE_ENGINE,
};

/// A keyed table's merge rule, resolved against its current schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedSpec {
    /// Key columns, as the schema spells them, in identifier-field order.
    pub key: Vec<String>,
    /// The version column (`None`: the later arrival wins).
    pub version: Option<String>,
    /// The delete flag column (`None`: nothing is deleted).
    pub delete: Option<String>,
    /// The merge engine.
    pub engine: MergeEngine,
    /// The per-column functions (`sum` and `aggregate` engines; empty otherwise).
    pub aggregates: Vec<Aggregate>,
    /// The `sum` engine removes keys whose summed columns all fold to zero.
    pub drop_zero_rows: bool,
}

impl KeyedSpec {
    /// The merge rule of `md` (current schema and properties); an error says what is missing.
    pub fn of(md: &TableMetadata, table: &str) -> Result<Self> {
        Self::resolve(md.current_schema(), md.properties(), table)
    }

    /// Checks the rule a table being created with `schema` and `props` would have (a
    /// table with a merge engine but no primary key, a bad function, …).
    pub fn check(
        schema: &Schema,
        props: &std::collections::HashMap<String, String>,
        table: &str,
    ) -> Result<()> {
        Self::resolve(schema, props, table).map(|_| ())
    }

    fn resolve(
        schema: &Schema,
        props: &std::collections::HashMap<String, String>,
        table: &str,
    ) -> Result<Self> {
        let mut ids: Vec<i32> = schema.identifier_field_ids().collect();
        ids.sort_unstable();
        if ids.is_empty() {
            return Err(Error::invalid(format!(
                "table {table} has no primary key (identifier fields); create it with a primary key to write keyed changes"
            )));
        }
        let mut key = Vec::new();
        for id in ids {
            let name = schema.name_by_field_id(id).ok_or_else(|| {
                Error::corrupt(format!(
                    "table {table}: identifier field {id} is not in the schema"
                ))
            })?;
            key.push(name.to_string());
        }
        let engine = match props.get(MERGE_ENGINE) {
            None => MergeEngine::Replace,
            Some(e) => MergeEngine::parse(e)
                .ok_or_else(|| super::merge_engine::unknown_engine(e, table))?,
        };
        let column = |prop: &str, what: &str, ok: fn(&PrimitiveType) -> bool, types: &str| {
            let Some(name) = props.get(prop) else {
                return Ok(None);
            };
            let f = crate::spec::resolve_field(schema, name)?.ok_or_else(|| {
                Error::invalid(format!(
                    "table {table}: {prop}={name} names no column of the schema"
                ))
            })?;
            let fits = matches!(&*f.field_type, Type::Primitive(p) if ok(p));
            if !fits {
                return Err(Error::invalid(format!(
                    "table {table}: the {what} column '{}' is {}; it must be {types}",
                    f.name, f.field_type
                )));
            }
            if key.contains(&f.name) {
                return Err(Error::invalid(format!(
                    "table {table}: the {what} column '{}' cannot be part of the primary key",
                    f.name
                )));
            }
            Ok(Some(f.name.clone()))
        };
        let version = column(
            VERSION_COLUMN,
            "version",
            |p| {
                matches!(
                    p,
                    PrimitiveType::Int
                        | PrimitiveType::Long
                        | PrimitiveType::Date
                        | PrimitiveType::Timestamp
                        | PrimitiveType::Timestamptz
                )
            },
            "int, long, date or timestamp",
        )?;
        let delete = column(
            DELETE_COLUMN,
            "delete",
            |p| {
                matches!(
                    p,
                    PrimitiveType::Int | PrimitiveType::Long | PrimitiveType::Boolean
                )
            },
            "int, long or boolean (0/1, false/true)",
        )?;
        if version.is_some() && version == delete {
            return Err(Error::invalid(format!(
                "table {table}: the version and delete columns must differ"
            )));
        }
        if engine != MergeEngine::Replace && delete.is_some() {
            return Err(Error::unsupported(format!(
                "table {table}: {DELETE_COLUMN} is set, but the {} engine folds rows and deletes none; \
                 only the replace engine takes a delete column",
                engine.name()
            )));
        }
        if !matches!(engine, MergeEngine::Replace | MergeEngine::PartialUpdate) && version.is_some()
        {
            return Err(Error::unsupported(format!(
                "table {table}: {VERSION_COLUMN} is set, but the {} engine folds rows in arrival order; \
                 only the replace and partial-update engines order rows by a version",
                engine.name()
            )));
        }
        let aggregates = super::merge_engine::aggregates(engine, schema, &key, props, table)?;
        let drop_zero_rows = match props
            .get(super::merge_engine::DROP_ZERO_ROWS)
            .map(String::as_str)
        {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => {
                return Err(Error::invalid(format!(
                    "table {table}: {}={v} is not true or false",
                    super::merge_engine::DROP_ZERO_ROWS
                )))
            }
        };
        Ok(Self {
            key,
            version,
            delete,
            engine,
            aggregates,
            drop_zero_rows,
        })
    }

    /// Whether `schema` still has every column this spec names (a guard for callers that
    /// resolved it against another schema).
    pub fn fits(&self, schema: &Schema) -> bool {
        self.key
            .iter()
            .chain(&self.version)
            .chain(&self.delete)
            .all(|c| schema.field_by_name(c).is_some())
    }
}

/// One tombstone file: Parquet with the key columns (in primary-key order) then
/// `__floe_version` (long), `__floe_deleted_at_ms` (long) and `__floe_deleted` (boolean:
/// `false` records that a later change brought the key back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TombstoneFile {
    /// Where it is.
    pub path: String,
    /// Records in it.
    pub records: u64,
    /// Its size.
    pub file_size_in_bytes: u64,
}

/// The value of [`TOMBSTONES`]: the tombstone files, oldest first (a later file's record for
/// a key supersedes an earlier one of the same version).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TombstoneList {
    /// The files.
    pub files: Vec<TombstoneFile>,
}

/// The record column names of a tombstone file, after the key columns.
pub const TOMBSTONE_VERSION: &str = "__floe_version";
/// When the delete was committed (ms since the epoch).
pub const TOMBSTONE_DELETED_AT: &str = "__floe_deleted_at_ms";
/// `true`: a tombstone; `false`: the key was brought back.
pub const TOMBSTONE_DELETED: &str = "__floe_deleted";

impl TombstoneList {
    /// The list recorded in `md` (empty when the property is unset).
    pub fn of(md: &TableMetadata, table: &str) -> Result<Self> {
        match md.properties().get(TOMBSTONES) {
            None => Ok(Self::default()),
            Some(v) => serde_json::from_str(v).map_err(|e| {
                Error::corrupt(format!(
                    "table {table}: property {TOMBSTONES} is not a tombstone list ({e}); \
                     it is written by floe and must not be edited"
                ))
            }),
        }
    }

    /// The property value.
    pub fn to_property(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_ids_are_checked() {
        assert!(check_sink_id("orders-1.v2_x").is_ok());
        assert!(check_sink_id("").is_err());
        assert!(check_sink_id("a b").is_err());
        assert_eq!(sink_checkpoint_key("o"), "floe.sink.o.checkpoint");
    }

    #[test]
    fn tombstone_list_round_trips() {
        let l = TombstoneList {
            files: vec![TombstoneFile {
                path: "/t/metadata/tombstones-1.parquet".into(),
                records: 3,
                file_size_in_bytes: 100,
            }],
        };
        let v = l.to_property();
        let back: TombstoneList = serde_json::from_str(&v).unwrap();
        assert_eq!(back, l);
        assert!(serde_json::from_str::<TombstoneList>("nope").is_err());
    }
}
