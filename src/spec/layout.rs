//! Partition-spec and sort-order text (`day(ts), bucket(16,id)`, `id desc nulls last`).

use iceberg::spec::{
    NullOrder, Schema, SortDirection, SortField, SortOrder, Transform, UnboundPartitionSpec,
};

use crate::error::{Error, Result};

/// Refuses a transform the spec does not allow: `bucket[N]` and `truncate[W]` need N, W > 0
/// (0 would divide by zero on every write).
pub(crate) fn check_transform(t: &Transform) -> Result<()> {
    match t {
        Transform::Bucket(0) => Err(Error::invalid(
            "bucket[0]: the number of buckets must be at least 1 (bucket(N, col) with N > 0)",
        )),
        Transform::Truncate(0) => Err(Error::invalid(
            "truncate[0]: the truncation width must be at least 1 (truncate(W, col) with W > 0)",
        )),
        _ => Ok(()),
    }
}

/// Refuses a partition spec or sort order with a transform [`check_transform`] refuses.
pub(crate) fn check_layout(spec: &UnboundPartitionSpec, order: Option<&SortOrder>) -> Result<()> {
    for f in spec.fields() {
        check_transform(&f.transform)
            .map_err(|e| e.context(format!("partition field '{}'", f.name)))?;
    }
    for f in order.map(|o| o.fields.as_slice()).unwrap_or_default() {
        check_transform(&f.transform)
            .map_err(|e| e.context(format!("sort field of source id {}", f.source_id)))?;
    }
    Ok(())
}

/// One `transform(args)` or bare column term.
fn parse_term(term: &str) -> Result<(Transform, String)> {
    let t = term.trim();
    let Some(open) = t.find('(') else {
        return Ok((Transform::Identity, t.trim_matches('`').to_string()));
    };
    let close = t
        .rfind(')')
        .ok_or_else(|| Error::invalid(format!("missing ')' in '{t}'")))?;
    let name = t[..open].trim().to_ascii_lowercase();
    let args: Vec<&str> = t[open + 1..close].split(',').map(str::trim).collect();
    let num = |s: &str| -> Result<u32> {
        s.parse()
            .map_err(|_| Error::invalid(format!("'{s}' is not a number in '{t}'")))
    };
    let two = |args: &[&str]| -> Result<(u32, String)> {
        match args {
            [n, c] if n.parse::<u32>().is_ok() => Ok((num(n)?, c.to_string())),
            [c, n] => Ok((num(n)?, c.to_string())),
            _ => Err(Error::invalid(format!(
                "'{t}' needs two arguments: (N, column)"
            ))),
        }
    };
    let one = |args: &[&str]| -> Result<String> {
        match args {
            [c] if !c.is_empty() => Ok(c.to_string()),
            _ => Err(Error::invalid(format!("'{t}' needs one column argument"))),
        }
    };
    let (transform, col) = match name.as_str() {
        "identity" => (Transform::Identity, one(&args)?),
        "bucket" => {
            let (n, c) = two(&args)?;
            (Transform::Bucket(n), c)
        }
        "truncate" => {
            let (n, c) = two(&args)?;
            (Transform::Truncate(n), c)
        }
        "year" | "years" => (Transform::Year, one(&args)?),
        "month" | "months" => (Transform::Month, one(&args)?),
        "day" | "days" => (Transform::Day, one(&args)?),
        "hour" | "hours" => (Transform::Hour, one(&args)?),
        "void" => (Transform::Void, one(&args)?),
        other => {
            return Err(Error::invalid(format!(
                "unknown transform '{other}' in '{t}'"
            )))
        }
    };
    check_transform(&transform).map_err(|e| e.context(format!("'{t}'")))?;
    Ok((transform, col))
}

/// Splits at top-level commas (not inside parentheses).
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The partition field name Iceberg Java gives a transform of `col`.
fn partition_field_name(t: &Transform, col: &str) -> String {
    match t {
        Transform::Identity => col.to_string(),
        Transform::Bucket(_) => format!("{col}_bucket"),
        Transform::Truncate(_) => format!("{col}_trunc"),
        Transform::Year => format!("{col}_year"),
        Transform::Month => format!("{col}_month"),
        Transform::Day => format!("{col}_day"),
        Transform::Hour => format!("{col}_hour"),
        _ => format!("{col}_null"),
    }
}

/// Parses `day(ts), bucket(16,id), truncate(4,name), region` against a schema.
pub fn parse_partition_spec(text: &str, schema: &Schema) -> Result<UnboundPartitionSpec> {
    let mut b = UnboundPartitionSpec::builder().with_spec_id(0);
    for (i, term) in split_top(text).into_iter().enumerate() {
        let (transform, col) = parse_term(term)?;
        let field = schema.field_by_name(&col).ok_or_else(|| {
            Error::invalid(format!(
                "partition term '{term}': no column '{col}' in the schema"
            ))
        })?;
        transform.result_type(&field.field_type).map_err(|e| {
            Error::invalid(format!(
                "partition term '{term}': {transform} cannot apply to {}: {e}",
                field.field_type
            ))
        })?;
        b = b
            .add_partition_field(field.id, partition_field_name(&transform, &col), transform)
            .map_err(|e| Error::invalid(format!("partition term '{term}' (#{i}): {e}")))?;
    }
    Ok(b.build())
}

