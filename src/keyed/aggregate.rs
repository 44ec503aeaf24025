//! Folding the rows of one key by a merge engine other than `replace`. Pure.
//!
//! Every incoming row is first made a **partial state** in the table's columns
//! ([`partial_states`]): `count` becomes 1, `avg:<in>` its input with a count of 1 (0 for a
//! null), `count_distinct:<in>` a set of one, `approx_count_distinct:<in>` a sketch of one;
//! other functions take the column as it is. A key's rows — its stored row first, then the
//! batch's in arrival order — are then merged state by state ([`fold_states`]), which is the
//! same whether the rows came in one batch or many: merging is associative. The result
//! columns are finalized from the merged states, so a plain reader reads final values.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::row::Rows;
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    RecordBatch, UInt32Array,
};
use arrow_cast::{cast_with_options, CastOptions};
use arrow_schema::{DataType, SchemaRef};
use roaring::RoaringTreemap;

use super::fold::KeyMap;
use super::sketch::{hash_bytes, hash_int, Hll};
use crate::error::{Error, Result};
use crate::spec::keyed::{Aggregate, Function, KeyedSpec, MergeEngine};

/// The input columns of a batch that feed functions without being table columns.
pub(crate) type Inputs = Vec<(String, ArrayRef)>;

/// The rows of one key, in the order they merge.
type Group = Vec<u32>;

fn function_of<'a>(spec: &'a KeyedSpec, column: &str) -> Option<&'a Aggregate> {
    spec.aggregates.iter().find(|a| a.column == column)
}

/// The result column whose state `column` is, and that function.
fn state_owner<'a>(spec: &'a KeyedSpec, column: &str) -> Option<&'a Aggregate> {
    spec.aggregates.iter().find(|a| {
        a.function
            .state_columns(&a.column)
            .iter()
            .any(|(n, _)| n == column)
    })
}

/// `conformed` (the table's columns; missing ones null) with `inputs`, as partial states
/// in `schema` (the table's). `source` names the rows in errors.
pub(crate) fn partial_states(
    spec: &KeyedSpec,
    schema: &SchemaRef,
    conformed: &RecordBatch,
    inputs: &Inputs,
    source: &str,
) -> Result<RecordBatch> {
    let n = conformed.num_rows();
    let column = |name: &str| -> Result<ArrayRef> {
        conformed
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| Error::io(format!("{source}: column '{name}' was not conformed")))
    };
    let input = |name: &str| -> ArrayRef {
        inputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .or_else(|| conformed.column_by_name(name).cloned())
            .unwrap_or_else(|| arrow_array::new_null_array(&DataType::Int64, n))
    };
    let mut out: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let name = f.name().as_str();
        let state = state_owner(spec, name);
        let a = match (function_of(spec, name), state) {
            (_, Some(owner)) => state_of(owner, name, &input, source)?,
            (Some(agg), None) => match &agg.function {
                Function::Count => Arc::new(Int64Array::from(vec![1i64; n])) as ArrayRef,
                Function::Avg(i) => float_input(&input(i), i, source)?,
                Function::CountDistinct(i) => {
                    let v = int_input(&input(i), i, source)?;
                    Arc::new(Int64Array::from_iter_values(
                        (0..n).map(|r| i64::from(v.is_valid(r))),
                    ))
                }
                Function::ApproxCountDistinct(i) => {
                    let v = input(i);
                    Arc::new(Int64Array::from_iter_values(
                        (0..n).map(|r| i64::from(v.is_valid(r))),
                    ))
                }
                _ => column(name)?,
            },
            (None, None) => column(name)?,
        };
        out.push(cast_to(&a, f.data_type(), name, source)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), out)?)
}

