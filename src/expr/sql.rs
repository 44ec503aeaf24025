//! SQL text to floe's statement and expression trees: `DELETE`, `UPDATE` and `MERGE` (with
//! `WHEN MATCHED`, `WHEN NOT MATCHED [BY TARGET]` and `WHEN NOT MATCHED BY SOURCE`), parsed by
//! `sqlparser`'s generic dialect. Errors carry the line and column sqlparser reports.

use arrow_schema::{DataType, TimeUnit};
use sqlparser::ast::{
    self as sql, AssignmentTarget, BinaryOperator, CastKind, DataType as SqlType, ExactNumberInfo,
    FromTable, FunctionArg, FunctionArgExpr, FunctionArguments, MergeAction, MergeClauseKind,
    MergeInsertKind, MergeUpdateKind, ObjectName, ObjectNamePart, Spanned, TableFactor,
    TimezoneInfo, UnaryOperator, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Word};

use super::ast::{BinaryOp, ColumnRef, Expr, Func, Literal};
use super::literal::{date_days, timestamp_micros};
use crate::error::{Error, Result};

/// A DML statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `DELETE FROM table [WHERE predicate]`.
    Delete {
        /// The table name as written (`db.t`).
        table: String,
        /// Rows to delete; all rows when `None`.
        predicate: Option<Expr>,
    },
    /// `UPDATE table SET col = expr, … [WHERE predicate]`.
    Update {
        /// The table name as written.
        table: String,
        /// `(column, value)` in order.
        assignments: Vec<(String, Expr)>,
        /// Rows to update; all rows when `None`.
        predicate: Option<Expr>,
    },
    /// `MERGE INTO … USING … ON … WHEN …`.
    Merge(Merge),
}

/// Where a MERGE reads its source rows from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeSource {
    /// A table name (`db.updates`).
    Table(String),
    /// A quoted file path or URL (`'path/to/file.parquet'`).
    Path(String),
}

/// A `MERGE` statement. Column qualifiers in its expressions are normalised to
/// [`Merge::target_qualifier`] and [`Merge::source_qualifier`].
#[derive(Debug, Clone, PartialEq)]
pub struct Merge {
    /// The target table name as written.
    pub target: String,
    /// `MERGE INTO db.t AS alias`.
    pub target_alias: Option<String>,
    /// The source rows.
    pub source: MergeSource,
    /// `USING … AS alias`.
    pub source_alias: Option<String>,
    /// The join keys: `(target column, source column)` pairs, all of which must be equal.
    pub on: Vec<(String, String)>,
    /// The WHEN clauses in order (the first whose condition holds applies to a row).
    pub clauses: Vec<MergeClause>,
}

/// A `WHEN … THEN …` clause of a MERGE.
#[derive(Debug, Clone, PartialEq)]
pub enum MergeClause {
    /// `WHEN MATCHED [AND cond] THEN UPDATE … | DELETE`.
    Matched {
        /// The extra condition.
        condition: Option<Expr>,
        /// What to do with the target row.
        action: MatchedAction,
    },
    /// `WHEN NOT MATCHED [BY TARGET] [AND cond] THEN INSERT …`.
    NotMatched {
        /// The extra condition (over source columns).
        condition: Option<Expr>,
        /// The row to insert.
        insert: Insert,
    },
    /// `WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE … | DELETE`.
    NotMatchedBySource {
        /// The extra condition (over target columns).
        condition: Option<Expr>,
        /// What to do with the target row.
        action: MatchedAction,
    },
}

/// What a matched (or not-matched-by-source) clause does to the target row.
#[derive(Debug, Clone, PartialEq)]
pub enum MatchedAction {
    /// `UPDATE SET col = expr, …` (target column names, unqualified).
    Update(Vec<(String, Expr)>),
    /// `UPDATE SET *`: every target column from the source column of the same name.
    UpdateStar,
    /// `DELETE`.
    Delete,
}

/// The row a `WHEN NOT MATCHED` clause inserts.
#[derive(Debug, Clone, PartialEq)]
pub enum Insert {
    /// `INSERT [(cols)] VALUES (exprs)`; `columns` is empty when omitted (all target columns
    /// in order).
    Values {
        /// Target column names.
        columns: Vec<String>,
        /// One expression per column.
        values: Vec<Expr>,
    },
    /// `INSERT *`: every target column from the source column of the same name.
    Star,
}

impl Merge {
    /// The qualifier target columns carry in this statement's expressions: the alias, else the
    /// last part of the table name.
    pub fn target_qualifier(&self) -> &str {
        self.target_alias
            .as_deref()
            .unwrap_or_else(|| last_part(&self.target))
    }

    /// The qualifier source columns carry: the alias, else the last part of the table name
    /// (a path source must have an alias).
    pub fn source_qualifier(&self) -> &str {
        match (&self.source_alias, &self.source) {
            (Some(a), _) => a,
            (None, MergeSource::Table(t)) => last_part(t),
            (None, MergeSource::Path(p)) => p,
        }
    }
}

fn last_part(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn parse_err(e: ParserError, text: &str) -> Error {
    let msg = match &e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => {
            "expression nested too deeply; simplify it".to_string()
        }
    };
    Error::invalid(format!("SQL syntax error: {msg}, in: {text}")).with_source(e)
}

