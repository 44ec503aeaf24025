//! Late materialization: the scan's row filter run inside arrow-rs's decoder.

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;

use super::{DirectOptions, Source};
use crate::error::{Error, Result};
use crate::expr::BoundExpr;
use crate::scan::adapt::{self, Adapt};

/// The first error the row filter met while decoding (arrow-rs carries it only as text).
pub(super) type FilterError = std::sync::Arc<std::sync::Mutex<Option<Error>>>;

/// The row filter as an arrow-rs [`RowFilter`](parquet::arrow::arrow_reader::RowFilter):
/// the file columns it reads are decoded first, adapted to the target types and the filter
/// evaluated on them; the other projected columns are then decoded only for the rows it
/// keeps. `None` when that cannot help (the filter reads every projected column) or
/// cannot be done: it reads a column the file lacks (filled with a default) or a nested one.
pub(super) fn row_filter(
    filter: &BoundExpr,
    sources: &[Source],
    roots: &[usize],
    o: &DirectOptions,
    parquet_schema: &parquet::schema::types::SchemaDescriptor,
    error: FilterError,
) -> Option<parquet::arrow::arrow_reader::RowFilter> {
    use parquet::arrow::arrow_reader::{ArrowPredicateFn, RowFilter};
    let columns = filter.columns();
    let mut read = Vec::with_capacity(columns.len());
    for &c in &columns {
        // Nested columns stay out: arrow-rs's async reader panics decoding a struct filter
        // column ("child with nullable parents must have definition level", parquet 58.4).
        if o.target.fields().get(c)?.data_type().is_nested() {
            return None;
        }
        match sources.get(c)? {
            Source::Column(root, _) => read.push(*root),
            Source::Fill(_) => return None,
        }
    }
    read.sort_unstable();
    read.dedup();
    if read.len() >= roots.len() {
        return None;
    }
    let over = filter.over_columns(&columns)?;
    let fields: Vec<arrow_schema::FieldRef> = columns
        .iter()
        .map(|&c| o.target.fields()[c].clone())
        .collect();
    let predicate_schema = std::sync::Arc::new(arrow_schema::Schema::new(fields));
    let adapts: Vec<(usize, Adapt)> = columns
        .iter()
        .filter_map(|&c| match &sources[c] {
            Source::Column(root, a) => Some((read.iter().position(|r| r == root)?, a.clone())),
            Source::Fill(_) => None,
        })
        .collect();
    let schema = o.schema.clone();
    let mask = ProjectionMask::roots(parquet_schema, read.iter().copied());
    let evaluate = move |b: RecordBatch| -> std::result::Result<
        arrow_array::BooleanArray,
        arrow_schema::ArrowError,
    > {
        let cols = adapts
            .iter()
            .zip(predicate_schema.fields())
            .map(|((at, a), f)| adapt::apply(b.column(*at), a, f.data_type(), &schema))
            .collect::<Result<Vec<_>>>()
            .and_then(|cols| {
                let opts =
                    arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                Ok(RecordBatch::try_new_with_options(
                    predicate_schema.clone(),
                    cols,
                    &opts,
                )?)
            })
            .and_then(|batch| over.evaluate_predicate(&batch));
        cols.map_err(|e| {
            let text = e.to_string();
            if let Ok(mut slot) = error.lock() {
                slot.get_or_insert(e);
            }
            arrow_schema::ArrowError::ComputeError(text)
        })
    };
    Some(RowFilter::new(vec![Box::new(ArrowPredicateFn::new(
        mask, evaluate,
    ))]))
}
