//! The text of Spark's `ALTER TABLE` (with Iceberg's SQL extensions) as [`TableChange`]s.
//! Pure.

use super::evolution::{ColumnPosition, TableChange};
use crate::error::{Error, Result};

/// Parses `ALTER TABLE name <clause>` into the table name and its changes. Clauses: `ADD
/// COLUMN(S)`, `DROP COLUMN(S)`, `RENAME COLUMN … TO …`, `ALTER [COLUMN] … TYPE t | DROP NOT
/// NULL | COMMENT 'c' | FIRST | AFTER x`, `SET TBLPROPERTIES (…)`, `UNSET TBLPROPERTIES [IF
/// EXISTS] (…)`, `ADD | DROP | REPLACE PARTITION FIELD`, `WRITE [LOCALLY] ORDERED BY …`,
/// `WRITE DISTRIBUTED BY PARTITION [LOCALLY ORDERED BY …]`, `WRITE UNORDERED`, `SET | DROP
/// IDENTIFIER FIELDS`.
pub fn parse_alter_table(text: &str) -> Result<(String, Vec<TableChange>)> {
    let mut p = P { s: text, pos: 0 };
    if !(p.kw("alter") && p.kw("table")) {
        return Err(p.err("expected ALTER TABLE"));
    }
    let name = p.dotted()?;
    let changes = p.clause()?;
    p.end()?;
    Ok((name, changes))
}

/// Parses the clause of an `ALTER TABLE` without its `ALTER TABLE name` (what `floe alter
/// NAME …` takes).
pub fn parse_alter_clause(text: &str) -> Result<Vec<TableChange>> {
    let mut p = P { s: text, pos: 0 };
    let changes = p.clause()?;
    p.end()?;
    Ok(changes)
}

/// `ALTER TABLE a RENAME TO b` (Spark's rename, a catalog operation): `Some((a, b))`;
/// `None` for any other statement.
pub fn parse_rename_table(text: &str) -> Option<(String, String)> {
    let mut p = P { s: text, pos: 0 };
    if !(p.kw("alter") && p.kw("table")) {
        return None;
    }
    let from = p.dotted().ok()?;
    if !p.kws(&["rename", "to"]) {
        return None;
    }
    let to = p.dotted().ok()?;
    p.end().ok()?;
    Some((from, to))
}

/// Whether `text` is an `ALTER TABLE` statement (rather than DML).
pub fn is_alter_table(text: &str) -> bool {
    let mut p = P { s: text, pos: 0 };
    p.kw("alter") && p.kw("table")
}

struct P<'a> {
    s: &'a str,
    pos: usize,
}

