//! Type-checking an [`Expr`] against an Arrow schema: resolves columns (qualified ones by the
//! field name `qualifier.column`), coerces literals and numeric types, and rejects type
//! mismatches before any row is read. The result, a [`BoundExpr`], is evaluated by `eval`.

use std::sync::Arc;

use arrow_array::{
    new_empty_array, new_null_array, Array, ArrayRef, BinaryArray, BooleanArray, Date32Array,
    Datum, Decimal128Array, FixedSizeBinaryArray, Float64Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow_cast::{can_cast_types, cast_with_options, CastOptions};
use arrow_schema::{DataType, Schema, TimeUnit};

use super::ast::{sql_type_name, BinaryOp, ColumnRef, Expr, Func, Literal};
use super::literal::{date_days, timestamp_micros};
use crate::error::{Error, Result};
use crate::spec::resolve_column;

/// An expression checked against a schema, ready to evaluate over batches of that schema.
#[derive(Debug, Clone)]
pub struct BoundExpr {
    pub(crate) node: Node,
    pub(crate) text: String,
}

impl BoundExpr {
    /// The Arrow type [`BoundExpr::evaluate`] returns.
    pub fn data_type(&self) -> &DataType {
        &self.node.ty
    }

    /// The top-level columns the expression reads, ascending.
    pub(crate) fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.node.clone().visit_mut(&mut |n| {
            if let Kind::Column(i) = n.kind {
                out.push(i);
            }
        });
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The same expression over batches that hold only `columns` of the bound schema, in
    /// that order; `None` when it reads a column not among them.
    pub(crate) fn over_columns(&self, columns: &[usize]) -> Option<BoundExpr> {
        let mut out = self.clone();
        let mut missing = false;
        out.node.visit_mut(&mut |n| {
            if let Kind::Column(i) = &mut n.kind {
                match columns.iter().position(|c| c == i) {
                    Some(at) => *i = at,
                    None => missing = true,
                }
            }
        });
        (!missing).then_some(out)
    }
}

impl Node {
    /// The direct children of this node, mutably.
    fn children_mut(&mut self) -> Vec<&mut Node> {
        match &mut self.kind {
            Kind::Column(_) | Kind::Scalar(_) => Vec::new(),
            Kind::Cast(x)
            | Kind::Neg(x)
            | Kind::Not(x)
            | Kind::IsNull(x, _)
            | Kind::Upper(x)
            | Kind::Lower(x)
            | Kind::Length(x)
            | Kind::Abs(x)
            | Kind::IsNan(x)
            | Kind::Field(x, _)
            | Kind::InSet(x, _) => vec![x],
            Kind::Arith(_, l, r) | Kind::Cmp(_, l, r) | Kind::And(l, r) | Kind::Or(l, r) => {
                vec![l, r]
            }
            Kind::Like { expr, pattern, .. } => vec![expr, pattern],
            Kind::Case(branches, els) => branches
                .iter_mut()
                .flat_map(|(w, t)| [w, t])
                .chain([&mut **els])
                .collect(),
            Kind::Coalesce(args) | Kind::Concat(args) => args.iter_mut().collect(),
        }
    }

    /// Calls `f` on this node and every node below it, mutably.
    fn visit_mut(&mut self, f: &mut impl FnMut(&mut Node)) {
        f(self);
        for c in self.children_mut() {
            c.visit_mut(f);
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub kind: Kind,
    pub ty: DataType,
}

/// Arithmetic operators after binding.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl Arith {
    /// The Arrow kernel of this operator.
    pub(crate) fn apply(self, l: &dyn Datum, r: &dyn Datum) -> Result<ArrayRef> {
        use arrow_arith::numeric as n;
        Ok(match self {
            Arith::Add => n::add(l, r)?,
            Arith::Sub => n::sub(l, r)?,
            Arith::Mul => n::mul(l, r)?,
            Arith::Div => n::div(l, r)?,
            Arith::Rem => n::rem(l, r)?,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Column(usize),
    /// A one-row array, never materialised per row.
    Scalar(ArrayRef),
    Cast(Box<Node>),
    Neg(Box<Node>),
    Not(Box<Node>),
    Arith(Arith, Box<Node>, Box<Node>),
    Cmp(BinaryOp, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    IsNull(Box<Node>, bool),
    Like {
        expr: Box<Node>,
        pattern: Box<Node>,
        negated: bool,
        ci: bool,
    },
    Case(Vec<(Node, Node)>, Box<Node>),
    Coalesce(Vec<Node>),
    Concat(Vec<Node>),
    Upper(Box<Node>),
    Lower(Box<Node>),
    Length(Box<Node>),
    Abs(Box<Node>),
    /// `isnan(x)` of a float / double.
    IsNan(Box<Node>),
    /// A field of a struct value, by index.
    Field(Box<Node>, usize),
    /// `x IN (…)` of many non-null literals, probed in a set.
    InSet(Box<Node>, super::in_list::InSetRef),
}

impl Expr {
    /// Type-checks against `schema`. A qualified column `t.c` resolves to the field named
    /// `t.c`; an unqualified `c` to the field `c`, else to the one field named `<q>.c`
    /// (ambiguous when several). Names match case-insensitively when there is no exact match.
    pub fn bind(&self, schema: &Schema) -> Result<BoundExpr> {
        super::sql::check_size(self, &self.to_string())?;
        let b = Binder { schema, root: self };
        Ok(BoundExpr {
            node: b.bind(self)?,
            text: self.to_string(),
        })
    }

    /// Like [`Expr::bind`], and checks the result is a boolean (for WHERE / conditions).
    pub fn bind_predicate(&self, schema: &Schema) -> Result<BoundExpr> {
        let mut b = self.bind(schema)?;
        match &b.node.ty {
            DataType::Boolean => Ok(b),
            DataType::Null => {
                b.node = cast_node(b.node, &DataType::Boolean, self)?;
                Ok(b)
            }
            other => Err(Error::invalid(format!(
                "'{self}' is a {}, not a condition; compare it (e.g. '{self} = …')",
                sql_type_name(other)
            ))),
        }
    }
}

struct Binder<'a> {
    schema: &'a Schema,
    root: &'a Expr,
}

fn scalar(a: ArrayRef) -> Node {
    Node {
        ty: a.data_type().clone(),
        kind: Kind::Scalar(a),
    }
}

fn is_numeric(t: &DataType) -> bool {
    t.is_numeric()
}

fn is_integer(t: &DataType) -> bool {
    t.is_integer()
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn mismatch(e: &Expr, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("type mismatch in '{e}': {why}; add a CAST"))
}

/// The decimal type holding every value of an integer or decimal type.
fn as_decimal(t: &DataType) -> Option<(u8, i8)> {
    match t {
        DataType::Int8 => Some((3, 0)),
        DataType::Int16 => Some((5, 0)),
        DataType::Int32 => Some((10, 0)),
        DataType::Int64 => Some((20, 0)),
        DataType::Decimal128(p, s) => Some((*p, *s)),
        _ => None,
    }
}

/// The type both sides are cast to before comparing or combining them.
pub(crate) fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType as D;
    if a == b {
        return Some(a.clone());
    }
    Some(match (a, b) {
        (D::Null, x) | (x, D::Null) => x.clone(),
        (x, y) if is_integer(x) && is_integer(y) => {
            let w = |t: &D| t.primitive_width().unwrap_or(8);
            if w(x) >= w(y) {
                x.clone()
            } else {
                y.clone()
            }
        }
        (D::Float32 | D::Float64, y) | (y, D::Float32 | D::Float64) if is_numeric(y) => D::Float64,
        (x, y) if as_decimal(x).is_some() && as_decimal(y).is_some() => {
            let (p1, s1) = as_decimal(x)?;
            let (p2, s2) = as_decimal(y)?;
            let scale = s1.max(s2);
            let int = (p1 as i16 - s1 as i16).max(p2 as i16 - s2 as i16);
            let p = (int + scale as i16).min(38) as u8;
            D::Decimal128(p, scale)
        }
        (x, y) if is_string(x) && is_string(y) => {
            if matches!(x, D::LargeUtf8) || matches!(y, D::LargeUtf8) {
                D::LargeUtf8
            } else {
                D::Utf8
            }
        }
        (
            D::FixedSizeBinary(_) | D::Binary | D::LargeBinary,
            D::FixedSizeBinary(_) | D::Binary | D::LargeBinary,
        ) => {
            if matches!(a, D::LargeBinary) || matches!(b, D::LargeBinary) {
                D::LargeBinary
            } else {
                D::Binary
            }
        }
        (D::Date32, D::Timestamp(u, tz)) | (D::Timestamp(u, tz), D::Date32) => {
            D::Timestamp(*u, tz.clone())
        }
        (D::Timestamp(u1, tz1), D::Timestamp(u2, tz2)) => {
            let unit = if *u1 == TimeUnit::Nanosecond || *u2 == TimeUnit::Nanosecond {
                TimeUnit::Nanosecond
            } else {
                TimeUnit::Microsecond
            };
            D::Timestamp(unit, tz1.clone().or_else(|| tz2.clone()))
        }
        _ => return None,
    })
}

/// Casts `n` to `to`: folded now for a scalar, else a cast node.
pub(crate) fn cast_node(n: Node, to: &DataType, e: &Expr) -> Result<Node> {
    if &n.ty == to {
        return Ok(n);
    }
    if !can_cast_types(&n.ty, to) {
        return Err(mismatch(
            e,
            format!(
                "cannot convert {} to {}",
                sql_type_name(&n.ty),
                sql_type_name(to)
            ),
        ));
    }
    Ok(match n.kind {
        Kind::Scalar(a) => {
            let opts = CastOptions {
                safe: false,
                ..Default::default()
            };
            let c = cast_with_options(&a, to, &opts).map_err(|err| {
                Error::invalid(format!(
                    "in '{e}': cannot convert {} to {}: {err}",
                    value_text(&a),
                    sql_type_name(to)
                ))
            })?;
            scalar(c)
        }
        kind => Node {
            kind: Kind::Cast(Box::new(Node { kind, ty: n.ty })),
            ty: to.clone(),
        },
    })
}

fn value_text(a: &ArrayRef) -> String {
    arrow_cast::display::array_value_to_string(a, 0).unwrap_or_else(|_| "the value".into())
}

/// A one-row array of `a` cast to `to`, if that loses nothing (casting back gives `a`).
fn exact_scalar(a: &ArrayRef, to: &DataType) -> Option<ArrayRef> {
    if !can_cast_types(a.data_type(), to) || !can_cast_types(to, a.data_type()) {
        return None;
    }
    let c = arrow_cast::cast(a, to).ok()?;
    if c.logical_null_count() != a.logical_null_count() {
        return None;
    }
    let back = arrow_cast::cast(&c, a.data_type()).ok()?;
    (back.to_data() == a.to_data()).then_some(c)
}

/// A string literal read as a value of `to` (dates and timestamps as the `--where` parser
/// reads them).
fn string_literal_as(s: &str, to: &DataType, e: &Expr) -> Result<Node> {
    let bad = || {
        Error::invalid(format!(
            "in '{e}': '{s}' is not a valid {}",
            sql_type_name(to)
        ))
    };
    let arr: ArrayRef = match to {
        DataType::Date32 => Arc::new(Date32Array::from(vec![date_days(s).ok_or_else(bad)?])),
        DataType::Timestamp(unit, tz) => {
            let us = timestamp_micros(s, tz.is_some()).ok_or_else(bad)?;
            let a: ArrayRef =
                Arc::new(TimestampMicrosecondArray::from(vec![us]).with_timezone_opt(tz.clone()));
            if *unit == TimeUnit::Microsecond {
                a
            } else {
                arrow_cast::cast(&a, to).map_err(|_| bad())?
            }
        }
        _ => {
            let a: ArrayRef = Arc::new(StringArray::from(vec![s]));
            return cast_node(scalar(a), to, e).map_err(|_| bad());
        }
    };
    Ok(scalar(arr))
}

fn literal(l: &Literal, e: &Expr) -> Result<Node> {
    let a: ArrayRef = match l {
        Literal::Null => new_null_array(&DataType::Null, 1),
        Literal::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Literal::Int(i) => Arc::new(Int64Array::from(vec![*i])),
        Literal::Float(f) => Arc::new(Float64Array::from(vec![*f])),
        Literal::String(s) => Arc::new(StringArray::from(vec![s.as_str()])),
        Literal::Date(d) => Arc::new(Date32Array::from(vec![*d])),
        Literal::Timestamp(us) => Arc::new(TimestampMicrosecondArray::from(vec![*us])),
        Literal::Binary(b) => Arc::new(BinaryArray::from(vec![b.as_slice()])),
        Literal::Decimal(d) => {
            let t = d.trim_start_matches(['-', '+']);
            let (int, frac) = t.split_once('.').unwrap_or((t, ""));
            let int = int.trim_start_matches('0');
            let scale = frac.len();
            let precision = (int.len() + scale).max(1);
            if precision > 38 {
                // As Spark: no decimal holds it, and a double would be a guess.
                return Err(Error::invalid(format!(
                    "in '{e}': the decimal literal '{d}' has {precision} digits and a decimal \
                     holds at most 38; write it with fewer digits, or as a double (with an \
                     exponent, like 1.5E40)"
                )));
            } else {
                let v = arrow_cast::parse::parse_decimal::<arrow_array::types::Decimal128Type>(
                    d,
                    precision as u8,
                    scale as i8,
                )
                .map_err(|err| Error::invalid(format!("in '{e}': '{d}': {err}")))?;
                Arc::new(
                    Decimal128Array::from(vec![v])
                        .with_precision_and_scale(precision as u8, scale as i8)?,
                )
            }
        }
    };
    Ok(scalar(a))
}

fn str_lit(n: &Node) -> Option<String> {
    match &n.kind {
        Kind::Scalar(a) if a.data_type() == &DataType::Utf8 && a.is_valid(0) => a
            .as_any()
            .downcast_ref::<StringArray>()
            .map(|s| s.value(0).to_string()),
        _ => None,
    }
}

impl Binder<'_> {
    fn column(&self, c: &ColumnRef) -> Result<Node> {
        let fields = self.schema.fields();
        let want = c.qualified_name();
        let idx = resolve_column(fields.iter().map(|f| f.name().as_str()), &want)
            .map_err(|err| err.context(format!("in '{}'", self.root)))?;
        let idx = match (idx, &c.qualifier) {
            (Some(i), _) => i,
            (None, None) => {
                let suffix = format!(".{}", c.name.to_ascii_lowercase());
                let hits: Vec<usize> = (0..fields.len())
                    .filter(|&i| fields[i].name().to_ascii_lowercase().ends_with(&suffix))
                    .collect();
                match hits.as_slice() {
                    [i] => *i,
                    [] => return Err(self.unknown(&want)),
                    many => {
                        let names: Vec<&str> =
                            many.iter().map(|&i| fields[i].name().as_str()).collect();
                        return Err(Error::invalid(format!(
                            "column '{want}' in '{}' is ambiguous: qualify it as one of {}",
                            self.root,
                            names.join(", ")
                        )));
                    }
                }
            }
            (None, Some(_)) => return self.struct_field(&want),
        };
        Ok(Node {
            kind: Kind::Column(idx),
            ty: fields[idx].data_type().clone(),
        })
    }

    /// `s.a.b`: field `b` of struct field `a` of top-level struct column `s` (names match
    /// exactly, else case-insensitively).
    fn struct_field(&self, want: &str) -> Result<Node> {
        let find = |fields: &arrow_schema::Fields, name: &str| {
            resolve_column(fields.iter().map(|f| f.name().as_str()), name)
                .map_err(|err| err.context(format!("in '{}'", self.root)))
        };
        let mut parts = want.split('.');
        let first = parts.next().unwrap_or(want);
        let idx = find(self.schema.fields(), first)?.ok_or_else(|| self.unknown(want))?;
        let mut node = Node {
            kind: Kind::Column(idx),
            ty: self.schema.field(idx).data_type().clone(),
        };
        for part in parts {
            let DataType::Struct(children) = &node.ty else {
                return Err(self.unknown(want));
            };
            let i = find(children, part)?.ok_or_else(|| self.unknown(want))?;
            let ty = children[i].data_type().clone();
            node = Node {
                kind: Kind::Field(Box::new(node), i),
                ty,
            };
        }
        Ok(node)
    }

    fn unknown(&self, name: &str) -> Error {
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        Error::invalid(format!(
            "unknown column '{name}' in '{}'; available columns: {}",
            self.root,
            names.join(", ")
        ))
    }

    fn boolean(&self, e: &Expr) -> Result<Node> {
        let n = self.bind(e)?;
        match n.ty {
            DataType::Boolean => Ok(n),
            DataType::Null => cast_node(n, &DataType::Boolean, e),
            ref t => Err(mismatch(
                e,
                format!("expected a condition, got a {}", sql_type_name(t)),
            )),
        }
    }

    fn string(&self, e: &Expr) -> Result<Node> {
        let n = self.bind(e)?;
        match n.ty {
            DataType::Utf8 => Ok(n),
            DataType::Boolean | DataType::Binary | DataType::LargeBinary => Err(mismatch(
                e,
                format!("expected a string, got a {}", sql_type_name(&n.ty)),
            )),
            _ => cast_node(n, &DataType::Utf8, e),
        }
    }

    fn numeric(&self, e: &Expr, whole: &Expr) -> Result<Node> {
        let n = self.bind(e)?;
        if is_numeric(&n.ty) || n.ty == DataType::Null {
            Ok(n)
        } else {
            Err(mismatch(
                whole,
                format!("'{e}' is a {}, not a number", sql_type_name(&n.ty)),
            ))
        }
    }

    /// `l op r`: both sides brought to one type; a decimal compared with an exact number
    /// keeps its own type and the literal is moved to its scale (by value, as Spark).
    fn comparison(&self, op: BinaryOp, l: &Expr, r: &Expr, whole: &Expr) -> Result<Node> {
        let ln = self.bind(l)?;
        let rn = self.bind(r)?;
        let cmp = |op, l, r| Node {
            kind: Kind::Cmp(op, Box::new(l), Box::new(r)),
            ty: DataType::Boolean,
        };
        if let (DataType::Decimal128(p, s), Kind::Scalar(a)) = (&ln.ty, &rn.kind) {
            if !matches!(ln.kind, Kind::Scalar(_)) {
                if let Some((op, lit)) = decimal_literal(op, *p, *s, a)? {
                    return Ok(cmp(op, ln, scalar(lit)));
                }
            }
        }
        if let (Kind::Scalar(a), DataType::Decimal128(p, s)) = (&ln.kind, &rn.ty) {
            if !matches!(rn.kind, Kind::Scalar(_)) {
                if let Some((op, lit)) = decimal_literal(op.flipped(), *p, *s, a)? {
                    return Ok(cmp(op, rn, scalar(lit)));
                }
            }
        }
        let (l, r) = self.comparable(ln, rn, whole)?;
        Ok(cmp(op, l, r))
    }

    /// Brings two bound operands of a comparison to one type.
    fn comparable(&self, ln: Node, rn: Node, whole: &Expr) -> Result<(Node, Node)> {
        let (mut ln, mut rn) = (ln, rn);
        // A string literal against binary / fixed / uuid columns: its bytes (a uuid's 16).
        if let Some(s) = str_lit(&rn) {
            if let Some(b) = bytes_literal(&s, &ln.ty, whole)? {
                rn = scalar(b);
            }
        }
        if let Some(s) = str_lit(&ln) {
            if let Some(b) = bytes_literal(&s, &rn.ty, whole)? {
                ln = scalar(b);
            }
        }

        // A string literal takes the other side's type ('2024-01-01' against a date).
        if !is_string(&rn.ty) && rn.ty != DataType::Null {
            if let Some(s) = str_lit(&ln) {
                ln = string_literal_as(&s, &rn.ty, whole)?;
            }
        }
        if !is_string(&ln.ty) && ln.ty != DataType::Null {
            if let Some(s) = str_lit(&rn) {
                rn = string_literal_as(&s, &ln.ty, whole)?;
            }
        }
        // A literal that fits the column's type exactly is cast once, not the column per row.
        // A literal that fits the column's type exactly is cast once, not the column per row
        // (not for float: Spark compares a float column with a number as a double).
        let shortcut = |t: &DataType| is_numeric(t) && *t != DataType::Float32;
        if let Kind::Scalar(a) = &rn.kind {
            if let Some(c) = exact_scalar(a, &ln.ty).filter(|_| shortcut(&ln.ty)) {
                rn = scalar(c);
            }
        }
        if let Kind::Scalar(a) = &ln.kind {
            if let Some(c) = exact_scalar(a, &rn.ty).filter(|_| shortcut(&rn.ty)) {
                ln = scalar(c);
            }
        }
        let t = common_type(&ln.ty, &rn.ty).ok_or_else(|| {
            mismatch(
                whole,
                format!(
                    "cannot compare {} with {}",
                    sql_type_name(&ln.ty),
                    sql_type_name(&rn.ty)
                ),
            )
        })?;
        let t = if t == DataType::Null {
            DataType::Boolean
        } else {
            t
        };
        Ok((cast_node(ln, &t, whole)?, cast_node(rn, &t, whole)?))
    }

    /// Brings all of `ns` to one type (CASE results, COALESCE arguments).
    fn unify(&self, ns: Vec<Node>, whole: &Expr) -> Result<(Vec<Node>, DataType)> {
        let mut t = DataType::Null;
        for n in &ns {
            t = common_type(&t, &n.ty).ok_or_else(|| {
                mismatch(
                    whole,
                    format!(
                        "results have different types ({} and {})",
                        sql_type_name(&t),
                        sql_type_name(&n.ty)
                    ),
                )
            })?;
        }
        let ns = ns
            .into_iter()
            .map(|n| cast_node(n, &t, whole))
            .collect::<Result<Vec<_>>>()?;
        Ok((ns, t))
    }

    fn bind(&self, e: &Expr) -> Result<Node> {
        let bx = Box::new;
        Ok(match e {
            Expr::Column(c) => self.column(c)?,
            Expr::Literal(l) => literal(l, e)?,
            Expr::Neg(x) => {
                let n = self.numeric(x, e)?;
                let ty = n.ty.clone();
                Node {
                    kind: Kind::Neg(bx(n)),
                    ty,
                }
            }
            Expr::Not(x) => Node {
                kind: Kind::Not(bx(self.boolean(x)?)),
                ty: DataType::Boolean,
            },
            Expr::Binary { left, op, right } => match op {
                BinaryOp::And | BinaryOp::Or => {
                    let (l, r) = (bx(self.boolean(left)?), bx(self.boolean(right)?));
                    Node {
                        kind: if *op == BinaryOp::And {
                            Kind::And(l, r)
                        } else {
                            Kind::Or(l, r)
                        },
                        ty: DataType::Boolean,
                    }
                }
                BinaryOp::Concat => {
                    let args = vec![self.string(left)?, self.string(right)?];
                    Node {
                        kind: Kind::Concat(args),
                        ty: DataType::Utf8,
                    }
                }
                op if op.is_comparison() => self.comparison(*op, left, right, e)?,
                _ => self.arith(*op, left, right, e)?,
            },
            Expr::IsNull { expr, negated } => Node {
                kind: Kind::IsNull(bx(self.bind(expr)?), *negated),
                ty: DataType::Boolean,
            },
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                if list.is_empty() {
                    return Err(Error::invalid(format!("'{e}': empty IN list")));
                }
                let eqs = list
                    .iter()
                    .map(|item| self.comparison(BinaryOp::Eq, expr, item, e))
                    .collect::<Result<Vec<_>>>()?;
                let n = match in_set(&eqs)? {
                    Some(n) => n,
                    None => balanced_or(eqs),
                };
                not_if(n, *negated)
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => {
                let n = Node {
                    kind: Kind::And(
                        bx(self.comparison(BinaryOp::GtEq, expr, low, e)?),
                        bx(self.comparison(BinaryOp::LtEq, expr, high, e)?),
                    ),
                    ty: DataType::Boolean,
                };
                not_if(n, *negated)
            }
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => Node {
                kind: Kind::Like {
                    expr: bx(self.string(expr)?),
                    pattern: bx(self.string(pattern)?),
                    negated: *negated,
                    ci: *case_insensitive,
                },
                ty: DataType::Boolean,
            },
            Expr::Case {
                operand,
                branches,
                else_expr,
            } => {
                let mut conds = Vec::new();
                let mut results = Vec::new();
                for (w, t) in branches {
                    let cond = match operand {
                        Some(o) => self.comparison(BinaryOp::Eq, o, w, e)?,
                        None => self.boolean(w)?,
                    };
                    conds.push(cond);
                    results.push(self.bind(t)?);
                }
                results.push(match else_expr {
                    Some(x) => self.bind(x)?,
                    None => literal(&Literal::Null, e)?,
                });
                let (mut results, ty) = self.unify(results, e)?;
                let els = results.pop().ok_or_else(|| Error::invalid("empty CASE"))?;
                Node {
                    kind: Kind::Case(conds.into_iter().zip(results).collect(), bx(els)),
                    ty,
                }
            }
            Expr::Cast { expr, to } => cast_node(self.bind(expr)?, to, e)?,
            Expr::Function { func, args } => self.function(*func, args, e)?,
        })
    }

    fn function(&self, func: Func, args: &[Expr], e: &Expr) -> Result<Node> {
        let bx = Box::new;
        let one = || {
            args.first()
                .ok_or_else(|| Error::invalid(format!("'{e}': missing argument")))
        };
        Ok(match func {
            Func::Coalesce => {
                let ns = args.iter().map(|a| self.bind(a)).collect::<Result<_>>()?;
                let (ns, ty) = self.unify(ns, e)?;
                Node {
                    kind: Kind::Coalesce(ns),
                    ty,
                }
            }
            Func::Concat => Node {
                kind: Kind::Concat(args.iter().map(|a| self.string(a)).collect::<Result<_>>()?),
                ty: DataType::Utf8,
            },
            Func::Upper => Node {
                kind: Kind::Upper(bx(self.string(one()?)?)),
                ty: DataType::Utf8,
            },
            Func::Lower => Node {
                kind: Kind::Lower(bx(self.string(one()?)?)),
                ty: DataType::Utf8,
            },
            Func::Length => Node {
                kind: Kind::Length(bx(self.string(one()?)?)),
                ty: DataType::Int32,
            },
            Func::IsNan => {
                let n = self.numeric(one()?, e)?;
                let n = match n.ty {
                    DataType::Float32 | DataType::Float64 => n,
                    _ => cast_node(n, &DataType::Float64, e)?,
                };
                Node {
                    kind: Kind::IsNan(bx(n)),
                    ty: DataType::Boolean,
                }
            }
            Func::Abs => {
                let n = self.numeric(one()?, e)?;
                let ty = n.ty.clone();
                Node {
                    kind: Kind::Abs(bx(n)),
                    ty,
                }
            }
        })
    }

    fn arith(&self, op: BinaryOp, l: &Expr, r: &Expr, e: &Expr) -> Result<Node> {
        let ln = self.numeric(l, e)?;
        let rn = self.numeric(r, e)?;
        let mut t = common_type(&ln.ty, &rn.ty).ok_or_else(|| {
            mismatch(
                e,
                format!(
                    "cannot apply {} to {} and {}",
                    op.sql(),
                    sql_type_name(&ln.ty),
                    sql_type_name(&rn.ty)
                ),
            )
        })?;
        if t == DataType::Null {
            t = DataType::Int64;
        }
        // '/' is fractional, as in Spark: integers divide as doubles.
        if op == BinaryOp::Div && is_integer(&t) {
            t = DataType::Float64;
        }
        // Decimal arithmetic keeps each side's own precision and scale (the kernel widens);
        // an integer side becomes the decimal that holds it.
        let side = |n: Node| -> Result<Node> {
            match (&t, as_decimal(&n.ty)) {
                (DataType::Decimal128(..), Some((p, s))) => {
                    cast_node(n, &DataType::Decimal128(p, s), e)
                }
                _ => cast_node(n, &t, e),
            }
        };
        let (ln, rn) = (side(ln)?, side(rn)?);
        let a = match op {
            BinaryOp::Add => Arith::Add,
            BinaryOp::Sub => Arith::Sub,
            BinaryOp::Mul => Arith::Mul,
            BinaryOp::Div => Arith::Div,
            _ => Arith::Rem,
        };
        // The result type is whatever the kernel gives (decimals widen); ask it on empty input.
        let ty = a
            .apply(&new_empty_array(&ln.ty), &new_empty_array(&rn.ty))
            .map_err(|err| mismatch(e, err))?
            .data_type()
            .clone();
        Ok(Node {
            kind: Kind::Arith(a, Box::new(ln), Box::new(rn)),
            ty,
        })
    }
}

/// Equalities `x = v1`, …, `x = vn` of one operand `x` with non-null literals, as one set
/// probe (`None`: too few of them, or a type or shape a set does not compare exactly).
fn in_set(eqs: &[Node]) -> Result<Option<Node>> {
    if eqs.len() < super::in_list::MIN_SET_VALUES {
        return Ok(None);
    }
    let mut operand: Option<(&Node, String)> = None;
    let mut values = Vec::with_capacity(eqs.len());
    for n in eqs {
        let Kind::Cmp(BinaryOp::Eq, l, r) = &n.kind else {
            return Ok(None);
        };
        let Kind::Scalar(v) = &r.kind else {
            return Ok(None);
        };
        let shape = format!("{:?}", l);
        match &operand {
            Some((_, s)) if *s != shape => return Ok(None),
            Some(_) => {}
            None => operand = Some((l, shape)),
        }
        values.push(v.clone());
    }
    let Some((x, _)) = operand else {
        return Ok(None);
    };
    if matches!(x.kind, Kind::Scalar(_)) {
        return Ok(None);
    }
    Ok(super::in_list::InSet::new(&x.ty, &values)?.map(|set| Node {
        kind: Kind::InSet(Box::new(x.clone()), Arc::new(set)),
        ty: DataType::Boolean,
    }))
}

/// `nodes` OR-ed as a balanced tree (an IN list of thousands of values stays shallow).
fn balanced_or(mut nodes: Vec<Node>) -> Node {
    while nodes.len() > 1 {
        let mut next = Vec::with_capacity(nodes.len().div_ceil(2));
        let mut it = nodes.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => Node {
                    kind: Kind::Or(Box::new(a), Box::new(b)),
                    ty: DataType::Boolean,
                },
                None => a,
            });
        }
        nodes = next;
    }
    nodes
        .pop()
        .unwrap_or_else(|| scalar(Arc::new(BooleanArray::from(vec![false]))))
}