/// Tokenizes `text`, turning a single-quoted string right after `MERGE … USING` into a marked
/// identifier so sqlparser accepts a file path as the source.
fn tokens(text: &str) -> Result<Vec<TokenWithSpan>> {
    let dialect = GenericDialect {};
    let mut toks = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| parse_err(ParserError::TokenizerError(e.to_string()), text))?;
    let words = toks
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .count();
    if words > MAX_EXPR_TOKENS {
        return Err(Error::invalid(format!(
            "SQL text too large: {words} tokens (floe accepts {MAX_EXPR_TOKENS})"
        )));
    }
    let is_kw = |t: &Token, k: &str| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    let first = toks
        .iter()
        .position(|t| !matches!(t.token, Token::Whitespace(_)));
    if first.is_some_and(|i| is_kw(&toks[i].token, "merge")) {
        let using = toks.iter().position(|t| is_kw(&t.token, "using"));
        if let Some(u) = using {
            let next = toks[u + 1..]
                .iter()
                .position(|t| !matches!(t.token, Token::Whitespace(_)))
                .map(|i| i + u + 1);
            if let Some(n) = next {
                if let Token::SingleQuotedString(path) = &toks[n].token {
                    toks[n].token = Token::Word(Word {
                        value: path.clone(),
                        quote_style: Some(PATH_QUOTE),
                        keyword: sqlparser::keywords::Keyword::NoKeyword,
                    });
                }
            }
        }
    }
    Ok(toks)
}

/// Marks a MERGE source identifier that was written as a quoted path.
const PATH_QUOTE: char = '\'';

fn parser(text: &str) -> Result<Parser<'static>> {
    static DIALECT: GenericDialect = GenericDialect {};
    Ok(Parser::new(&DIALECT).with_tokens_with_locations(tokens(text)?))
}

fn expect_end(p: &mut Parser<'_>, text: &str) -> Result<()> {
    while p.consume_token(&Token::SemiColon) {}
    let t = p.peek_token();
    if t.token != Token::EOF {
        return Err(Error::invalid(format!(
            "SQL syntax error: unexpected '{}'{} (expected end of input), in: {text}",
            t.token, t.span.start
        )));
    }
    Ok(())
}

/// Parses one DML statement: `DELETE`, `UPDATE` or `MERGE`.
pub fn parse_statement(text: &str) -> Result<Statement> {
    let mut p = parser(text)?;
    let stmt = p.parse_statement().map_err(|e| parse_err(e, text))?;
    expect_end(&mut p, text)?;
    match stmt {
        sql::Statement::Delete(d) => delete(d, text),
        sql::Statement::Update(u) => update(u, text),
        sql::Statement::Merge(m) => merge(m, text).map(Statement::Merge),
        sql::Statement::Query(_) => Err(Error::invalid(format!(
            "'{}': floe sql runs DELETE, UPDATE, MERGE and ALTER TABLE; to read, use `floe scan \
             TABLE --columns … --where …` (or DuckDB's iceberg_scan on the table's metadata file, \
             which `floe describe TABLE` prints)",
            first_words(text)
        ))),
        other => Err(Error::invalid(format!(
            "unsupported statement '{}': floe runs DELETE, UPDATE and MERGE",
            first_words(&other.to_string())
        ))),
    }
}

fn first_words(s: &str) -> String {
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The deepest expression tree floe accepts (after chains of AND / OR are balanced).
pub const MAX_EXPR_DEPTH: usize = 256;
/// The most tokens (words, literals, operators) one expression or statement may have.
pub(super) const MAX_EXPR_TOKENS: usize = 100_000;

/// Parses a scalar or boolean expression: every `--where`, `--set` value and DML condition
/// goes through this one grammar. Chains of `AND` / `OR` (thousands of terms) become balanced
/// trees; a tree deeper than [`MAX_EXPR_DEPTH`] is refused with an error, never a crash.
pub fn parse_expr(text: &str) -> Result<Expr> {
    let mut p = parser(text)?;
    let e = p.parse_expr().map_err(|e| parse_err(e, text))?;
    expect_end(&mut p, text)?;
    let out = expr(&e)?;
    check_size(&out, text)?;
    Ok(out)
}

/// Refuses an expression too deep or too large to evaluate safely.
pub(crate) fn check_size(e: &Expr, text: &str) -> Result<()> {
    let (depth, _) = e.depth_and_size();
    if depth > MAX_EXPR_DEPTH {
        let shown: String = text.chars().take(60).collect();
        return Err(Error::invalid(format!(
            "expression nested too deeply ({depth} levels; floe accepts {MAX_EXPR_DEPTH}): '{shown}…'; \
             use IN (…) for long lists of values"
        )));
    }
    Ok(())
}

/// Parses `a = a + 1, b = upper(b)` (for `--set`).
pub fn parse_assignments(text: &str) -> Result<Vec<(String, Expr)>> {
    let mut p = parser(text)?;
    let a = p
        .parse_comma_separated(Parser::parse_assignment)
        .map_err(|e| parse_err(e, text))?;
    expect_end(&mut p, text)?;
    assignments(&a, &[])
}

fn unsupported(what: &str, node: &impl Spanned, shown: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!("unsupported {what} '{shown}'{}", node.span().start))
}

fn object_name(n: &ObjectName) -> Result<Vec<String>> {
    n.0.iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Ok(i.value.clone()),
            ObjectNamePart::Function(_) => Err(unsupported("name", n, n)),
        })
        .collect()
}

