//! MERGE INTO: target rows joined to source rows on key equality; WHEN clauses decide, in
//! order, which rows are updated, deleted or inserted. A target row matched by more than one
//! source row is an error (nothing is committed), as in Spark, unless the statement has no
//! MATCHED clause or only one unconditional `WHEN MATCHED THEN DELETE` (Spark skips its
//! cardinality check then: the row is deleted once, and no source row of its key is inserted).

use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema as ArrowSchema, SchemaRef as ArrowSchemaRef};

use super::merge_source::{read_source, Aligned, ReadSource, SourceKeys, SourceRows, SourceSet};
use super::statement::{check_assignable, column_index, nullable, with_lineage};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::expr::{cast_to, BoundExpr, Insert, MatchedAction, Merge, MergeClause, MergeSource};
use crate::scan::Scan;
use crate::spec::Struct;
use crate::table::{parse_ident, Table};
use crate::txn::{run_row_delta as run, MergeCounts, RowChanger, RowLevelKind, RowLevelResult};

/// Reads a MERGE source named in the statement: a Parquet file, or a table of the catalog.
pub(super) async fn source_rows(catalog: &Catalog, src: &MergeSource) -> Result<SourceRows> {
    match src {
        MergeSource::Table(name) => {
            let t = catalog.load_table(&parse_ident(name)?).await?;
            Ok(Scan::new(&t).to_batches().await?.into())
        }
        MergeSource::Path(p) => {
            // A relative local path is the caller's working directory's.
            let location = match crate::storage::scheme(p) {
                None if !p.starts_with('/') => std::path::absolute(p)
                    .map(|a| a.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| p.clone()),
                _ => p.clone(),
            };
            let reader = catalog
                .storage()
                .parquet_reader(&location, "MERGE source")
                .await
                .map_err(|e| {
                    e.with_hint(
                        "read other formats into record batches and pass them as the MERGE source",
                    )
                })?;
            Ok(SourceRows::new(reader.map(move |b| {
                b.map_err(|e| Error::corrupt(format!("MERGE source '{location}': {e}")))
            })))
        }
    }
}

/// What a bound matched / not-matched-by-source clause does.
enum Action {
    Delete,
    /// Per target column: its new value (`None`: unchanged).
    Update(Vec<Option<BoundExpr>>),
}

enum Clause {
    Matched(Option<BoundExpr>, Action),
    NotMatchedBySource(Option<BoundExpr>, Action),
    /// Per target column: the inserted value (`None`: its write-default, else NULL).
    NotMatched(Option<BoundExpr>, Vec<Option<BoundExpr>>),
}

struct MergeChanger {
    target: ArrowSchemaRef,
    /// Per target column: its write-default (one row), what an INSERT that does not list
    /// the column writes (`None`: NULL).
    write_defaults: Vec<Option<ArrayRef>>,
    joined: ArrowSchemaRef,
    source_schema: ArrowSchemaRef,
    target_keys: Vec<usize>,
    keys: SourceKeys,
    /// Whether a target row matched by several source rows is an error: as in Spark, unless
    /// there is no MATCHED clause or the only one is an unconditional DELETE.
    check_cardinality: bool,
    clauses: Vec<Clause>,
    /// The statement has a `WHEN NOT MATCHED BY SOURCE` clause (every target row is read).
    by_source: bool,
    /// The source rows target rows are matched against now: all of them, or (aligned) those
    /// of the partition being read.
    current: Option<SourceSet>,
    /// The source split by partition (`None`: read whole).
    aligned: Option<Box<Aligned>>,
    /// Aligned: the partition being read, until its first target row was checked to be in it.
    unchecked: Option<Struct>,
    table: String,
    /// What the clauses did so far.
    counts: MergeCounts,
}

