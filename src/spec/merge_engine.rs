//! Merge engines of keyed tables other than `replace`: `sum`, `aggregate`, `partial-update`
//! and `first-row` (`floe.merge-engine`), and the per-column functions of `sum` and
//! `aggregate` (`floe.aggregate.<column>=<function>[:<input column>]`). Pure.
//!
//! Functions whose result cannot be merged from results keep a **state** in columns next to
//! the result, named after it (`<c>` is the result column):
//!
//! | function | state columns |
//! |---|---|
//! | `avg:<in>` | `_floe_<c>_sum` (double), `_floe_<c>_count` (long) |
//! | `count_distinct:<in>` | `_floe_<c>_set` (binary: a portable 64-bit roaring bitmap of the integer inputs) |
//! | `approx_count_distinct:<in>` | `_floe_<c>_hll` (binary: a HyperLogLog sketch, see `keyed::sketch`) |
//!
//! The result column always holds the finalized value; the states are what later batches
//! merge with.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::spec::{NestedField, PrimitiveType, Schema, Type};

/// `floe.merge-engine`: how rows of one key are merged ([`MergeEngine`]; `replace` by default).
pub const MERGE_ENGINE: &str = "floe.merge-engine";
/// `floe.aggregate.<column>`: the column's function.
pub const AGGREGATE_PREFIX: &str = "floe.aggregate.";
/// `floe.merge.drop-zero-rows`: the `sum` engine removes a key whose summed columns all
/// fold to zero (default `true`, as ClickHouse's SummingMergeTree).
pub const DROP_ZERO_ROWS: &str = "floe.merge.drop-zero-rows";
/// The prefix of state columns.
pub(super) const STATE_PREFIX: &str = "_floe_";

/// How a keyed table merges the changes of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MergeEngine {
    /// The highest version wins, later arrivals on ties (ClickHouse's ReplacingMergeTree).
    Replace,
    /// Named columns are summed, others keep the last value (SummingMergeTree).
    Sum,
    /// Every column has a function (AggregatingMergeTree, Paimon's `aggregation`).
    Aggregate,
    /// A non-null incoming field overwrites, a null keeps the stored value.
    PartialUpdate,
    /// The first arrival of a key is kept, later ones are ignored.
    FirstRow,
}

impl MergeEngine {
    /// The engine a `floe.merge-engine` value names.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "replace" => Self::Replace,
            "sum" => Self::Sum,
            "aggregate" | "aggregation" => Self::Aggregate,
            "partial-update" => Self::PartialUpdate,
            "first-row" => Self::FirstRow,
            _ => return None,
        })
    }

    /// The property value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Replace => "replace",
            Self::Sum => "sum",
            Self::Aggregate => "aggregate",
            Self::PartialUpdate => "partial-update",
            Self::FirstRow => "first-row",
        }
    }
}

/// An aggregate function of one column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "function", content = "input")]
pub enum Function {
    /// The sum of the non-null values (null when there are none).
    Sum,
    /// The smallest non-null value.
    Min,
    /// The largest non-null value.
    Max,
    /// The number of rows folded into the key.
    Count,
    /// The first arrival's value (null included).
    First,
    /// The last arrival's value (null included).
    Last,
    /// The first non-null value.
    FirstNonNull,
    /// The last non-null value.
    LastNonNull,
    /// Logical and of the non-null values.
    BoolAnd,
    /// Logical or of the non-null values.
    BoolOr,
    /// The mean of an input column's non-null values (state: sum and count).
    Avg(String),
    /// The number of distinct non-null integers of an input column (state: the exact set).
    CountDistinct(String),
    /// An estimate of the distinct non-null values of an input column (state: a
    /// HyperLogLog sketch, ~1.6% standard error).
    ApproxCountDistinct(String),
}

