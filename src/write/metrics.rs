//! Column metrics policy (`write.metadata.metrics.*`): drop or truncate bounds per column.

use std::collections::HashMap;

use iceberg::spec::{DataFile, Datum, PrimitiveLiteral, Schema};

use crate::error::{Error, Result};
use crate::spec::{MetricsMode, TableProperties};

/// Truncates a string lower bound to `n` characters.
fn truncate_str_lower(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Truncates a string upper bound to `n` characters, incrementing the last one; `None` if
/// no such bound exists.
fn truncate_str_upper(s: &str, n: usize) -> Option<String> {
    if s.chars().count() <= n {
        return Some(s.to_string());
    }
    let mut chars: Vec<char> = s.chars().take(n).collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

fn truncate_bin_upper(b: &[u8], n: usize) -> Option<Vec<u8>> {
    if b.len() <= n {
        return Some(b.to_vec());
    }
    let mut v = b[..n].to_vec();
    while let Some(last) = v.pop() {
        if last < u8::MAX {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

fn apply_bound(d: &Datum, n: usize, upper: bool) -> Option<Datum> {
    match d.literal() {
        PrimitiveLiteral::String(s) => {
            if upper {
                truncate_str_upper(s, n).map(Datum::string)
            } else {
                Some(Datum::string(truncate_str_lower(s, n)))
            }
        }
        PrimitiveLiteral::Binary(b) => {
            if upper {
                truncate_bin_upper(b, n).map(Datum::binary)
            } else {
                Some(Datum::binary(b[..b.len().min(n)].to_vec()))
            }
        }
        _ => Some(d.clone()),
    }
}

/// UUID bounds that order differently as unsigned bytes (the spec, Parquet, floe) and as
/// Java's signed `UUID.compareTo` (Iceberg Java up to 1.10 prunes with it, apache/iceberg
/// #14216): values on both sides of the top bit. Such bounds are left out, so no reader
/// prunes the file wrongly (Spark 3.5 + Iceberg 1.10.2 dropped matching rows).
fn uuid_bounds_ambiguous(lower: Option<&Datum>, upper: Option<&Datum>) -> bool {
    let top = |d: Option<&Datum>| match d.map(|d| d.literal()) {
        Some(PrimitiveLiteral::UInt128(v)) => Some(v >> 127),
        _ => None,
    };
    matches!((top(lower), top(upper)), (Some(a), Some(b)) if a != b)
}

/// Rebuilds `f` applying the table's metrics modes, with partition spec id `spec_id`.
pub(crate) fn finish_data_file(
    f: DataFile,
    schema: &Schema,
    props: &TableProperties,
    spec_id: i32,
) -> Result<DataFile> {
    let mut lower = HashMap::new();
    let mut upper = HashMap::new();
    let mut values = HashMap::new();
    let mut nulls = HashMap::new();
    let mut nans = HashMap::new();
    let mut ids: Vec<i32> = f
        .value_counts()
        .keys()
        .chain(f.lower_bounds().keys())
        .copied()
        .collect();
    ids.sort_unstable();
    ids.dedup();
    for (idx, id) in ids.iter().enumerate() {
        let name = schema.name_by_field_id(*id).unwrap_or_default();
        let mode = props.metrics_mode(name, idx);
        if mode == MetricsMode::None {
            continue;
        }
        if let Some(v) = f.value_counts().get(id) {
            values.insert(*id, *v);
        }
        if let Some(v) = f.null_value_counts().get(id) {
            nulls.insert(*id, *v);
        }
        if let Some(v) = f.nan_value_counts().get(id) {
            nans.insert(*id, *v);
        }
        let n = match mode {
            MetricsMode::Truncate(n) => n,
            MetricsMode::Full => usize::MAX,
            _ => continue,
        };
        if uuid_bounds_ambiguous(f.lower_bounds().get(id), f.upper_bounds().get(id)) {
            continue;
        }
        if let Some(b) = f
            .lower_bounds()
            .get(id)
            .and_then(|d| apply_bound(d, n, false))
        {
            lower.insert(*id, b);
        }
        if let Some(b) = f
            .upper_bounds()
            .get(id)
            .and_then(|d| apply_bound(d, n, true))
        {
            upper.insert(*id, b);
        }
    }
    crate::spec::data_file_builder(&f)
        .value_counts(values)
        .null_value_counts(nulls)
        .nan_value_counts(nans)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .partition_spec_id(spec_id)
        .build()
        .map_err(|e| Error::invalid(format!("data file {}: {e}", f.file_path())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_bounds_across_the_top_bit_are_dropped() {
        let u = |v: u128| Datum::uuid(uuid::Uuid::from_u128(v));
        assert!(uuid_bounds_ambiguous(Some(&u(1)), Some(&u(1 << 127))));
        assert!(!uuid_bounds_ambiguous(Some(&u(1)), Some(&u(2))));
        assert!(!uuid_bounds_ambiguous(
            Some(&u(1 << 127)),
            Some(&u(u128::MAX))
        ));
        assert!(!uuid_bounds_ambiguous(
            Some(&Datum::long(1)),
            Some(&Datum::long(2))
        ));
    }

    #[test]
    fn truncation() {
        assert_eq!(truncate_str_lower("abcdef", 3), "abc");
        assert_eq!(truncate_str_upper("abcdef", 3).as_deref(), Some("abd"));
        assert_eq!(truncate_str_upper("ab", 3).as_deref(), Some("ab"));
        assert_eq!(truncate_bin_upper(&[1, 255, 255, 4], 3), Some(vec![2]));
        assert_eq!(truncate_bin_upper(&[255, 255, 1], 2), None);
    }
}
