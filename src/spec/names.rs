//! The one rule that finds the column a user named (filters, projections, assignments, key
//! columns): the exact name, else the one that matches ignoring ASCII case.

use iceberg::spec::{NestedFieldRef, Schema};

use crate::error::{Error, Result};

/// The position of the column a user called `want` among `names`: the one of exactly that name,
/// else the one whose name matches ignoring ASCII case. `Ok(None)` when none matches; an error
/// naming them when several match ignoring case (Iceberg Java's case-insensitive lookup
/// refuses such names too). Every name a user writes (filters, projections, assignments, key
/// columns) is found by this rule.
pub fn resolve_column<'a>(
    names: impl IntoIterator<Item = &'a str>,
    want: &str,
) -> Result<Option<usize>> {
    let names: Vec<&str> = names.into_iter().collect();
    if let Some(i) = names.iter().position(|n| *n == want) {
        return Ok(Some(i));
    }
    let hits: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].eq_ignore_ascii_case(want))
        .collect();
    match hits.as_slice() {
        [] => Ok(None),
        [i] => Ok(Some(*i)),
        many => Err(Error::invalid(format!(
            "column '{want}' is ambiguous: {} differ only in case; write the name exactly",
            many.iter()
                .map(|&i| names[i])
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// [`resolve_column`] over an Iceberg schema's fields by full name (`s.a` is field `a` of
/// struct `s`).
pub fn resolve_field(schema: &Schema, want: &str) -> Result<Option<NestedFieldRef>> {
    if let Some(f) = schema.field_by_name(want) {
        return Ok(Some(f.clone()));
    }
    let mut named: Vec<(i32, &str)> = schema
        .field_id_to_name_map()
        .iter()
        .map(|(id, n)| (*id, n.as_str()))
        .collect();
    named.sort_unstable();
    let found = resolve_column(named.iter().map(|(_, n)| *n), want)?;
    Ok(found.and_then(|i| schema.field_by_id(named[i].0).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_win_then_one_case_insensitive_match() {
        let names = ["id", "Name", "NAME2", "x"];
        assert_eq!(resolve_column(names, "Name").unwrap(), Some(1));
        assert_eq!(resolve_column(names, "name").unwrap(), Some(1));
        assert_eq!(resolve_column(names, "name2").unwrap(), Some(2));
        assert_eq!(resolve_column(names, "y").unwrap(), None);
        let twins = ["a", "A"];
        assert_eq!(resolve_column(twins, "A").unwrap(), Some(1));
        let err = resolve_column(twins, "b").unwrap();
        assert_eq!(err, None);
        let err = resolve_column(["Ab", "aB"], "ab").unwrap_err();
        assert!(err.to_string().contains("ambiguous"), "{err}");
    }

    #[test]
    fn fields_resolve_by_full_name() {
        let s = crate::spec::parse_schema("id long, St struct<A: int, b: string>").unwrap();
        assert_eq!(resolve_field(&s, "st.a").unwrap().unwrap().name, "A");
        assert_eq!(resolve_field(&s, "ID").unwrap().unwrap().name, "id");
        assert!(resolve_field(&s, "st.c").unwrap().is_none());
    }
}