/// A table factor's `(name parts, alias, was a quoted path)`.
fn table(t: &TableFactor) -> Result<(Vec<String>, Option<String>, bool)> {
    match t {
        TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => {
            let path = matches!(name.0.as_slice(), [ObjectNamePart::Identifier(i)] if i.quote_style == Some(PATH_QUOTE));
            Ok((
                object_name(name)?,
                alias.as_ref().map(|a| a.name.value.clone()),
                path,
            ))
        }
        other => Err(unsupported(
            "table reference (use a table name or a quoted file path)",
            other,
            other,
        )),
    }
}

/// Drops qualifiers naming the statement's own table (`DELETE FROM db.t x WHERE x.id = 1`).
fn unqualify(e: Expr, names: &[String]) -> Expr {
    e.map_columns(&mut |c| match &c.qualifier {
        Some(q) if names.iter().any(|n| n.eq_ignore_ascii_case(q)) => ColumnRef {
            qualifier: None,
            name: c.name.clone(),
        },
        _ => c.clone(),
    })
}

fn own_names(parts: &[String], alias: &Option<String>) -> Vec<String> {
    let mut names = vec![parts.join(".")];
    names.extend(parts.last().cloned());
    names.extend(alias.clone());
    names
}

fn delete(d: sql::Delete, text: &str) -> Result<Statement> {
    let tables = match &d.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    if d.using.is_some() || d.returning.is_some() || d.limit.is_some() || !d.tables.is_empty() {
        return Err(Error::invalid(format!(
            "DELETE supports only 'DELETE FROM table [WHERE …]', in: {text}"
        )));
    }
    let [t] = tables.as_slice() else {
        return Err(Error::invalid(format!(
            "DELETE needs exactly one table, in: {text}"
        )));
    };
    if !t.joins.is_empty() {
        return Err(Error::invalid(format!("DELETE cannot join, in: {text}")));
    }
    let (parts, alias, _) = table(&t.relation)?;
    let names = own_names(&parts, &alias);
    let predicate = d
        .selection
        .as_ref()
        .map(expr)
        .transpose()?
        .map(|e| unqualify(e, &names));
    Ok(Statement::Delete {
        table: parts.join("."),
        predicate,
    })
}

fn update(u: sql::Update, text: &str) -> Result<Statement> {
    if u.from.is_some() || u.returning.is_some() || u.limit.is_some() || !u.table.joins.is_empty() {
        return Err(Error::invalid(format!(
            "UPDATE supports only 'UPDATE table SET col = expr, … [WHERE …]' (for a join use MERGE), in: {text}"
        )));
    }
    let (parts, alias, _) = table(&u.table.relation)?;
    let names = own_names(&parts, &alias);
    let assignments = assignments(&u.assignments, &names)?
        .into_iter()
        .map(|(c, e)| (c, unqualify(e, &names)))
        .collect();
    let predicate = u
        .selection
        .as_ref()
        .map(expr)
        .transpose()?
        .map(|e| unqualify(e, &names));
    Ok(Statement::Update {
        table: parts.join("."),
        assignments,
        predicate,
    })
}

/// `(column, expr)` pairs; a target column may be qualified by one of `own` names.
fn assignments(a: &[sql::Assignment], own: &[String]) -> Result<Vec<(String, Expr)>> {
    let mut out: Vec<(String, Expr)> = Vec::new();
    for x in a {
        let AssignmentTarget::ColumnName(n) = &x.target else {
            return Err(unsupported("assignment target", &x.value, &x.target));
        };
        let mut parts = object_name(n)?;
        let col = parts.pop().unwrap_or_default();
        let q = parts.join(".");
        if !parts.is_empty() && !own.iter().any(|o| o.eq_ignore_ascii_case(&q)) {
            return Err(Error::invalid(format!(
                "SET {}: '{q}' is not the table being updated; name the target column alone",
                x.target
            )));
        }
        if out.iter().any(|(c, _)| c.eq_ignore_ascii_case(&col)) {
            return Err(Error::invalid(format!(
                "column '{col}' is assigned twice in SET; assign it once"
            )));
        }
        out.push((col, expr(&x.value)?));
    }
    Ok(out)
}