/// Parses `id desc nulls last, bucket(4, k)` into a sort order (id 1) against a schema.
pub fn parse_sort_order(text: &str, schema: &Schema) -> Result<SortOrder> {
    let mut fields = Vec::new();
    for term in split_top(text) {
        let lower = term.to_ascii_lowercase();
        let mut words: Vec<&str> = lower.split_whitespace().collect();
        let mut nulls = None;
        if words.len() >= 2 && words[words.len() - 2] == "nulls" {
            nulls = Some(match words[words.len() - 1] {
                "first" => NullOrder::First,
                "last" => NullOrder::Last,
                w => return Err(Error::invalid(format!("sort term '{term}': NULLS {w}?"))),
            });
            words.truncate(words.len() - 2);
        }
        let mut direction = SortDirection::Ascending;
        if let Some(last) = words.last() {
            if *last == "desc" || *last == "asc" {
                direction = if *last == "desc" {
                    SortDirection::Descending
                } else {
                    SortDirection::Ascending
                };
                words.pop();
            }
        }
        // Keep the original case of the column expression.
        let expr_len: usize =
            words.iter().map(|w| w.len()).sum::<usize>() + words.len().saturating_sub(1);
        let expr = term.trim()[..expr_len.min(term.trim().len())].trim();
        let (transform, col) = parse_term(expr)?;
        let field = schema.field_by_name(&col).ok_or_else(|| {
            Error::invalid(format!(
                "sort term '{term}': no column '{col}' in the schema"
            ))
        })?;
        let null_order = nulls.unwrap_or(match direction {
            SortDirection::Ascending => NullOrder::First,
            SortDirection::Descending => NullOrder::Last,
        });
        fields.push(
            SortField::builder()
                .source_id(field.id)
                .transform(transform)
                .direction(direction)
                .null_order(null_order)
                .build(),
        );
    }
    SortOrder::builder()
        .with_order_id(1)
        .with_fields(fields)
        .build(schema)
        .map_err(|e| Error::invalid(format!("sort order '{text}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_schema;

    #[test]
    fn every_transform() {
        let s = parse_schema(
            "id long, name string, ts timestamptz, d date, t2 timestamp, d2 date, t3 timestamptz",
        )
        .unwrap();
        let spec = parse_partition_spec(
            "identity(d), bucket(16,id), truncate(4, name), year(ts), months(d2), day(t2), hour(t3), void(id), name",
            &s,
        )
        .unwrap();
        let names: Vec<_> = spec.fields().iter().map(|f| f.name.clone()).collect();
        assert_eq!(names[1], "id_bucket");
        assert_eq!(spec.fields()[2].transform, Transform::Truncate(4));
        assert_eq!(names.len(), 9);
        assert!(parse_partition_spec("day(nope)", &s).is_err());
        assert!(parse_partition_spec("day(name)", &s).is_err());
        assert!(parse_partition_spec("zorder(id)", &s).is_err());
    }

    #[test]
    fn zero_buckets_and_widths_are_refused() {
        let s = parse_schema("id long, name string").unwrap();
        for (text, want) in [
            ("bucket(0, id)", "number of buckets"),
            ("bucket(id, 0)", "number of buckets"),
            ("truncate(0, name)", "truncation width"),
            ("id, truncate(name, 0)", "truncation width"),
        ] {
            let e = parse_partition_spec(text, &s).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{text}");
            assert!(e.to_string().contains(want), "{text}: {e}");
            let e = parse_sort_order(text, &s).unwrap_err();
            assert!(e.to_string().contains(want), "sort {text}: {e}");
        }
        assert!(parse_partition_spec("bucket(1, id), truncate(1, name)", &s).is_ok());
        let zero = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_bucket", Transform::Bucket(0))
            .unwrap()
            .build();
        assert!(check_layout(&zero, None).is_err());
        assert!(check_layout(&UnboundPartitionSpec::builder().build(), None).is_ok());
    }

    #[test]
    fn sort_orders() {
        let s = parse_schema("id long, ts timestamptz").unwrap();
        let o = parse_sort_order("id desc, day(ts) nulls last", &s).unwrap();
        assert_eq!(o.fields[0].direction, SortDirection::Descending);
        assert_eq!(o.fields[0].null_order, NullOrder::Last);
        assert_eq!(o.fields[1].transform, Transform::Day);
        assert_eq!(o.fields[1].null_order, NullOrder::Last);
    }
}