impl P<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn err(&self, what: &str) -> Error {
        let near: String = self.rest().chars().take(30).collect();
        Error::invalid(format!(
            "ALTER TABLE syntax: {what} at position {} (near '{near}'), in: {}",
            self.pos, self.s
        ))
    }

    fn ws(&mut self) {
        let t = self.rest();
        self.pos += t.len() - t.trim_start().len();
    }

    fn peek(&mut self) -> Option<char> {
        self.ws();
        self.rest().chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{c}'")))
        }
    }

    /// The next word if it is `kw` (any case), consumed.
    fn kw(&mut self, kw: &str) -> bool {
        self.ws();
        let save = self.pos;
        match self.bare_word() {
            Some(w) if w.eq_ignore_ascii_case(kw) => true,
            _ => {
                self.pos = save;
                false
            }
        }
    }

    fn kws(&mut self, kws: &[&str]) -> bool {
        let save = self.pos;
        for k in kws {
            if !self.kw(k) {
                self.pos = save;
                return false;
            }
        }
        true
    }

    fn bare_word(&mut self) -> Option<String> {
        let t = self.rest();
        let n = t
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map(|(i, _)| i)
            .unwrap_or(t.len());
        if n == 0 {
            return None;
        }
        let w = t[..n].to_string();
        self.pos += n;
        Some(w)
    }

    /// A name: a word or a `back-quoted` name.
    fn ident(&mut self) -> Result<String> {
        self.ws();
        if self.eat('`') {
            let t = self.rest();
            let end = t.find('`').ok_or_else(|| self.err("unclosed `"))?;
            let w = t[..end].to_string();
            self.pos += end + 1;
            return Ok(w);
        }
        self.bare_word().ok_or_else(|| self.err("expected a name"))
    }

    /// `a.b.c`.
    fn dotted(&mut self) -> Result<String> {
        let mut parts = vec![self.ident()?];
        while self.rest().starts_with('.') {
            self.pos += 1;
            parts.push(self.ident()?);
        }
        Ok(parts.join("."))
    }

    fn string(&mut self) -> Result<String> {
        self.ws();
        if !self.rest().starts_with('\'') {
            return Err(self.err("expected a quoted string"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let t = self.rest();
            let i = t.find('\'').ok_or_else(|| self.err("unclosed string"))?;
            out.push_str(&t[..i]);
            self.pos += i + 1;
            if self.rest().starts_with('\'') {
                out.push('\'');
                self.pos += 1;
            } else {
                return Ok(out);
            }
        }
    }

    /// Text up to the next top-level `stop` character or one of `stop_words`, with balanced
    /// `()` and `<>`; trimmed.
    fn raw_until(&mut self, stop: &[char], stop_words: &[&str]) -> Result<String> {
        self.ws();
        let start = self.pos;
        let mut depth = 0i32;
        loop {
            let t = self.rest();
            let Some(c) = t.chars().next() else { break };
            if depth == 0 && stop.contains(&c) {
                break;
            }
            if depth == 0 && (c.is_alphabetic()) {
                let at_word_start = self.s[..self.pos]
                    .chars()
                    .last()
                    .is_none_or(|p| p.is_whitespace() || p == ',' || p == '(');
                if at_word_start {
                    let save = self.pos;
                    let w = self.bare_word().unwrap_or_default();
                    if stop_words.iter().any(|s| s.eq_ignore_ascii_case(&w)) && self.pos > start {
                        self.pos = save;
                        break;
                    }
                    continue;
                }
            }
            match c {
                '(' | '<' => depth += 1,
                ')' | '>' => depth -= 1,
                '\'' => {
                    self.string()?;
                    continue;
                }
                _ => {}
            }
            if depth < 0 {
                break;
            }
            self.pos += c.len_utf8();
        }
        let raw = self.s[start..self.pos].trim().to_string();
        if raw.is_empty() {
            return Err(self.err("expected a value"));
        }
        Ok(raw)
    }

    fn end(&mut self) -> Result<()> {
        while self.eat(';') {}
        if self.peek().is_some() {
            return Err(self.err("unexpected text (expected the end of the statement)"));
        }
        Ok(())
    }

    fn position(&mut self) -> Result<ColumnPosition> {
        if self.kw("first") {
            Ok(ColumnPosition::First)
        } else if self.kw("after") {
            Ok(ColumnPosition::After(self.ident()?))
        } else {
            Ok(ColumnPosition::Last)
        }
    }

    fn clause(&mut self) -> Result<Vec<TableChange>> {
        if self.kws(&["add", "partition", "field"]) {
            let term = self.raw_until(&[';'], &["as"])?;
            let name = if self.kw("as") {
                Some(self.ident()?)
            } else {
                None
            };
            return Ok(vec![TableChange::AddPartitionField { term, name }]);
        }
        if self.kws(&["drop", "partition", "field"]) {
            return Ok(vec![TableChange::DropPartitionField(
                self.raw_until(&[';'], &[])?,
            )]);
        }
        if self.kws(&["replace", "partition", "field"]) {
            let old = self.raw_until(&[';'], &["with"])?;
            if !self.kw("with") {
                return Err(self.err("expected WITH"));
            }
            let term = self.raw_until(&[';'], &["as"])?;
            let name = if self.kw("as") {
                Some(self.ident()?)
            } else {
                None
            };
            return Ok(vec![TableChange::ReplacePartitionField { old, term, name }]);
        }
        if self.kws(&["set", "identifier", "fields"]) {
            return Ok(vec![TableChange::SetIdentifierFields(self.name_list()?)]);
        }
        if self.kws(&["drop", "identifier", "fields"]) {
            let _ = self.name_list()?;
            return Ok(vec![TableChange::SetIdentifierFields(vec![])]);
        }
        if self.kw("add") {
            let _ = self.kw("columns") || self.kw("column");
            let paren = self.eat('(');
            let mut out = Vec::new();
            loop {
                out.push(self.column_def()?);
                if !self.eat(',') {
                    break;
                }
            }
            if paren {
                self.expect(')')?;
            }
            return Ok(out);
        }
        if self.kw("drop") {
            let _ = self.kw("columns") || self.kw("column");
            let paren = self.eat('(');
            let mut out = vec![TableChange::DropColumn(self.dotted()?)];
            while self.eat(',') {
                out.push(TableChange::DropColumn(self.dotted()?));
            }
            if paren {
                self.expect(')')?;
            }
            return Ok(out);
        }
        if self.kws(&["rename", "column"]) {
            let path = self.dotted()?;
            if !self.kw("to") {
                return Err(self.err("expected TO"));
            }
            let to = self.ident()?;
            return Ok(vec![TableChange::RenameColumn { path, to }]);
        }
        if self.kws(&["rename", "to"]) {
            return Err(Error::invalid(
                "ALTER TABLE … RENAME TO renames the table in its catalog and combines with no \
                 other change (`floe sql \"ALTER TABLE a RENAME TO b\"` or `floe rename a b`)",
            ));
        }
        if self.kw("alter") || self.kw("change") {
            let _ = self.kw("column");
            let path = self.dotted()?;
            let change = if self.kw("type") || self.kws(&["set", "data", "type"]) {
                TableChange::AlterType {
                    path,
                    ty: self.raw_until(&[';'], &["comment", "first", "after"])?,
                }
            } else if self.kws(&["drop", "not", "null"]) {
                TableChange::MakeOptional(path)
            } else if self.kws(&["set", "not", "null"]) {
                return Err(Error::invalid(format!(
                    "ALTER COLUMN {path} SET NOT NULL: rows already written may hold nulls, so \
                     Iceberg does not make a column required"
                )));
            } else if self.kw("comment") {
                TableChange::SetComment {
                    path,
                    comment: Some(self.string()?),
                }
            } else if self.peek().is_some() {
                let position = self.position()?;
                if position == ColumnPosition::Last {
                    return Err(self.err(
                        "expected TYPE, DROP NOT NULL, COMMENT, FIRST or AFTER after ALTER COLUMN",
                    ));
                }
                TableChange::Move { path, position }
            } else {
                return Err(self.err("expected what to alter"));
            };
            return Ok(vec![change]);
        }
        if self.kws(&["set", "tblproperties"]) || self.kws(&["set", "properties"]) {
            self.expect('(')?;
            let mut kv = Vec::new();
            loop {
                let k = self.prop_key()?;
                let _ = self.eat('=');
                let v = self.string()?;
                kv.push((k, v));
                if !self.eat(',') {
                    break;
                }
            }
            self.expect(')')?;
            return Ok(vec![TableChange::SetProperties(kv)]);
        }
        if self.kws(&["unset", "tblproperties"]) || self.kws(&["unset", "properties"]) {
            let if_exists = self.kws(&["if", "exists"]);
            self.expect('(')?;
            let mut keys = vec![self.prop_key()?];
            while self.eat(',') {
                keys.push(self.prop_key()?);
            }
            self.expect(')')?;
            return Ok(vec![TableChange::UnsetProperties { keys, if_exists }]);
        }
        if self.kw("write") {
            return self.write_order();
        }
        Err(self.err("unsupported ALTER TABLE clause"))
    }

    fn prop_key(&mut self) -> Result<String> {
        if self.peek() == Some('\'') {
            self.string()
        } else {
            self.dotted()
        }
    }

    fn name_list(&mut self) -> Result<Vec<String>> {
        let mut out = vec![self.dotted()?];
        while self.eat(',') {
            out.push(self.dotted()?);
        }
        Ok(out)
    }

    fn column_def(&mut self) -> Result<TableChange> {
        let path = self.dotted()?;
        let ty = self.raw_until(
            &[',', ')', ';'],
            &["not", "default", "comment", "first", "after"],
        )?;
        let required = self.kws(&["not", "null"]);
        let default = if self.kw("default") {
            Some(self.raw_until(&[',', ')', ';'], &["comment", "first", "after"])?)
        } else {
            None
        };
        let comment = if self.kw("comment") {
            Some(self.string()?)
        } else {
            None
        };
        let position = self.position()?;
        Ok(TableChange::AddColumn {
            path,
            ty,
            required,
            default,
            comment,
            position,
        })
    }

    /// After `WRITE`: the sort order and the distribution mode Spark sets with it.
    fn write_order(&mut self) -> Result<Vec<TableChange>> {
        let mode = |m: &str| {
            TableChange::SetProperties(vec![("write.distribution-mode".into(), m.into())])
        };
        if self.kw("unordered") {
            return Ok(vec![TableChange::SetSortOrder(String::new()), mode("none")]);
        }
        if self.kws(&["distributed", "by", "partition"]) {
            let order = if self.kws(&["locally", "ordered", "by"]) {
                self.raw_until(&[';'], &[])?
            } else {
                String::new()
            };
            return Ok(vec![TableChange::SetSortOrder(order), mode("hash")]);
        }
        if self.kws(&["locally", "ordered", "by"]) {
            let order = self.raw_until(&[';'], &[])?;
            return Ok(vec![TableChange::SetSortOrder(order), mode("none")]);
        }
        if self.kws(&["ordered", "by"]) {
            let order = self.raw_until(&[';'], &[])?;
            return Ok(vec![TableChange::SetSortOrder(order), mode("range")]);
        }
        Err(self
            .err("expected ORDERED BY, LOCALLY ORDERED BY, DISTRIBUTED BY PARTITION or UNORDERED"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Vec<TableChange> {
        let (t, c) = parse_alter_table(sql).unwrap();
        assert_eq!(t, "db.t");
        c
    }

    #[test]
    fn parses_spark_column_clauses() {
        assert_eq!(
            one("ALTER TABLE db.t ADD COLUMNS (a bigint NOT NULL DEFAULT 5 COMMENT 'x' AFTER id, s struct<x: int, y: string> FIRST)"),
            vec![
                TableChange::AddColumn {
                    path: "a".into(),
                    ty: "bigint".into(),
                    required: true,
                    default: Some("5".into()),
                    comment: Some("x".into()),
                    position: ColumnPosition::After("id".into()),
                },
                TableChange::AddColumn {
                    path: "s".into(),
                    ty: "struct<x: int, y: string>".into(),
                    required: false,
                    default: None,
                    comment: None,
                    position: ColumnPosition::First,
                },
            ]
        );
        assert_eq!(
            one("alter table db.t add column p.q decimal(10, 2)"),
            vec![TableChange::AddColumn {
                path: "p.q".into(),
                ty: "decimal(10, 2)".into(),
                required: false,
                default: None,
                comment: None,
                position: ColumnPosition::Last,
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t DROP COLUMNS a, b.c"),
            vec![
                TableChange::DropColumn("a".into()),
                TableChange::DropColumn("b.c".into())
            ]
        );
        assert_eq!(
            one("ALTER TABLE db.t RENAME COLUMN a TO `b c`"),
            vec![TableChange::RenameColumn {
                path: "a".into(),
                to: "b c".into()
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t ALTER COLUMN a TYPE decimal(12,2)"),
            vec![TableChange::AlterType {
                path: "a".into(),
                ty: "decimal(12,2)".into()
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t ALTER COLUMN a DROP NOT NULL"),
            vec![TableChange::MakeOptional("a".into())]
        );
        assert_eq!(
            one("ALTER TABLE db.t ALTER COLUMN a AFTER b"),
            vec![TableChange::Move {
                path: "a".into(),
                position: ColumnPosition::After("b".into())
            }]
        );
        assert!(parse_alter_table("ALTER TABLE db.t ALTER COLUMN a SET NOT NULL").is_err());
    }

    #[test]
    fn rename_to_is_a_statement_of_its_own() {
        assert_eq!(
            parse_rename_table("alter table db.t rename to `db`.t2"),
            Some(("db.t".into(), "db.t2".into()))
        );
        assert_eq!(
            parse_rename_table("ALTER TABLE db.t RENAME COLUMN a TO b"),
            None
        );
        assert_eq!(
            parse_rename_table("ALTER TABLE db.t RENAME TO db.u, x"),
            None
        );
        assert!(parse_alter_table("ALTER TABLE db.t RENAME TO db.u")
            .unwrap_err()
            .to_string()
            .contains("floe rename"));
    }

    #[test]
    fn parses_iceberg_extensions_and_properties() {
        assert_eq!(
            one("ALTER TABLE db.t ADD PARTITION FIELD bucket(16, id) AS shard"),
            vec![TableChange::AddPartitionField {
                term: "bucket(16, id)".into(),
                name: Some("shard".into())
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t REPLACE PARTITION FIELD ts_day WITH hour(ts)"),
            vec![TableChange::ReplacePartitionField {
                old: "ts_day".into(),
                term: "hour(ts)".into(),
                name: None
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t WRITE ORDERED BY id DESC NULLS LAST, v"),
            vec![
                TableChange::SetSortOrder("id DESC NULLS LAST, v".into()),
                TableChange::SetProperties(vec![(
                    "write.distribution-mode".into(),
                    "range".into()
                )])
            ]
        );
        assert_eq!(
            one("ALTER TABLE db.t SET TBLPROPERTIES ('a.b'='1', 'c'='it''s')"),
            vec![TableChange::SetProperties(vec![
                ("a.b".into(), "1".into()),
                ("c".into(), "it's".into())
            ])]
        );
        assert_eq!(
            one("ALTER TABLE db.t UNSET TBLPROPERTIES IF EXISTS ('a')"),
            vec![TableChange::UnsetProperties {
                keys: vec!["a".into()],
                if_exists: true
            }]
        );
        assert_eq!(
            one("ALTER TABLE db.t SET IDENTIFIER FIELDS id, k"),
            vec![TableChange::SetIdentifierFields(vec![
                "id".into(),
                "k".into()
            ])]
        );
        for bad in [
            "ALTER TABLE db.t",
            "ALTER TABLE db.t FROB x",
            "ALTER TABLE db.t ADD COLUMN",
            "ALTER TABLE db.t SET TBLPROPERTIES ('a'='1'",
            "ALTER TABLE db.t RENAME COLUMN a b",
            "ALTER TABLE db.t DROP COLUMN a extra",
        ] {
            assert!(parse_alter_table(bad).is_err(), "{bad}");
        }
    }
}