/// Merges `source` rows into `table` as `m` says.
///
/// When every partition source column of the table's default spec is the target side of an
/// ON pair (a `bucket(N, key)` table merged on `key`), the source is split by the table's
/// partitions first (beyond `floe.merge.source-memory-bytes`, default 16 MiB, into temporary
/// files) and each target partition is read against only its own source rows: memory holds
/// one partition's source and new rows, not the whole source. The result's `aligned` says so;
/// `floe.merge.partition-aligned=false` turns it off.
pub async fn merge(
    catalog: &Catalog,
    table: &Table,
    m: &Merge,
    source: impl Into<SourceRows>,
) -> Result<RowLevelResult> {
    let ctx = |e: Error| e.context(format!("MERGE INTO {}", table.name()));
    let target = table.arrow_schema()?;
    let mut source: SourceRows = source.into();
    let first = source.next().transpose().map_err(ctx)?.ok_or_else(|| {
        ctx(Error::invalid(
            "the source has no rows and no schema; give it at least a header",
        ))
    })?;
    let source_schema = first.schema();
    let (tq, sq) = (m.target_qualifier(), m.source_qualifier());
    let mut fields: Vec<Field> = Vec::new();
    for f in target.fields() {
        fields.push(Field::new(
            format!("{tq}.{}", f.name()),
            f.data_type().clone(),
            true,
        ));
    }
    for f in source_schema.fields() {
        fields.push(Field::new(
            format!("{sq}.{}", f.name()),
            f.data_type().clone(),
            true,
        ));
    }
    let joined = Arc::new(ArrowSchema::new(fields));
    let find = |schema: &ArrowSchema, name: &str, what: &str| {
        column_index(schema, name, what).map_err(ctx)
    };
    let mut target_keys = Vec::new();
    let mut source_keys = Vec::new();
    for (t, s) in &m.on {
        target_keys.push(find(&target, t, "target")?);
        source_keys.push(find(&source_schema, s, "source")?);
    }
    let key_types = target_keys
        .iter()
        .map(|i| target.field(*i).data_type().clone())
        .collect();
    let keys = SourceKeys::new(source_keys, key_types)?;
    // Bind every clause against the joined schema (target.* then source.*).
    let n_target = target.fields().len();
    let by_source_name = |name: &str| -> Result<BoundExpr> {
        let j = find(&source_schema, name, "source")?;
        crate::expr::Expr::col(format!("{sq}.{}", source_schema.field(j).name())).bind(&joined)
    };
    let bind_set = |set: &[(String, crate::expr::Expr)]| -> Result<Vec<Option<BoundExpr>>> {
        let mut out: Vec<Option<BoundExpr>> = vec![None; n_target];
        for (col, e) in set {
            let i = find(&target, col, "target")?;
            if out[i].is_some() {
                return Err(ctx(Error::invalid(format!("{col} is assigned twice"))));
            }
            let b = e.bind(&joined).map_err(ctx)?;
            check_assignable(b.data_type(), target.field(i).data_type(), col, e).map_err(ctx)?;
            out[i] = Some(b);
        }
        Ok(out)
    };
    let star = || -> Result<Vec<Option<BoundExpr>>> {
        target
            .fields()
            .iter()
            .map(|f| by_source_name(f.name()).map(Some))
            .collect()
    };
    let cond = |c: &Option<crate::expr::Expr>| -> Result<Option<BoundExpr>> {
        c.as_ref()
            .map(|e| e.bind_predicate(&joined).map_err(ctx))
            .transpose()
    };
    let action = |a: &MatchedAction| -> Result<Action> {
        Ok(match a {
            MatchedAction::Delete => Action::Delete,
            MatchedAction::Update(set) => Action::Update(bind_set(set)?),
            MatchedAction::UpdateStar => Action::Update(star()?),
        })
    };
    let mut clauses = Vec::new();
    let mut by_source = false;
    for c in &m.clauses {
        clauses.push(match c {
            MergeClause::Matched {
                condition,
                action: a,
            } => Clause::Matched(cond(condition)?, action(a)?),
            MergeClause::NotMatchedBySource {
                condition,
                action: a,
            } => {
                by_source = true;
                Clause::NotMatchedBySource(cond(condition)?, action(a)?)
            }
            MergeClause::NotMatched { condition, insert } => {
                let values = match insert {
                    Insert::Star => star()?,
                    Insert::Values { columns, values } => {
                        let cols: Vec<String> = if columns.is_empty() {
                            target.fields().iter().map(|f| f.name().clone()).collect()
                        } else {
                            columns.clone()
                        };
                        if cols.len() != values.len() {
                            return Err(ctx(Error::invalid(format!(
                                "INSERT lists {} columns but {} values",
                                cols.len(),
                                values.len()
                            ))));
                        }
                        let set: Vec<(String, crate::expr::Expr)> =
                            cols.into_iter().zip(values.iter().cloned()).collect();
                        bind_set(&set)?
                    }
                };
                Clause::NotMatched(cond(condition)?, values)
            }
        });
    }
    // The source is read (and split, maybe spilled) on a blocking thread: reading a file
    // source is synchronous I/O.
    let (read, range, keys) = {
        let (t, target_keys) = (table.clone(), target_keys.clone());
        tokio::task::spawn_blocking(move || {
            read_source(&t, first, source, &keys, &target_keys).map(|(r, k)| (r, k, keys))
        })
        .await
        .map_err(|e| ctx(Error::io("the MERGE source reader failed").with_source(e)))?
        .map_err(ctx)?
    };
    // Without NOT MATCHED BY SOURCE, only target rows whose key is in the source's key range
    // can change: prune by it.
    let filter = match by_source {
        true => None,
        false => range.predicate(target.field(target_keys[0]).name()),
    };
    let matched_clauses: Vec<&Clause> = clauses
        .iter()
        .filter(|c| matches!(c, Clause::Matched(..)))
        .collect();
    let check_cardinality = !matches!(
        matched_clauses.as_slice(),
        [] | [Clause::Matched(None, Action::Delete)]
    );
    let (current, aligned) = match read {
        ReadSource::Whole(rows) => (Some(SourceSet::new(rows, &keys).map_err(ctx)?), None),
        ReadSource::Aligned(a) => (None, Some(a)),
    };
    let write_defaults =
        crate::write::write_default_row(table.metadata().current_schema(), &target).map_err(ctx)?;
    let mut changer = MergeChanger {
        target,
        write_defaults,
        joined,
        source_schema,
        target_keys,
        keys,
        check_cardinality,
        clauses,
        by_source,
        current,
        aligned,
        unchecked: None,
        table: table.name(),
        counts: MergeCounts::default(),
    };
    let mut r = run(catalog, table, RowLevelKind::Merge, filter, &mut changer).await?;
    r.aligned = changer.aligned.map(|a| a.alignment);
    r.merged = Some(changer.counts);
    Ok(r)
}

