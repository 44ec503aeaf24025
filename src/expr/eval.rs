//! Evaluating a [`BoundExpr`] over a `RecordBatch` with Arrow compute kernels. Literals stay
//! one-row scalars until a kernel needs a full column. SQL three-valued logic throughout;
//! division or remainder by zero gives NULL (as Spark with ANSI mode off); integer overflow
//! and an invalid CAST are errors.

use std::sync::Arc;

use arrow_arith::boolean::{and_kleene, not, or_kleene};
use arrow_array::cast::AsArray;
use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Datum, Int32Array, Int64Array, RecordBatch,
    Scalar, StringArray, UInt32Array,
};
use arrow_cast::{can_cast_types, cast_with_options, CastOptions};
use arrow_schema::DataType;
use arrow_select::filter::prep_null_mask_filter;
use arrow_select::zip::zip;

use super::ast::{sql_type_name, BinaryOp};
use super::bind::{Arith, BoundExpr, Kind, Node};
use crate::error::{Error, Result};

/// An intermediate value: a column of the batch's length, or a one-row scalar.
enum Val {
    Array(ArrayRef),
    /// The one-row array, and the same as a `Scalar` for kernels.
    Scalar(ArrayRef, Scalar<ArrayRef>),
}

impl Val {
    fn datum(&self) -> &dyn Datum {
        match self {
            Val::Array(a) => a,
            Val::Scalar(_, s) => s,
        }
    }
    fn array(&self) -> &ArrayRef {
        match self {
            Val::Array(a) => a,
            Val::Scalar(a, _) => a,
        }
    }
    fn is_scalar(&self) -> bool {
        matches!(self, Val::Scalar(..))
    }
    fn scalar(a: ArrayRef) -> Val {
        Val::Scalar(a.clone(), Scalar::new(a))
    }
    /// Wraps a kernel's output: a scalar if every input was one.
    fn wrap(a: ArrayRef, scalar: bool) -> Val {
        if scalar && a.len() == 1 {
            Val::scalar(a)
        } else {
            Val::Array(a)
        }
    }
    fn expand(self, n: usize) -> Result<ArrayRef> {
        match self {
            Val::Array(a) => Ok(a),
            Val::Scalar(a, _) => {
                let idx = UInt32Array::from(vec![0u32; n]);
                Ok(arrow_select::take::take(&a, &idx, None)?)
            }
        }
    }
}

fn bools(a: &ArrayRef, what: &str) -> Result<BooleanArray> {
    a.as_boolean_opt()
        .cloned()
        .ok_or_else(|| Error::invalid(format!("'{what}' is not a condition")))
}

fn strings<'a>(a: &'a ArrayRef, what: &str) -> Result<&'a StringArray> {
    a.as_string_opt::<i32>()
        .ok_or_else(|| Error::invalid(format!("'{what}' is not a string")))
}

fn zero_of(t: &DataType) -> Result<ArrayRef> {
    Ok(arrow_cast::cast(
        &(Arc::new(Int64Array::from(vec![0])) as ArrayRef),
        t,
    )?)
}