/// State column `name` of `owner` for incoming rows.
fn state_of(
    owner: &Aggregate,
    name: &str,
    input: &dyn Fn(&str) -> ArrayRef,
    source: &str,
) -> Result<ArrayRef> {
    Ok(match &owner.function {
        Function::Avg(i) => {
            let v = float_input(&input(i), i, source)?;
            if name.ends_with("_sum") {
                v
            } else {
                Arc::new(Int64Array::from_iter_values(
                    (0..v.len()).map(|r| i64::from(v.is_valid(r))),
                ))
            }
        }
        Function::CountDistinct(i) => {
            let v = int_input(&input(i), i, source)?;
            let sets = (0..v.len()).map(|r| {
                let mut s = RoaringTreemap::new();
                if v.is_valid(r) {
                    s.insert(v.value(r) as u64);
                }
                serialize_set(&s)
            });
            Arc::new(BinaryArray::from_iter_values(sets))
        }
        Function::ApproxCountDistinct(i) => {
            let v = input(i);
            let hashes = value_hashes(&v, i, source)?;
            let sketches = hashes.iter().map(|h| {
                let mut s = Hll::default();
                if let Some(h) = h {
                    s.add(*h);
                }
                s.to_bytes()
            });
            Arc::new(BinaryArray::from_iter_values(sketches))
        }
        _ => {
            return Err(Error::io(format!(
                "column '{name}' is no state of {}",
                owner.column
            )))
        }
    })
}

fn serialize_set(s: &RoaringTreemap) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.serialized_size());
    // Writing into a Vec cannot fail.
    let _ = s.serialize_into(&mut out);
    out
}

fn float_input(a: &ArrayRef, name: &str, source: &str) -> Result<ArrayRef> {
    if !a.data_type().is_numeric() && a.data_type() != &DataType::Null {
        return Err(Error::invalid(format!(
            "{source}: input column '{name}' is {}; avg takes numbers",
            a.data_type()
        )));
    }
    Ok(arrow_cast::cast(a, &DataType::Float64)?)
}

