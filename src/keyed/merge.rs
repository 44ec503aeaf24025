//! Applying one batch to a keyed table whose merge engine folds rows (`sum`, `aggregate`,
//! `partial-update`, `first-row`): the batch's rows become partial states
//! ([`super::aggregate`]), the stored rows of its keys are read (the files pruned by the
//! keys' range), and each key's stored row and incoming rows are merged into its new row,
//! which replaces the stored one (deletion vectors / position deletes as
//! `write.merge.mode` says, or rewritten files). `first-row` leaves a stored row in place and
//! ignores the key's incoming rows.

use arrow::row::RowConverter;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::expr::Predicate;

use super::aggregate::{fold_states, partial_states, Inputs};
use super::batch::{ChangeBatch, UpsertOptions};
use super::changer::Counts;
use super::evolve::{evolve, relaxed};
use super::fold::{key_converter, key_rows, versions_of, Columns, KeyMap};
use super::state::MergeState;
use crate::error::{Error, Result};
use crate::scan::{Scan, SnapshotSelector};
use crate::spec::keyed::{KeyedSpec, MergeEngine};
use crate::spec::Schema;
use crate::table::Table;
use crate::txn::{stage, stage_known, RowChanger, RowLevelKind, Staged};
use crate::write::Conformer;

/// A batch decided against the table, its files staged.
pub(super) struct MergeDecided {
    pub counts: Counts,
    pub keys: u64,
    pub staged: Staged,
    pub new_schema: Option<(i32, Schema)>,
    pub added_columns: Vec<String>,
    /// With a writer's state: what it needs to follow the commit.
    pub follow: Option<Follow>,
}

/// A batch's rows as partial states in the (relaxed) schema of the table they are written to.
struct Partials {
    /// The table written (with the batch's new columns when the schema evolves).
    write_table: Table,
    spec: KeyedSpec,
    /// The table's schema as written (required columns).
    strict: SchemaRef,
    /// The partial states' schema (the table's, relaxed).
    schema: SchemaRef,
    rows: RecordBatch,
    new_schema: Option<(i32, Schema)>,
    added_columns: Vec<String>,
}

/// `changes` as partial states of `table` ([`super::aggregate`]). With `pre_folded`, the
/// changes are rows [`pre_fold`] made (the table's columns, states included): conformed, not
/// converted.
fn partials(table: &Table, changes: &ChangeBatch, options: &UpsertOptions) -> Result<Partials> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    // Input columns that feed functions without being table columns leave the batch first.
    let schema = table.metadata().current_schema();
    let input_names: Vec<&str> = spec
        .aggregates
        .iter()
        .filter_map(|a| a.function.input())
        .filter(|i| schema.field_by_name(i).is_none())
        .collect();
    let mut stripped = ChangeBatch::new();
    let mut inputs: Vec<Inputs> = Vec::new();
    for (source, b) in &changes.parts {
        if options.pre_folded {
            stripped.push(source.clone(), b.clone());
            inputs.push(Vec::new());
            continue;
        }
        let mut keep = Vec::new();
        let mut taken: Inputs = Vec::new();
        for (i, f) in b.schema().fields().iter().enumerate() {
            if input_names.contains(&f.name().as_str()) {
                taken.push((f.name().clone(), b.column(i).clone()));
            } else if is_state_column(&spec, f.name()) {
                return Err(Error::invalid(format!(
                    "{source}: column '{}' is a state column floe keeps for table {name}; batches carry \
                     the inputs of functions, not their states",
                    f.name()
                )));
            } else {
                keep.push(i);
            }
        }
        stripped.push(source.clone(), b.project(&keep)?);
        inputs.push(taken);
    }
    let evolve_schema = options.evolve_schema && !options.pre_folded;
    let (write_table, new_schema, added_columns) = evolve(table, &stripped, evolve_schema)?;
    let spec = KeyedSpec::of(write_table.metadata(), &name)?;
    let strict = write_table.arrow_schema()?;
    let conformer = Conformer::new(
        &relaxed(write_table.metadata().current_schema(), &spec)?,
        &name,
    )?;
    let schema = conformer.schema().clone();
    let mut next_row: std::collections::HashMap<&str, u64> = Default::default();
    let mut partials = Vec::with_capacity(stripped.parts.len());
    for ((source, b), taken) in stripped.parts.iter().zip(&inputs) {
        let first = next_row
            .entry(source.as_str())
            .or_insert_with(|| stripped.first_row(source));
        let first_row = *first;
        *first += b.num_rows() as u64;
        let conformed = conformer
            .conform_from(b, source, first_row)
            .map_err(|e| e.context(source))?;
        check_keys(&spec, &conformed, source, first_row)?;
        partials.push(match options.pre_folded {
            true => conformed,
            false => partial_states(&spec, &schema, &conformed, taken, source)?,
        });
    }
    let rows = arrow_select::concat::concat_batches(&schema, &partials)?;
    Ok(Partials {
        write_table,
        spec,
        strict,
        schema,
        rows,
        new_schema,
        added_columns,
    })
}

