//! A distributed upsert into a keyed table whose merge engine folds rows (`sum`,
//! `aggregate`, `partial-update`, `first-row`), in two rounds of tasks with a shuffle by key
//! between them, so that no row passes through the driver:
//!
//! 1. each task folds its share of the changes into one row per key with the functions'
//!    states ([`super::pre_fold`]; a `partial-update` ordered by a version column keeps the
//!    rows as they are) and writes them split by a hash of the key into N shard files
//!    ([`stage_shards`]);
//! 2. each shard task reads its shard of every task's files (in task order: arrival order),
//!    merges them with the stored rows of its keys and writes the keys' new rows as data
//!    files of the table with their key list ([`stage_merged_upsert`]; nothing committed);
//! 3. the driver commits every shard at once ([`super::commit_staged_upserts`]): the new rows
//!    replace the stored ones, but only onto the state of the table the shards merged with
//!    (else a conflict: the shards are merged again onto the new state).

use arrow::row::{RowConverter, SortField};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use serde::{Deserialize, Serialize};

use super::batch::{ChangeBatch, UpsertOptions};
use super::fold::{key_converter, key_fields, key_rows, Columns, Folded};
use super::staged::{
    get_parquet, put_staged_parquet, stage_prepared, MergedOnto, StagedUpsert, Tally,
};
use crate::error::{Error, Result};
use crate::spec::keyed::{KeyedSpec, MergeEngine};
use crate::table::Table;
use crate::txn::StagingJob;

/// The most shards a distributed upsert is split into.
pub const MAX_SHARDS: usize = 4096;

/// One task's share of a distributed upsert into a table whose engine folds rows, split by
/// key into shard files by [`crate::pending::stage_shuffle`] (JSON-serializable, to hand from a worker to the
/// driver).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StagedShards {
    /// The table's name (`ns.table`).
    pub table: String,
    /// Whether the shard files hold folded rows (the table's columns, states included) or
    /// the changes as given (a `partial-update` ordered by a version column).
    pub pre_folded: bool,
    /// Per shard: the Parquet files holding its rows, in arrival order (none: no key of the
    /// task fell in it; several: the changes as given came in parts of differing columns).
    pub shards: Vec<Vec<String>>,
    /// Per shard: the changes of the task's share whose key fell in it.
    pub input_rows: Vec<u64>,
}

/// Splits `changes` (a task's share, in arrival order) into `shards` files by a hash of the
/// key, folded into one row per key first where the engine allows it ([`super::pre_fold`]);
/// every name is tagged with `job`. Nothing is committed. Only the engines that fold rows
/// (the replace engine stages its rows directly: [`super::stage_upsert`]).
pub(crate) async fn stage_shards(
    table: &Table,
    changes: &ChangeBatch,
    shards: usize,
    job: &StagingJob,
) -> Result<StagedShards> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    if spec.engine == MergeEngine::Replace {
        return Err(Error::unsupported(format!(
            "table {name} uses the replace engine: a distributed upsert's task stages its rows \
             directly (stage_upsert)"
        )));
    }
    if shards == 0 || shards > MAX_SHARDS {
        return Err(Error::invalid(format!(
            "{shards} shards: a distributed upsert takes 1 to {MAX_SHARDS}"
        )));
    }
    let hasher = KeyHasher::of(table, &spec)?;
    let mut input_rows = vec![0u64; shards];
    for (source, b) in &changes.parts {
        for s in hasher.shards(b, shards, source)? {
            input_rows[s as usize] += 1;
        }
    }
    let pre_folded = !(spec.engine == MergeEngine::PartialUpdate && spec.version.is_some());
    let parts = match pre_folded {
        true => vec![super::pre_fold(table, changes).await?],
        false => changes.parts.iter().map(|(_, b)| b.clone()).collect(),
    };
    let mut written: Vec<Vec<String>> = vec![Vec::new(); shards];
    for rows in &parts {
        let mut of_shard: Vec<Vec<u32>> = vec![Vec::new(); shards];
        for (r, s) in hasher
            .shards(rows, shards, "the task's rows")?
            .into_iter()
            .enumerate()
        {
            of_shard[s as usize].push(r as u32);
        }
        for (s, (files, idx)) in written.iter_mut().zip(of_shard).enumerate() {
            if idx.is_empty() {
                continue;
            }
            let part = arrow_select::take::take_record_batch(rows, &UInt32Array::from(idx))?;
            match put_staged_parquet(table, &format!("shard{s}"), job, &part).await {
                Ok(location) => files.push(location),
                Err(e) => {
                    let staged: Vec<String> = written.iter().flatten().cloned().collect();
                    discard_locations(table, &staged).await;
                    return Err(
                        e.context(format!("staging shard {s} of an upsert of table {name}"))
                    );
                }
            }
        }
    }
    Ok(StagedShards {
        table: name,
        pre_folded,
        shards: written,
        input_rows,
    })
}