/// The bytes a string literal stands for against a binary (its UTF-8), a `uuid` / fixed(16)
/// (the parsed UUID) column; `None` for other types. A fixed(16) literal that is no UUID is
/// an error (write it as `X'…'`).
fn bytes_literal(s: &str, other: &DataType, e: &Expr) -> Result<Option<ArrayRef>> {
    Ok(match other {
        DataType::Binary | DataType::LargeBinary => {
            Some(Arc::new(BinaryArray::from(vec![s.as_bytes()])))
        }
        DataType::FixedSizeBinary(16) => {
            let u = uuid::Uuid::parse_str(s).map_err(|_| {
                Error::invalid(format!(
                    "in '{e}': '{s}' is not a UUID; write bytes of a fixed column as X'…'"
                ))
            })?;
            Some(Arc::new(
                FixedSizeBinaryArray::try_from_iter(std::iter::once(u.as_bytes().to_vec()))
                    .map_err(|err| Error::invalid(format!("in '{e}': {err}")))?,
            ))
        }
        DataType::FixedSizeBinary(n) => {
            return Err(Error::invalid(format!(
                "in '{e}': compare a fixed({n}) column with a binary literal X'…', not '{s}'"
            )))
        }
        _ => None,
    })
}

/// `decimal(p, s) op literal` with the literal (an integer or decimal scalar) at scale `s`,
/// by value: a literal with more digits after the point than `s` becomes the nearest value of
/// the column's scale that keeps the same rows (`x > 1.005` is `x > 1.00` at scale 2); one
/// beyond the column's range becomes a comparison with the range's end that is TRUE (or
/// FALSE) for every non-NULL row. `None` when the literal is not an exact number.
fn decimal_literal(
    op: BinaryOp,
    p: u8,
    s: i8,
    lit: &ArrayRef,
) -> Result<Option<(BinaryOp, ArrayRef)>> {
    use arrow_array::cast::AsArray;
    if lit.is_null(0) || s < 0 {
        return Ok(None);
    }
    let (v, t): (i128, i8) = match lit.data_type() {
        DataType::Int64 => (
            lit.as_primitive::<arrow_array::types::Int64Type>().value(0) as i128,
            0,
        ),
        DataType::Int32 => (
            lit.as_primitive::<arrow_array::types::Int32Type>().value(0) as i128,
            0,
        ),
        DataType::Decimal128(_, t) if *t >= 0 => (
            lit.as_primitive::<arrow_array::types::Decimal128Type>()
                .value(0),
            *t,
        ),
        _ => return Ok(None),
    };
    let pow = |n: i8| 10i128.checked_pow(n as u32);
    // The literal at scale s: exact, or (floor, true) when digits are cut.
    let (q, cut): (Option<i128>, bool) = if t <= s {
        (pow(s - t).and_then(|m| v.checked_mul(m)), false)
    } else {
        match pow(t - s) {
            Some(d) => (Some(v.div_euclid(d)), v.rem_euclid(d) != 0),
            None => (Some(if v < 0 { -1 } else { 0 }), v != 0),
        }
    };
    decimal_bound(op, p, s, v.signum() as i8, q, cut).map(Some)
}

