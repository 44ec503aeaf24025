//! Literal text to an Iceberg `Datum` of a column's type: shared by binding (string literals
//! against date / timestamp columns) and the lowering to pruning predicates, so both read
//! `'2024-01-01'` the same way.

use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Type};

/// The literal as written: a number or a quoted string.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RawLit<'a> {
    Num(&'a str),
    Str(&'a str),
}

/// Why a literal does not convert.
#[derive(Debug)]
pub(crate) enum LitError {
    /// The literal's kind (a number, a string) does not fit the column type.
    Mismatch,
    /// Right kind, but the text is not a valid value.
    Invalid,
}

/// Converts `raw` into a `Datum` of type `ty` (timestamps without an offset read as UTC; a bare
/// date for a timestamp column is its midnight).
pub(crate) fn datum_for(raw: RawLit<'_>, ty: &PrimitiveType) -> Result<Datum, LitError> {
    let bad = |_: iceberg::Error| LitError::Invalid;
    match (raw, ty) {
        (RawLit::Num(n), PrimitiveType::Int) => n
            .parse::<i32>()
            .map(Datum::int)
            .map_err(|_| LitError::Invalid),
        (RawLit::Num(n), PrimitiveType::Long) => n
            .parse::<i64>()
            .map(Datum::long)
            .map_err(|_| LitError::Invalid),
        (RawLit::Num(n), PrimitiveType::Float) => n
            .parse::<f32>()
            .map(Datum::float)
            .map_err(|_| LitError::Invalid),
        (RawLit::Num(n), PrimitiveType::Double) => n
            .parse::<f64>()
            .map(Datum::double)
            .map_err(|_| LitError::Invalid),
        (RawLit::Num(n) | RawLit::Str(n), PrimitiveType::Decimal { precision, scale }) => {
            decimal(n, *precision, *scale).ok_or(LitError::Invalid)
        }
        (RawLit::Str(s), PrimitiveType::String) => Ok(Datum::string(s)),
        (RawLit::Str(s), PrimitiveType::Date) => Datum::date_from_str(s).map_err(bad),
        (RawLit::Str(s), PrimitiveType::Time) => Datum::time_from_str(s).map_err(bad),
        (RawLit::Str(s), PrimitiveType::Timestamp) => {
            Datum::timestamp_from_str(s.trim().replace(' ', "T"))
                .or_else(|_| Datum::date_from_str(s).map(|d| day_to_ts(&d, false)))
                .map_err(bad)
        }
        (RawLit::Str(s), PrimitiveType::Timestamptz) => tstz(s).ok_or(LitError::Invalid),
        (RawLit::Str(s), PrimitiveType::Uuid) => Datum::uuid_from_str(s).map_err(bad),
        (RawLit::Str(s), PrimitiveType::Boolean) => Datum::bool_from_str(s).map_err(bad),
        (RawLit::Str(s), PrimitiveType::Binary) => Ok(Datum::binary(s.as_bytes().to_vec())),
        (RawLit::Num(_), _) => Err(LitError::Mismatch),
        (RawLit::Str(_), _) => Err(LitError::Mismatch),
    }
}

/// Microseconds since the epoch of a timestamp string (`tz`: read an offset if given, else
/// UTC), or `None` if it is not a timestamp or a date.
pub(crate) fn timestamp_micros(s: &str, tz: bool) -> Option<i64> {
    let ty = if tz {
        PrimitiveType::Timestamptz
    } else {
        PrimitiveType::Timestamp
    };
    match datum_for(RawLit::Str(s), &ty).ok()?.literal() {
        PrimitiveLiteral::Long(v) => Some(*v),
        _ => None,
    }
}

/// Days since the epoch of a `YYYY-MM-DD` string.
pub(crate) fn date_days(s: &str) -> Option<i32> {
    match datum_for(RawLit::Str(s), &PrimitiveType::Date)
        .ok()?
        .literal()
    {
        PrimitiveLiteral::Int(v) => Some(*v),
        _ => None,
    }
}

fn day_to_ts(d: &Datum, tz: bool) -> Datum {
    let days = match d.literal() {
        PrimitiveLiteral::Int(v) => *v as i64,
        _ => 0,
    };
    let micros = days * 86_400_000_000;
    if tz {
        Datum::timestamptz_micros(micros)
    } else {
        Datum::timestamp_micros(micros)
    }
}

fn tstz(s: &str) -> Option<Datum> {
    let s = s.trim().replace(' ', "T");
    if let Ok(d) = Datum::timestamptz_from_str(&s) {
        return Some(d);
    }
    // No offset given: read as UTC.
    if let Ok(d) = Datum::timestamp_from_str(&s) {
        if let PrimitiveLiteral::Long(v) = d.literal() {
            return Some(Datum::timestamptz_micros(*v));
        }
    }
    Datum::date_from_str(&s).ok().map(|d| day_to_ts(&d, true))
}

fn decimal(s: &str, precision: u32, scale: u32) -> Option<Datum> {
    let s = s.trim();
    let (sign, digits) = match s.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if frac.len() > scale as usize
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
        || (int.is_empty() && frac.is_empty())
    {
        return None;
    }
    let int = if int.is_empty() { "0" } else { int };
    let padded = if scale == 0 {
        format!("{sign}{int}")
    } else {
        format!(
            "{sign}{int}.{frac}{}",
            "0".repeat(scale as usize - frac.len())
        )
    };
    Datum::decimal_from_str(padded)
        .ok()?
        .to(&Type::Primitive(PrimitiveType::Decimal {
            precision,
            scale,
        }))
        .ok()
}
