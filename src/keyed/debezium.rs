//! Debezium JSON change events as keyed changes: one event per line, schema-less (the
//! payload itself) or with-schema (`{"schema": …, "payload": …}`) envelopes. `op` `c`
//! (create), `r` (snapshot read) and `u` (update) upsert the `after` row; `d` deletes the
//! key of the `before` row. The version is `source.lsn`, else `ts_ms`; a Kafka tombstone
//! (a null payload) is skipped.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::spec::keyed::KeyedSpec;
use crate::table::Table;

/// Decodes the events in `text` (read from `source`, for messages) into rows of `table`'s
/// columns, with its version and delete columns set from each event.
pub fn decode(text: &str, source: &str, table: &Table) -> Result<RecordBatch> {
    decode_lines(text, source, 1, table)
}

/// [`decode`] for lines that start at line `first_line` of `source` (the numbers errors give).
pub fn decode_lines(
    text: &str,
    source: &str,
    first_line: u64,
    table: &Table,
) -> Result<RecordBatch> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    let schema = table.arrow_schema()?;
    let at = |n: u64, why: String| Error::invalid(format!("line {n} of {source}: {why}"));
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + first_line;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(line).map_err(|e| at(n, format!("not a JSON object ({e})")))?;
        let payload = match v.get("payload") {
            Some(p) if v.get("schema").is_some() || p.is_object() || p.is_null() => p.clone(),
            _ => v,
        };
        if payload.is_null() {
            continue;
        }
        let op = payload.get("op").and_then(Value::as_str).ok_or_else(|| {
            at(
                n,
                "no \"op\" field; expected a Debezium change event".into(),
            )
        })?;
        let obj = |k: &str| payload.get(k).and_then(Value::as_object).cloned();
        let (before, after) = (obj("before"), obj("after"));
        if before.is_none() && after.is_none() {
            return Err(at(
                n,
                format!("op '{op}' has neither \"before\" nor \"after\""),
            ));
        }
        let (mut row, deleted): (Map<String, Value>, bool) = match op {
            "c" | "r" | "u" => (
                after.ok_or_else(|| at(n, format!("op '{op}' has no \"after\" row")))?,
                false,
            ),
            "d" => (
                before.ok_or_else(|| at(n, "op 'd' has no \"before\" row".into()))?,
                true,
            ),
            other => return Err(at(n, format!("op '{other}' is not c, r, u or d"))),
        };
        for k in row.keys() {
            if schema.field_with_name(k).is_err() {
                return Err(at(
                    n,
                    format!("column '{k}' is not in the schema of table {name}; add it to the table first"),
                ));
            }
        }
        if let Some(vc) = &spec.version {
            let version = payload
                .get("source")
                .and_then(|s| s.get("lsn"))
                .filter(|l| l.is_number())
                .or_else(|| payload.get("ts_ms").filter(|t| t.is_number()));
            if let Some(version) = version {
                row.insert(vc.clone(), version.clone());
            }
        }
        match &spec.delete {
            Some(dc) => {
                let boolean = schema
                    .field_with_name(dc)
                    .map(|f| f.data_type() == &DataType::Boolean)
                    .unwrap_or(false);
                let flag = if boolean {
                    Value::Bool(deleted)
                } else {
                    Value::from(deleted as i64)
                };
                row.insert(dc.clone(), flag);
            }
            None if deleted => {
                return Err(at(
                    n,
                    format!(
                        "op 'd' needs a delete column; table {name} has none (set floe.merge.delete-column)"
                    ),
                ))
            }
            None => {}
        }
        lines.push(Value::Object(row).to_string());
    }
    // Read with every column nullable: required columns are checked when the rows are
    // conformed to the table (a delete's `before` may carry only the key).
    let loose = Arc::new(ArrowSchema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let body = lines.join("\n");
    let reader = arrow::json::ReaderBuilder::new(loose.clone())
        .with_batch_size(65536)
        .build(std::io::Cursor::new(body.into_bytes()))
        .map_err(|e| Error::invalid(format!("{source}: {e}")))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::invalid(format!("{source}: {e}")))?;
    Ok(arrow_select::concat::concat_batches(&loose, &batches)?)
}