fn int_input(a: &ArrayRef, name: &str, source: &str) -> Result<Int64Array> {
    if !a.data_type().is_integer() && a.data_type() != &DataType::Null {
        return Err(Error::invalid(format!(
            "{source}: input column '{name}' is {}; count_distinct keeps an exact set of integers \
             (use approx_count_distinct for other types)",
            a.data_type()
        )));
    }
    Ok(arrow_cast::cast(a, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// Stable hashes of `a`'s values (integers by value, others by their string form).
fn value_hashes(a: &ArrayRef, name: &str, source: &str) -> Result<Vec<Option<u64>>> {
    let n = a.len();
    if a.data_type().is_integer() || a.data_type() == &DataType::Null {
        let v = int_input(a, name, source)?;
        return Ok((0..n)
            .map(|r| v.is_valid(r).then(|| hash_int(v.value(r))))
            .collect());
    }
    if let Some(b) = a.as_binary_opt::<i32>() {
        return Ok((0..n)
            .map(|r| b.is_valid(r).then(|| hash_bytes(b.value(r))))
            .collect());
    }
    let s = arrow_cast::cast(a, &DataType::Utf8).map_err(|_| {
        Error::invalid(format!(
            "{source}: input column '{name}' is {}; approx_count_distinct takes integers, strings and \
             values with a string form",
            a.data_type()
        ))
    })?;
    let s = s.as_string::<i32>();
    Ok((0..n)
        .map(|r| s.is_valid(r).then(|| hash_bytes(s.value(r).as_bytes())))
        .collect())
}

/// `a` cast to `to`; an overflow is an error naming the column.
fn cast_to(a: &ArrayRef, to: &DataType, name: &str, source: &str) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(a, to, &opts).map_err(|e| {
        Error::invalid(format!(
            "{source}: column '{name}' does not fit its type {to}: {e}"
        ))
    })
}

/// One key's merged row.
#[derive(Debug)]
pub(crate) struct Merged {
    /// One row per key, in order of first appearance.
    pub rows: RecordBatch,
    /// Per key: whether its summed columns all folded to zero (the `sum` engine then
    /// removes it).
    pub zero: Vec<bool>,
    /// Per key: its rows (indices into the input), in merge order.
    pub groups: Vec<Vec<u32>>,
}

/// Merges `rows` (partial states in arrival order; `keys` their encoded keys; `versions`
/// order the partial-update engine's rows) into one row per key.
pub(crate) fn fold_states(
    spec: &KeyedSpec,
    rows: &RecordBatch,
    keys: &Rows,
    versions: Option<&Int64Array>,
    table: &str,
) -> Result<Merged> {
    let mut group_of: KeyMap<&[u8], u32> = KeyMap::default();
    let mut groups: Vec<Group> = Vec::new();
    for r in 0..keys.num_rows() {
        let g = *group_of.entry(keys.row(r).data()).or_insert_with(|| {
            groups.push(Vec::new());
            (groups.len() - 1) as u32
        });
        groups[g as usize].push(r as u32);
    }
    if let (MergeEngine::PartialUpdate, Some(v)) = (spec.engine, versions) {
        // Stable: equal versions keep their arrival order (the later arrival wins).
        for g in &mut groups {
            g.sort_by_key(|&r| v.value(r as usize));
        }
    }
    let schema = rows.schema();
    let mut out: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    let mut zero = vec![spec.engine == MergeEngine::Sum && spec.drop_zero_rows; groups.len()];
    let what = |c: &str| format!("table {table}: column '{c}'");
    for (i, f) in schema.fields().iter().enumerate() {
        let name = f.name().as_str();
        let col = rows.column(i);
        let a: ArrayRef = if spec.key.iter().any(|k| k == name) {
            pick(col, &groups, |g, _| g[0])?
        } else {
            match spec.engine {
                MergeEngine::FirstRow => pick(col, &groups, |g, _| g[0])?,
                MergeEngine::PartialUpdate | MergeEngine::Replace => {
                    pick(col, &groups, last_non_null)?
                }
                MergeEngine::Sum | MergeEngine::Aggregate => {
                    if let Some(owner) = state_owner(spec, name) {
                        merge_state(owner, name, rows, &groups, table)?
                    } else {
                        let agg = function_of(spec, name).ok_or_else(|| {
                            Error::invalid(format!("{}: has no function", what(name)))
                        })?;
                        let a = apply(agg, col, rows, &groups, table)?;
                        if agg.function == Function::Sum {
                            for (g, z) in zero.iter_mut().enumerate() {
                                *z &= is_zero(&a, g);
                            }
                        }
                        a
                    }
                }
            }
        };
        out.push(cast_to(&a, f.data_type(), name, &format!("table {table}"))?);
    }
    Ok(Merged {
        rows: RecordBatch::try_new(schema, out)?,
        zero,
        groups,
    })
}

/// The row each group takes column `col`'s value from.
fn pick(
    col: &ArrayRef,
    groups: &[Group],
    choose: impl Fn(&Group, &dyn Array) -> u32,
) -> Result<ArrayRef> {
    let idx = UInt32Array::from_iter_values(groups.iter().map(|g| choose(g, col.as_ref())));
    Ok(arrow_select::take::take(col, &idx, None)?)
}

fn last_non_null(g: &Group, a: &dyn Array) -> u32 {
    g.iter()
        .rev()
        .copied()
        .find(|&r| a.is_valid(r as usize))
        .unwrap_or(g[g.len() - 1])
}

fn first_non_null(g: &Group, a: &dyn Array) -> u32 {
    g.iter()
        .copied()
        .find(|&r| a.is_valid(r as usize))
        .unwrap_or(g[0])
}

/// Result column `col` of function `agg` merged per group.
fn apply(
    agg: &Aggregate,
    col: &ArrayRef,
    rows: &RecordBatch,
    groups: &[Group],
    table: &str,
) -> Result<ArrayRef> {
    let name = &agg.column;
    Ok(match &agg.function {
        Function::First => pick(col, groups, |g, _| g[0])?,
        Function::Last => pick(col, groups, |g, _| g[g.len() - 1])?,
        Function::FirstNonNull => pick(col, groups, first_non_null)?,
        Function::LastNonNull => pick(col, groups, last_non_null)?,
        Function::Min | Function::Max => {
            let cmp =
                arrow_ord::ord::make_comparator(col.as_ref(), col.as_ref(), Default::default())?;
            let want = if agg.function == Function::Min {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            pick(col, groups, |g, a| {
                let mut best: Option<u32> = None;
                for &r in g {
                    if a.is_null(r as usize) {
                        continue;
                    }
                    best = match best {
                        Some(b) if cmp(r as usize, b as usize) != want => Some(b),
                        _ => Some(r),
                    };
                }
                best.unwrap_or(g[0])
            })?
        }
        Function::Sum | Function::Count => sum(col, groups, name, table)?,
        Function::BoolAnd | Function::BoolOr => {
            let b = col.as_boolean_opt().ok_or_else(|| {
                Error::invalid(format!("table {table}: column '{name}' is not boolean"))
            })?;
            let and = agg.function == Function::BoolAnd;
            Arc::new(BooleanArray::from_iter(groups.iter().map(|g| {
                let vals = g
                    .iter()
                    .filter(|&&r| b.is_valid(r as usize))
                    .map(|&r| b.value(r as usize));
                let mut any = false;
                let mut acc = and;
                for v in vals {
                    any = true;
                    acc = if and { acc && v } else { acc || v };
                }
                any.then_some(acc)
            })))
        }
        Function::Avg(_) => {
            let (s, c) = avg_states(agg, rows, groups, table)?;
            Arc::new(Float64Array::from_iter(
                (0..groups.len()).map(|g| (c[g] > 0).then(|| s[g].unwrap_or(0.0) / c[g] as f64)),
            ))
        }
        Function::CountDistinct(_) => {
            let sets = sets(agg, rows, groups, table)?;
            Arc::new(Int64Array::from_iter_values(
                sets.iter().map(|s| s.len() as i64),
            ))
        }
        Function::ApproxCountDistinct(_) => {
            let sk = sketches(agg, rows, groups, table)?;
            Arc::new(Int64Array::from_iter_values(sk.iter().map(Hll::estimate)))
        }
    })
}

/// State column `name` of `owner` merged per group.
fn merge_state(
    owner: &Aggregate,
    name: &str,
    rows: &RecordBatch,
    groups: &[Group],
    table: &str,
) -> Result<ArrayRef> {
    Ok(match &owner.function {
        Function::Avg(_) => {
            let (s, c) = avg_states(owner, rows, groups, table)?;
            if name.ends_with("_sum") {
                Arc::new(Float64Array::from(s))
            } else {
                Arc::new(Int64Array::from(c))
            }
        }
        Function::CountDistinct(_) => {
            let sets = sets(owner, rows, groups, table)?;
            Arc::new(BinaryArray::from_iter_values(
                sets.iter().map(serialize_set),
            ))
        }
        Function::ApproxCountDistinct(_) => {
            let sk = sketches(owner, rows, groups, table)?;
            Arc::new(BinaryArray::from_iter_values(sk.iter().map(Hll::to_bytes)))
        }
        _ => return Err(Error::io(format!("column '{name}' is no state"))),
    })
}

fn state_column<'a>(
    agg: &Aggregate,
    rows: &'a RecordBatch,
    i: usize,
    table: &str,
) -> Result<&'a ArrayRef> {
    let states = agg.function.state_columns(&agg.column);
    let name = &states[i].0;
    rows.column_by_name(name).ok_or_else(|| {
        Error::corrupt(format!(
            "table {table}: state column '{name}' of '{}' is missing",
            agg.column
        ))
    })
}

/// A set or sketch state column as `Binary` (Iceberg's binary is read as `LargeBinary`).
fn binary_state(agg: &Aggregate, rows: &RecordBatch, table: &str) -> Result<ArrayRef> {
    let c = state_column(agg, rows, 0, table)?;
    arrow_cast::cast(c, &DataType::Binary).map_err(|_| {
        Error::corrupt(format!(
            "table {table}: the state of '{}' is {}, not binary",
            agg.column,
            c.data_type()
        ))
    })
}

/// Per group: the avg's merged (sum, count).
fn avg_states(
    agg: &Aggregate,
    rows: &RecordBatch,
    groups: &[Group],
    table: &str,
) -> Result<(Vec<Option<f64>>, Vec<i64>)> {
    let s = arrow_cast::cast(state_column(agg, rows, 0, table)?, &DataType::Float64)?;
    let s = s.as_primitive::<Float64Type>();
    let c = arrow_cast::cast(state_column(agg, rows, 1, table)?, &DataType::Int64)?;
    let c = c.as_primitive::<Int64Type>();
    let mut sums = Vec::with_capacity(groups.len());
    let mut counts = Vec::with_capacity(groups.len());
    for g in groups {
        let mut sum: Option<f64> = None;
        let mut count = 0i64;
        for &r in g {
            let r = r as usize;
            if s.is_valid(r) {
                sum = Some(sum.unwrap_or(0.0) + s.value(r));
            }
            if c.is_valid(r) {
                count = count.checked_add(c.value(r)).ok_or_else(|| {
                    Error::invalid(format!(
                        "table {table}: the count of avg column '{}' overflows",
                        agg.column
                    ))
                })?;
            }
        }
        sums.push(sum);
        counts.push(count);
    }
    Ok((sums, counts))
}

fn sets(
    agg: &Aggregate,
    rows: &RecordBatch,
    groups: &[Group],
    table: &str,
) -> Result<Vec<RoaringTreemap>> {
    let b = binary_state(agg, rows, table)?;
    let b = b.as_binary::<i32>();
    groups
        .iter()
        .map(|g| {
            let mut s = RoaringTreemap::new();
            for &r in g {
                if b.is_valid(r as usize) {
                    let one =
                        RoaringTreemap::deserialize_from(b.value(r as usize)).map_err(|e| {
                            Error::corrupt(format!(
                            "table {table}: the distinct set of '{}' is not a roaring bitmap ({e})",
                            agg.column
                        ))
                        })?;
                    s |= one;
                }
            }
            Ok(s)
        })
        .collect()
}

fn sketches(
    agg: &Aggregate,
    rows: &RecordBatch,
    groups: &[Group],
    table: &str,
) -> Result<Vec<Hll>> {
    let b = binary_state(agg, rows, table)?;
    let b = b.as_binary::<i32>();
    let what = || format!("table {table}: the sketch of '{}'", agg.column);
    groups
        .iter()
        .map(|g| {
            let mut s = Hll::default();
            for &r in g {
                if b.is_valid(r as usize) {
                    s.merge(&Hll::from_bytes(b.value(r as usize), &what)?);
                }
            }
            Ok(s)
        })
        .collect()
}

/// The sum per group of `col`'s non-null values (null when there are none); an overflow is
/// an error.
fn sum(col: &ArrayRef, groups: &[Group], name: &str, table: &str) -> Result<ArrayRef> {
    let overflow = || {
        Error::invalid(format!(
            "table {table}: the sum of column '{name}' overflows its type {}; nothing was committed \
             (widen the column)",
            col.data_type()
        ))
    };
    Ok(match col.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            let v = arrow_cast::cast(col, &DataType::Int64)?;
            let v = v.as_primitive::<Int64Type>();
            let out = checked_sums(groups, v, i64::checked_add, &overflow)?;
            let a: ArrayRef = Arc::new(Int64Array::from(out));
            cast_to(&a, col.data_type(), name, &format!("table {table}")).map_err(|_| overflow())?
        }
        DataType::Float32 | DataType::Float64 => {
            let v = arrow_cast::cast(col, &DataType::Float64)?;
            let v = v.as_primitive::<Float64Type>();
            let out: Float64Array = groups
                .iter()
                .map(|g| {
                    g.iter()
                        .filter(|&&r| v.is_valid(r as usize))
                        .map(|&r| v.value(r as usize))
                        .fold(None, |a: Option<f64>, x| Some(a.unwrap_or(0.0) + x))
                })
                .collect();
            Arc::new(out)
        }
        DataType::Decimal128(p, s) => {
            let v = col.as_primitive::<Decimal128Type>();
            let out = checked_sums(groups, v, i128::checked_add, &overflow)?;
            let a = Decimal128Array::from(out).with_precision_and_scale(*p, *s)?;
            a.validate_decimal_precision(*p).map_err(|_| overflow())?;
            Arc::new(a)
        }
        other => {
            return Err(Error::invalid(format!(
                "table {table}: column '{name}' is {other}; sum takes numbers"
            )))
        }
    })
}

