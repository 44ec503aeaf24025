//! MERGE INTO: target rows joined to source rows on key equality; WHEN clauses decide, in
//! order, which rows are updated, deleted or inserted. A target row matched by more than one
//! source row is an error (nothing is committed), as in Spark, unless the statement has no
//! MATCHED clause or only one unconditional `WHEN MATCHED THEN DELETE` (Spark skips its
//! cardinality check then: the row is deleted once, and no source row of its key is inserted).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::row::{RowConverter, SortField};
use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef as ArrowSchemaRef};
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;

use super::engine::{run, RowChanger, RowLevelKind, RowLevelResult};
use super::statement::{check_assignable, column_index, nullable, with_lineage};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::expr::{cast_to, BoundExpr, Insert, MatchedAction, Merge, MergeClause, MergeSource};
use crate::scan::Scan;
use crate::table::{parse_ident, Table};

/// Reads a MERGE source named in the statement: a Parquet file, or a table of the catalog.
pub(super) async fn source_rows(catalog: &Catalog, src: &MergeSource) -> Result<Vec<RecordBatch>> {
    match src {
        MergeSource::Table(name) => {
            let t = catalog.load_table(&parse_ident(name)?).await?;
            Scan::new(&t).to_batches().await
        }
        MergeSource::Path(p) => {
            let path = p.strip_prefix("file://").unwrap_or(p).to_string();
            tokio::task::spawn_blocking(move || {
                let f = std::fs::File::open(&path).map_err(|e| {
                    Error::not_found(format!("MERGE source '{path}' cannot be opened: {e}"))
                })?;
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                    .and_then(|b| b.build())
                    .map_err(|e| {
                        Error::invalid(format!(
                            "MERGE source '{path}' is not a readable Parquet file ({e}); \
                             read other formats into record batches and pass them as the MERGE source"
                        ))
                    })?
                    .map(|b| b.map_err(|e| Error::corrupt(format!("MERGE source '{path}': {e}"))))
                    .collect::<Result<Vec<_>>>()
            })
            .await
            .map_err(|e| Error::io("MERGE source reader failed").with_source(e))?
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
    /// Per target column: the inserted value (`None`: NULL).
    NotMatched(Option<BoundExpr>, Vec<Option<BoundExpr>>),
}

struct MergeChanger {
    target: ArrowSchemaRef,
    joined: ArrowSchemaRef,
    source: RecordBatch,
    target_keys: Vec<usize>,
    key_types: Vec<DataType>,
    converter: RowConverter,
    /// Encoded key → first source row; `dups` lists the other source rows of a key held by
    /// several.
    index: HashMap<Box<[u8]>, u32>,
    dups: HashMap<u32, Vec<u32>>,
    /// Whether a target row matched by several source rows is an error: as in Spark, unless
    /// there is no MATCHED clause or the only one is an unconditional DELETE.
    check_cardinality: bool,
    matched: Vec<bool>,
    clauses: Vec<Clause>,
    table: String,
}

/// Merges `source` rows into `table` as `m` says.
pub async fn merge(
    catalog: &Catalog,
    table: &Table,
    m: &Merge,
    source: Vec<RecordBatch>,
) -> Result<RowLevelResult> {
    let ctx = |e: Error| e.context(format!("MERGE INTO {}", table.name()));
    let target = table.arrow_schema()?;
    let source = match source.first() {
        Some(first) => arrow_select::concat::concat_batches(&first.schema(), &source)?,
        None => {
            return Err(ctx(Error::invalid(
                "the source has no rows and no schema; give it at least a header",
            )))
        }
    };
    let (tq, sq) = (m.target_qualifier(), m.source_qualifier());
    let mut fields: Vec<Field> = Vec::new();
    for f in target.fields() {
        fields.push(Field::new(
            format!("{tq}.{}", f.name()),
            f.data_type().clone(),
            true,
        ));
    }
    for f in source.schema().fields() {
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
        source_keys.push(find(&source.schema(), s, "source")?);
    }
    let key_types: Vec<DataType> = target_keys
        .iter()
        .map(|i| target.field(*i).data_type().clone())
        .collect();
    let converter = RowConverter::new(
        key_types
            .iter()
            .map(|t| SortField::new(t.clone()))
            .collect(),
    )?;
    let src_key_cols = source_keys
        .iter()
        .zip(&key_types)
        .map(|(i, t)| cast_to(source.column(*i), t))
        .collect::<Result<Vec<_>>>()
        .map_err(ctx)?;
    let rows = converter.convert_columns(&src_key_cols)?;
    let mut index: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(source.num_rows());
    let mut dups: HashMap<u32, Vec<u32>> = HashMap::new();
    let valid = |r: usize| src_key_cols.iter().all(|c| c.is_valid(r));
    for (r, row) in rows.iter().enumerate() {
        if !valid(r) {
            continue; // a NULL key matches nothing
        }
        match index.entry(row.as_ref().into()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                dups.entry(*e.get()).or_default().push(r as u32)
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(r as u32);
            }
        }
    }
    // Bind every clause against the joined schema (target.* then source.*).
    let n_target = target.fields().len();
    let source_schema = source.schema();
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
    // Without NOT MATCHED BY SOURCE, only target rows whose key is in the source's key range
    // can change: prune by it.
    let filter = if by_source {
        None
    } else {
        key_range(&target, &target_keys, &src_key_cols)
    };
    let matched_clauses: Vec<&Clause> = clauses
        .iter()
        .filter(|c| matches!(c, Clause::Matched(..)))
        .collect();
    let check_cardinality = !matches!(
        matched_clauses.as_slice(),
        [] | [Clause::Matched(None, Action::Delete)]
    );
    let n_source = source.num_rows();
    let mut changer = MergeChanger {
        target,
        joined,
        source,
        target_keys,
        key_types,
        converter,
        index,
        dups,
        check_cardinality,
        matched: vec![false; n_source],
        clauses,
        table: table.name(),
    };
    run(catalog, table, RowLevelKind::Merge, filter, &mut changer).await
}

/// `key BETWEEN min AND max` of the source keys, for an integer first key.
fn key_range(target: &ArrowSchema, keys: &[usize], src: &[ArrayRef]) -> Option<Predicate> {
    let (k, col) = (keys.first()?, src.first()?);
    let name = target.field(*k).name().clone();
    let (lo, hi) = if let Some(a) = col.as_any().downcast_ref::<Int64Array>() {
        (
            Datum::long(arrow::compute::min(a)?),
            Datum::long(arrow::compute::max(a)?),
        )
    } else if let Some(a) = col.as_any().downcast_ref::<Int32Array>() {
        (
            Datum::int(arrow::compute::min(a)?),
            Datum::int(arrow::compute::max(a)?),
        )
    } else {
        return None;
    };
    Some(
        Reference::new(name.clone())
            .greater_than_or_equal_to(lo)
            .and(Reference::new(name).less_than_or_equal_to(hi)),
    )
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
        for c in self.source.columns() {
            cols.push(arrow_select::take::take(c.as_ref(), source_rows, None)?);
        }
        Ok(RecordBatch::try_new(self.joined.clone(), cols)?)
    }

    /// New target rows from `values` (per target column; `None`: keep / NULL).
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
                    None => Ok(new_null_array(ty, rows.num_rows())),
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
}

