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

pub(crate) fn arith_kernel(op: Arith, l: &dyn Datum, r: &dyn Datum) -> Result<ArrayRef> {
    use arrow_arith::numeric as n;
    Ok(match op {
        Arith::Add => n::add(l, r)?,
        Arith::Sub => n::sub(l, r)?,
        Arith::Mul => n::mul(l, r)?,
        Arith::Div => n::div(l, r)?,
        Arith::Rem => n::rem(l, r)?,
    })
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
                let out = arith_kernel(*op, l.datum(), r.datum()).map_err(|e| self.err(e))?;
                Val::wrap(out, scalar)
            }
            Kind::Cmp(op, l, r) => {
                let (l, r) = (self.eval(l, batch)?, self.eval(r, batch)?);
                let scalar = l.is_scalar() && r.is_scalar();
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
                    let mask = prep_null_mask_filter(&bools(&c, &self.text)?);
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

/// Casts `array` to `to` (an assignment's value to its column's type), refusing a cast that
/// loses information: a value that does not convert (`'abc'` to long, an overflow) or an
/// integer target for a value with a fractional part.
pub fn cast_to(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
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