/// Per group: the sum of `v`'s non-null values by `add` (null when there are none); an
/// overflow is `overflow()`.
fn checked_sums<T: arrow_array::ArrowPrimitiveType>(
    groups: &[Group],
    v: &arrow_array::PrimitiveArray<T>,
    add: fn(T::Native, T::Native) -> Option<T::Native>,
    overflow: &dyn Fn() -> Error,
) -> Result<Vec<Option<T::Native>>> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let mut acc: Option<T::Native> = None;
        for &r in g {
            if v.is_valid(r as usize) {
                let x = v.value(r as usize);
                acc = Some(match acc {
                    Some(a) => add(a, x).ok_or_else(overflow)?,
                    None => x,
                });
            }
        }
        out.push(acc);
    }
    Ok(out)
}

/// Whether row `r` of a summed column is zero (a null is not).
fn is_zero(a: &ArrayRef, r: usize) -> bool {
    if a.is_null(r) {
        return false;
    }
    match a.data_type() {
        DataType::Float32 | DataType::Float64 => {
            arrow_cast::cast(&a.slice(r, 1), &DataType::Float64)
                .ok()
                .is_some_and(|x| x.as_primitive::<Float64Type>().value(0) == 0.0)
        }
        DataType::Decimal128(_, _) => a.as_primitive::<Decimal128Type>().value(r) == 0,
        _ => arrow_cast::cast(&a.slice(r, 1), &DataType::Int64)
            .ok()
            .is_some_and(|x| x.as_primitive::<Int64Type>().value(0) == 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::keyed::Aggregate;
    use arrow_array::{Float64Array, StringArray};
    use arrow_schema::{Field, Schema};

    fn spec(engine: MergeEngine, aggs: &[(&str, Function)]) -> KeyedSpec {
        KeyedSpec {
            key: vec!["k".into()],
            version: None,
            delete: None,
            engine,
            aggregates: aggs
                .iter()
                .map(|(c, f)| Aggregate {
                    column: c.to_string(),
                    function: f.clone(),
                    explicit: true,
                })
                .collect(),
            drop_zero_rows: true,
        }
    }

    fn fold(spec: &KeyedSpec, b: &RecordBatch) -> Merged {
        let conv = super::super::fold::key_converter(&b.schema(), &[0]).unwrap();
        let keys = super::super::fold::key_rows(&conv, b, &[0]).unwrap();
        fold_states(spec, b, &keys, None, "t").unwrap()
    }

    fn longs(b: &RecordBatch, c: &str) -> Vec<Option<i64>> {
        let a = b.column_by_name(c).unwrap().as_primitive::<Int64Type>();
        (0..a.len())
            .map(|r| a.is_valid(r).then(|| a.value(r)))
            .collect()
    }

    #[test]
    fn sum_of_max_is_max_and_a_zero_sum_removes_the_key() {
        // (1, a=5, mx=10) + (1, a=-5, mx=20): a sums to 0 and the key goes, whatever mx is;
        // key 2 keeps max(mx), not the sum.
        let b = RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from(vec![1, 1, 2, 2])) as ArrayRef,
            ),
            ("a", Arc::new(Int64Array::from(vec![5, -5, 1, 2])) as _),
            ("mx", Arc::new(Int64Array::from(vec![10, 20, 7, 3])) as _),
        ])
        .unwrap();
        let s = spec(
            MergeEngine::Sum,
            &[("a", Function::Sum), ("mx", Function::Max)],
        );
        let m = fold(&s, &b);
        assert_eq!(m.zero, vec![true, false]);
        assert_eq!(longs(&m.rows, "a"), vec![Some(0), Some(3)]);
        assert_eq!(longs(&m.rows, "mx"), vec![Some(20), Some(7)]);
        // The naive way (every numeric column summed) keeps key 1 with mx = 30.
        let naive = spec(
            MergeEngine::Sum,
            &[("a", Function::Sum), ("mx", Function::Sum)],
        );
        let m = fold(&naive, &b);
        assert_eq!((m.zero[0], longs(&m.rows, "mx")[0]), (false, Some(30)));
    }

    #[test]
    fn distinct_counts_merge_states_instead_of_adding_results() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("u", DataType::Int64, true),
            Field::new("_floe_u_set", DataType::Binary, true),
            Field::new("e", DataType::Int64, true),
            Field::new("_floe_e_hll", DataType::Binary, true),
        ]));
        let s = spec(
            MergeEngine::Aggregate,
            &[
                ("u", Function::CountDistinct("user".into())),
                ("e", Function::ApproxCountDistinct("user".into())),
            ],
        );
        // Two batches of one key: users 0..1000 and 500..1500 (500 seen by both).
        let batch = |lo: i64, hi: i64| {
            let conformed = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(vec![1; (hi - lo) as usize])) as ArrayRef,
                    arrow_array::new_null_array(&DataType::Int64, (hi - lo) as usize),
                    arrow_array::new_null_array(&DataType::Binary, (hi - lo) as usize),
                    arrow_array::new_null_array(&DataType::Int64, (hi - lo) as usize),
                    arrow_array::new_null_array(&DataType::Binary, (hi - lo) as usize),
                ],
            )
            .unwrap();
            let inputs: Inputs = vec![(
                "user".into(),
                Arc::new(Int64Array::from_iter_values(lo..hi)) as ArrayRef,
            )];
            let p = partial_states(&s, &schema, &conformed, &inputs, "b").unwrap();
            fold(&s, &p).rows
        };
        let first = batch(0, 1000);
        let second = batch(500, 1500);
        assert_eq!(longs(&first, "u"), vec![Some(1000)]);
        // Adding the finalized counts double-counts the overlap: 2000.
        let both = arrow_select::concat::concat_batches(&schema, [&first, &second]).unwrap();
        let naive: i64 = longs(&both, "u").iter().flatten().sum();
        assert_eq!(naive, 2000);
        // Merging the states counts each user once.
        let m = fold(&s, &both);
        assert_eq!(longs(&m.rows, "u"), vec![Some(1500)]);
        let approx = longs(&m.rows, "e")[0].unwrap();
        assert!((approx - 1500).abs() < 60, "{approx}");
    }

    #[test]
    fn selectors_avg_and_partial_update_follow_arrival_order() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("avg", DataType::Float64, true),
            Field::new("_floe_avg_sum", DataType::Float64, true),
            Field::new("_floe_avg_count", DataType::Int64, true),
        ]));
        let conformed = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 1, 1])) as ArrayRef,
                Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])) as _,
                arrow_array::new_null_array(&DataType::Float64, 3),
                arrow_array::new_null_array(&DataType::Float64, 3),
                arrow_array::new_null_array(&DataType::Int64, 3),
            ],
        )
        .unwrap();
        let inputs: Inputs = vec![(
            "ms".into(),
            Arc::new(Float64Array::from(vec![Some(1.0), None, Some(5.0)])) as ArrayRef,
        )];
        let strs = |b: &RecordBatch| {
            let a = b.column_by_name("s").unwrap().as_string::<i32>().clone();
            (0..a.len())
                .map(|r| a.is_valid(r).then(|| a.value(r).to_string()))
                .collect::<Vec<_>>()
        };
        for (f, want) in [
            (Function::First, Some("a")),
            (Function::Last, None),
            (Function::LastNonNull, Some("b")),
            (Function::FirstNonNull, Some("a")),
            (Function::Max, Some("b")),
            (Function::Min, Some("a")),
        ] {
            let s = spec(
                MergeEngine::Aggregate,
                &[("s", f.clone()), ("avg", Function::Avg("ms".into()))],
            );
            let p = partial_states(&s, &schema, &conformed, &inputs, "b").unwrap();
            let m = fold(&s, &p);
            assert_eq!(strs(&m.rows), vec![want.map(String::from)], "{f:?}");
            let avg = m
                .rows
                .column_by_name("avg")
                .unwrap()
                .as_primitive::<Float64Type>()
                .value(0);
            assert_eq!(avg, 3.0);
            assert_eq!(longs(&m.rows, "_floe_avg_count"), vec![Some(2)]);
        }
        // partial-update: the last non-null value of each column.
        let s = spec(MergeEngine::PartialUpdate, &[]);
        let m = fold(&s, &conformed);
        assert_eq!(strs(&m.rows), vec![Some("b".to_string())]);
        // first-row: the whole first row.
        let s = spec(MergeEngine::FirstRow, &[]);
        assert_eq!(
            strs(&fold(&s, &conformed).rows),
            vec![Some("a".to_string())]
        );
    }

    #[test]
    fn an_overflowing_sum_is_an_error() {
        let b = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![1, 1])) as ArrayRef),
            (
                "a",
                Arc::new(arrow_array::Int32Array::from(vec![i32::MAX, 1])) as _,
            ),
        ])
        .unwrap();
        let s = spec(MergeEngine::Sum, &[("a", Function::Sum)]);
        let conv = super::super::fold::key_converter(&b.schema(), &[0]).unwrap();
        let keys = super::super::fold::key_rows(&conv, &b, &[0]).unwrap();
        let e = fold_states(&s, &b, &keys, None, "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflows") && e.contains("'a'"), "{e}");
    }
}