impl BoundExpr {
    /// Evaluates over `batch` (of the schema it was bound to): one value per row.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        let v = self.eval(&self.node, batch)?;
        v.expand(batch.num_rows())
    }

    /// Evaluates a condition: `true` only where it is TRUE (NULL counts as false, as WHERE).
    pub fn evaluate_predicate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let a = self.evaluate(batch)?;
        let a = if a.data_type() == &DataType::Null {
            arrow_cast::cast(&a, &DataType::Boolean)?
        } else {
            a
        };
        let b = bools(&a, &self.text)?;
        Ok(if b.null_count() > 0 {
            prep_null_mask_filter(&b)
        } else {
            b
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::invalid(format!("evaluating '{}': {e}", self.text))
    }

    fn eval(&self, n: &Node, batch: &RecordBatch) -> Result<Val> {
        let rows = batch.num_rows();
        Ok(match &n.kind {
            Kind::Column(i) => {
                let a = batch.columns().get(*i).filter(|a| a.data_type() == &n.ty);
                Val::Array(a.cloned().ok_or_else(|| {
                    self.err("the batch does not have the schema the expression was bound to")
                })?)
            }
            Kind::Scalar(a) => Val::scalar(a.clone()),
            Kind::Cast(x) => {
                let v = self.eval(x, batch)?;
                let opts = CastOptions {
                    safe: false,
                    ..Default::default()
                };
                let c = cast_with_options(v.array(), &n.ty, &opts).map_err(|e| self.err(e))?;
                Val::wrap(c, v.is_scalar())
            }
            Kind::Neg(x) => {
                let v = self.eval(x, batch)?;
                let r = arrow_arith::numeric::neg(v.array()).map_err(|e| self.err(e))?;
                Val::wrap(r, v.is_scalar())
            }
            Kind::Not(x) => {
                let v = self.eval(x, batch)?;
                let r = not(&bools(v.array(), &self.text)?)?;
                Val::wrap(Arc::new(r), v.is_scalar())
            }
            Kind::Arith(op, l, r) => {
                let (l, r) = (self.eval(l, batch)?, self.eval(r, batch)?);
                let scalar = l.is_scalar() && r.is_scalar();
                let r = match op {
                    // x / 0 and x % 0 are NULL: blank the zero divisors first.
                    Arith::Div | Arith::Rem => {
                        let zero = Scalar::new(zero_of(r.array().data_type())?);
                        let is_zero = arrow_ord::cmp::eq(r.datum(), &zero)?;
                        let blanked = arrow_select::nullif::nullif(r.array(), &is_zero)?;
                        Val::wrap(blanked, r.is_scalar())
                    }
                    _ => r,
                };
                let out = op.apply(l.datum(), r.datum()).map_err(|e| self.err(e))?;
                Val::wrap(out, scalar)
            }
            Kind::Cmp(op, l, r) => {
                let (l, r) = (self.eval(l, batch)?, self.eval(r, batch)?);
                let scalar = l.is_scalar() && r.is_scalar();
                // Spark's float order: -0.0 = 0.0, every NaN equal and above every number.
                let (l, r) = (normalize_float(l)?, normalize_float(r)?);
                use arrow_ord::cmp;
                let (a, b) = (l.datum(), r.datum());
                let out = match op {
                    BinaryOp::Eq => cmp::eq(a, b),
                    BinaryOp::NotEq => cmp::neq(a, b),
                    BinaryOp::Lt => cmp::lt(a, b),
                    BinaryOp::LtEq => cmp::lt_eq(a, b),
                    BinaryOp::Gt => cmp::gt(a, b),
                    _ => cmp::gt_eq(a, b),
                }
                .map_err(|e| self.err(e))?;
                Val::wrap(Arc::new(out), scalar)
            }
            Kind::And(l, r) | Kind::Or(l, r) => {
                let (l, r) = (self.eval(l, batch)?, self.eval(r, batch)?);
                let scalar = l.is_scalar() && r.is_scalar();
                let len = if scalar { 1 } else { rows };
                let (l, r) = (self.expand_to(l, len)?, self.expand_to(r, len)?);
                let (l, r) = (bools(&l, &self.text)?, bools(&r, &self.text)?);
                let out = if matches!(n.kind, Kind::And(..)) {
                    and_kleene(&l, &r)?
                } else {
                    or_kleene(&l, &r)?
                };
                Val::wrap(Arc::new(out), scalar)
            }
            Kind::InSet(x, set) => {
                let v = self.eval(x, batch)?;
                let out = set.contains(v.array()).map_err(|e| self.err(e))?;
                Val::wrap(Arc::new(out), v.is_scalar())
            }
            Kind::IsNull(x, negated) => {
                let v = self.eval(x, batch)?;
                let a = v.array();
                let out = if *negated {
                    arrow_arith::boolean::is_not_null(a)?
                } else {
                    arrow_arith::boolean::is_null(a)?
                };
                Val::wrap(Arc::new(out), v.is_scalar())
            }
            Kind::Like {
                expr,
                pattern,
                negated,
                ci,
            } => {
                let (l, r) = (self.eval(expr, batch)?, self.eval(pattern, batch)?);
                let scalar = l.is_scalar() && r.is_scalar();
                use arrow_string::like;
                let out = match (negated, ci) {
                    (false, false) => like::like(l.datum(), r.datum()),
                    (true, false) => like::nlike(l.datum(), r.datum()),
                    (false, true) => like::ilike(l.datum(), r.datum()),
                    (true, true) => like::nilike(l.datum(), r.datum()),
                }
                .map_err(|e| self.err(e))?;
                Val::wrap(Arc::new(out), scalar)
            }
            Kind::Case(branches, els) => {
                let mut acc = self.eval(els, batch)?;
                for (cond, then) in branches.iter().rev() {
                    let c = self.eval(cond, batch)?.expand(rows)?;
                    let mask = bools(&c, &self.text)?;
                    let mask = if mask.null_count() > 0 {
                        prep_null_mask_filter(&mask)
                    } else {
                        mask
                    };
                    let t = self.eval(then, batch)?;
                    acc = Val::Array(zip(&mask, t.datum(), acc.datum())?);
                }
                Val::Array(acc.expand(rows)?)
            }
            Kind::Coalesce(args) => {
                let mut it = args.iter().rev();
                let mut acc = match it.next() {
                    Some(last) => self.eval(last, batch)?,
                    None => Val::Array(new_null_array(&n.ty, rows)),
                };
                for a in it {
                    let v = self.eval(a, batch)?;
                    let present = arrow_arith::boolean::is_not_null(v.array())?;
                    acc = if v.is_scalar() {
                        if present.value(0) {
                            v
                        } else {
                            acc
                        }
                    } else {
                        Val::Array(zip(&present, v.datum(), acc.datum())?)
                    };
                }
                acc
            }
            Kind::Concat(args) => {
                let scalar = args.iter().all(|a| matches!(a.kind, Kind::Scalar(_)));
                let len = if scalar { 1 } else { rows };
                let arrays = args
                    .iter()
                    .map(|a| {
                        let v = self.eval(a, batch)?;
                        self.expand_to(v, len)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let refs = arrays
                    .iter()
                    .map(|a| strings(a, &self.text))
                    .collect::<Result<Vec<_>>>()?;
                let out = arrow_string::concat_elements::concat_elements_utf8_many(&refs)?;
                Val::wrap(Arc::new(out), scalar)
            }
            Kind::Upper(x) | Kind::Lower(x) => {
                let v = self.eval(x, batch)?;
                let s = strings(v.array(), &self.text)?;
                let upper = matches!(n.kind, Kind::Upper(_));
                let out: StringArray = s
                    .iter()
                    .map(|o| {
                        o.map(|s| {
                            if upper {
                                s.to_uppercase()
                            } else {
                                s.to_lowercase()
                            }
                        })
                    })
                    .collect();
                Val::wrap(Arc::new(out), v.is_scalar())
            }
            Kind::Length(x) => {
                let v = self.eval(x, batch)?;
                let s = strings(v.array(), &self.text)?;
                let out: Int32Array = s
                    .iter()
                    .map(|o| o.map(|s| s.chars().count() as i32))
                    .collect();
                Val::wrap(Arc::new(out), v.is_scalar())
            }
            Kind::IsNan(x) => {
                let v = self.eval(x, batch)?;
                let a = v.array();
                let out: BooleanArray = match a.data_type() {
                    DataType::Float32 => a
                        .as_primitive::<arrow_array::types::Float32Type>()
                        .iter()
                        .map(|x| Some(x.is_some_and(f32::is_nan)))
                        .collect(),
                    _ => a
                        .as_primitive_opt::<arrow_array::types::Float64Type>()
                        .ok_or_else(|| self.err("isnan needs a float or double"))?
                        .iter()
                        .map(|x| Some(x.is_some_and(f64::is_nan)))
                        .collect(),
                };
                Val::wrap(Arc::new(out), v.is_scalar())
            }
            Kind::Field(x, i) => {
                let v = self.eval(x, batch)?;
                let st = v
                    .array()
                    .as_struct_opt()
                    .ok_or_else(|| self.err("field access on a value that is not a struct"))?;
                let child = st
                    .columns()
                    .get(*i)
                    .cloned()
                    .ok_or_else(|| self.err("struct field out of range"))?;
                // A field of a NULL struct is NULL.
                let nulls =
                    arrow_buffer::NullBuffer::union(st.nulls(), child.logical_nulls().as_ref());
                let data = child.to_data().into_builder().nulls(nulls).build()?;
                Val::wrap(arrow_array::make_array(data), v.is_scalar())
            }
            Kind::Abs(x) => {
                let v = self.eval(x, batch)?;
                let a = v.array();
                let zero = Scalar::new(zero_of(a.data_type())?);
                let negative = arrow_ord::cmp::lt(a, &zero)?;
                let negated = arrow_arith::numeric::neg(a).map_err(|e| self.err(e))?;
                Val::wrap(zip(&negative, &negated, a)?, v.is_scalar())
            }
        })
    }

    fn expand_to(&self, v: Val, len: usize) -> Result<ArrayRef> {
        match v {
            Val::Scalar(a, _) if len == 1 => Ok(a),
            v => v.expand(len),
        }
    }
}

/// Float and double values with -0.0 made 0.0 and every NaN the one positive NaN, so Arrow's
/// total-order comparison kernels give Spark's answers.
fn normalize_float(v: Val) -> Result<Val> {
    use arrow_array::types::{Float32Type, Float64Type};
    let a = v.array();
    // One body for both widths: zero to +0.0, any NaN to the positive NaN.
    macro_rules! normalized {
        ($t:ty, $nan:expr) => {{
            let p = a.as_primitive::<$t>();
            if !p.values().iter().any(|x| *x == 0.0 || x.is_nan()) {
                return Ok(v);
            }
            Arc::new(p.unary::<_, $t>(|x| {
                if x == 0.0 {
                    0.0
                } else if x.is_nan() {
                    $nan
                } else {
                    x
                }
            })) as ArrayRef
        }};
    }
    let out: ArrayRef = match a.data_type() {
        DataType::Float32 => normalized!(Float32Type, f32::NAN),
        DataType::Float64 => normalized!(Float64Type, f64::NAN),
        _ => return Ok(v),
    };
    Ok(Val::wrap(out, v.is_scalar()))
}

/// Casts `array` to `to` (an assignment's value to its column's type), refusing a cast that
/// loses information: a value that does not convert (`'abc'` to long, an overflow) or an
/// integer target for a value with a fractional part.
pub(crate) fn cast_to(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let from = array.data_type();
    if from == to {
        return Ok(array.clone());
    }
    if !can_cast_types(from, to) {
        return Err(Error::invalid(format!(
            "cannot store a {} value in a {} column; add a CAST",
            sql_type_name(from),
            sql_type_name(to)
        )));
    }
    let out = arrow_cast::cast(array, to)?;
    let lost = |i: usize, why: &str| {
        let v = arrow_cast::display::array_value_to_string(array, i)
            .unwrap_or_else(|_| "a value".into());
        Error::invalid(format!(
            "cannot store {v} ({}) in a {} column: {why}",
            sql_type_name(from),
            sql_type_name(to)
        ))
    };
    if out.logical_null_count() != array.logical_null_count() {
        let (src, dst) = (array.logical_nulls(), out.logical_nulls());
        let i = (0..array.len())
            .find(|&i| {
                src.as_ref().is_none_or(|n| n.is_valid(i))
                    && dst.as_ref().is_some_and(|n| n.is_null(i))
            })
            .unwrap_or(0);
        return Err(lost(i, "it does not convert"));
    }
    let fractional = matches!(
        from,
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(..)
    );
    if to.is_integer() && fractional {
        let back = arrow_cast::cast(&out, from)?;
        let differs = arrow_ord::cmp::neq(array, &back)?;
        if let Some(i) = (0..differs.len()).find(|&i| differs.is_valid(i) && differs.value(i)) {
            return Err(lost(i, "it has a fractional part"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse_expr;
    use arrow_array::{
        Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array, StringArray,
        TimestampMicrosecondArray,
    };
    use arrow_schema::{Field, Schema, TimeUnit};

    fn batch() -> RecordBatch {
        let tz = Some("+00:00".into());
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("n", DataType::Int32, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("x", DataType::Float64, true),
            Field::new("d", DataType::Date32, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
                true,
            ),
        ]);
        let day = 19723; // 2024-01-01
        let us = day as i64 * 86_400_000_000;
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(2), None, Some(4)])),
                Arc::new(Int32Array::from(vec![Some(10), None, Some(0), Some(-3)])),
                Arc::new(StringArray::from(vec![
                    Some("ab"),
                    Some("Cd"),
                    None,
                    Some("é"),
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(150), Some(1999), None, Some(5)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(Float64Array::from(vec![
                    Some(0.5),
                    None,
                    Some(2.0),
                    Some(-1.5),
                ])),
                Arc::new(Date32Array::from(vec![
                    Some(day - 1),
                    Some(day),
                    None,
                    Some(day + 1),
                ])),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![
                        Some(us - 1),
                        Some(us),
                        None,
                        Some(us + 86_400_000_000),
                    ])
                    .with_timezone_opt(tz),
                ),
            ],
        )
        .unwrap()
    }

    fn eval(s: &str) -> ArrayRef {
        let b = batch();
        parse_expr(s)
            .unwrap()
            .bind(&b.schema())
            .unwrap()
            .evaluate(&b)
            .unwrap()
    }

    fn pred(s: &str) -> Vec<bool> {
        let b = batch();
        let p = parse_expr(s).unwrap().bind_predicate(&b.schema()).unwrap();
        p.evaluate_predicate(&b)
            .unwrap()
            .iter()
            .map(|v| v.unwrap())
            .collect()
    }

    fn bools(s: &str) -> Vec<Option<bool>> {
        eval(s).as_boolean().iter().collect()
    }

    fn bind_err(s: &str) -> String {
        let b = batch();
        parse_expr(s)
            .unwrap()
            .bind(&b.schema())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn three_valued_logic() {
        assert_eq!(
            bools("id > 1"),
            vec![Some(false), Some(true), None, Some(true)]
        );
        assert_eq!(
            bools("id > 1 OR n = 10"),
            vec![Some(true), Some(true), None, Some(true)]
        );
        assert_eq!(
            bools("id > 1 AND n IS NULL"),
            vec![Some(false), Some(true), Some(false), Some(false)]
        );
        assert_eq!(
            bools("NOT (id > 1)"),
            vec![Some(true), Some(false), None, Some(false)]
        );
        assert_eq!(bools("id = NULL"), vec![None, None, None, None]);
        assert_eq!(pred("id > 1"), vec![false, true, false, true]);
        assert_eq!(pred("NOT (id > 1)"), vec![true, false, false, false]);
        assert_eq!(pred("NULL"), vec![false; 4]);
        assert_eq!(pred("id IS NULL"), vec![false, false, true, false]);
    }

    #[test]
    fn in_between_like() {
        assert_eq!(pred("id IN (1, 4)"), vec![true, false, false, true]);
        // x IN (1, NULL) is TRUE or NULL; NOT IN with a NULL is never TRUE.
        assert_eq!(bools("id IN (1, NULL)"), vec![Some(true), None, None, None]);
        assert_eq!(pred("id NOT IN (1, NULL)"), vec![false; 4]);
        assert_eq!(pred("id NOT IN (1, 2)"), vec![false, false, false, true]);
        assert_eq!(pred("id BETWEEN 2 AND 4"), vec![false, true, false, true]);
        assert_eq!(
            pred("id NOT BETWEEN 2 AND 3"),
            vec![true, false, false, true]
        );
        assert_eq!(pred("name LIKE 'a%'"), vec![true, false, false, false]);
        assert_eq!(pred("name ILIKE 'c_'"), vec![false, true, false, false]);
    }

    /// Long IN lists are probed in a set: the answers (three-valued, under NOT too) equal
    /// the OR of the equalities, for every column type and for lists mixing literal types.
    #[test]
    fn long_in_lists_answer_like_or_chains() {
        let b = batch();
        let lists = [
            ("id", "1, 3, 5, 7, 9, 11, 13, 4"),
            ("id", "1, 3, 5, 7, 9, 11, 13, 4.0"),
            ("id", "1, 3, 5, 7, 9, 11, 13, 4.5"),
            ("id", "1, 3, 5, 7, 9, 11, 13, NULL"),
            ("n", "10, -3, 1, 2, 3, 4, 5, 6, 7"),
            ("n + 1", "11, -2, 1, 2, 3, 4, 5, 6, 7"),
            ("name", "'ab', 'é', 'x', 'y', 'z', 'w', 'v', 'u'"),
            ("name", "'AB', 'cd', 'x', 'y', 'z', 'w', 'v', 'u'"),
            ("price", "1.5, 0.05, 1, 2, 3, 4, 5, 6"),
            ("price", "1.50, 19.990, 1, 2, 3, 4, 5, 6"),
            ("x", "0.5, -1.5, 1, 2, 3, 4, 5, 6, -0.0"),
            (
                "d",
                "DATE '2023-12-31', DATE '2024-01-02', DATE '2000-01-01', DATE '2000-01-02', \
                 DATE '2000-01-03', DATE '2000-01-04', DATE '2000-01-05', DATE '2000-01-06'",
            ),
            (
                "ts",
                "TIMESTAMP '2024-01-01 00:00:00', TIMESTAMP '2024-01-02 00:00:00', \
                 TIMESTAMP '2000-01-01 00:00:00', TIMESTAMP '2000-01-02 00:00:00', \
                 TIMESTAMP '2000-01-03 00:00:00', TIMESTAMP '2000-01-04 00:00:00', \
                 TIMESTAMP '2000-01-05 00:00:00', TIMESTAMP '2000-01-06 00:00:00'",
            ),
        ];
        for (x, list) in lists {
            let ors: Vec<String> = list.split(", ").map(|v| format!("{x} = {v}")).collect();
            for (set, chain) in [
                (
                    format!("{x} IN ({list})"),
                    format!("({})", ors.join(" OR ")),
                ),
                (
                    format!("{x} NOT IN ({list})"),
                    format!("NOT ({})", ors.join(" OR ")),
                ),
            ] {
                let set_bound = parse_expr(&set).unwrap().bind(&b.schema()).unwrap();
                let got: Vec<Option<bool>> = set_bound
                    .evaluate(&b)
                    .unwrap()
                    .as_boolean()
                    .iter()
                    .collect();
                assert_eq!(got, bools(&chain), "{set}");
            }
        }
        // The integer list does take the set path.
        let e = parse_expr("id IN (1, 3, 5, 7, 9, 11, 13, 4)")
            .unwrap()
            .bind(&b.schema())
            .unwrap();
        assert!(matches!(e.node.kind, Kind::InSet(..)), "{e:?}");
    }

    #[test]
    fn arithmetic_and_coercion() {
        let a = eval("id + n");
        assert_eq!(a.data_type(), &DataType::Int64);
        assert_eq!(
            a.as_primitive::<arrow_array::types::Int64Type>()
                .iter()
                .collect::<Vec<_>>(),
            vec![Some(11), None, None, Some(1)]
        );
        // '/' is fractional; division by zero is NULL.
        let a = eval("id / 2");
        assert_eq!(
            a.as_primitive::<arrow_array::types::Float64Type>()
                .iter()
                .collect::<Vec<_>>(),
            vec![Some(0.5), Some(1.0), None, Some(2.0)]
        );
        let a = eval("id / n");
        assert!(a.is_null(2));
        assert!(eval("id % n").is_null(2));
        assert_eq!(eval("x / 0").null_count(), 4);
        // int vs decimal vs double.
        assert_eq!(pred("price > 1.5"), vec![false, true, false, false]);
        assert_eq!(pred("price = 1.50"), vec![true, false, false, false]);
        assert_eq!(pred("price >= 1"), vec![true, true, false, false]);
        assert_eq!(pred("x < n"), vec![true, false, false, false]);
        let a = eval("price * 2");
        assert!(
            matches!(a.data_type(), DataType::Decimal128(_, 2)),
            "{}",
            a.data_type()
        );
        assert_eq!(
            arrow_cast::display::array_value_to_string(&a, 1).unwrap(),
            "39.98"
        );
        assert_eq!(
            eval("abs(n)")
                .as_primitive::<arrow_array::types::Int32Type>()
                .iter()
                .collect::<Vec<_>>(),
            vec![Some(10), None, Some(0), Some(3)]
        );
        assert_eq!(pred("-id < -1"), vec![false, true, false, true]);
    }

    #[test]
    fn dates_and_timestamps() {
        assert_eq!(pred("ts >= '2024-01-01'"), vec![false, true, false, true]);
        assert_eq!(
            pred("ts >= TIMESTAMP '2024-01-01 00:00:00'"),
            vec![false, true, false, true]
        );
        assert_eq!(
            pred("ts < '2024-01-01T00:00:00-01:00'"),
            vec![true, true, false, false]
        );
        assert_eq!(
            pred("d = DATE '2024-01-01'"),
            vec![false, true, false, false]
        );
        assert_eq!(pred("d > '2024-01-01'"), vec![false, false, false, true]);
        assert_eq!(pred("ts >= d"), vec![true, true, false, true]);
        assert!(bind_err("d = '2024-02-30'").contains("not a valid date"));
    }

    #[test]
    fn case_coalesce_cast_concat() {
        let a = eval("CASE WHEN id > 1 THEN 'big' WHEN id = 1 THEN 'one' END");
        assert_eq!(
            a.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("one"), Some("big"), None, Some("big")]
        );
        let a = eval("CASE n WHEN 10 THEN 1 WHEN 0 THEN 2.5 ELSE 0 END");
        assert_eq!(
            (0..4)
                .map(|i| arrow_cast::display::array_value_to_string(&a, i).unwrap())
                .collect::<Vec<_>>(),
            vec!["1.0", "0.0", "2.5", "0.0"]
        );
        let a = eval("coalesce(n, id, -1)");
        assert_eq!(
            a.as_primitive::<arrow_array::types::Int64Type>()
                .iter()
                .collect::<Vec<_>>(),
            vec![Some(10), Some(2), Some(0), Some(-3)]
        );
        let a = eval("coalesce(name, 'none')");
        assert_eq!(a.as_string::<i32>().value(2), "none");
        let a = eval("CAST(id AS string) || '-' || upper(name)");
        assert_eq!(
            a.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("1-AB"), Some("2-CD"), None, Some("4-É")]
        );
        assert_eq!(eval("concat(name, '!')").as_string::<i32>().value(0), "ab!");
        assert_eq!(
            eval("length(name)")
                .as_primitive::<arrow_array::types::Int32Type>()
                .value(3),
            1
        );
        let a = eval("CAST('12.5' AS decimal(5,2))");
        assert_eq!(a.len(), 4);
        assert_eq!(
            arrow_cast::display::array_value_to_string(&a, 3).unwrap(),
            "12.50"
        );
        let b = batch();
        let e = parse_expr("CAST(name AS int)")
            .unwrap()
            .bind(&b.schema())
            .unwrap();
        assert!(e
            .evaluate(&b)
            .unwrap_err()
            .to_string()
            .contains("evaluating 'CAST(name AS int)'"));
    }

    #[test]
    fn bind_errors() {
        let m = bind_err("nope + 1");
        assert!(
            m.contains("unknown column 'nope'") && m.contains("available columns: id, n, name"),
            "{m}"
        );
        let m = bind_err("'abc' + 1");
        assert!(m.contains("type mismatch in ''abc' + 1'"), "{m}");
        let m = bind_err("name = 5");
        assert!(m.contains("cannot compare string with bigint"), "{m}");
        let m = bind_err("id = 'abc'");
        assert!(m.contains("'abc' is not a valid bigint"), "{m}");
        assert!(bind_err("id AND n").contains("expected a condition"));
        let b = batch();
        let m = parse_expr("id + 1")
            .unwrap()
            .bind_predicate(&b.schema())
            .unwrap_err()
            .to_string();
        assert!(m.contains("not a condition"), "{m}");
    }

    #[test]
    fn qualified_columns() {
        let schema = Schema::new(vec![
            Field::new("t.id", DataType::Int64, true),
            Field::new("s.id", DataType::Int64, true),
            Field::new("s.v", DataType::Int64, true),
        ]);
        let b = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![1, 3])),
                Arc::new(Int64Array::from(vec![7, 8])),
            ],
        )
        .unwrap();
        let p = parse_expr("t.id = s.id AND v > 0")
            .unwrap()
            .bind(&b.schema())
            .unwrap();
        assert_eq!(
            p.evaluate_predicate(&b).unwrap().iter().collect::<Vec<_>>(),
            vec![Some(true), Some(false)]
        );
        let m = parse_expr("id = 1")
            .unwrap()
            .bind(&b.schema())
            .unwrap_err()
            .to_string();
        assert!(m.contains("ambiguous") && m.contains("t.id, s.id"), "{m}");
        let m = parse_expr("u.v = 1")
            .unwrap()
            .bind(&b.schema())
            .unwrap_err()
            .to_string();
        assert!(m.contains("unknown column 'u.v'"), "{m}");
    }

    #[test]
    fn cast_to_refuses_lossy() {
        let s: ArrayRef = Arc::new(StringArray::from(vec![Some("12"), None, Some("abc")]));
        let m = cast_to(&s, &DataType::Int64).unwrap_err().to_string();
        assert!(m.contains("cannot store abc"), "{m}");
        let ok: ArrayRef = Arc::new(StringArray::from(vec![Some("12"), None]));
        let out = cast_to(&ok, &DataType::Int64).unwrap();
        assert_eq!(
            out.as_primitive::<arrow_array::types::Int64Type>().value(0),
            12
        );
        let f: ArrayRef = Arc::new(Float64Array::from(vec![2.0, 2.5]));
        assert!(cast_to(&f, &DataType::Int32)
            .unwrap_err()
            .to_string()
            .contains("fractional"));
        let big: ArrayRef = Arc::new(Int64Array::from(vec![1, i64::MAX]));
        assert!(cast_to(&big, &DataType::Int32).is_err());
        let i: ArrayRef = Arc::new(Int64Array::from(vec![3]));
        let d = cast_to(&i, &DataType::Decimal128(10, 2)).unwrap();
        assert_eq!(
            arrow_cast::display::array_value_to_string(&d, 0).unwrap(),
            "3.00"
        );
    }

    fn on(b: &RecordBatch, s: &str) -> Vec<bool> {
        let p = parse_expr(s).unwrap().bind_predicate(&b.schema()).unwrap();
        p.evaluate_predicate(b)
            .unwrap()
            .iter()
            .map(|v| v.unwrap())
            .collect()
    }

    #[test]
    fn spark_float_order() {
        let vals = [f64::NAN, -0.0, 0.0, 1.5, f64::INFINITY, -f64::NAN];
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("d", DataType::Float64, true),
                Field::new("f", DataType::Float32, true),
            ])),
            vec![
                Arc::new(Float64Array::from(vals.to_vec())),
                Arc::new(arrow_array::Float32Array::from(
                    vals.iter().map(|v| *v as f32).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        for c in ["d", "f"] {
            // NaN above every number (also infinity) and equal to itself; -0.0 = 0.0.
            assert_eq!(
                on(&b, &format!("{c} > 1.5")),
                [true, false, false, false, true, true]
            );
            assert_eq!(
                on(&b, &format!("{c} = 0")),
                [false, true, true, false, false, false]
            );
            assert_eq!(on(&b, &format!("{c} < 0")), [false; 6]);
            assert_eq!(
                on(&b, &format!("{c} = CAST('NaN' AS double)")),
                [true, false, false, false, false, true]
            );
            assert_eq!(
                on(&b, &format!("{c} IN (0, 1.5)")),
                [false, true, true, true, false, false]
            );
            assert_eq!(
                on(&b, &format!("isnan({c})")),
                [true, false, false, false, false, true]
            );
        }
    }

    #[test]
    fn decimal_literals_compare_by_value() {
        // price: 1.50, 19.99, NULL, 0.05 (decimal(10,2)).
        assert_eq!(pred("price > 1.499"), [true, true, false, false]);
        assert_eq!(pred("price >= 1.501"), [false, true, false, false]);
        assert_eq!(pred("price < 1.501"), [true, false, false, true]);
        assert_eq!(pred("price = 1.505"), [false; 4]);
        assert_eq!(pred("price != 1.505"), [true, true, false, true]);
        assert_eq!(pred("NOT (price = 1.505)"), [true, true, false, true]);
        assert_eq!(pred("price < 100000000000"), [true, true, false, true]);
        assert_eq!(pred("price > -100000000000.5"), [true, true, false, true]);
        assert_eq!(pred("price > 100000000000"), [false; 4]);
        assert_eq!(pred("price IN (1.5, 2.5)"), [true, false, false, false]);
        assert_eq!(pred("price BETWEEN 1 AND 2"), [true, false, false, false]);
        assert_eq!(pred("1.505 < price"), [false, true, false, false]);
        // 38 digits: still a decimal, by value.
        let zeros = "0".repeat(35);
        assert_eq!(
            pred(&format!("price = 1.50{zeros}")),
            [true, false, false, false]
        );
        assert_eq!(
            pred(&format!("price > 1.50{}1", &zeros[1..])),
            [false, true, false, false]
        );
        assert_eq!(
            pred(&format!("-0.05{zeros}1 < price")),
            [true, true, false, true]
        );
        assert_eq!(
            pred(&format!("price < 1{zeros}0.5")),
            [true, true, false, true]
        );
    }

    #[test]
    fn decimal_literals_no_decimal_holds_are_refused() {
        // As Spark: more than 38 digits (trailing zeros after the point count) is an error,
        // never a double.
        let b = batch();
        for text in [
            format!("price = 1.50{}", "0".repeat(37)),
            format!("price NOT IN (0.05{}1)", "0".repeat(40)),
            format!("price > -1{}.5", "0".repeat(38)),
            "price < 99999999999999999999999999999999999999.9".to_string(),
        ] {
            let err = parse_expr(&text).unwrap().bind(&b.schema()).unwrap_err();
            assert!(
                err.to_string().contains("holds at most 38"),
                "{text}: {err}"
            );
        }
        // Leading zeros do not count; an exponent makes a double.
        assert_eq!(
            pred(&format!("price > 0{}.5", "0".repeat(40))),
            [true, true, false, false]
        );
        assert_eq!(pred("price < 1.5E40"), [true, true, false, true]);
    }

    #[test]
    fn long_chains_and_deep_nesting_are_errors_or_answers_not_crashes() {
        // A small stack, as a tokio worker has: nothing here may overflow it.
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let ors = (0..5000).map(|i| format!("id = {i}")).collect::<Vec<_>>();
                assert_eq!(pred(&ors.join(" OR ")), [true, true, false, true]);
                let ands = (0..20000)
                    .map(|_| "id > 0")
                    .collect::<Vec<_>>()
                    .join(" AND ");
                assert_eq!(pred(&ands), [true, true, false, true]);
                let sum = format!("id{} > 0", " + 1".repeat(5000));
                assert!(parse_expr(&sum).is_err(), "a 5000-deep sum is refused");
                let deep = format!("{}id = 1{}", "(".repeat(6000), ")".repeat(6000));
                let e = parse_expr(&deep).unwrap_err().to_string();
                assert!(e.contains("nested too deeply"), "{e}");
                let nots = format!("{}id = 1", "NOT ".repeat(6000));
                assert!(parse_expr(&nots).is_err());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
