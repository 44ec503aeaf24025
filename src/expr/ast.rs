//! floe's own SQL expression tree: what `sql` produces and `bind` type-checks. Independent of
//! the parser crate so callers can build expressions directly.

use std::collections::BTreeSet;
use std::fmt;

use arrow_schema::DataType;

/// A column reference, optionally qualified (`t.id`, `s.id`); see [`Expr::bind`] for how a
/// qualifier is resolved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ColumnRef {
    /// The qualifier before the last dot (a table alias or name), if any.
    pub qualifier: Option<String>,
    /// The column name.
    pub name: String,
}

impl ColumnRef {
    /// The name as written: `qualifier.name` or `name`.
    pub fn qualified_name(&self) -> String {
        match &self.qualifier {
            Some(q) => format!("{q}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A literal value as written in SQL.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// An integer that fits a 64-bit long.
    Int(i64),
    /// A number with an exponent (`1e3`): a double.
    Float(f64),
    /// A number with a fraction (`1.50`) or too large for a long, kept as its exact text.
    Decimal(String),
    /// `'text'`.
    String(String),
    /// `DATE 'YYYY-MM-DD'`, as days since 1970-01-01.
    Date(i32),
    /// `TIMESTAMP '…'`, as microseconds since the epoch (UTC when no offset is given).
    Timestamp(i64),
    /// `X'0A1B'`: bytes (for binary and fixed columns).
    Binary(Vec<u8>),
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (always fractional, as Spark: integer operands give a double)
    Div,
    /// `%`
    Rem,
    /// `=`
    Eq,
    /// `!=` / `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `||` string concatenation
    Concat,
}

impl BinaryOp {
    /// The SQL spelling.
    pub fn sql(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
            BinaryOp::Concat => "||",
        }
    }

    /// Whether this is one of the six comparisons.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq
                | BinaryOp::NotEq
                | BinaryOp::Lt
                | BinaryOp::LtEq
                | BinaryOp::Gt
                | BinaryOp::GtEq
        )
    }

    /// The comparison with its operands swapped (`a < b` is `b > a`).
    pub fn flipped(self) -> BinaryOp {
        match self {
            BinaryOp::Lt => BinaryOp::Gt,
            BinaryOp::LtEq => BinaryOp::GtEq,
            BinaryOp::Gt => BinaryOp::Lt,
            BinaryOp::GtEq => BinaryOp::LtEq,
            other => other,
        }
    }
}

/// Scalar functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `coalesce(a, b, …)`: the first non-NULL argument.
    Coalesce,
    /// `concat(a, b, …)`: NULL if any argument is NULL (as Spark).
    Concat,
    /// `upper(s)`
    Upper,
    /// `lower(s)`
    Lower,
    /// `length(s)` in characters.
    Length,
    /// `abs(x)`
    Abs,
    /// `isnan(x)`: TRUE for NaN, FALSE otherwise, also for NULL (as Spark).
    IsNan,
}

impl Func {
    /// Looks a function up by its (case-insensitive) SQL name.
    pub fn from_name(name: &str) -> Option<Func> {
        Some(match name.to_ascii_lowercase().as_str() {
            "coalesce" => Func::Coalesce,
            "concat" => Func::Concat,
            "upper" | "ucase" => Func::Upper,
            "lower" | "lcase" => Func::Lower,
            "length" | "char_length" | "character_length" => Func::Length,
            "abs" => Func::Abs,
            "isnan" => Func::IsNan,
            _ => return None,
        })
    }

    /// The SQL name.
    pub fn sql(self) -> &'static str {
        match self {
            Func::Coalesce => "coalesce",
            Func::Concat => "concat",
            Func::Upper => "upper",
            Func::Lower => "lower",
            Func::Length => "length",
            Func::Abs => "abs",
            Func::IsNan => "isnan",
        }
    }
}

