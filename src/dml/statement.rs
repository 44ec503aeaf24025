//! DELETE and UPDATE with SQL expressions.

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{Schema as ArrowSchema, SchemaRef as ArrowSchemaRef};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::expr::{cast_to, to_iceberg_predicate, BoundExpr, Expr};
use crate::spec::resolve_column;
use crate::table::Table;
use crate::txn::{run_row_delta as run, RowChanger, RowLevelKind, RowLevelResult};

/// The table's top-level column names `names` refers to, in table order (`s.a`, a struct
/// field, reads top-level column `s`; names are found by [`resolve_column`]).
pub(super) fn columns_in_table_order(
    arrow: &ArrowSchema,
    names: impl IntoIterator<Item = String>,
) -> Result<Vec<String>> {
    let top = || arrow.fields().iter().map(|f| f.name().as_str());
    let mut found = vec![false; arrow.fields().len()];
    for n in names {
        let first = n.split('.').next().unwrap_or(&n).to_string();
        let i = match resolve_column(top(), &n)? {
            Some(i) => Some(i),
            None => resolve_column(top(), &first)?,
        };
        if let Some(i) = i {
            found[i] = true;
        }
    }
    Ok(top()
        .zip(found)
        .filter(|(_, f)| *f)
        .map(|(n, _)| n.to_string())
        .collect())
}

/// The index of column `name` in `schema` ([`resolve_column`]); `what` names the schema in the
/// error ("target", "source").
pub(super) fn column_index(schema: &ArrowSchema, name: &str, what: &str) -> Result<usize> {
    let names = || schema.fields().iter().map(|f| f.name().as_str());
    resolve_column(names(), name)?.ok_or_else(|| {
        Error::invalid(format!(
            "{what} column '{name}': no such column; the {what} has {}",
            names().collect::<Vec<_>>().join(", ")
        ))
    })
}

/// Binds `e` as a condition to the columns `cols` of the table (as the scan returns them).
fn bind_on(arrow: &ArrowSchema, cols: &[String], e: &Expr) -> Result<BoundExpr> {
    let idx: Vec<usize> = cols.iter().filter_map(|c| arrow.index_of(c).ok()).collect();
    e.bind_predicate(&arrow.project(&idx)?)
}

/// Deletes the rows for which `predicate` is true (all rows when `None`).
pub async fn delete(
    catalog: &Catalog,
    table: &Table,
    predicate: Option<&Expr>,
) -> Result<RowLevelResult> {
    let arrow = table.arrow_schema()?;
    let ctx = |e: Error| e.context(format!("DELETE FROM {}", table.name()));
    let (bound, columns, filter) = match predicate {
        Some(p) => {
            p.bind_predicate(&arrow).map_err(ctx)?;
            let cols = columns_in_table_order(&arrow, p.columns()).map_err(ctx)?;
            let bound = bind_on(&arrow, &cols, p).map_err(ctx)?;
            let filter = to_iceberg_predicate(p, table.metadata().current_schema());
            (Some(bound), cols, filter)
        }
        None => (None, Vec::new(), None),
    };
    let mut changer = Delete { bound, columns };
    run(catalog, table, RowLevelKind::Delete, filter, &mut changer).await
}

struct Delete {
    bound: Option<BoundExpr>,
    columns: Vec<String>,
}

impl RowChanger for Delete {
    fn columns(&self) -> Option<Vec<String>> {
        Some(self.columns.clone())
    }
    fn removes_all(&self, constants: &RecordBatch) -> Result<Option<bool>> {
        Ok(match &self.bound {
            Some(b) => Some(b.evaluate_predicate(constants)?.value(0)),
            None => Some(true),
        })
    }
    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        Ok(match &self.bound {
            Some(b) => (b.evaluate_predicate(batch)?, None),
            None => (BooleanArray::from(vec![true; batch.num_rows()]), None),
        })
    }
}