fn merge(m: sql::Merge, text: &str) -> Result<Merge> {
    if m.output.is_some() {
        return Err(Error::invalid(format!(
            "MERGE … OUTPUT/RETURNING is not supported, in: {text}"
        )));
    }
    let (tparts, target_alias, _) = table(&m.table)?;
    let (sparts, source_alias, is_path) = table(&m.source)?;
    let source = if is_path {
        MergeSource::Path(sparts.join("."))
    } else {
        MergeSource::Table(sparts.join("."))
    };
    if is_path && source_alias.is_none() {
        return Err(Error::invalid(format!(
            "MERGE: give the file source an alias (USING '{}' AS s) to qualify its columns",
            sparts.join(".")
        )));
    }
    let mut merge = Merge {
        target: tparts.join("."),
        target_alias: target_alias.clone(),
        source,
        source_alias: source_alias.clone(),
        on: Vec::new(),
        clauses: Vec::new(),
    };
    let tq = merge.target_qualifier().to_string();
    let sq = merge.source_qualifier().to_string();
    if tq.eq_ignore_ascii_case(&sq) {
        return Err(Error::invalid(format!(
            "MERGE: target and source are both called '{tq}'; give them distinct aliases (… AS t USING … AS s)"
        )));
    }
    let tnames = own_names(&tparts, &target_alias);
    let snames = if is_path {
        source_alias.iter().cloned().collect()
    } else {
        own_names(&sparts, &source_alias)
    };
    // Qualifiers: target names to `tq`, source names to `sq`; the alias wins over a name.
    let norm = |e: Expr| -> Expr {
        e.map_columns(&mut |c| {
            let q = match &c.qualifier {
                None => None,
                Some(q)
                    if target_alias
                        .as_ref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(q)) =>
                {
                    Some(tq.clone())
                }
                Some(q)
                    if source_alias
                        .as_ref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(q)) =>
                {
                    Some(sq.clone())
                }
                Some(q) if tnames.iter().any(|n| n.eq_ignore_ascii_case(q)) => Some(tq.clone()),
                Some(q) if snames.iter().any(|n| n.eq_ignore_ascii_case(q)) => Some(sq.clone()),
                Some(q) => Some(q.clone()),
            };
            ColumnRef {
                qualifier: q,
                name: c.name.clone(),
            }
        })
    };
    merge.on = on_keys(&norm(expr(&m.on)?), &tq, &sq)?;
    let cond = |p: &Option<sql::Expr>| -> Result<Option<Expr>> {
        Ok(p.as_ref().map(expr).transpose()?.map(norm))
    };
    for c in &m.clauses {
        let condition = cond(&c.predicate)?;
        let matched_action = |a: &MergeAction| -> Result<MatchedAction> {
            match a {
                MergeAction::Delete { .. } => Ok(MatchedAction::Delete),
                MergeAction::Update(u) => {
                    if u.update_predicate.is_some() || u.delete_predicate.is_some() {
                        return Err(Error::invalid(format!(
                            "MERGE: UPDATE … WHERE / DELETE WHERE is not supported; put the condition in WHEN MATCHED AND …, in: {text}"
                        )));
                    }
                    match &u.kind {
                        MergeUpdateKind::Wildcard => Ok(MatchedAction::UpdateStar),
                        MergeUpdateKind::Set(a) => Ok(MatchedAction::Update(
                            assignments(a, &tnames)?
                                .into_iter()
                                .map(|(c, e)| (c, norm(e)))
                                .collect(),
                        )),
                    }
                }
                other => Err(unsupported("MERGE action", c, other)),
            }
        };
        let clause = match c.clause_kind {
            MergeClauseKind::Matched => MergeClause::Matched {
                condition,
                action: matched_action(&c.action)?,
            },
            MergeClauseKind::NotMatchedBySource => MergeClause::NotMatchedBySource {
                condition,
                action: matched_action(&c.action)?,
            },
            MergeClauseKind::NotMatched | MergeClauseKind::NotMatchedByTarget => {
                let MergeAction::Insert(i) = &c.action else {
                    return Err(unsupported("WHEN NOT MATCHED action", c, &c.action));
                };
                if i.insert_predicate.is_some() {
                    return Err(Error::invalid(format!(
                        "MERGE: INSERT … WHERE is not supported; put the condition in WHEN NOT MATCHED AND …, in: {text}"
                    )));
                }
                let insert = match &i.kind {
                    MergeInsertKind::Wildcard => Insert::Star,
                    MergeInsertKind::Row => {
                        return Err(unsupported("INSERT ROW (use INSERT *)", c, &c.action))
                    }
                    MergeInsertKind::Values(v) => {
                        let [row] = v.rows.as_slice() else {
                            return Err(Error::invalid(format!(
                                "MERGE: INSERT takes exactly one VALUES row: {}",
                                c.action
                            )));
                        };
                        let columns = i
                            .columns
                            .iter()
                            .map(|n| object_name(n).map(|mut p| p.pop().unwrap_or_default()))
                            .collect::<Result<Vec<_>>>()?;
                        if !columns.is_empty() && columns.len() != row.len() {
                            return Err(Error::invalid(format!(
                                "MERGE: INSERT names {} columns but gives {} values: {}",
                                columns.len(),
                                row.len(),
                                c.action
                            )));
                        }
                        let values = row
                            .iter()
                            .map(|e| expr(e).map(norm))
                            .collect::<Result<Vec<_>>>()?;
                        Insert::Values { columns, values }
                    }
                };
                MergeClause::NotMatched { condition, insert }
            }
        };
        merge.clauses.push(clause);
    }
    if merge.clauses.is_empty() {
        return Err(Error::invalid(format!(
            "MERGE needs at least one WHEN clause, in: {text}"
        )));
    }
    Ok(merge)
}

/// `t.a = s.a AND t.b = s.b` to `[(a, a), (b, b)]`.
fn on_keys(on: &Expr, tq: &str, sq: &str) -> Result<Vec<(String, String)>> {
    let mut conj = Vec::new();
    let mut stack = vec![on];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Binary {
                left,
                op: BinaryOp::And,
                right,
            } => {
                stack.push(right);
                stack.push(left);
            }
            other => conj.push(other),
        }
    }
    let bad = |e: &Expr, why: &str| {
        Error::invalid(format!(
            "MERGE ON: '{e}' {why}; ON must be {tq}.col = {sq}.col equalities joined by AND (put other conditions in WHEN … AND …)"
        ))
    };
    let mut keys = Vec::new();
    for e in conj {
        let Expr::Binary {
            left,
            op: BinaryOp::Eq,
            right,
        } = e
        else {
            return Err(bad(e, "is not an equality"));
        };
        let (Expr::Column(l), Expr::Column(r)) = (left.as_ref(), right.as_ref()) else {
            return Err(bad(e, "does not compare two columns"));
        };
        let side = |c: &ColumnRef| match c.qualifier.as_deref() {
            Some(q) if q == tq => Some(true),
            Some(q) if q == sq => Some(false),
            _ => None,
        };
        match (side(l), side(r)) {
            (Some(true), Some(false)) => keys.push((l.name.clone(), r.name.clone())),
            (Some(false), Some(true)) => keys.push((r.name.clone(), l.name.clone())),
            _ => {
                return Err(bad(
                    e,
                    "does not compare a target column with a source column (qualify both)",
                ))
            }
        }
    }
    Ok(keys)
}