impl Function {
    /// Parses `sum`, `avg:ms`, … (`column` and `table` for messages).
    pub fn parse(s: &str, column: &str, table: &str) -> Result<Self> {
        let (name, input) = match s.split_once(':') {
            Some((n, i)) => (n.trim(), Some(i.trim())),
            None => (s.trim(), None),
        };
        let needs_input = |f: fn(String) -> Function| {
            match input {
            Some(i) if !i.is_empty() => Ok(f(i.to_string())),
            _ => Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{column}={s}: {name} needs its input column ({name}:<column>)"
            ))),
        }
        };
        let plain = |f: Function| {
            match input {
            None => Ok(f),
            Some(_) => Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{column}={s}: {name} takes no input column (it folds '{column}' itself)"
            ))),
        }
        };
        match name {
            "sum" => plain(Self::Sum),
            "min" => plain(Self::Min),
            "max" => plain(Self::Max),
            "count" => plain(Self::Count),
            "first" => plain(Self::First),
            "last" => plain(Self::Last),
            "first_non_null" => plain(Self::FirstNonNull),
            "last_non_null" => plain(Self::LastNonNull),
            "bool_and" => plain(Self::BoolAnd),
            "bool_or" => plain(Self::BoolOr),
            "avg" => needs_input(Self::Avg),
            "count_distinct" => needs_input(Self::CountDistinct),
            "approx_count_distinct" => needs_input(Self::ApproxCountDistinct),
            other => Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{column}={s}: unknown function '{other}'; use sum, min, max, count, \
                 first, last, first_non_null, last_non_null, bool_and, bool_or, avg:<col>, count_distinct:<col> \
                 or approx_count_distinct:<col>"
            ))),
        }
    }

    /// The function's name (`avg`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Min => "min",
            Self::Max => "max",
            Self::Count => "count",
            Self::First => "first",
            Self::Last => "last",
            Self::FirstNonNull => "first_non_null",
            Self::LastNonNull => "last_non_null",
            Self::BoolAnd => "bool_and",
            Self::BoolOr => "bool_or",
            Self::Avg(_) => "avg",
            Self::CountDistinct(_) => "count_distinct",
            Self::ApproxCountDistinct(_) => "approx_count_distinct",
        }
    }

    /// The input column read from batches (`None`: the result column itself).
    pub fn input(&self) -> Option<&str> {
        match self {
            Self::Avg(i) | Self::CountDistinct(i) | Self::ApproxCountDistinct(i) => Some(i),
            _ => None,
        }
    }

    /// The state columns kept next to result column `column`, with their types.
    pub fn state_columns(&self, column: &str) -> Vec<(String, PrimitiveType)> {
        match self {
            Self::Avg(_) => vec![
                (format!("{STATE_PREFIX}{column}_sum"), PrimitiveType::Double),
                (format!("{STATE_PREFIX}{column}_count"), PrimitiveType::Long),
            ],
            Self::CountDistinct(_) => {
                vec![(format!("{STATE_PREFIX}{column}_set"), PrimitiveType::Binary)]
            }
            Self::ApproxCountDistinct(_) => {
                vec![(format!("{STATE_PREFIX}{column}_hll"), PrimitiveType::Binary)]
            }
            _ => vec![],
        }
    }

    /// Whether the result column's type suits the function; `None` when it does, else the
    /// types it takes.
    fn refuses(&self, t: &PrimitiveType) -> Option<&'static str> {
        use PrimitiveType as P;
        let numeric = matches!(
            t,
            P::Int | P::Long | P::Float | P::Double | P::Decimal { .. }
        );
        let ordered = numeric
            || matches!(
                t,
                P::Date
                    | P::Time
                    | P::Timestamp
                    | P::Timestamptz
                    | P::TimestampNs
                    | P::TimestamptzNs
                    | P::String
                    | P::Boolean
            );
        let ok = match self {
            Self::Sum => numeric,
            Self::Min | Self::Max => ordered,
            Self::Count | Self::CountDistinct(_) | Self::ApproxCountDistinct(_) => {
                matches!(t, P::Long)
            }
            Self::BoolAnd | Self::BoolOr => matches!(t, P::Boolean),
            Self::Avg(_) => matches!(t, P::Double),
            Self::First | Self::Last | Self::FirstNonNull | Self::LastNonNull => true,
        };
        (!ok).then_some(match self {
            Self::Sum => "int, long, float, double or decimal",
            Self::Min | Self::Max => "a number, string, boolean, date, time or timestamp",
            Self::Count | Self::CountDistinct(_) | Self::ApproxCountDistinct(_) => "long",
            Self::BoolAnd | Self::BoolOr => "boolean",
            Self::Avg(_) => "double",
            _ => "any primitive type",
        })
    }
}

/// One result column and its function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Aggregate {
    /// The result column.
    pub column: String,
    /// Its function.
    #[serde(flatten)]
    pub function: Function,
    /// Whether the function was set (`false`: the engine's default, `last`).
    pub explicit: bool,
}