/// Folds a share of a batch (a distributed task's rows, in arrival order) into one row per
/// key in the table's columns, the functions' states included, without reading the table:
/// what [`super::upsert`] with [`UpsertOptions::pre_folded`] takes. Merging is associative,
/// so the tasks' rows folded in task order equal the whole batch folded at once. The
/// `replace` engine stages instead ([`crate::pending::stage_upsert`]); `partial-update` with a version
/// column is refused (a row folded from versions 1 and 5 cannot later take version 3's
/// values in between).
pub async fn pre_fold(table: &Table, changes: &ChangeBatch) -> Result<RecordBatch> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    match (spec.engine, &spec.version) {
        (MergeEngine::Replace, _) => {
            return Err(Error::unsupported(format!(
                "table {name} uses the replace engine: a task stages its upserts (stage_upsert) \
                 instead of folding them"
            )))
        }
        (MergeEngine::PartialUpdate, Some(v)) => {
            return Err(Error::unsupported(format!(
                "table {name} orders partial updates by version column '{v}': folding a share of \
                 the changes apart from the others would lose the order; apply them in one upsert"
            )))
        }
        _ => {}
    }
    let p = partials(table, changes, &UpsertOptions::default())?;
    let cols = Columns::of(&p.spec, &p.schema)?;
    let conv = key_converter(&p.schema, &cols.key)?;
    let keys = key_rows(&conv, &p.rows, &cols.key)?;
    Ok(fold_states(&p.spec, &p.rows, &keys, None, &name)?.rows)
}

/// A batch's rows as partial states and the changer that merges them with the stored rows
/// of their keys.
struct Setup {
    write_table: Table,
    new_schema: Option<(i32, Schema)>,
    added_columns: Vec<String>,
    /// The partial states' schema, their key columns and the keys' encoding.
    schema: SchemaRef,
    cols: Columns,
    conv: RowConverter,
    /// The row where each key first appears, in the order keys are numbered.
    firsts: Vec<u32>,
    /// Prunes the files that cannot hold the batch's keys.
    filter: Option<Predicate>,
    changer: MergeChanger,
}

fn setup(table: &Table, changes: &ChangeBatch, options: &UpsertOptions) -> Result<Setup> {
    let name = table.name();
    let Partials {
        write_table,
        spec,
        strict,
        schema,
        rows: partials,
        new_schema,
        added_columns,
    } = partials(table, changes, options)?;
    let cols = Columns::of(&spec, &schema)?;
    let conv = key_converter(&schema, &cols.key)?;
    let keys = key_rows(&conv, &partials, &cols.key)?;
    let mut key_index: KeyMap<Box<[u8]>, u32> = KeyMap::default();
    let mut firsts: Vec<u32> = Vec::new();
    for r in 0..keys.num_rows() {
        let next = key_index.len() as u32;
        key_index
            .entry(keys.row(r).as_ref().into())
            .or_insert_with(|| {
                firsts.push(r as u32);
                next
            });
    }
    let n_keys = key_index.len();
    // A single integer key is matched by value (no row encoding of every stored row).
    let long_keys = (cols.key.len() == 1 && schema.field(cols.key[0]).data_type().is_integer())
        .then(|| -> Result<KeyMap<i64, u32>> {
            let k = arrow_cast::cast(partials.column(cols.key[0]), &arrow_schema::DataType::Int64)?;
            let k = k.as_primitive::<arrow_array::types::Int64Type>();
            let mut m = KeyMap::with_capacity_and_hasher(n_keys, Default::default());
            for r in 0..k.len() {
                let next = m.len() as u32;
                m.entry(k.value(r)).or_insert(next);
            }
            Ok(m)
        })
        .transpose()?;
    let filter = super::fold::key_filter(&spec.key[0], partials.column(cols.key[0]));
    let changer = MergeChanger {
        spec: spec.clone(),
        schema: schema.clone(),
        strict,
        conv: key_converter(
            &write_table.arrow_schema()?,
            &Columns::of(&spec, &write_table.arrow_schema()?)?.key,
        )?,
        keys: key_index,
        long_keys,
        seen: vec![false; n_keys],
        stored: Vec::new(),
        partials,
        table: name,
        counts: Counts::default(),
        removed: None,
    };
    Ok(Setup {
        write_table,
        new_schema,
        added_columns,
        schema,
        cols,
        conv,
        firsts,
        filter,
        changer,
    })
}