fn number(n: &str) -> Literal {
    if let Ok(i) = n.parse::<i64>() {
        return Literal::Int(i);
    }
    if n.contains(['e', 'E']) {
        if let Ok(f) = n.parse::<f64>() {
            return Literal::Float(f);
        }
    }
    Literal::Decimal(n.to_string())
}

fn negate(l: Literal) -> Option<Literal> {
    Some(match l {
        Literal::Int(i) => Literal::Int(i.checked_neg()?),
        Literal::Float(f) => Literal::Float(-f),
        Literal::Decimal(d) => match d.strip_prefix('-') {
            Some(p) => Literal::Decimal(p.to_string()),
            None => Literal::Decimal(format!("-{d}")),
        },
        _ => return None,
    })
}

fn value(v: &sql::ValueWithSpan) -> Result<Literal> {
    Ok(match &v.value {
        Value::Number(n, _) => number(n),
        Value::SingleQuotedString(s) => Literal::String(s.clone()),
        Value::Boolean(b) => Literal::Bool(*b),
        Value::Null => Literal::Null,
        Value::HexStringLiteral(h) => Literal::Binary(hex(h).ok_or_else(|| {
            Error::invalid(format!(
                "X'{h}'{}: a binary literal needs an even number of hex digits",
                v.span().start
            ))
        })?),
        other => return Err(unsupported("literal", v, other)),
    })
}

fn typed_literal(t: &sql::TypedString, node: &sql::Expr) -> Result<Literal> {
    let Value::SingleQuotedString(s) = &t.value.value else {
        return Err(unsupported("typed literal", node, node));
    };
    let invalid = |what: &str| {
        Error::invalid(format!(
            "{node}: '{s}' is not a valid {what}{}",
            node.span().start
        ))
    };
    match &t.data_type {
        SqlType::Date => date_days(s)
            .map(Literal::Date)
            .ok_or_else(|| invalid("date (YYYY-MM-DD)")),
        SqlType::Timestamp(_, tz) => timestamp_micros(s, *tz != TimezoneInfo::WithoutTimeZone)
            .map(Literal::Timestamp)
            .ok_or_else(|| invalid("timestamp (YYYY-MM-DD[ HH:MM:SS[.ffffff]][+HH:MM])")),
        SqlType::Decimal(_) | SqlType::Numeric(_) | SqlType::Dec(_) => {
            let t = s.trim();
            let ok = !t.is_empty()
                && t.trim_start_matches(['-', '+'])
                    .split_once('.')
                    .map_or_else(
                        || {
                            t.trim_start_matches(['-', '+'])
                                .chars()
                                .all(|c| c.is_ascii_digit())
                        },
                        |(a, b)| (a.chars().chain(b.chars())).all(|c| c.is_ascii_digit()),
                    );
            if ok {
                Ok(Literal::Decimal(t.to_string()))
            } else {
                Err(invalid("decimal"))
            }
        }
        _ => Err(unsupported("typed literal", node, node)),
    }
}

/// SQL type names to Arrow types (Spark/Iceberg spelling: int, bigint/long, double, float,
/// decimal(p,s), string/varchar, boolean, date, timestamp, timestamptz, binary).
pub(crate) fn arrow_type(t: &SqlType) -> Option<DataType> {
    let tz = || Some("+00:00".into());
    Some(match t {
        SqlType::TinyInt(_) => DataType::Int8,
        SqlType::SmallInt(_) | SqlType::Int2(_) => DataType::Int16,
        SqlType::Int(_) | SqlType::Integer(_) | SqlType::Int4(_) | SqlType::Int32 => {
            DataType::Int32
        }
        SqlType::BigInt(_) | SqlType::Int8(_) | SqlType::Int64 => DataType::Int64,
        SqlType::Float(ExactNumberInfo::None) | SqlType::Real | SqlType::Float4 => {
            DataType::Float32
        }
        SqlType::Float32 => DataType::Float32,
        SqlType::Float(ExactNumberInfo::Precision(p)) if *p <= 24 => DataType::Float32,
        SqlType::Float(_)
        | SqlType::Double(_)
        | SqlType::DoublePrecision
        | SqlType::Float8
        | SqlType::Float64 => DataType::Float64,
        SqlType::Decimal(i) | SqlType::Numeric(i) | SqlType::Dec(i) => {
            let (p, s) = match i {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
            };
            if p == 0 || p > 38 || s > p {
                return None;
            }
            DataType::Decimal128(p as u8, s as i8)
        }
        SqlType::String(_)
        | SqlType::Varchar(_)
        | SqlType::Text
        | SqlType::Char(_)
        | SqlType::Character(_)
        | SqlType::CharacterVarying(_)
        | SqlType::CharVarying(_)
        | SqlType::Nvarchar(_) => DataType::Utf8,
        SqlType::Boolean | SqlType::Bool => DataType::Boolean,
        SqlType::Date => DataType::Date32,
        SqlType::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz())
        }
        SqlType::Timestamp(_, _) | SqlType::TimestampNtz(_) | SqlType::Datetime(_) => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        SqlType::Binary(_) | SqlType::Varbinary(_) | SqlType::Bytea | SqlType::Blob(_) => {
            DataType::Binary
        }
        SqlType::Custom(n, m) if m.is_empty() => {
            match n.to_string().to_ascii_lowercase().as_str() {
                "long" => DataType::Int64,
                "short" => DataType::Int16,
                "byte" => DataType::Int8,
                "timestamptz" | "timestamp_ltz" => DataType::Timestamp(TimeUnit::Microsecond, tz()),
                "timestamp_ntz" => DataType::Timestamp(TimeUnit::Microsecond, None),
                _ => return None,
            }
        }
        _ => return None,
    })
}