/// Merges shard `shard` of every task's share (`tasks`, in task order) with the stored rows
/// of its keys in `table`'s current snapshot, and writes the keys' new rows as data files of
/// the table with their key list, tagged with `job`; commits nothing. The result, committed
/// with the other shards' by [`super::commit_staged_upserts`], commits onto that snapshot
/// only.
pub(crate) async fn stage_merged_upsert(
    table: &Table,
    tasks: &[StagedShards],
    shard: usize,
    job: &StagingJob,
) -> Result<StagedUpsert> {
    let name = table.name();
    let mut changes = ChangeBatch::new();
    let mut input_rows = 0u64;
    let pre_folded = tasks.first().is_none_or(|t| t.pre_folded);
    for (i, t) in tasks.iter().enumerate() {
        if t.table != name {
            return Err(Error::invalid(format!(
                "task {} staged shards of table {}, not {name}",
                i + 1,
                t.table
            )));
        }
        if t.pre_folded != pre_folded || t.shards.len() != tasks[0].shards.len() {
            return Err(Error::invalid(format!(
                "task {} of an upsert into table {name} split its rows otherwise than the first \
                 (was the table changed between tasks?)",
                i + 1
            )));
        }
        let (Some(locations), Some(&n)) = (t.shards.get(shard), t.input_rows.get(shard)) else {
            return Err(Error::invalid(format!(
                "shard {shard} does not exist: task {} split its rows into {} shards",
                i + 1,
                t.shards.len()
            )));
        };
        input_rows += n;
        for location in locations {
            for b in get_parquet(table, location, "staged shard").await? {
                changes.push(format!("shard {shard} of task {} ('{location}')", i + 1), b);
            }
        }
    }
    let onto = MergedOnto {
        snapshot_id: table.metadata().current_snapshot_id(),
    };
    let options = UpsertOptions::default().with_pre_folded(pre_folded);
    let m = super::merge::merged_rows(table, &changes, &options).await?;
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    let cols = Columns::of(&spec, &m.schema)?;
    let upserts = m.rows.as_ref().map_or(0, |r| r.num_rows());
    let rows = arrow_select::concat::concat_batches(&m.schema, m.rows.iter().chain([&m.removed]))?;
    let deleted: BooleanArray = (0..rows.num_rows()).map(|r| Some(r >= upserts)).collect();
    let conv = key_converter(&m.schema, &cols.key)?;
    let prep = super::apply::Prepared {
        spec,
        write_table: table.clone(),
        new_schema: None,
        added_columns: vec![],
        key_fields: key_fields(&m.schema, &cols),
        rows: key_rows(&conv, &rows, &cols.key)?,
        cols,
        conv,
        folded: Folded {
            rows,
            versions: None,
            deleted,
        },
    };
    let counts = Tally {
        input_rows,
        keys: m.keys,
        ignored: m.counts.ignored,
    };
    stage_prepared(table, &prep, job, counts, Some(onto)).await
}

async fn discard_locations(table: &Table, locations: &[String]) {
    for l in locations {
        let _ = table.storage().delete(l).await;
    }
}

/// Hashes a row's key, cast to the table's key column types, to its shard: the same key
/// goes to the same shard in every task and process (FNV-1a over Arrow's row encoding).
#[derive(Debug)]
pub(super) struct KeyHasher {
    /// The key columns and their types in the table.
    key: Vec<(String, arrow_schema::DataType)>,
    conv: RowConverter,
}

impl KeyHasher {
    pub(super) fn of(table: &Table, spec: &KeyedSpec) -> Result<Self> {
        let schema = table.arrow_schema()?;
        let key = spec
            .key
            .iter()
            .map(|k| {
                let f = schema.field_with_name(k).map_err(|_| {
                    Error::invalid(format!("key column '{k}' is not in table {}", table.name()))
                })?;
                Ok((k.clone(), f.data_type().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let conv = RowConverter::new(key.iter().map(|(_, t)| SortField::new(t.clone())).collect())?;
        Ok(Self { key, conv })
    }

    /// The shard of each row of `batch` (`source` names it in errors).
    pub(super) fn shards(
        &self,
        batch: &RecordBatch,
        shards: usize,
        source: &str,
    ) -> Result<Vec<u32>> {
        let cols = self
            .key
            .iter()
            .map(|(k, t)| {
                let c = batch.column_by_name(k).ok_or_else(|| {
                    Error::invalid(format!(
                        "{source}: column '{k}' is missing; every change needs its key"
                    ))
                })?;
                if let Some(r) = (0..c.len()).find(|&r| c.is_null(r)) {
                    return Err(Error::invalid(format!(
                        "row {} of {source}: key column '{k}' is null; every change needs its key",
                        r + 1
                    )));
                }
                let c: ArrayRef = match c.data_type() == t {
                    true => c.clone(),
                    false => arrow_cast::cast(c, t).map_err(|e| {
                        Error::invalid(format!("{source}: key column '{k}' is not a {t}: {e}"))
                    })?,
                };
                Ok(c)
            })
            .collect::<Result<Vec<_>>>()?;
        let rows = self.conv.convert_columns(&cols)?;
        Ok(rows
            .iter()
            .map(|r| (fnv1a(r.as_ref()) % shards as u64) as u32)
            .collect())
    }
}

/// The 64-bit FNV-1a hash of `bytes` (stable across processes and versions).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function() {
        // Test vectors of the FNV-1a 64-bit hash.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