/// A SQL scalar expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A column.
    Column(ColumnRef),
    /// A literal.
    Literal(Literal),
    /// `-x`
    Neg(Box<Expr>),
    /// `NOT x`
    Not(Box<Expr>),
    /// `l op r`
    Binary {
        /// Left operand.
        left: Box<Expr>,
        /// Operator.
        op: BinaryOp,
        /// Right operand.
        right: Box<Expr>,
    },
    /// `x IS [NOT] NULL`
    IsNull {
        /// Operand.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `x [NOT] IN (a, b, …)`
    InList {
        /// Operand.
        expr: Box<Expr>,
        /// The list.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `x [NOT] BETWEEN low AND high`
    Between {
        /// Operand.
        expr: Box<Expr>,
        /// Lower bound (inclusive).
        low: Box<Expr>,
        /// Upper bound (inclusive).
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `x [NOT] LIKE pattern` / `ILIKE`
    Like {
        /// Operand.
        expr: Box<Expr>,
        /// The pattern (`%`, `_`).
        pattern: Box<Expr>,
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
    },
    /// `CASE [operand] WHEN … THEN … [ELSE …] END`
    Case {
        /// The operand of a simple CASE (`CASE x WHEN 1 THEN …`), `None` for a searched CASE.
        operand: Option<Box<Expr>>,
        /// `(WHEN, THEN)` pairs, in order.
        branches: Vec<(Expr, Expr)>,
        /// `ELSE`; NULL when absent.
        else_expr: Option<Box<Expr>>,
    },
    /// `CAST(x AS type)`
    Cast {
        /// Operand.
        expr: Box<Expr>,
        /// Target type.
        to: DataType,
    },
    /// A function call.
    Function {
        /// The function.
        func: Func,
        /// Arguments.
        args: Vec<Expr>,
    },
}

impl Expr {
    /// An unqualified column reference.
    pub fn col(name: impl Into<String>) -> Expr {
        Expr::Column(ColumnRef {
            qualifier: None,
            name: name.into(),
        })
    }

    /// A literal.
    pub fn lit(l: Literal) -> Expr {
        Expr::Literal(l)
    }

    /// `self op right`.
    pub fn binary(self, op: BinaryOp, right: Expr) -> Expr {
        Expr::Binary {
            left: Box::new(self),
            op,
            right: Box::new(right),
        }
    }

    /// The columns referenced, as written (`qualifier.name` when qualified).
    pub fn columns(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.visit(&mut |e| {
            if let Expr::Column(c) = e {
                out.insert(c.qualified_name());
            }
        });
        out
    }

    /// The column references themselves.
    pub fn column_refs(&self) -> BTreeSet<ColumnRef> {
        let mut out = BTreeSet::new();
        self.visit(&mut |e| {
            if let Expr::Column(c) = e {
                out.insert(c.clone());
            }
        });
        out
    }

    /// Rewrites every column reference with `f` (e.g. to drop or rename qualifiers).
    pub fn map_columns(&self, f: &mut dyn FnMut(&ColumnRef) -> ColumnRef) -> Expr {
        let b = |e: &Expr, f: &mut dyn FnMut(&ColumnRef) -> ColumnRef| Box::new(e.map_columns(f));
        match self {
            Expr::Column(c) => Expr::Column(f(c)),
            Expr::Literal(l) => Expr::Literal(l.clone()),
            Expr::Neg(e) => Expr::Neg(b(e, f)),
            Expr::Not(e) => Expr::Not(b(e, f)),
            Expr::Binary { left, op, right } => Expr::Binary {
                left: b(left, f),
                op: *op,
                right: b(right, f),
            },
            Expr::IsNull { expr, negated } => Expr::IsNull {
                expr: b(expr, f),
                negated: *negated,
            },
            Expr::InList {
                expr,
                list,
                negated,
            } => Expr::InList {
                expr: b(expr, f),
                list: list.iter().map(|e| e.map_columns(f)).collect(),
                negated: *negated,
            },
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => Expr::Between {
                expr: b(expr, f),
                low: b(low, f),
                high: b(high, f),
                negated: *negated,
            },
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => Expr::Like {
                expr: b(expr, f),
                pattern: b(pattern, f),
                negated: *negated,
                case_insensitive: *case_insensitive,
            },
            Expr::Case {
                operand,
                branches,
                else_expr,
            } => Expr::Case {
                operand: operand.as_ref().map(|o| b(o, f)),
                branches: branches
                    .iter()
                    .map(|(w, t)| (w.map_columns(f), t.map_columns(f)))
                    .collect(),
                else_expr: else_expr.as_ref().map(|e| b(e, f)),
            },
            Expr::Cast { expr, to } => Expr::Cast {
                expr: b(expr, f),
                to: to.clone(),
            },
            Expr::Function { func, args } => Expr::Function {
                func: *func,
                args: args.iter().map(|e| e.map_columns(f)).collect(),
            },
        }
    }

    /// The operands directly below this node.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Column(_) | Expr::Literal(_) => vec![],
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull { expr: e, .. } => vec![e],
            Expr::Cast { expr, .. } => vec![expr],
            Expr::Binary { left, right, .. } => vec![left, right],
            Expr::InList { expr, list, .. } => {
                let mut v: Vec<&Expr> = vec![expr];
                v.extend(list.iter());
                v
            }
            Expr::Between {
                expr, low, high, ..
            } => vec![expr, low, high],
            Expr::Like { expr, pattern, .. } => vec![expr, pattern],
            Expr::Case {
                operand,
                branches,
                else_expr,
            } => {
                let mut v: Vec<&Expr> = operand.iter().map(|o| o.as_ref()).collect();
                for (w, t) in branches {
                    v.push(w);
                    v.push(t);
                }
                v.extend(else_expr.iter().map(|e| e.as_ref()));
                v
            }
            Expr::Function { args, .. } => args.iter().collect(),
        }
    }

    /// The depth of the tree (a leaf is 1) and its node count, computed without recursion so
    /// that any tree can be measured before it is walked recursively.
    pub fn depth_and_size(&self) -> (usize, usize) {
        let mut stack = vec![(self, 1usize)];
        let (mut depth, mut size) = (0, 0);
        while let Some((e, d)) = stack.pop() {
            depth = depth.max(d);
            size += 1;
            stack.extend(e.children().into_iter().map(|c| (c, d + 1)));
        }
        (depth, size)
    }

    /// Calls `f` on this node and every node below it.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Column(_) | Expr::Literal(_) => {}
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull { expr: e, .. } => e.visit(f),
            Expr::Cast { expr, .. } => expr.visit(f),
            Expr::Binary { left, right, .. } => {
                left.visit(f);
                right.visit(f);
            }
            Expr::InList { expr, list, .. } => {
                expr.visit(f);
                list.iter().for_each(|e| e.visit(f));
            }
            Expr::Between {
                expr, low, high, ..
            } => {
                expr.visit(f);
                low.visit(f);
                high.visit(f);
            }
            Expr::Like { expr, pattern, .. } => {
                expr.visit(f);
                pattern.visit(f);
            }
            Expr::Case {
                operand,
                branches,
                else_expr,
            } => {
                if let Some(o) = operand {
                    o.visit(f);
                }
                for (w, t) in branches {
                    w.visit(f);
                    t.visit(f);
                }
                if let Some(e) = else_expr {
                    e.visit(f);
                }
            }
            Expr::Function { args, .. } => args.iter().for_each(|e| e.visit(f)),
        }
    }
}