fn function(f: &sql::Function, node: &sql::Expr) -> Result<Expr> {
    let name = f.name.to_string();
    let func = Func::from_name(&name).ok_or_else(|| {
        Error::invalid(format!(
            "unknown function '{name}'{}; floe supports coalesce, concat, upper, lower, length, abs",
            node.span().start
        ))
    })?;
    if f.filter.is_some() || f.over.is_some() || !f.within_group.is_empty() {
        return Err(unsupported("function call", node, node));
    }
    let args = match &f.args {
        FunctionArguments::None => Vec::new(),
        FunctionArguments::List(l) if l.duplicate_treatment.is_none() && l.clauses.is_empty() => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => expr(e),
                _ => Err(unsupported("function argument", node, a)),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => return Err(unsupported("function call", node, node)),
    };
    let ok = match func {
        Func::Coalesce | Func::Concat => !args.is_empty(),
        Func::Upper | Func::Lower | Func::Length | Func::Abs | Func::IsNan => args.len() == 1,
    };
    if !ok {
        return Err(Error::invalid(format!(
            "{node}: wrong number of arguments to {}{}",
            func.sql(),
            node.span().start
        )));
    }
    Ok(Expr::Function { func, args })
}

fn hex(h: &str) -> Option<Vec<u8>> {
    if h.len() % 2 != 0 {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

fn binary_op(e: &sql::Expr, op: &BinaryOperator) -> Result<BinaryOp> {
    Ok(match op {
        BinaryOperator::Plus => BinaryOp::Add,
        BinaryOperator::Minus => BinaryOp::Sub,
        BinaryOperator::Multiply => BinaryOp::Mul,
        BinaryOperator::Divide => BinaryOp::Div,
        BinaryOperator::Modulo => BinaryOp::Rem,
        BinaryOperator::StringConcat => BinaryOp::Concat,
        BinaryOperator::Eq => BinaryOp::Eq,
        BinaryOperator::NotEq => BinaryOp::NotEq,
        BinaryOperator::Lt => BinaryOp::Lt,
        BinaryOperator::LtEq => BinaryOp::LtEq,
        BinaryOperator::Gt => BinaryOp::Gt,
        BinaryOperator::GtEq => BinaryOp::GtEq,
        BinaryOperator::And => BinaryOp::And,
        BinaryOperator::Or => BinaryOp::Or,
        other => return Err(unsupported("operator", e, other)),
    })
}

/// `items` joined by `op` (AND / OR, associative in three-valued logic) as a balanced tree.
fn balanced(mut items: Vec<Expr>, op: BinaryOp) -> Expr {
    while items.len() > 1 {
        let mut next = Vec::with_capacity(items.len().div_ceil(2));
        let mut it = items.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => a.binary(op, b),
                None => a,
            });
        }
        items = next;
    }
    items
        .pop()
        .unwrap_or(Expr::Literal(Literal::Bool(op == BinaryOp::And)))
}

/// A left-deep chain of binary operators (`a OR b OR c …`, `x + 1 + 1 …`), converted without
/// recursing down its left spine; runs of AND / OR become balanced trees.
fn binary_chain(e: &sql::Expr) -> Result<Expr> {
    let mut spine = Vec::new();
    let mut leaf = e;
    while let sql::Expr::BinaryOp { left, op, right } = leaf {
        spine.push((binary_op(leaf, op)?, right.as_ref()));
        leaf = left;
    }
    spine.reverse();
    let chained = spine
        .iter()
        .filter(|(op, _)| !matches!(op, BinaryOp::And | BinaryOp::Or))
        .count();
    if chained > MAX_EXPR_DEPTH {
        return Err(Error::invalid(format!(
            "expression nested too deeply ({chained} chained operators; floe accepts \
             {MAX_EXPR_DEPTH})"
        )));
    }
    let mut acc = expr(leaf)?;
    let mut i = 0;
    while i < spine.len() {
        let op = spine[i].0;
        if matches!(op, BinaryOp::And | BinaryOp::Or) {
            let mut run = vec![acc];
            while i < spine.len() && spine[i].0 == op {
                run.push(expr(spine[i].1)?);
                i += 1;
            }
            acc = balanced(run, op);
        } else {
            acc = acc.binary(op, expr(spine[i].1)?);
            i += 1;
        }
    }
    Ok(acc)
}