/// The per-column functions of `engine` over `schema` (every column but the key and the
/// state columns; columns without a property take `last`), checked: a function on a key
/// column, a type the function cannot take, an unknown column, the `sum` engine with
/// nothing summed, a state column missing from the schema are errors.
pub(super) fn aggregates(
    engine: MergeEngine,
    schema: &Schema,
    key: &[String],
    props: &std::collections::HashMap<String, String>,
    table: &str,
) -> Result<Vec<Aggregate>> {
    let set: BTreeMap<&str, &str> = props
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(AGGREGATE_PREFIX).map(|c| (c, v.as_str())))
        .collect();
    if !matches!(engine, MergeEngine::Sum | MergeEngine::Aggregate) {
        if let Some((c, _)) = set.iter().next() {
            return Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{c} is set but {}={} has no per-column functions; \
                 use floe.merge-engine=aggregate (or sum)",
                MERGE_ENGINE,
                engine.name()
            )));
        }
        return Ok(vec![]);
    }
    for c in set.keys() {
        if key.iter().any(|k| k == c) {
            return Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{c}: '{c}' is part of the primary key; key columns identify \
                 the row and take no function"
            )));
        }
        if schema.field_by_name(c).is_none() {
            return Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{c} names no column of the schema"
            )));
        }
    }
    let mut out = Vec::new();
    let mut states: Vec<String> = Vec::new();
    for f in schema.as_struct().fields() {
        if key.contains(&f.name) || f.name.starts_with(STATE_PREFIX) {
            continue;
        }
        let (function, explicit) = match set.get(f.name.as_str()) {
            Some(s) => (Function::parse(s, &f.name, table)?, true),
            None => (Function::Last, false),
        };
        let Type::Primitive(p) = &*f.field_type else {
            return Err(Error::unsupported(format!(
                "table {table}: column '{}' is {}; merge engines fold primitive columns only",
                f.name, f.field_type
            )));
        };
        if let Some(types) = function.refuses(p) {
            return Err(Error::invalid(format!(
                "table {table}: {AGGREGATE_PREFIX}{}: {} cannot fold a {} column; its column must be {types}",
                f.name,
                function.name(),
                p
            )));
        }
        for (name, ty) in function.state_columns(&f.name) {
            let ok = schema
                .field_by_name(&name)
                .is_some_and(|s| *s.field_type == Type::Primitive(ty.clone()));
            if !ok {
                return Err(Error::invalid(format!(
                    "table {table}: column '{}' ({AGGREGATE_PREFIX}{}) keeps its state in column '{name}' ({ty}), \
                     which the schema lacks; create the table through floe, which adds it",
                    f.name, f.name
                )));
            }
            states.push(name);
        }
        out.push(Aggregate {
            column: f.name.clone(),
            function,
            explicit,
        });
    }
    for f in schema.as_struct().fields() {
        if f.name.starts_with(STATE_PREFIX) && !states.contains(&f.name) {
            return Err(Error::invalid(format!(
                "table {table}: column '{}' is named like a state column ({STATE_PREFIX}…) but no function keeps \
                 its state there; rename it",
                f.name
            )));
        }
    }
    if engine == MergeEngine::Sum && !out.iter().any(|a| a.function == Function::Sum) {
        return Err(Error::invalid(format!(
            "table {table}: the sum engine needs the columns to sum named ({AGGREGATE_PREFIX}<column>=sum). \
             floe does not sum every numeric column by default: columns that are really maxima, ids or \
             codes would be summed too — (1, a=5, mx=10) + (1, a=-5, mx=20) would become (1, 0, 30), and \
             the row would survive because mx is not 0; give such columns max, min or last"
        )));
    }
    Ok(out)
}