/// `decimal(p, s) op q`, where `q` is the floor of the literal at scale `s` (`None`: beyond
/// i128 on the side of `sign`) and `cut` says digits below the scale were dropped.
fn decimal_bound(
    op: BinaryOp,
    p: u8,
    s: i8,
    sign: i8,
    q: Option<i128>,
    cut: bool,
) -> Result<(BinaryOp, ArrayRef)> {
    let pow = |n: i8| 10i128.checked_pow(n as u32);
    let max = pow(p as i8).map(|m| m - 1).unwrap_or(i128::MAX);
    let above = q.is_none_or(|q| q > max) && sign > 0;
    let below = q.is_none_or(|q| q < -max) && sign < 0;
    let (always_true, always_false) = ((BinaryOp::GtEq, -max), (BinaryOp::Gt, max));
    let (op, value) = if above {
        match op {
            BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::NotEq => (BinaryOp::LtEq, max),
            _ => always_false,
        }
    } else if below {
        match op {
            BinaryOp::Gt | BinaryOp::GtEq | BinaryOp::NotEq => always_true,
            _ => (BinaryOp::Lt, -max),
        }
    } else {
        let q = q.unwrap_or(0);
        if !cut {
            (op, q)
        } else {
            // q < literal < q + 1 unit.
            match op {
                BinaryOp::Eq => always_false,
                BinaryOp::NotEq => always_true,
                BinaryOp::Gt | BinaryOp::GtEq => (BinaryOp::Gt, q),
                _ => (BinaryOp::LtEq, q),
            }
        }
    };
    let a = Decimal128Array::from(vec![value]).with_precision_and_scale(p, s)?;
    Ok((op, Arc::new(a)))
}

fn not_if(n: Node, negated: bool) -> Node {
    if negated {
        Node {
            kind: Kind::Not(Box::new(n)),
            ty: DataType::Boolean,
        }
    } else {
        n
    }
}