/// Converts a sqlparser expression into floe's.
fn expr(e: &sql::Expr) -> Result<Expr> {
    use sql::Expr as E;
    let b = |e: &sql::Expr| expr(e).map(Box::new);
    Ok(match e {
        E::Identifier(i) => Expr::col(i.value.clone()),
        E::CompoundIdentifier(parts) => {
            let mut names: Vec<String> = parts.iter().map(|i| i.value.clone()).collect();
            let name = names.pop().unwrap_or_default();
            Expr::Column(ColumnRef {
                qualifier: (!names.is_empty()).then(|| names.join(".")),
                name,
            })
        }
        E::Value(v) => Expr::Literal(value(v)?),
        E::TypedString(t) => Expr::Literal(typed_literal(t, e)?),
        E::Nested(inner) => expr(inner)?,
        E::UnaryOp { op, expr: inner } => match op {
            UnaryOperator::Not => Expr::Not(b(inner)?),
            UnaryOperator::Plus => expr(inner)?,
            UnaryOperator::Minus => match expr(inner)? {
                Expr::Literal(l) => match negate(l.clone()) {
                    Some(n) => Expr::Literal(n),
                    None => Expr::Neg(Box::new(Expr::Literal(l))),
                },
                other => Expr::Neg(Box::new(other)),
            },
            _ => return Err(unsupported("operator", e, op)),
        },
        E::BinaryOp { .. } => binary_chain(e)?,
        E::IsNull(x) => Expr::IsNull {
            expr: b(x)?,
            negated: false,
        },
        E::IsNotNull(x) => Expr::IsNull {
            expr: b(x)?,
            negated: true,
        },
        E::In {
            expr: x,
            target: sql::InTarget::List(list),
            negated,
            global: false,
        } => Expr::InList {
            expr: b(x)?,
            list: list.iter().map(expr).collect::<Result<_>>()?,
            negated: *negated,
        },
        E::Between {
            expr: x,
            negated,
            low,
            high,
        } => Expr::Between {
            expr: b(x)?,
            low: b(low)?,
            high: b(high)?,
            negated: *negated,
        },
        E::Like {
            negated,
            any: false,
            expr: x,
            pattern,
            escape_char: None,
        } => Expr::Like {
            expr: b(x)?,
            pattern: b(pattern)?,
            negated: *negated,
            case_insensitive: false,
        },
        E::ILike {
            negated,
            any: false,
            expr: x,
            pattern,
            escape_char: None,
        } => Expr::Like {
            expr: b(x)?,
            pattern: b(pattern)?,
            negated: *negated,
            case_insensitive: true,
        },
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => Expr::Case {
            operand: operand.as_deref().map(b).transpose()?,
            branches: conditions
                .iter()
                .map(|c| Ok((expr(&c.condition)?, expr(&c.result)?)))
                .collect::<Result<_>>()?,
            else_expr: else_result.as_deref().map(b).transpose()?,
        },
        E::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr: x,
            data_type,
            format: None,
        } => Expr::Cast {
            expr: b(x)?,
            to: arrow_type(data_type).ok_or_else(|| {
                Error::invalid(format!(
                    "{e}: unsupported type '{data_type}'{}; use int, bigint, double, float, decimal(p,s), string, boolean, date, timestamp",
                    e.span().start
                ))
            })?,
        },
        E::Function(f) => function(f, e)?,
        other => return Err(unsupported("expression", other, other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> Expr {
        parse_expr(s).unwrap()
    }

    #[test]
    fn delete_and_update() {
        let s = parse_statement("DELETE FROM db.t x WHERE x.id = 1 AND t.name IS NULL").unwrap();
        assert_eq!(
            s,
            Statement::Delete {
                table: "db.t".into(),
                predicate: Some(e("id = 1 AND name IS NULL")),
            }
        );
        assert_eq!(
            parse_statement("delete from t").unwrap(),
            Statement::Delete {
                table: "t".into(),
                predicate: None
            }
        );
        let s = parse_statement("UPDATE db.t SET a = a + 1, t.b = upper(b) WHERE id IN (1, 2);")
            .unwrap();
        assert_eq!(
            s,
            Statement::Update {
                table: "db.t".into(),
                assignments: vec![("a".into(), e("a + 1")), ("b".into(), e("upper(b)"))],
                predicate: Some(e("id IN (1, 2)")),
            }
        );
        assert_eq!(
            parse_assignments("a = a + 1, b = upper(b)").unwrap(),
            vec![("a".into(), e("a + 1")), ("b".into(), e("upper(b)"))]
        );
    }

    #[test]
    fn merge_with_all_clause_kinds() {
        let sql = "MERGE INTO db.target AS t USING 'data/up dates.parquet' AS s \
                   ON t.id = s.id AND s.region = t.region \
                   WHEN MATCHED AND s.op = 'delete' THEN DELETE \
                   WHEN MATCHED THEN UPDATE SET v = s.v, target.n = t.n + 1 \
                   WHEN NOT MATCHED AND s.v > 0 THEN INSERT (id, region, v) VALUES (s.id, s.region, s.v) \
                   WHEN NOT MATCHED BY SOURCE AND t.v < 0 THEN DELETE \
                   WHEN NOT MATCHED BY SOURCE THEN UPDATE SET v = 0";
        let Statement::Merge(m) = parse_statement(sql).unwrap() else {
            panic!("not a merge")
        };
        assert_eq!(m.target, "db.target");
        assert_eq!(m.target_alias.as_deref(), Some("t"));
        assert_eq!(m.source, MergeSource::Path("data/up dates.parquet".into()));
        assert_eq!(m.source_qualifier(), "s");
        assert_eq!(
            m.on,
            vec![
                ("id".into(), "id".into()),
                ("region".into(), "region".into())
            ]
        );
        assert_eq!(m.clauses.len(), 5);
        assert_eq!(
            m.clauses[0],
            MergeClause::Matched {
                condition: Some(e("s.op = 'delete'")),
                action: MatchedAction::Delete
            }
        );
        // `target.n` (the table name) is normalised to the alias `t`.
        assert_eq!(
            m.clauses[1],
            MergeClause::Matched {
                condition: None,
                action: MatchedAction::Update(vec![
                    ("v".into(), e("s.v")),
                    ("n".into(), e("t.n + 1"))
                ])
            }
        );
        assert_eq!(
            m.clauses[2],
            MergeClause::NotMatched {
                condition: Some(e("s.v > 0")),
                insert: Insert::Values {
                    columns: vec!["id".into(), "region".into(), "v".into()],
                    values: vec![e("s.id"), e("s.region"), e("s.v")]
                }
            }
        );
        assert_eq!(
            m.clauses[3],
            MergeClause::NotMatchedBySource {
                condition: Some(e("t.v < 0")),
                action: MatchedAction::Delete
            }
        );
        assert!(matches!(
            &m.clauses[4],
            MergeClause::NotMatchedBySource { condition: None, action: MatchedAction::Update(a) } if a == &vec![("v".to_string(), e("0"))]
        ));
    }

    #[test]
    fn merge_star_and_table_source() {
        let Statement::Merge(m) = parse_statement(
            "MERGE INTO db.t USING db.updates ON t.id = updates.id \
             WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        )
        .unwrap() else {
            panic!("not a merge")
        };
        assert_eq!(m.source, MergeSource::Table("db.updates".into()));
        assert_eq!(
            (m.target_qualifier(), m.source_qualifier()),
            ("t", "updates")
        );
        assert_eq!(m.on, vec![("id".into(), "id".into())]);
        assert_eq!(
            m.clauses,
            vec![
                MergeClause::Matched {
                    condition: None,
                    action: MatchedAction::UpdateStar
                },
                MergeClause::NotMatched {
                    condition: None,
                    insert: Insert::Star
                }
            ]
        );
    }

    #[test]
    fn expressions() {
        assert_eq!(
            e("-5 + x * 2.50"),
            Expr::lit(Literal::Int(-5)).binary(
                BinaryOp::Add,
                Expr::col("x").binary(BinaryOp::Mul, Expr::lit(Literal::Decimal("2.50".into())))
            )
        );
        assert_eq!(e("DATE '1970-01-02'"), Expr::lit(Literal::Date(1)));
        assert_eq!(
            e("TIMESTAMP '1970-01-01 00:00:01'"),
            Expr::lit(Literal::Timestamp(1_000_000))
        );
        assert_eq!(e("1e3"), Expr::lit(Literal::Float(1000.0)));
        assert_eq!(
            e("CAST(a AS decimal(10,2))"),
            Expr::Cast {
                expr: Box::new(Expr::col("a")),
                to: DataType::Decimal128(10, 2)
            }
        );
        assert_eq!(
            e("CAST(a AS long)"),
            Expr::Cast {
                expr: Box::new(Expr::col("a")),
                to: DataType::Int64
            }
        );
        assert_eq!(e("a || 'x'").to_string(), "a || 'x'",);
        assert_eq!(
            e("CASE WHEN a > 1 THEN 'big' ELSE 'small' END").to_string(),
            "CASE WHEN a > 1 THEN 'big' ELSE 'small' END"
        );
        assert_eq!(
            e("t.a BETWEEN 1 AND 2")
                .columns()
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["t.a".to_string()]
        );
        assert_eq!(
            e("coalesce(a, b) = length(c)")
                .columns()
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
    }

    #[test]
    fn errors() {
        let err = |s: &str| parse_statement(s).unwrap_err().to_string();
        let m = err("MERGE INTO t USING s ON t.id > s.id WHEN MATCHED THEN DELETE");
        assert!(m.contains("is not an equality"), "{m}");
        let m = err("MERGE INTO t USING s ON t.id = 5 WHEN MATCHED THEN DELETE");
        assert!(m.contains("does not compare two columns"), "{m}");
        let m = err("MERGE INTO t USING s ON id = id WHEN MATCHED THEN DELETE");
        assert!(m.contains("qualify both"), "{m}");
        let m = err("MERGE INTO t USING 'f.parquet' ON t.id = id WHEN MATCHED THEN DELETE");
        assert!(m.contains("alias"), "{m}");
        let m = err("DELETE FROM t WHERE id = = 1");
        assert!(m.contains("Line: 1, Column: 26"), "{m}");
        let m = err("SELECT 1");
        assert!(
            m.contains("DELETE, UPDATE, MERGE") && m.contains("floe scan"),
            "{m}"
        );
        assert!(m.contains("iceberg_scan"), "{m}");
        let m = parse_expr("a = 1 b").unwrap_err().to_string();
        assert!(m.contains("Column: 7"), "{m}");
        let m = parse_expr("nosuch(a)").unwrap_err().to_string();
        assert!(m.contains("unknown function 'nosuch'"), "{m}");
        let m = parse_expr("DATE '2024-13-01'").unwrap_err().to_string();
        assert!(m.contains("not a valid date"), "{m}");
        let m = parse_assignments("a = 1, a = 2").unwrap_err().to_string();
        assert!(m.contains("assigned twice"), "{m}");
    }
}
