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

/// The last checkpoint committed to `table` for sink `sink`: the table property
/// `floe.sink.<sink>.checkpoint`, which every sink commit sets with its snapshot and a
/// rollback rewinds to the snapshot it makes current. Absent: the sink has committed nothing
/// (or its checkpoint was unset on purpose to start it over).
pub fn committed_checkpoint(table: &Table, sink: &str) -> Result<Option<i64>> {
    let key = sink_checkpoint_key(sink);
    table
        .metadata()
        .properties()
        .get(&key)
        .map(|v| {
            v.trim().parse::<i64>().map_err(|_| {
                Error::corrupt(format!(
                    "table {}: {key}={v} is not a number; set it to the sink's last committed \
                     checkpoint (`floe alter {} --set {key}=N`) or unset it",
                    table.name(),
                    table.name()
                ))
            })
        })
        .transpose()
}