fn and(a: &BooleanArray, b: &BooleanArray) -> Result<BooleanArray> {
    Ok(arrow_arith::boolean::and(a, b)?)
}

fn not(a: &BooleanArray) -> Result<BooleanArray> {
    Ok(arrow_arith::boolean::not(a)?)
}

impl MergeChanger {
    /// Target (or NULL) columns + source (or NULL) columns for the clauses to read.
    fn joined_batch(
        &self,
        set: &SourceSet,
        target: Option<&RecordBatch>,
        source_rows: &UInt32Array,
    ) -> Result<RecordBatch> {
        let n = source_rows.len();
        let mut cols: Vec<ArrayRef> = match target {
            Some(t) => t.columns().to_vec(),
            None => self
                .target
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect(),
        };
        for c in set.rows.columns() {
            cols.push(arrow_select::take::take(c.as_ref(), source_rows, None)?);
        }
        Ok(RecordBatch::try_new(self.joined.clone(), cols)?)
    }

    /// New target rows from `values` (per target column; `None`: keep, or the write-default
    /// / NULL).
    fn build(
        &self,
        rows: &RecordBatch,
        values: &[Option<BoundExpr>],
        keep: bool,
    ) -> Result<RecordBatch> {
        let cols = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let ty = self.target.field(i).data_type();
                match v {
                    Some(e) => cast_to(&e.evaluate(rows)?, ty),
                    None if keep => Ok(rows.column(i).clone()),
                    None => match &self.write_defaults[i] {
                        Some(d) => {
                            let zeros = UInt32Array::from(vec![0u32; rows.num_rows()]);
                            Ok(arrow_select::take::take(d.as_ref(), &zeros, None)?)
                        }
                        None => Ok(new_null_array(ty, rows.num_rows())),
                    },
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(nullable(&self.target), cols)?)
    }