/// A batch merged with the stored rows of its keys, nothing written.
pub(super) struct Merged {
    /// The partial states' schema (the table's, relaxed).
    pub schema: SchemaRef,
    /// The keys' new rows (keys whose stored row stays, and rows folding to zero, left out).
    pub rows: Option<RecordBatch>,
    /// Keys whose stored row goes (their rows folded to zero), as rows of `schema`.
    pub removed: RecordBatch,
    pub counts: Counts,
    /// Distinct keys in the batch.
    pub keys: u64,
}

/// Merges `changes` with the stored rows of their keys in `table`'s current snapshot (read
/// by a scan pruned by the keys' range) and returns each changed key's new row, staging
/// nothing: a distributed upsert's shard ([`super::stage_merged_upsert`]).
pub(super) async fn merged_rows(
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
) -> Result<Merged> {
    let Setup {
        new_schema,
        schema,
        filter,
        mut changer,
        ..
    } = setup(table, changes, options)?;
    if new_schema.is_some() {
        return Err(Error::unsupported(format!(
            "table {}: a distributed upsert does not evolve the schema",
            table.name()
        )));
    }
    if let Some(id) = table.metadata().current_snapshot_id() {
        let mut scan = Scan::new(table)
            .snapshot(SnapshotSelector::Id(id))
            .in_current_schema();
        if let Some(f) = filter {
            scan = scan.prune(f);
        }
        let plan = scan.plan().await?;
        let mut stored = scan.read(plan)?;
        while let Some(b) = stored.try_next().await? {
            changer.change(&b)?;
        }
    }
    let rows = changer.finish()?.into_iter().next();
    let removed = match changer.removed.take() {
        Some(r) => r,
        None => RecordBatch::new_empty(schema.clone()),
    };
    Ok(Merged {
        schema,
        rows,
        removed,
        counts: changer.counts,
        keys: changer.seen.len() as u64,
    })
}

