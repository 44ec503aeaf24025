//! SQL-style predicates (`ts >= '2024-01-01' AND id IN (1, 2) OR name IS NULL`) parsed against
//! a schema into the `iceberg` crate's `Predicate`, with literals already of the column type.
//! Errors point at the offending token.

use iceberg::expr::{Predicate, Reference};
use iceberg::spec::{Datum, PrimitiveType, Schema, Type};

use super::literal::{datum_for, LitError, RawLit};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    pos: usize,
    text: String,
}

fn lex(s: &str) -> Result<Vec<Token>> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i] as char;
        let start = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            '(' => {
                i += 1;
                Tok::LParen
            }
            ')' => {
                i += 1;
                Tok::RParen
            }
            ',' => {
                i += 1;
                Tok::Comma
            }
            '\'' => {
                let mut v = String::new();
                i += 1;
                loop {
                    match s[i..].chars().next() {
                        None => {
                            return Err(Error::invalid(format!(
                                "--where: unterminated string starting at position {start}"
                            )))
                        }
                        Some('\'') if s[i + 1..].starts_with('\'') => {
                            v.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            v.push(ch);
                            i += ch.len_utf8();
                        }
                    }
                }
                Tok::Str(v)
            }
            '"' | '`' => {
                let end = s[i + 1..].find(c).ok_or_else(|| {
                    Error::invalid(format!(
                        "--where: unterminated quoted name at position {start}"
                    ))
                })?;
                let v = s[i + 1..i + 1 + end].to_string();
                i += end + 2;
                Tok::Ident(v)
            }
            '<' | '>' | '=' | '!' => {
                let two = s.get(i..i + 2).unwrap_or("");
                let op: &'static str = match two {
                    "<=" => "<=",
                    ">=" => ">=",
                    "!=" => "!=",
                    "<>" => "!=",
                    "==" => "=",
                    _ => match c {
                        '<' => "<",
                        '>' => ">",
                        '=' => "=",
                        _ => {
                            return Err(Error::invalid(format!(
                                "--where: unexpected '!' at position {start}"
                            )))
                        }
                    },
                };
                i += if op.len() == 2 || two == "==" || two == "<>" {
                    2
                } else {
                    1
                };
                Tok::Op(op)
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+' || c == '.')
                    && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'.'
                        || ((b[i] == b'-' || b[i] == b'+')
                            && (b[i - 1] == b'e' || b[i - 1] == b'E')))
                {
                    i += 1;
                }
                Tok::Num(s[start..i].to_string())
            }
            c if c.is_alphabetic() || c == '_' => {
                while i < b.len()
                    && ((b[i] as char).is_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'.'
                        || b[i] >= 0x80)
                {
                    i += 1;
                }
                Tok::Ident(s[start..i].to_string())
            }
            other => {
                return Err(Error::invalid(format!(
                    "--where: unexpected character '{other}' at position {start}"
                )))
            }
        };
        out.push(Token {
            tok,
            pos: start,
            text: s[start..i].to_string(),
        });
    }
    Ok(out)
}

struct P<'a> {
    toks: Vec<Token>,
    i: usize,
    schema: &'a Schema,
    src: &'a str,
}

/// Parses `text` into a predicate over `schema` (column names are case-insensitive).
pub fn parse_predicate(text: &str, schema: &Schema) -> Result<Predicate> {
    let toks = lex(text)?;
    if toks.is_empty() {
        return Ok(Predicate::AlwaysTrue);
    }
    let mut p = P {
        toks,
        i: 0,
        schema,
        src: text,
    };
    let e = p.or()?;
    if let Some(t) = p.toks.get(p.i) {
        return Err(p.err_at(t, "expected AND, OR or end of expression"));
    }
    Ok(e)
}

