//! Schema DDL (`id long, name string, ts timestamptz, price decimal(10,2), tags list<string>`)
//! to an Iceberg schema.

use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};

use crate::error::{Error, Result};

/// Parses a comma-separated column list into a schema with fresh field ids.
///
/// Types: `boolean, int, long (bigint), float, double, decimal(P,S), date, time, timestamp,
/// timestamptz, timestamp_ns, timestamptz_ns, string, uuid, fixed(L), binary, list<T>,
/// map<K,V>, struct<name:T,…>`; append `not null` to make a column required.
pub fn parse_schema(ddl: &str) -> Result<Schema> {
    let mut p = Parser {
        s: ddl,
        pos: 0,
        next_id: 1,
    };
    let mut fields = Vec::new();
    loop {
        p.ws();
        let name = p.ident()?;
        p.ws();
        let ty = p.ty()?;
        p.ws();
        let required = p.keyword("not") && {
            p.ws();
            if !p.keyword("null") {
                return Err(p.err("expected NULL after NOT"));
            }
            true
        };
        let id = p.id();
        fields.push(Arc::new(NestedField::new(id, name, ty, required)));
        p.ws();
        if p.eat(',') {
            continue;
        }
        if p.pos < p.s.len() {
            return Err(p.err("expected ',' or end of schema"));
        }
        break;
    }
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| Error::invalid(format!("schema '{ddl}': {e}")))
}

/// Converts an Arrow schema (for example a Parquet file's) into an Iceberg schema with fresh
/// field ids; field ids present in the Arrow metadata are ignored.
pub fn schema_from_arrow(schema: &arrow_schema::Schema) -> Result<Schema> {
    let plain = iceberg::arrow::strip_metadata_from_schema(schema)
        .map_err(|e| Error::invalid(format!("arrow schema: {e}")))?;
    iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&plain)
        .map_err(|e| Error::invalid(format!("arrow schema cannot be an Iceberg schema: {e}")))
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
    next_id: i32,
}

impl Parser<'_> {
    fn id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }
    fn err(&self, what: &str) -> Error {
        Error::invalid(format!(
            "schema: {what} at position {} ('{}')",
            self.pos,
            self.rest().chars().take(20).collect::<String>()
        ))
    }
    fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }
    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.rest().starts_with(c) {
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
    fn ident(&mut self) -> Result<String> {
        self.ws();
        let r = self.rest();
        if let Some(q) = r.strip_prefix('`') {
            let end = q
                .find('`')
                .ok_or_else(|| self.err("unterminated `quoted` name"))?;
            let name = q[..end].to_string();
            self.pos += end + 2;
            return Ok(name);
        }
        let n = r
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        if n == 0 {
            return Err(self.err("expected a column name"));
        }
        let name = r[..n].to_string();
        self.pos += n;
        Ok(name)
    }
    fn keyword(&mut self, kw: &str) -> bool {
        let r = self.rest();
        if r.get(..kw.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(kw))
            && !r[kw.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }
    fn number(&mut self) -> Result<u32> {
        self.ws();
        let r = self.rest();
        let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        let v = r[..n].parse().map_err(|_| self.err("expected a number"))?;
        self.pos += n;
        Ok(v)
    }
    fn ty(&mut self) -> Result<Type> {
        self.ws();
        let start = self.pos;
        let word = self.ident()?.to_ascii_lowercase();
        let prim = |p| Ok(Type::Primitive(p));
        match word.as_str() {
            "boolean" | "bool" => prim(PrimitiveType::Boolean),
            "int" | "integer" => prim(PrimitiveType::Int),
            "long" | "bigint" => prim(PrimitiveType::Long),
            "float" => prim(PrimitiveType::Float),
            "double" => prim(PrimitiveType::Double),
            "date" => prim(PrimitiveType::Date),
            "time" => prim(PrimitiveType::Time),
            "timestamp" | "timestamp_ntz" => prim(PrimitiveType::Timestamp),
            "timestamptz" | "timestamp_ltz" => prim(PrimitiveType::Timestamptz),
            "timestamp_ns" => prim(PrimitiveType::TimestampNs),
            "timestamptz_ns" => prim(PrimitiveType::TimestamptzNs),
            "string" | "varchar" | "text" => prim(PrimitiveType::String),
            "uuid" => prim(PrimitiveType::Uuid),
            "binary" => prim(PrimitiveType::Binary),
            "fixed" => {
                self.expect('(')?;
                let l = self.number()?;
                self.expect(')')?;
                prim(PrimitiveType::Fixed(l as u64))
            }
            "decimal" => {
                self.expect('(')?;
                let precision = self.number()?;
                self.expect(',')?;
                let scale = self.number()?;
                self.expect(')')?;
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(self.err("decimal precision must be 1..=38 and scale <= precision"));
                }
                prim(PrimitiveType::Decimal { precision, scale })
            }
            "list" | "array" => {
                self.expect('<')?;
                let id = self.id();
                let inner = self.ty()?;
                self.expect('>')?;
                Ok(Type::List(ListType::new(Arc::new(
                    NestedField::list_element(id, inner, false),
                ))))
            }
            "map" => {
                self.expect('<')?;
                let (kid, vid) = (self.id(), self.id());
                let k = self.ty()?;
                self.expect(',')?;
                let v = self.ty()?;
                self.expect('>')?;
                Ok(Type::Map(MapType::new(
                    Arc::new(NestedField::map_key_element(kid, k)),
                    Arc::new(NestedField::map_value_element(vid, v, false)),
                )))
            }
            "struct" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                loop {
                    let name = self.ident()?;
                    self.expect(':')?;
                    let id = self.id();
                    let t = self.ty()?;
                    fields.push(Arc::new(NestedField::optional(id, name, t)));
                    if !self.eat(',') {
                        break;
                    }
                }
                self.expect('>')?;
                Ok(Type::Struct(StructType::new(fields)))
            }
            _ => {
                self.pos = start;
                Err(self.err(&format!("unknown type '{word}'")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_ascii_where_a_keyword_is_expected_is_an_error() {
        // Found by the fuzzer (tests/it/fuzz, target sql): the keyword check sliced inside '€'.
        assert!(parse_schema("x a\u{20ac}").is_err());
        assert!(parse_schema("x \u{7f}\u{fffd}db").is_err());
    }

    #[test]
    fn parses_all_kinds() {
        let s = parse_schema(
            "id long not null, name string, ts timestamptz, price decimal(10,2), tags list<string>, \
             m map<string, long>, s struct<a:int, b:string>",
        )
        .unwrap();
        assert_eq!(s.as_struct().fields().len(), 7);
        assert!(s.field_by_name("id").unwrap().required);
        assert_eq!(
            *s.field_by_name("price").unwrap().field_type,
            Type::Primitive(PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            })
        );
        assert!(s.field_by_name("s.b").is_some());
    }

    #[test]
    fn bad_type_points_at_token() {
        let e = parse_schema("id long, x strng").unwrap_err();
        assert!(e.to_string().contains("unknown type 'strng'"), "{e}");
        assert!(parse_schema("id long id2").is_err());
        assert!(parse_schema("p decimal(50,2)").is_err());
    }
}