#[cfg(test)]
mod partial_update_tests {
    use super::*;

    #[test]
    fn partial_update_orders_by_version_then_arrival() {
        let s = KeyedSpec {
            key: vec!["k".into()],
            version: Some("ver".into()),
            delete: None,
            engine: MergeEngine::PartialUpdate,
            aggregates: vec![],
            drop_zero_rows: true,
        };
        // Arrival: (ver 3, email a), (ver 1, email b, phone p), (ver 3, phone q).
        let b = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![1, 1, 1])) as ArrayRef),
            (
                "email",
                Arc::new(arrow_array::StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    None,
                ])) as _,
            ),
            (
                "phone",
                Arc::new(arrow_array::StringArray::from(vec![
                    None,
                    Some("p"),
                    Some("q"),
                ])) as _,
            ),
            ("ver", Arc::new(Int64Array::from(vec![3, 1, 3])) as _),
        ])
        .unwrap();
        let conv = super::super::fold::key_converter(&b.schema(), &[0]).unwrap();
        let keys = super::super::fold::key_rows(&conv, &b, &[0]).unwrap();
        let v = b.column(3).as_primitive::<Int64Type>().clone();
        let m = fold_states(&s, &b, &keys, Some(&v), "t").unwrap();
        let col = |c: &str| {
            m.rows
                .column_by_name(c)
                .unwrap()
                .as_string::<i32>()
                .value(0)
                .to_string()
        };
        // The version-1 values lose to version 3 wherever version 3 has a value; among the
        // version-3 rows the later arrival wins.
        assert_eq!(
            (col("email"), col("phone")),
            ("a".to_string(), "q".to_string())
        );
        assert_eq!(m.rows.column(3).as_primitive::<Int64Type>().value(0), 3);
    }
}