impl P<'_> {
    fn err_at(&self, t: &Token, what: &str) -> Error {
        Error::invalid(format!(
            "--where: {what} at position {} (near '{}') in: {}",
            t.pos, t.text, self.src
        ))
    }
    fn err_end(&self, what: &str) -> Error {
        Error::invalid(format!("--where: {what} at end of: {}", self.src))
    }
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.i)
    }
    fn next(&mut self) -> Result<Token> {
        let t = self
            .toks
            .get(self.i)
            .cloned()
            .ok_or_else(|| self.err_end("unexpected end"))?;
        self.i += 1;
        Ok(t)
    }
    fn kw(&mut self, k: &str) -> bool {
        if let Some(Token {
            tok: Tok::Ident(w), ..
        }) = self.peek()
        {
            if w.eq_ignore_ascii_case(k) {
                self.i += 1;
                return true;
            }
        }
        false
    }
    fn expect(&mut self, want: Tok, what: &str) -> Result<()> {
        let t = self.next()?;
        if t.tok == want {
            Ok(())
        } else {
            Err(self.err_at(&t, &format!("expected {what}")))
        }
    }
    fn or(&mut self) -> Result<Predicate> {
        let mut l = self.and()?;
        while self.kw("or") {
            l = l.or(self.and()?);
        }
        Ok(l)
    }
    fn and(&mut self) -> Result<Predicate> {
        let mut l = self.not()?;
        while self.kw("and") {
            l = l.and(self.not()?);
        }
        Ok(l)
    }
    fn not(&mut self) -> Result<Predicate> {
        if self.kw("not") {
            return Ok(!self.not()?);
        }
        if matches!(
            self.peek(),
            Some(Token {
                tok: Tok::LParen,
                ..
            })
        ) {
            self.i += 1;
            let e = self.or()?;
            self.expect(Tok::RParen, "')'")?;
            return Ok(e);
        }
        if self.kw("true") {
            return Ok(Predicate::AlwaysTrue);
        }
        if self.kw("false") {
            return Ok(Predicate::AlwaysFalse);
        }
        self.comparison()
    }
    fn column(&mut self) -> Result<(String, PrimitiveType, Token)> {
        let t = self.next()?;
        let Tok::Ident(name) = &t.tok else {
            return Err(self.err_at(&t, "expected a column name"));
        };
        let field = self
            .schema
            .field_by_name(name)
            .or_else(|| self.schema.field_by_name_case_insensitive(name))
            .ok_or_else(|| self.err_at(&t, &format!("unknown column '{name}'")))?;
        let full = self
            .schema
            .name_by_field_id(field.id)
            .unwrap_or(name)
            .to_string();
        match field.field_type.as_ref() {
            Type::Primitive(p) => Ok((full, p.clone(), t)),
            other => Err(self.err_at(
                &t,
                &format!(
                    "column '{name}' has type {other}; only primitive columns can be filtered"
                ),
            )),
        }
    }
    fn comparison(&mut self) -> Result<Predicate> {
        let (name, ty, col_tok) = self.column()?;
        let r = Reference::new(name.clone());
        if self.kw("is") {
            let neg = self.kw("not");
            if self.kw("null") {
                return Ok(if neg { r.is_not_null() } else { r.is_null() });
            }
            if self.kw("nan") {
                if !matches!(ty, PrimitiveType::Float | PrimitiveType::Double) {
                    return Err(self.err_at(
                        &col_tok,
                        &format!("IS NAN needs a float or double column, '{name}' is {ty}"),
                    ));
                }
                return Ok(if neg { r.is_not_nan() } else { r.is_nan() });
            }
            let t = self.next()?;
            return Err(self.err_at(&t, "expected NULL or NAN after IS"));
        }
        let neg = self.kw("not");
        if self.kw("in") {
            self.expect(Tok::LParen, "'(' after IN")?;
            let mut vals = Vec::new();
            loop {
                vals.push(self.literal(&ty, &name)?);
                let t = self.next()?;
                match t.tok {
                    Tok::Comma => continue,
                    Tok::RParen => break,
                    _ => return Err(self.err_at(&t, "expected ',' or ')' in IN list")),
                }
            }
            return Ok(if neg {
                r.is_not_in(vals)
            } else {
                r.is_in(vals)
            });
        }
        if self.kw("between") {
            let lo = self.literal(&ty, &name)?;
            if !self.kw("and") {
                return Err(self.err_end("expected AND in BETWEEN"));
            }
            let hi = self.literal(&ty, &name)?;
            let p = Reference::new(name.clone())
                .greater_than_or_equal_to(lo)
                .and(r.less_than_or_equal_to(hi));
            return Ok(if neg { !p } else { p });
        }
        if self.kw("like") {
            let t = self.next()?;
            let Tok::Str(pat) = &t.tok else {
                return Err(self.err_at(&t, "expected a 'pattern' after LIKE"));
            };
            let prefix = pat
                .strip_suffix('%')
                .filter(|p| !p.contains(['%', '_']))
                .ok_or_else(|| {
                    self.err_at(&t, "only prefix patterns ('abc%') are supported by LIKE")
                })?;
            if ty != PrimitiveType::String {
                return Err(self.err_at(&col_tok, "LIKE needs a string column"));
            }
            let d = Datum::string(prefix);
            return Ok(if neg {
                r.not_starts_with(d)
            } else {
                r.starts_with(d)
            });
        }
        if neg {
            let t = self.peek().cloned().unwrap_or(col_tok);
            return Err(self.err_at(&t, "expected IN, BETWEEN or LIKE after NOT"));
        }
        let t = self.next()?;
        let Tok::Op(op) = t.tok else {
            return Err(self.err_at(
                &t,
                "expected a comparison operator (=, !=, <, <=, >, >=, IN, IS)",
            ));
        };
        if let Some(
            t @ Token {
                tok: Tok::Ident(w), ..
            },
        ) = self.peek()
        {
            if w.eq_ignore_ascii_case("null") {
                return Err(self.err_at(t, "compare with NULL using IS NULL / IS NOT NULL"));
            }
        }
        let v = self.literal(&ty, &name)?;
        Ok(match op {
            "=" => r.equal_to(v),
            "!=" => r.not_equal_to(v),
            "<" => r.less_than(v),
            "<=" => r.less_than_or_equal_to(v),
            ">" => r.greater_than(v),
            _ => r.greater_than_or_equal_to(v),
        })
    }

    /// A literal converted to the column's type (typed literals such as DATE '…' accepted).
    fn literal(&mut self, ty: &PrimitiveType, col: &str) -> Result<Datum> {
        let mut t = self.next()?;
        // Typed literal prefix: DATE '…', TIMESTAMP '…', TIMESTAMPTZ '…', UUID '…', DECIMAL '…'.
        if let Tok::Ident(w) = &t.tok {
            let w = w.to_ascii_lowercase();
            if matches!(
                w.as_str(),
                "date" | "timestamp" | "timestamptz" | "time" | "uuid" | "decimal"
            ) {
                if let Some(Token {
                    tok: Tok::Str(_), ..
                }) = self.peek()
                {
                    t = self.next()?;
                }
            } else if w == "true" || w == "false" {
                return match ty {
                    PrimitiveType::Boolean => Ok(Datum::bool(w == "true")),
                    _ => Err(self.err_at(
                        &t,
                        &format!("type mismatch: column '{col}' is {ty}, literal is boolean"),
                    )),
                };
            }
        }
        let raw = match &t.tok {
            Tok::Num(n) => RawLit::Num(n),
            Tok::Str(s) => RawLit::Str(s),
            _ => return Err(self.err_at(&t, "expected a literal")),
        };
        datum_for(raw, ty).map_err(|e| match e {
            LitError::Mismatch(kind) => self.err_at(
                &t,
                &format!("type mismatch: column '{col}' is {ty}, literal is {kind}"),
            ),
            LitError::Invalid(detail) => {
                let v = match raw {
                    RawLit::Num(v) | RawLit::Str(v) => v,
                };
                let detail = detail.map(|d| format!(": {d}")).unwrap_or_default();
                self.err_at(
                    &t,
                    &format!("'{v}' is not a valid {ty} for column '{col}'{detail}"),
                )
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_schema;

    fn schema() -> Schema {
        parse_schema("id long, name string, ts timestamptz, d date, price decimal(10,2), ok boolean, x double, tags list<string>").unwrap()
    }

    #[test]
    fn parses_the_grammar() {
        let s = schema();
        for e in [
            "id = 1",
            "id != 1 AND name = 'a''b'",
            "NOT (id < 3 OR id >= 10)",
            "id IN (1, 2, 3) and name not in ('x')",
            "name IS NULL or ts IS NOT NULL",
            "ts >= '2024-01-01T00:00:00Z' and d < DATE '2024-02-01'",
            "price > 10.5 and ok = true and x is nan",
            "id between 1 and 5",
            "name like 'ab%'",
            "ID = 3",
        ] {
            parse_predicate(e, &s).unwrap_or_else(|err| panic!("{e}: {err}"));
        }
    }

    #[test]
    fn errors_point_at_the_token() {
        let s = schema();
        let cases = [
            ("nope = 1", "unknown column 'nope'"),
            ("id = 'abc'", "type mismatch"),
            ("id = 1 AND", "unexpected end"),
            ("id = 1 name", "position 7"),
            ("d = '2024-13-45'", "not a valid date"),
            ("tags = 'a'", "only primitive"),
            ("id = NULL", "IS NULL"),
            ("price = 1.234", "decimal(10, 2)"),
            ("name = 'x", "unterminated"),
        ];
        for (e, want) in cases {
            let err = parse_predicate(e, &s).unwrap_err().to_string();
            assert!(err.contains(want), "{e}: {err}");
        }
    }
}