/// Folds `changes` into `table`'s stored rows and stages the result. With `state` (a
/// writer's), the stored rows come from it (built first when it does not reflect `table`);
/// `lookup` says how they were found.
pub(super) async fn decide(
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
    state: Option<&mut Option<MergeState>>,
    lookup: &mut &'static str,
) -> Result<MergeDecided> {
    let Setup {
        write_table,
        new_schema,
        added_columns,
        schema,
        cols,
        conv,
        firsts,
        filter,
        mut changer,
    } = setup(table, changes, options)?;
    let n_keys = changer.seen.len();
    // A writer's state (not across a schema change) finds the stored rows without a read.
    let slot = match state {
        Some(slot) if new_schema.is_none() => Some(slot),
        Some(slot) => {
            *slot = None;
            None
        }
        None => None,
    };
    let Some(slot) = slot else {
        let staged = stage(&write_table, RowLevelKind::Merge, filter, &mut changer).await?;
        return Ok(MergeDecided {
            counts: changer.counts,
            keys: n_keys as u64,
            staged,
            new_schema,
            added_columns,
            follow: None,
        });
    };
    let st = match slot.take() {
        Some(s) if s.is_current(table, &schema) => {
            *lookup = "state";
            s
        }
        _ => {
            *lookup = "state-built";
            MergeState::build(table, &schema, &cols.key, &conv).await?
        }
    };
    let mut st = st;
    // The batch's keys in the order they are numbered.
    let firsts = arrow_array::UInt32Array::from(firsts);
    let distinct = cols
        .key
        .iter()
        .map(|&k| {
            Ok(arrow_select::take::take(
                changer.partials.column(k),
                &firsts,
                None,
            )?)
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let (found, stored, mut removed) = st.stored(&distinct, &conv)?;
    for &i in &found {
        changer.seen[i] = true;
    }
    if changer.spec.engine == MergeEngine::FirstRow {
        // The stored row stays; the key's changes are ignored.
        removed.clear();
        st.keep_found();
    } else {
        changer.stored.push(stored);
    }
    *slot = Some(st);
    let rows = changer.finish()?;
    let staged = stage_known(&write_table, RowLevelKind::Merge, removed, rows.clone()).await?;
    Ok(MergeDecided {
        counts: changer.counts,
        keys: n_keys as u64,
        staged,
        new_schema,
        added_columns,
        follow: Some(Follow {
            conv,
            written: rows,
        }),
    })
}

/// What a writer's [`MergeState`] needs to follow the batch's commit.
pub(super) struct Follow {
    conv: arrow::row::RowConverter,
    written: Vec<RecordBatch>,
}

impl Follow {
    /// Brings `state` to `table`, the batch committed (its data files `added`).
    pub(super) async fn apply(
        &self,
        state: &mut MergeState,
        table: &Table,
        added: &[String],
    ) -> Result<()> {
        state.follow(table, &self.conv, &self.written, added).await
    }
}

fn is_state_column(spec: &KeyedSpec, name: &str) -> bool {
    spec.aggregates.iter().any(|a| {
        a.function
            .state_columns(&a.column)
            .iter()
            .any(|(n, _)| n == name)
    })
}

/// Every change needs its key (and its version, when the table orders by one).
fn check_keys(spec: &KeyedSpec, b: &RecordBatch, source: &str, first_row: u64) -> Result<()> {
    for k in spec.key.iter().chain(&spec.version) {
        let Some(c) = b.column_by_name(k) else {
            return Err(Error::invalid(format!(
                "{source}: column '{k}' is missing; every change needs its key and version"
            )));
        };
        if let Some(r) = (0..c.len()).find(|&r| c.is_null(r)) {
            return Err(Error::invalid(format!(
                "row {} of {source}: column '{k}' is null; every change needs its key and version",
                first_row + r as u64
            )));
        }
    }
    Ok(())
}

/// Collects the stored rows of the batch's keys (removing them, but for `first-row`), then
/// merges them with the batch.
struct MergeChanger {
    spec: KeyedSpec,
    /// The partial states' schema (the table's, relaxed).
    schema: SchemaRef,
    /// The table's schema as written (required columns).
    strict: SchemaRef,
    /// Encodes the stored rows' keys.
    conv: RowConverter,
    /// Encoded key → its number (first appearance in the batch).
    keys: KeyMap<Box<[u8]>, u32>,
    /// The same numbers by value, for a single integer key.
    long_keys: Option<KeyMap<i64, u32>>,
    /// Per key: whether a stored row was seen.
    seen: Vec<bool>,
    /// The stored rows of the batch's keys, in the partial states' schema.
    stored: Vec<RecordBatch>,
    partials: RecordBatch,
    table: String,
    counts: Counts,
    /// Set by `finish`: the stored keys whose rows folded to zero (they are removed).
    removed: Option<RecordBatch>,
}

impl MergeChanger {
    /// `batch`'s rows `idx` in the partial states' schema (columns by name; a column the
    /// stored rows lack — added since — is null).
    fn conform_stored(&self, batch: &RecordBatch, idx: &[u32]) -> Result<RecordBatch> {
        let idx = arrow_array::UInt32Array::from(idx.to_vec());
        let cols = self
            .schema
            .fields()
            .iter()
            .map(|f| match batch.column_by_name(f.name()) {
                Some(c) => {
                    let c = arrow_select::take::take(c, &idx, None)?;
                    Ok(if c.data_type() == f.data_type() {
                        c
                    } else {
                        arrow_cast::cast(&c, f.data_type())?
                    })
                }
                None => Ok(arrow_array::new_null_array(f.data_type(), idx.len())),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

impl RowChanger for MergeChanger {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        let key_cols =
            self.spec
                .key
                .iter()
                .map(|k| {
                    batch.column_by_name(k).cloned().ok_or_else(|| {
                        Error::io(format!("the scan did not return key column '{k}'"))
                    })
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
        let numbers: Vec<Option<u32>> = match &self.long_keys {
            Some(m) => {
                let k = arrow_cast::cast(&key_cols[0], &arrow_schema::DataType::Int64)?;
                let k = k.as_primitive::<arrow_array::types::Int64Type>();
                (0..k.len()).map(|r| m.get(&k.value(r)).copied()).collect()
            }
            None => {
                let rows = self.conv.convert_columns(&key_cols)?;
                (0..rows.num_rows())
                    .map(|r| self.keys.get(rows.row(r).as_ref()).copied())
                    .collect()
            }
        };
        let mut remove = vec![false; batch.num_rows()];
        let mut take = Vec::new();
        for (r, rm) in remove.iter_mut().enumerate() {
            let Some(k) = numbers[r] else {
                continue;
            };
            if std::mem::replace(&mut self.seen[k as usize], true) {
                return Err(Error::invalid(format!(
                    "table {} holds a key of the batch in more than one live row (was it written by an engine \
                     that does not keep keys unique?); nothing was committed: remove the duplicates first",
                    self.table
                )));
            }
            if self.spec.engine != MergeEngine::FirstRow {
                *rm = true;
                take.push(r as u32);
            }
        }
        if !take.is_empty() {
            let s = self.conform_stored(batch, &take)?;
            self.stored.push(s);
        }
        Ok((BooleanArray::from(remove), None))
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let mut all = std::mem::take(&mut self.stored);
        let n_stored: usize = all.iter().map(|b| b.num_rows()).sum();
        all.push(self.partials.clone());
        let rows = arrow_select::concat::concat_batches(&self.schema, &all)?;
        let cols = Columns::of(&self.spec, &self.schema)?;
        let conv = key_converter(&self.schema, &cols.key)?;
        let keys = key_rows(&conv, &rows, &cols.key)?;
        let versions = match cols.version {
            Some(v) => Some(versions_of(rows.column(v))?),
            None => None,
        };
        let merged = fold_states(&self.spec, &rows, &keys, versions.as_ref(), &self.table)?;
        let mut keep = Vec::with_capacity(merged.groups.len());
        let mut removed = Vec::new();
        let mut c = Counts::default();
        for (g, members) in merged.groups.iter().enumerate() {
            // The stored rows come first in `rows`, but a version column reorders members.
            let had_stored = members.iter().any(|&m| (m as usize) < n_stored);
            // first-row: a key with a stored row keeps it (it was not read for merging).
            let first_row_kept = self.spec.engine == MergeEngine::FirstRow && {
                let key = keys.row(members[0] as usize);
                self.keys
                    .get(key.as_ref())
                    .is_some_and(|&k| self.seen[k as usize])
            };
            if first_row_kept {
                c.ignored += 1;
            } else if merged.zero[g] {
                if had_stored {
                    c.deleted += 1;
                    removed.push(g as u32);
                } else {
                    c.ignored += 1;
                }
            } else {
                if had_stored {
                    c.updated += 1;
                } else {
                    c.inserted += 1;
                }
                keep.push(g as u32);
            }
        }
        self.counts = c;
        self.removed = Some(arrow_select::take::take_record_batch(
            &merged.rows,
            &arrow_array::UInt32Array::from(removed),
        )?);
        if keep.is_empty() {
            return Ok(vec![]);
        }
        let out = arrow_select::take::take_record_batch(
            &merged.rows,
            &arrow_array::UInt32Array::from(keep),
        )?;
        for (i, f) in self.strict.fields().iter().enumerate() {
            if f.is_nullable() {
                continue;
            }
            let c = out.column(i);
            if let Some(r) = (0..c.len()).find(|&r| c.is_null(r)) {
                let key: Vec<String> = cols
                    .key
                    .iter()
                    .map(|&k| {
                        arrow_cast::display::ArrayFormatter::try_new(
                            out.column(k).as_ref(),
                            &Default::default(),
                        )
                        .map(|f| f.value(r).to_string())
                        .unwrap_or_default()
                    })
                    .collect();
                return Err(Error::invalid(format!(
                    "table {}: required column '{}' is null in the merged row of key ({}); nothing was committed \
                     (give it a value in the key's first change)",
                    self.table,
                    f.name(),
                    key.join(", ")
                )));
            }
        }
        Ok(vec![out])
    }
}