/// Sets `assignments` (column, value) on the rows for which `predicate` is true (all rows when
/// `None`). A changed partition column moves the row to its new partition.
pub async fn update(
    catalog: &Catalog,
    table: &Table,
    assignments: &[(String, Expr)],
    predicate: Option<&Expr>,
) -> Result<RowLevelResult> {
    let arrow = table.arrow_schema()?;
    let ctx = |e: Error| e.context(format!("UPDATE {}", table.name()));
    if assignments.is_empty() {
        return Err(ctx(Error::invalid("SET needs at least one assignment")));
    }
    let mut set: Vec<Option<BoundExpr>> = vec![None; arrow.fields().len()];
    for (col, e) in assignments {
        let i = column_index(&arrow, col, "table").map_err(ctx)?;
        if set[i].is_some() {
            return Err(ctx(Error::invalid(format!("SET assigns {col} twice"))));
        }
        let b = e.bind(&arrow).map_err(ctx)?;
        check_assignable(b.data_type(), arrow.field(i).data_type(), col, e).map_err(ctx)?;
        set[i] = Some(b);
    }
    let (bound, filter) = match predicate {
        Some(p) => (
            Some(p.bind_predicate(&arrow).map_err(ctx)?),
            to_iceberg_predicate(p, table.metadata().current_schema()),
        ),
        None => (None, None),
    };
    let mut changer = Update { arrow, bound, set };
    run(catalog, table, RowLevelKind::Update, filter, &mut changer).await
}

/// Refuses an assignment whose type can never fit the column (a string into a number, …).
pub(super) fn check_assignable(
    from: &arrow_schema::DataType,
    to: &arrow_schema::DataType,
    col: &str,
    e: &Expr,
) -> Result<()> {
    if from == to
        || from == &arrow_schema::DataType::Null
        || arrow_cast::can_cast_types(from, to) && same_family(from, to)
    {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "SET {col} = {e}: a {from} value cannot be stored in column {col} of type {to}; add a CAST"
    )))
}

fn same_family(a: &arrow_schema::DataType, b: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType as D;
    let fam = |t: &D| {
        if t.is_numeric() {
            0
        } else if matches!(t, D::Utf8 | D::LargeUtf8 | D::Utf8View) {
            1
        } else if t.is_temporal() {
            2
        } else if matches!(t, D::Boolean) {
            3
        } else {
            4
        }
    };
    fam(a) == fam(b) && fam(a) != 4 || a.equals_datatype(b)
}

struct Update {
    arrow: ArrowSchemaRef,
    bound: Option<BoundExpr>,
    set: Vec<Option<BoundExpr>>,
}

impl RowChanger for Update {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }
    fn wants_row_lineage(&self) -> bool {
        true
    }
    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        let mask = match &self.bound {
            Some(b) => b.evaluate_predicate(batch)?,
            None => BooleanArray::from(vec![true; batch.num_rows()]),
        };
        if mask.true_count() == 0 {
            return Ok((mask, None));
        }
        let matched = arrow_select::filter::filter_record_batch(batch, &mask)?;
        let cols = self
            .set
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Some(e) => cast_to(&e.evaluate(&matched)?, self.arrow.field(i).data_type()),
                None => Ok(matched.column(i).clone()),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let mut out = RecordBatch::try_new(nullable(&self.arrow), cols)?;
        // v3: an updated row keeps its row id; its last-updated sequence number becomes the
        // new snapshot's (NULL: inherited from the new file).
        if matched.num_columns() >= self.arrow.fields().len() + 2 {
            out = with_lineage(out, matched.column(self.arrow.fields().len()).clone())?;
        }
        Ok((mask, Some(out)))
    }
}

/// `rows` with the lineage columns of updated rows: their `row_ids` kept, the last-updated
/// sequence number NULL (it becomes the new snapshot's, inherited from the new file).
pub(super) fn with_lineage(rows: RecordBatch, row_ids: ArrayRef) -> Result<RecordBatch> {
    let mut fields: Vec<arrow_schema::FieldRef> = rows.schema().fields().iter().cloned().collect();
    fields.extend(crate::scan::lineage_fields());
    let mut columns = rows.columns().to_vec();
    columns.push(row_ids);
    columns.push(arrow_array::new_null_array(
        &arrow_schema::DataType::Int64,
        rows.num_rows(),
    ));
    Ok(RecordBatch::try_new(
        Arc::new(ArrowSchema::new(fields)),
        columns,
    )?)
}

/// The schema with every field nullable (new rows are checked by the writer, which names the
/// column when a required one gets a NULL).
pub(super) fn nullable(s: &ArrowSchema) -> ArrowSchemaRef {
    Arc::new(ArrowSchema::new(
        s.fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