/// `schema` with the state columns of its functions (optional, new field ids) appended,
/// for a table being created with `props`; unchanged for other engines.
pub fn with_state_columns(
    schema: Schema,
    props: &std::collections::HashMap<String, String>,
) -> Result<Schema> {
    let engine = match props.get(MERGE_ENGINE) {
        None => return Ok(schema),
        Some(e) => MergeEngine::parse(e).ok_or_else(|| unknown_engine(e, "the new table"))?,
    };
    if !matches!(engine, MergeEngine::Aggregate | MergeEngine::Sum) {
        return Ok(schema);
    }
    let mut fields: Vec<Arc<NestedField>> = schema.as_struct().fields().to_vec();
    let mut next_id = schema.highest_field_id();
    let mut added = false;
    for f in schema.as_struct().fields() {
        let Some(s) = props.get(&format!("{AGGREGATE_PREFIX}{}", f.name)) else {
            continue;
        };
        let function = Function::parse(s, &f.name, "the new table")?;
        for (name, ty) in function.state_columns(&f.name) {
            if schema.field_by_name(&name).is_some() {
                continue;
            }
            next_id += 1;
            fields.push(Arc::new(NestedField::optional(
                next_id,
                &name,
                Type::Primitive(ty),
            )));
            added = true;
        }
    }
    if !added {
        return Ok(schema);
    }
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| Error::invalid(format!("adding state columns: {e}")))
}

/// The error for an unknown `floe.merge-engine` value.
pub(super) fn unknown_engine(value: &str, table: &str) -> Error {
    Error::unsupported(format!(
        "table {table}: {}={value} is not a merge engine; use replace, sum, aggregate, partial-update or first-row",
        MERGE_ENGINE
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_schema;
    use std::collections::HashMap;

    fn props(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn functions_parse_and_states_are_added_at_create() {
        let p = props(&[
            ("floe.merge-engine", "aggregate"),
            ("floe.aggregate.hits", "sum"),
            ("floe.aggregate.mx", "max"),
            ("floe.aggregate.avg_ms", "avg:ms"),
            ("floe.aggregate.users", "count_distinct:user_id"),
        ]);
        let s = parse_schema(
            "day date not null, hits long, mx double, avg_ms double, users long, note string",
        )
        .unwrap();
        let s = with_state_columns(s, &p).unwrap();
        for c in ["_floe_avg_ms_sum", "_floe_avg_ms_count", "_floe_users_set"] {
            assert!(s.field_by_name(c).is_some(), "{c}");
        }
        let a = aggregates(MergeEngine::Aggregate, &s, &["day".into()], &p, "t").unwrap();
        let f: Vec<(&str, &Function)> =
            a.iter().map(|a| (a.column.as_str(), &a.function)).collect();
        assert_eq!(
            f,
            vec![
                ("hits", &Function::Sum),
                ("mx", &Function::Max),
                ("avg_ms", &Function::Avg("ms".into())),
                ("users", &Function::CountDistinct("user_id".into())),
                ("note", &Function::Last),
            ]
        );
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let s = parse_schema("k long not null, a long, mx long, name string").unwrap();
        let key = ["k".to_string()];
        let err = |e: MergeEngine, kv: &[(&str, &str)]| {
            aggregates(e, &s, &key, &props(kv), "t")
                .unwrap_err()
                .to_string()
        };
        // Summing every numeric column by default is refused, explaining the pitfall.
        let e = err(MergeEngine::Sum, &[]);
        assert!(e.contains("mx is not 0") && e.contains("=sum"), "{e}");
        let e = err(MergeEngine::Aggregate, &[("floe.aggregate.k", "sum")]);
        assert!(e.contains("primary key"), "{e}");
        let e = err(MergeEngine::Aggregate, &[("floe.aggregate.name", "sum")]);
        assert!(e.contains("cannot fold a string column"), "{e}");
        let e = err(MergeEngine::Aggregate, &[("floe.aggregate.a", "median")]);
        assert!(e.contains("unknown function 'median'"), "{e}");
        let e = err(MergeEngine::Aggregate, &[("floe.aggregate.a", "avg")]);
        assert!(e.contains("needs its input column"), "{e}");
        let e = err(MergeEngine::Aggregate, &[("floe.aggregate.zz", "sum")]);
        assert!(e.contains("names no column"), "{e}");
        let e = err(MergeEngine::FirstRow, &[("floe.aggregate.a", "sum")]);
        assert!(e.contains("has no per-column functions"), "{e}");
        // A state column the schema lacks (a table not created by floe).
        let e = err(
            MergeEngine::Aggregate,
            &[("floe.aggregate.a", "count_distinct:u")],
        );
        assert!(e.contains("_floe_a_set"), "{e}");
        assert!(aggregates(
            MergeEngine::Sum,
            &s,
            &key,
            &props(&[("floe.aggregate.a", "sum")]),
            "t"
        )
        .is_ok());
    }
}
