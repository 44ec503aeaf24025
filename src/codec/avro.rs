//! Checks on an Avro container's writer schema before its records are decoded.
//!
//! An array whose items encode in zero bytes (`null`, `fixed(0)`, a record of such fields)
//! lets a block declare millions of items that cost no input; nested, they multiply into
//! hours of decoding from a few bytes. No Iceberg schema has such an array, so a file whose
//! writer schema does is refused before any record is read.

use std::collections::HashMap;

use apache_avro::schema::{Name, Schema};

use crate::error::{Error, Result};

/// Refuses `schema` (the writer schema of `what`) if an array's items encode in zero bytes,
/// or a record contains itself with nothing (a union, array or map) in between.
pub fn check_writer_schema(schema: &Schema, what: &str) -> Result<()> {
    let mut named = HashMap::new();
    collect_named(schema, &mut named);
    let mut sizes = Sizes {
        named,
        memo: HashMap::new(),
        cyclic: false,
    };
    let empty_items = sizes.has_zero_byte_items(schema);
    if empty_items || sizes.cyclic {
        return Err(Error::corrupt(format!(
            "{what} is malformed: its Avro schema has {} (no Iceberg writer produces one)",
            if empty_items {
                "an array whose items take no bytes"
            } else {
                "a record that contains itself"
            }
        )));
    }
    Ok(())
}

/// Named types by name. Nesting is bounded by the schema JSON parser's recursion limit.
fn collect_named<'a>(s: &'a Schema, out: &mut HashMap<&'a Name, &'a Schema>) {
    match s {
        Schema::Record(r) => {
            out.insert(&r.name, s);
            r.fields.iter().for_each(|f| collect_named(&f.schema, out));
        }
        Schema::Fixed(f) => {
            out.insert(&f.name, s);
        }
        Schema::Array(a) => collect_named(&a.items, out),
        Schema::Map(m) => collect_named(&m.types, out),
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_named(v, out)),
        Schema::Decimal(d) => collect_named(&d.inner, out),
        _ => {}
    }
}

struct Sizes<'a> {
    named: HashMap<&'a Name, &'a Schema>,
    /// Per record: `None` while it is being sized, then whether it takes zero bytes.
    memo: HashMap<&'a Name, Option<bool>>,
    /// A record was reached again while being sized.
    cyclic: bool,
}

impl<'a> Sizes<'a> {
    /// Whether a value of `s` can encode in zero bytes.
    fn zero_bytes(&mut self, s: &'a Schema) -> bool {
        match s {
            Schema::Null => true,
            Schema::Fixed(f) => f.size == 0,
            Schema::Decimal(d) => self.zero_bytes(&d.inner),
            Schema::Record(r) => match self.memo.get(&r.name) {
                Some(Some(known)) => *known,
                Some(None) => {
                    self.cyclic = true;
                    true
                }
                None => {
                    self.memo.insert(&r.name, None);
                    let zero = r.fields.iter().all(|f| self.zero_bytes(&f.schema));
                    self.memo.insert(&r.name, Some(zero));
                    zero
                }
            },
            // An unknown name: the decoder fails on it anyway.
            Schema::Ref { name } => match self.named.get(name).copied() {
                Some(t) => self.zero_bytes(t),
                None => false,
            },
            _ => false,
        }
    }

    fn has_zero_byte_items(&mut self, s: &'a Schema) -> bool {
        match s {
            Schema::Array(a) => self.zero_bytes(&a.items) || self.has_zero_byte_items(&a.items),
            Schema::Map(m) => self.has_zero_byte_items(&m.types),
            Schema::Record(r) => {
                // Sizing the record finds a record that contains itself.
                self.zero_bytes(s);
                r.fields.iter().any(|f| self.has_zero_byte_items(&f.schema))
            }
            Schema::Union(u) => u.variants().iter().any(|v| self.has_zero_byte_items(v)),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<()> {
        check_writer_schema(&Schema::parse_str(json).unwrap(), "test.avro")
    }

    #[test]
    fn iceberg_like_schemas_pass() {
        check(
            r#"{"type":"record","name":"manifest_file","fields":[
                {"name":"path","type":"string"},
                {"name":"partitions","type":["null",{"type":"array","items":
                    {"type":"record","name":"r508","fields":[
                        {"name":"contains_null","type":"boolean"},
                        {"name":"lower_bound","type":["null","bytes"]}]}}]}]}"#,
        )
        .unwrap();
        check(r#"{"type":"array","items":{"type":"fixed","name":"f","size":4}}"#).unwrap();
    }

    #[test]
    fn arrays_of_nothing_are_refused() {
        for json in [
            r#"{"type":"array","items":"null"}"#,
            r#"{"type":"array","items":{"type":"fixed","name":"z","size":0}}"#,
            r#"{"type":"record","name":"r","fields":[{"name":"a","type":{"type":"array",
                "items":{"type":"record","name":"e","fields":[{"name":"n","type":"null"}]}}}]}"#,
            r#"{"type":"map","values":{"type":"array","items":{"type":"array","items":"null"}}}"#,
        ] {
            let e = check(json).unwrap_err();
            assert!(e.to_string().contains("items take no bytes"), "{json}: {e}");
        }
    }

    #[test]
    fn records_that_contain_themselves_are_refused() {
        let e = check(r#"{"type":"record","name":"r","fields":[{"name":"a","type":"r"}]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("contains itself"), "{e}");
        // Through a union it is a finite linked list.
        check(r#"{"type":"record","name":"r","fields":[{"name":"a","type":["null","r"]}]}"#)
            .unwrap();
    }
}
