//! Sink checkpoints: which batch of a sink a table holds last.

use super::batch::UpsertOptions;
use crate::error::{Error, Result};
use crate::spec::keyed::{check_sink_id, sink_checkpoint_key};
use crate::table::Table;

/// The sink and checkpoint of `options`, checked.
pub(super) fn sink_of(options: &UpsertOptions) -> Result<Option<(&str, i64)>> {
    match (&options.sink_id, options.checkpoint) {
        (Some(s), Some(n)) => {
            check_sink_id(s)?;
            Ok(Some((s.as_str(), n)))
        }
        (None, Some(_)) => Err(Error::invalid(
            "a checkpoint needs the sink id it belongs to (each sink counts its own checkpoints)",
        )),
        (Some(s), None) => {
            check_sink_id(s)?;
            Ok(None)
        }
        (None, None) => Ok(None),
    }
}

/// The last checkpoint committed to `table` for sink `sink`: the table property, else the
/// newest snapshot summary on `main` that carries one.
pub fn committed_checkpoint(table: &Table, sink: &str) -> Result<Option<i64>> {
    let key = sink_checkpoint_key(sink);
    let parse = |v: &String| {
        v.parse::<i64>().map_err(|_| {
            Error::corrupt(format!("table {}: {key}={v} is not a number", table.name()))
        })
    };
    if let Some(v) = table.metadata().properties().get(&key) {
        return parse(v).map(Some);
    }
    let md = table.metadata();
    let mut cur = md.current_snapshot();
    while let Some(s) = cur {
        if let Some(v) = s.summary().additional_properties.get(&key) {
            return parse(v).map(Some);
        }
        cur = s.parent_snapshot_id().and_then(|p| md.snapshot_by_id(p));
    }
    Ok(None)
}