    fn condition(&self, c: &Option<BoundExpr>, b: &RecordBatch) -> Result<BooleanArray> {
        match c {
            Some(e) => e.evaluate_predicate(b),
            None => Ok(BooleanArray::from(vec![true; b.num_rows()])),
        }
    }

    /// The ON key of source row `row`, as text for an error message.
    fn key_text(&self, set: &SourceSet, row: usize) -> String {
        self.keys
            .columns
            .iter()
            .map(|c| {
                arrow::util::display::array_value_to_string(set.rows.column(*c), row)
                    .unwrap_or_else(|_| "?".into())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// [`RowChanger::change`] against the source rows `set`.
    /// `unchecked`: the aligned partition being read, whose first row is checked first.
    fn change_with(
        &mut self,
        set: &mut SourceSet,
        batch: &RecordBatch,
        unchecked: Option<&Struct>,
    ) -> Result<(BooleanArray, Option<RecordBatch>)> {
        // v3: the rows' `_row_id` follows the target's columns; an updated row keeps it.
        let width = self.target.fields().len();
        let row_ids = (batch.num_columns() >= width + 2).then(|| batch.column(width).clone());
        let batch = &batch.project(&(0..width).collect::<Vec<_>>())?;
        let n = batch.num_rows();
        let key_cols = self.keys.cast_columns(batch, &self.target_keys)?;
        if let (Some(a), Some(partition)) = (&self.aligned, unchecked) {
            a.check_partition(partition, &key_cols)?;
        }
        let rows = self.keys.converter.convert_columns(&key_cols)?;
        let mut hits: Vec<Option<u32>> = Vec::with_capacity(n);
        for (r, row) in rows.iter().enumerate() {
            let hit = if key_cols.iter().all(|c| c.is_valid(r)) {
                set.index.get(row.as_ref()).copied()
            } else {
                None
            };
            if let Some(s) = hit {
                if let Some(others) = set.dups.get(&s) {
                    if !self.check_cardinality {
                        // Every source row of the key is matched (none is inserted).
                        for o in others {
                            set.matched[*o as usize] = true;
                        }
                        set.matched[s as usize] = true;
                        hits.push(Some(s));
                        continue;
                    }
                    return Err(Error::invalid(format!(
                        "MERGE INTO {}: a target row matches more than one source row ({} rows \
                         of key ({})); make the source keys unique",
                        self.table,
                        others.len() + 1,
                        self.key_text(set, s as usize)
                    )));
                }
                set.matched[s as usize] = true;
            }
            hits.push(hit);
        }
        let has_match: BooleanArray = hits.iter().map(|h| Some(h.is_some())).collect();
        if has_match.true_count() == 0 && !self.by_source {
            return Ok((BooleanArray::from(vec![false; n]), None));
        }
        let joined = self.joined_batch(set, Some(batch), &UInt32Array::from(hits))?;
        let mut remaining = BooleanArray::from(vec![true; n]);
        let mut remove = BooleanArray::from(vec![false; n]);
        let mut out = Vec::new();
        let (mut updated, mut deleted) = (0u64, 0u64);
        for c in &self.clauses {
            let (cond, act, applicable) = match c {
                Clause::Matched(cond, act) => (cond, act, has_match.clone()),
                Clause::NotMatchedBySource(cond, act) => (cond, act, not(&has_match)?),
                Clause::NotMatched(..) => continue,
            };
            let rows = and(
                &and(&applicable, &remaining)?,
                &self.condition(cond, &joined)?,
            )?;
            if rows.true_count() == 0 {
                continue;
            }
            remaining = and(&remaining, &not(&rows)?)?;
            remove = arrow_arith::boolean::or(&remove, &rows)?;
            match act {
                Action::Update(_) => updated += rows.true_count() as u64,
                Action::Delete => deleted += rows.true_count() as u64,
            }
            if let Action::Update(values) = act {
                let sub = arrow_select::filter::filter_record_batch(&joined, &rows)?;
                let mut updated = self.build(&sub, values, true)?;
                if let Some(ids) = &row_ids {
                    updated = with_lineage(updated, arrow_select::filter::filter(ids, &rows)?)?;
                }
                out.push(updated);
            }
        }
        let new = match out.first() {
            None => None,
            Some(first) => Some(arrow_select::concat::concat_batches(&first.schema(), &out)?),
        };
        self.counts.updated += updated;
        self.counts.deleted += deleted;
        Ok((remove, new))
    }

    /// `WHEN NOT MATCHED` rows for the source rows of `set` that no target row matched.
    fn inserts(&mut self, set: &SourceSet) -> Result<Vec<RecordBatch>> {
        let idx = set.unmatched();
        if idx.is_empty() {
            return Ok(vec![]);
        }
        let joined = self.joined_batch(set, None, &idx)?;
        let mut remaining = BooleanArray::from(vec![true; idx.len()]);
        let mut out = Vec::new();
        for c in &self.clauses {
            let Clause::NotMatched(cond, values) = c else {
                continue;
            };
            let rows = and(&remaining, &self.condition(cond, &joined)?)?;
            if rows.true_count() == 0 {
                continue;
            }
            remaining = and(&remaining, &not(&rows)?)?;
            let sub = arrow_select::filter::filter_record_batch(&joined, &rows)?;
            out.push(self.build(&sub, values, false)?);
        }
        self.counts.inserted += out.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        Ok(out)
    }
}

impl RowChanger for MergeChanger {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    fn wants_row_lineage(&self) -> bool {
        true
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        let mut set = self
            .current
            .take()
            .ok_or_else(|| Error::io("MERGE target rows arrived outside a partition group"))?;
        // An empty batch checks nothing: the partition stays unchecked.
        let unchecked = match batch.num_rows() {
            0 => None,
            _ => self.unchecked.take(),
        };
        let r = self.change_with(&mut set, batch, unchecked.as_ref());
        self.current = Some(set);
        r
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        // Aligned, every partition's inserts were written with it.
        match self.current.take() {
            Some(set) if self.aligned.is_none() => self.inserts(&set),
            _ => Ok(vec![]),
        }
    }

    fn grouped(&self) -> bool {
        self.aligned.is_some()
    }

    fn ungroup(&mut self) -> Result<()> {
        if let Some(mut a) = self.aligned.take() {
            self.current = Some(SourceSet::new(a.take_rest()?, &self.keys)?);
        }
        Ok(())
    }

    fn start_group(&mut self, _spec_id: i32, partition: &Struct) -> Result<bool> {
        let Some(a) = self.aligned.as_mut() else {
            return Ok(true);
        };
        let rows = match a.take(partition)? {
            Some(rows) => rows,
            // Only NOT MATCHED BY SOURCE clauses can change this partition.
            None if self.by_source => RecordBatch::new_empty(self.source_schema.clone()),
            None => return Ok(false),
        };
        a.alignment.target_partitions_read += 1;
        self.current = Some(SourceSet::new(rows, &self.keys)?);
        self.unchecked = Some(partition.clone());
        Ok(true)
    }

    fn end_group(&mut self) -> Result<Vec<RecordBatch>> {
        match self.current.take() {
            Some(set) => self.inserts(&set),
            None => Ok(vec![]),
        }
    }

    fn next_new_group(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        let Some(a) = self.aligned.as_mut() else {
            return Ok(None);
        };
        match a.next_untaken()? {
            Some(rows) => Ok(Some(self.inserts(&SourceSet::unindexed(rows))?)),
            None => Ok(None),
        }
    }
}