/// The SQL name of an Arrow type as floe's CAST spells it.
pub(crate) fn sql_type_name(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 => "tinyint".into(),
        DataType::Int16 => "smallint".into(),
        DataType::Int32 => "int".into(),
        DataType::Int64 => "bigint".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary".into(),
        DataType::Date32 => "date".into(),
        DataType::Timestamp(_, None) => "timestamp".into(),
        DataType::Timestamp(_, Some(_)) => "timestamptz".into(),
        DataType::Null => "null".into(),
        other => other.to_string(),
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x:e}"),
            Literal::Decimal(d) => f.write_str(d),
            Literal::String(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Literal::Date(d) => match chrono::DateTime::from_timestamp(*d as i64 * 86_400, 0) {
                Some(t) => write!(f, "DATE '{}'", t.format("%Y-%m-%d")),
                None => write!(f, "DATE {d}"),
            },
            Literal::Timestamp(us) => match chrono::DateTime::from_timestamp_micros(*us) {
                Some(t) => write!(f, "TIMESTAMP '{}'", t.format("%Y-%m-%d %H:%M:%S%.f")),
                None => write!(f, "TIMESTAMP {us}"),
            },
            Literal::Binary(b) => {
                f.write_str("X'")?;
                for x in b {
                    write!(f, "{x:02X}")?;
                }
                f.write_str("'")
            }
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, xs: &[Expr]| -> fmt::Result {
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{x}")?;
            }
            Ok(())
        };
        let not = |n: bool| if n { "NOT " } else { "" };
        match self {
            Expr::Column(c) => f.write_str(&c.qualified_name()),
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Neg(e) => write!(f, "-{e}"),
            Expr::Not(e) => write!(f, "NOT {e}"),
            Expr::Binary { left, op, right } => {
                let paren = matches!(op, BinaryOp::And | BinaryOp::Or);
                let side = |f: &mut fmt::Formatter<'_>, e: &Expr| {
                    if paren
                        && matches!(
                            e,
                            Expr::Binary {
                                op: BinaryOp::Or | BinaryOp::And,
                                ..
                            }
                        )
                    {
                        write!(f, "({e})")
                    } else {
                        write!(f, "{e}")
                    }
                };
                side(f, left)?;
                write!(f, " {} ", op.sql())?;
                side(f, right)
            }
            Expr::IsNull { expr, negated } => write!(f, "{expr} IS {}NULL", not(*negated)),
            Expr::InList {
                expr,
                list: l,
                negated,
            } => {
                write!(f, "{expr} {}IN (", not(*negated))?;
                list(f, l)?;
                f.write_str(")")
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => write!(f, "{expr} {}BETWEEN {low} AND {high}", not(*negated)),
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => {
                let kw = if *case_insensitive { "ILIKE" } else { "LIKE" };
                write!(f, "{expr} {}{kw} {pattern}", not(*negated))
            }
            Expr::Case {
                operand,
                branches,
                else_expr,
            } => {
                f.write_str("CASE")?;
                if let Some(o) = operand {
                    write!(f, " {o}")?;
                }
                for (w, t) in branches {
                    write!(f, " WHEN {w} THEN {t}")?;
                }
                if let Some(e) = else_expr {
                    write!(f, " ELSE {e}")?;
                }
                f.write_str(" END")
            }
            Expr::Cast { expr, to } => write!(f, "CAST({expr} AS {})", sql_type_name(to)),
            Expr::Function { func, args } => {
                write!(f, "{}(", func.sql())?;
                list(f, args)?;
                f.write_str(")")
            }
        }
    }
}
