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

/// The DDL of `schema` in the form [`parse_schema`] reads (field ids aside): what
/// `create --schema-from FILE --dry-run` prints.
pub fn schema_ddl(schema: &Schema) -> String {
    fn name(n: &str) -> String {
        if !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_') {
            n.to_string()
        } else {
            format!("`{n}`")
        }
    }
    fn ty(t: &Type) -> String {
        match t {
            Type::Primitive(p) => match p {
                PrimitiveType::Boolean => "boolean".into(),
                PrimitiveType::Int => "int".into(),
                PrimitiveType::Long => "long".into(),
                PrimitiveType::Float => "float".into(),
                PrimitiveType::Double => "double".into(),
                PrimitiveType::Decimal { precision, scale } => {
                    format!("decimal({precision},{scale})")
                }
                PrimitiveType::Date => "date".into(),
                PrimitiveType::Time => "time".into(),
                PrimitiveType::Timestamp => "timestamp".into(),
                PrimitiveType::Timestamptz => "timestamptz".into(),
                PrimitiveType::TimestampNs => "timestamp_ns".into(),
                PrimitiveType::TimestamptzNs => "timestamptz_ns".into(),
                PrimitiveType::String => "string".into(),
                PrimitiveType::Uuid => "uuid".into(),
                PrimitiveType::Fixed(l) => format!("fixed({l})"),
                PrimitiveType::Binary => "binary".into(),
            },
            Type::List(l) => format!("list<{}>", ty(&l.element_field.field_type)),
            Type::Map(m) => format!(
                "map<{}, {}>",
                ty(&m.key_field.field_type),
                ty(&m.value_field.field_type)
            ),
            Type::Struct(s) => format!(
                "struct<{}>",
                s.fields()
                    .iter()
                    .map(|f| format!("{}: {}", name(&f.name), ty(&f.field_type)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{} {}{}",
                name(&f.name),
                ty(&f.field_type),
                if f.required { " not null" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `schema` with `columns` as its identifier fields (`identifier-field-ids`: the primary key
/// Flink, pyiceberg's `upsert` and Spark's `SET IDENTIFIER FIELDS` use). As the spec requires,
/// each must be a required primitive column other than float and double, not inside a list or
/// map, and inside structs only when every enclosing struct is required; names are found by
/// [`crate::spec::resolve_field`], and a column named twice is refused.
pub fn with_primary_key(schema: Schema, columns: &[String]) -> Result<Schema> {
    let mut ids = Vec::new();
    for c in columns {
        let err = |why: &str| Error::invalid(format!("primary key column '{c}': {why}"));
        let f = crate::spec::resolve_field(&schema, c)?.ok_or_else(|| {
            let names: Vec<&str> = schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.name.as_str())
                .collect();
            err(&format!(
                "no such column; the schema has {}",
                names.join(", ")
            ))
        })?;
        let full = schema.name_by_field_id(f.id).unwrap_or(c).to_string();
        let parts: Vec<&str> = full.split('.').collect();
        for n in 1..parts.len() {
            let parent = parts[..n].join(".");
            match schema.field_by_name(&parent) {
                Some(p) if matches!(*p.field_type, Type::Struct(_)) && p.required => {}
                Some(p) if matches!(*p.field_type, Type::Struct(_)) => {
                    return Err(err(&format!(
                        "struct '{parent}' is optional; make it not null"
                    )))
                }
                _ => return Err(err("a key cannot be inside a list or map")),
            }
        }
        match &*f.field_type {
            Type::Primitive(PrimitiveType::Float | PrimitiveType::Double) => {
                return Err(err("float and double columns cannot be keys"))
            }
            Type::Primitive(_) => {}
            _ => return Err(err("a key must be a primitive column")),
        }
        if !f.required {
            return Err(err("key columns must be required: declare it `not null`"));
        }
        if ids.contains(&f.id) {
            return Err(err("named twice"));
        }
        ids.push(f.id);
    }
    schema
        .into_builder()
        .with_identifier_field_ids(ids)
        .build()
        .map_err(|e| Error::invalid(format!("primary key {columns:?}: {e}")))
}

/// `schema` as Arrow: each field carries its `PARQUET:field_id`, as scans return batches.
pub fn arrow_schema(schema: &Schema) -> Result<arrow_schema::Schema> {
    Ok(iceberg::arrow::schema_to_arrow_schema(schema)?)
}

/// Converts an Arrow schema (for example a Parquet file's) into an Iceberg schema with fresh
/// field ids in Iceberg's order (a struct's fields, then their nested fields); field ids
/// present in the Arrow metadata are ignored.
pub fn schema_from_arrow(schema: &arrow_schema::Schema) -> Result<Schema> {
    let plain = arrow_schema::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| plain_field(f))
            .collect::<Vec<_>>(),
    );
    iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&plain)
        .map_err(|e| Error::invalid(format!("arrow schema cannot be an Iceberg schema: {e}")))
}

/// `f` without metadata at any nesting level.
fn plain_field(f: &arrow_schema::Field) -> arrow_schema::Field {
    use arrow_schema::{DataType, Field};
    let nested = |f: &Arc<Field>| Arc::new(plain_field(f));
    let ty = match f.data_type() {
        DataType::List(e) => DataType::List(nested(e)),
        DataType::LargeList(e) => DataType::LargeList(nested(e)),
        DataType::FixedSizeList(e, n) => DataType::FixedSizeList(nested(e), *n),
        DataType::Map(e, sorted) => DataType::Map(nested(e), *sorted),
        DataType::Struct(fs) => DataType::Struct(fs.iter().map(nested).collect()),
        t => t.clone(),
    };
    Field::new(f.name(), ty, f.is_nullable())
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
    fn schema_ddl_reads_back_as_the_same_schema() {
        let ddl = "id long not null, `first name` string, p decimal(10,2), u uuid, f fixed(3), \
                   ts timestamptz, tags list<string>, m map<string, int>, \
                   s struct<a: int, `b c`: list<date>>";
        let s = parse_schema(ddl).unwrap();
        let printed = schema_ddl(&s);
        assert_eq!(parse_schema(&printed).unwrap(), s, "{printed}");
        assert!(
            printed.starts_with("id long not null, `first name` string"),
            "{printed}"
        );
    }

    #[test]
    fn primary_keys_follow_the_spec_rules() {
        let prim = |t| Type::Primitive(t);
        let inner = |id| {
            StructType::new(vec![NestedField::required(
                id,
                "a",
                prim(PrimitiveType::Int),
            )
            .into()])
        };
        let s = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", prim(PrimitiveType::Long)).into(),
                NestedField::required(2, "Name", prim(PrimitiveType::String)).into(),
                NestedField::required(3, "f", prim(PrimitiveType::Double)).into(),
                NestedField::optional(4, "opt", prim(PrimitiveType::Long)).into(),
                NestedField::required(5, "st", Type::Struct(inner(8))).into(),
                NestedField::optional(6, "os", Type::Struct(inner(9))).into(),
            ])
            .build()
            .unwrap();
        let k = with_primary_key(s.clone(), &["id".into(), "name".into()]).unwrap();
        let mut ids: Vec<i32> = k.identifier_field_ids().collect();
        ids.sort();
        assert_eq!(ids, [1, 2]);
        let nested = with_primary_key(s.clone(), &["st.a".into()]).unwrap();
        assert_eq!(nested.identifier_field_ids().count(), 1);
        for (cols, why) in [
            (vec!["nope"], "no such column"),
            (vec!["opt"], "must be required"),
            (vec!["f"], "float and double"),
            (vec!["st"], "primitive"),
            (vec!["os.a"], "optional"),
            (vec!["id", "ID"], "named twice"),
        ] {
            let cols: Vec<String> = cols.into_iter().map(String::from).collect();
            let e = with_primary_key(s.clone(), &cols).unwrap_err().to_string();
            assert!(e.contains(why), "{cols:?}: {e}");
        }
    }

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

    /// Regression (issue 14): list and map columns failed with "Field stack underflow".
    #[test]
    fn arrow_schemas_with_nested_types() {
        use arrow_schema::{DataType, Field, Fields};
        let meta = |f: Field, id: &str| {
            f.with_metadata([("PARQUET:field_id".to_string(), id.to_string())].into())
        };
        let entries = Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new(
                    "value",
                    DataType::Struct(Fields::from(vec![Field::new("n", DataType::Int64, true)])),
                    true,
                ),
            ])),
            false,
        );
        let item = meta(Field::new("item", DataType::Int32, true), "99");
        let arrow = arrow_schema::Schema::new(vec![
            meta(Field::new("id", DataType::Int64, false), "7"),
            Field::new(
                "s",
                DataType::Struct(Fields::from(vec![
                    Field::new("a", DataType::Utf8, true),
                    Field::new("l", DataType::List(Arc::new(item)), true),
                ])),
                true,
            ),
            Field::new("m", DataType::Map(Arc::new(entries), false), true),
        ]);
        let s = schema_from_arrow(&arrow).unwrap();
        let want = parse_schema(
            "id long not null, s struct<a:string, l:list<int>>, m map<string, struct<n:long>>",
        )
        .unwrap();
        // Iceberg's order: top-level fields 1..3, then s's members 4, 5, the list element 6,
        // the map's key 7 and value 8, the value's member 9.
        let ids = |s: &Schema, name: &str| s.field_id_by_name(name).unwrap();
        for (name, id) in [
            ("id", 1),
            ("s", 2),
            ("m", 3),
            ("s.a", 4),
            ("s.l", 5),
            ("s.l.element", 6),
            ("m.key", 7),
            ("m.value", 8),
            ("m.value.n", 9),
        ] {
            assert_eq!(ids(&s, name), id, "{name}");
        }
        fn shape(t: &Type) -> String {
            let field =
                |f: &NestedField| format!("{}:{}:{}", f.name, f.required, shape(&f.field_type));
            match t {
                Type::Primitive(p) => p.to_string(),
                Type::Struct(s) => s
                    .fields()
                    .iter()
                    .map(|f| field(f))
                    .collect::<Vec<_>>()
                    .join(","),
                Type::List(l) => format!("list<{}>", field(&l.element_field)),
                Type::Map(m) => format!("map<{},{}>", field(&m.key_field), field(&m.value_field)),
            }
        }
        let root = |s: &Schema| shape(&Type::Struct(s.as_struct().clone()));
        assert_eq!(root(&s), root(&want));
    }
}