impl RowChanger for MergeChanger {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    fn wants_row_lineage(&self) -> bool {
        true
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        // v3: the rows' `_row_id` follows the target's columns; an updated row keeps it.
        let width = self.target.fields().len();
        let row_ids = (batch.num_columns() >= width + 2).then(|| batch.column(width).clone());
        let batch = &batch.project(&(0..width).collect::<Vec<_>>())?;
        let n = batch.num_rows();
        let key_cols = self
            .target_keys
            .iter()
            .zip(&self.key_types)
            .map(|(i, t)| cast_to(batch.column(*i), t))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.converter.convert_columns(&key_cols)?;
        let mut hits: Vec<Option<u32>> = Vec::with_capacity(n);
        for (r, row) in rows.iter().enumerate() {
            let hit = if key_cols.iter().all(|c| c.is_valid(r)) {
                self.index.get(row.as_ref()).copied()
            } else {
                None
            };
            if let Some(s) = hit {
                if let Some(others) = self.dups.get(&s) {
                    if !self.check_cardinality {
                        // Every source row of the key is matched (none is inserted).
                        for o in others {
                            self.matched[*o as usize] = true;
                        }
                        self.matched[s as usize] = true;
                        hits.push(Some(s));
                        continue;
                    }
                    return Err(Error::invalid(format!(
                        "MERGE INTO {}: a target row matches more than one source row (source row {}); \
                         make the source keys unique",
                        self.table, s
                    )));
                }
                self.matched[s as usize] = true;
            }
            hits.push(hit);
        }
        let has_match: BooleanArray = hits.iter().map(|h| Some(h.is_some())).collect();
        if has_match.true_count() == 0
            && !self
                .clauses
                .iter()
                .any(|c| matches!(c, Clause::NotMatchedBySource(..)))
        {
            return Ok((BooleanArray::from(vec![false; n]), None));
        }
        let joined = self.joined_batch(Some(batch), &UInt32Array::from(hits))?;
        let mut remaining = BooleanArray::from(vec![true; n]);
        let mut remove = BooleanArray::from(vec![false; n]);
        let mut out = Vec::new();
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
        Ok((remove, new))
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let unmatched: Vec<u32> = (0..self.source.num_rows() as u32)
            .filter(|i| !self.matched[*i as usize])
            .collect();
        if unmatched.is_empty() {
            return Ok(vec![]);
        }
        let idx = UInt32Array::from(unmatched);
        let joined = self.joined_batch(None, &idx)?;
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
        Ok(out)
    }
}
