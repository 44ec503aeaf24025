//! Makes input batches fit the table's Arrow schema (by column name, with exact casts).
//!
//! A column fits when every value converts without losing information: integers and floats
//! widen, decimals rescale only when no digit is dropped and the precision holds, strings
//! parse into decimals exactly, timestamps change unit only when no sub-unit digit is dropped.
//! Nested types conform at every level: struct members by name (a missing member takes its
//! v3 write-default, else is null when optional), list elements and map keys/values by
//! position, with the table's field ids, names and nullability.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int64Type};
use arrow_array::{
    new_null_array, Array, ArrayRef, Decimal128Array, ListArray, MapArray, PrimitiveArray,
    RecordBatch, StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, FieldRef, Fields, SchemaRef};

use crate::error::{Error, Result};

/// Conforms input batches to a target Arrow schema that carries Iceberg field ids.
#[derive(Debug, Clone)]
pub struct Conformer {
    target: SchemaRef,
    /// The Iceberg type of each target column, for error messages (`decimal(10,2)`).
    types: Vec<String>,
    /// The v3 `write-default` of each field (columns and nested members, by field id) that
    /// has one, in the spec's JSON text form: what a missing input column or member is
    /// filled with.
    defaults: Defaults,
    table: String,
}

/// Why a column does not fit: what went wrong, at which nested member, at which row.
struct Misfit {
    /// The nested member below the column (`.a.element`), empty for the column itself.
    member: String,
    why: String,
    /// The row of the array being conformed, when one value is at fault.
    row: Option<usize>,
}

impl Misfit {
    fn new(why: impl Into<String>) -> Self {
        Misfit {
            member: String::new(),
            why: why.into(),
            row: None,
        }
    }
    fn at(row: usize, why: impl Into<String>) -> Self {
        Misfit {
            row: Some(row),
            ..Misfit::new(why)
        }
    }
    /// The same misfit seen from the parent: `member` prefixed, the row mapped by `row`.
    fn inside(mut self, name: &str, row: impl FnOnce(usize) -> usize) -> Self {
        self.member = format!(".{name}{}", self.member);
        self.row = self.row.map(row);
        self
    }
}

type Fit<T> = std::result::Result<T, Misfit>;

/// Write-defaults by field id.
type Defaults = std::collections::HashMap<i32, String>;

/// The write-defaults of `fields` and of every field nested in them.
fn collect_defaults(fields: &[iceberg::spec::NestedFieldRef], out: &mut Defaults) {
    use iceberg::spec::Type;
    for f in fields {
        if let Some(json) = f
            .write_default
            .clone()
            .and_then(|d| d.try_into_json(&f.field_type).ok())
        {
            let text = match json {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            out.insert(f.id, text);
        }
        match &*f.field_type {
            Type::Struct(st) => collect_defaults(st.fields(), out),
            Type::List(l) => collect_defaults(std::slice::from_ref(&l.element_field), out),
            Type::Map(m) => collect_defaults(&[m.key_field.clone(), m.value_field.clone()], out),
            Type::Primitive(_) => {}
        }
    }
}

/// The Iceberg field id an Arrow field carries.
fn field_id(f: &arrow_schema::Field) -> Option<i32> {
    f.metadata()
        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)?
        .parse()
        .ok()
}

/// `rows` copies of the write-default of target field `tf`, if it has one.
fn default_column(defaults: &Defaults, tf: &FieldRef, rows: usize) -> Option<Fit<ArrayRef>> {
    let text = defaults.get(&field_id(tf)?)?;
    let strings: ArrayRef = Arc::new(arrow_array::StringArray::from(vec![text.as_str(); rows]));
    Some(arrow_cast::cast(&strings, tf.data_type()).map_err(|e| {
        Misfit::new(format!(
            "its write-default '{text}' does not fit its type: {e}"
        ))
    }))
}

/// One row holding the write-default of each top-level field of `arrow` (the Arrow form of
/// `schema`), `None` for a field without one: what a row written without that column holds.
pub(crate) fn write_default_row(
    schema: &iceberg::spec::Schema,
    arrow: &arrow_schema::Schema,
) -> Result<Vec<Option<ArrayRef>>> {
    let mut defaults = Defaults::new();
    collect_defaults(schema.as_struct().fields(), &mut defaults);
    arrow
        .fields()
        .iter()
        .map(|f| {
            default_column(&defaults, f, 1)
                .transpose()
                .map_err(|m| Error::invalid(format!("column '{}': {}", f.name(), m.why)))
        })
        .collect()
}

impl Conformer {
    /// A conformer for the table's current schema.
    pub fn new(schema: &iceberg::spec::Schema, table: &str) -> Result<Self> {
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema)?);
        let types = target
            .fields()
            .iter()
            .map(
                |f| match schema.field_by_name(f.name()).map(|n| &*n.field_type) {
                    Some(t @ iceberg::spec::Type::Primitive(_)) => t.to_string(),
                    _ => f.data_type().to_string(),
                },
            )
            .collect();
        let mut defaults = Defaults::new();
        collect_defaults(schema.as_struct().fields(), &mut defaults);
        Ok(Self {
            target,
            types,
            defaults,
            table: table.to_string(),
        })
    }

    /// The Arrow schema (with `PARQUET:field_id` metadata) batches are conformed to.
    pub fn schema(&self) -> &SchemaRef {
        &self.target
    }

    /// Reorders, casts and null-fills `batch` to the table schema; errors name the column,
    /// and the value and its row (counted from 1 in the batch) when one value does not fit.
    pub fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        self.conform_from(batch, "the batch", 1)
    }

    /// [`Conformer::conform`] for rows of `source` (an input file, quoted by the caller)
    /// starting at row `first_row` (counted from 1): errors say `row N of SOURCE`.
    pub fn conform_from(
        &self,
        batch: &RecordBatch,
        source: &str,
        first_row: u64,
    ) -> Result<RecordBatch> {
        let input = batch.schema();
        for f in input.fields() {
            if self.target.field_with_name(f.name()).is_err() {
                return Err(Error::invalid(format!(
                    "input column '{}' is not in the schema of table {}; add it to the table schema or drop it from the input",
                    f.name(),
                    self.table
                )));
            }
        }
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.target.fields().len());
        for (n, tf) in self.target.fields().iter().enumerate() {
            let col = match input.index_of(tf.name()) {
                Ok(i) => {
                    let a = batch.column(i);
                    fit_field(a, tf, &self.defaults)
                        .map_err(|m| self.misfit(a, n, m, source, first_row))?
                }
                // v3: a column the input lacks takes its write-default.
                Err(_) => match default_column(&self.defaults, tf, batch.num_rows()) {
                    Some(d) => d.map_err(|m| {
                        Error::invalid(format!(
                            "table {}: column '{}': {}",
                            self.table,
                            tf.name(),
                            m.why
                        ))
                    })?,
                    None if tf.is_nullable() => new_null_array(tf.data_type(), batch.num_rows()),
                    None => {
                        return Err(Error::invalid(format!(
                            "required column '{}' of table {} is missing from the input",
                            tf.name(),
                            self.table
                        )))
                    }
                },
            };
            cols.push(col);
        }
        RecordBatch::try_new(self.target.clone(), cols)
            .map_err(|e| Error::invalid(format!("table {}: {e}", self.table)))
    }

    /// The error for column `a` that does not fit target column `n`.
    fn misfit(&self, a: &ArrayRef, n: usize, m: Misfit, source: &str, first: u64) -> Error {
        let tf = self.target.field(n);
        let ty = self.types.get(n).map(String::as_str).unwrap_or("?");
        let column = format!("{}{}", tf.name(), m.member);
        match m.row {
            Some(r) => Error::invalid(format!(
                "column '{column}' of table {} ({ty}): row {} of {source} {}",
                self.table,
                first + r as u64,
                m.why
            )),
            None => Error::invalid(format!(
                "column '{column}' of type {} does not fit table {} column of type {ty}: {}",
                a.data_type(),
                self.table,
                m.why
            )),
        }
    }
}

/// Fits `a` to the field `to`: its type, and its nullability (rows where `a` is null).
fn fit_field(a: &ArrayRef, to: &FieldRef, defaults: &Defaults) -> Fit<ArrayRef> {
    let out = fit(a, to.data_type(), defaults)?;
    if !to.is_nullable() {
        if let Some(r) = out.logical_nulls().and_then(|n| first_null(&n, None)) {
            return Err(Misfit::at(r, "is null, and the column is required"));
        }
    }
    Ok(out)
}

/// The first row null in `nulls` that is valid in `parent` (all rows when `None`).
fn first_null(nulls: &NullBuffer, parent: Option<&NullBuffer>) -> Option<usize> {
    (0..nulls.len()).find(|&i| nulls.is_null(i) && parent.is_none_or(|p| p.is_valid(i)))
}

/// Same type → as is; nested → member by member; else an exact cast.
fn fit(a: &ArrayRef, to: &DataType, defaults: &Defaults) -> Fit<ArrayRef> {
    use DataType::*;
    if a.data_type() == to {
        return Ok(a.clone());
    }
    match (a.data_type(), to) {
        (Dictionary(_, v), _) => fit(&cast(a, v)?, to, defaults),
        (Null, _) => Ok(new_null_array(to, a.len())),
        (LargeList(f), List(_)) => fit(&cast(a, &List(f.clone()))?, to, defaults),
        (List(_), List(tf)) => fit_list(a.as_list::<i32>(), tf, defaults),
        (Struct(_), Struct(tfs)) => fit_struct(a.as_struct(), tfs, defaults),
        (Map(_, _), Map(tf, sorted)) => fit_map(a.as_map(), tf, *sorted, defaults),
        (List(_) | LargeList(_) | Struct(_) | Map(_, _), _)
        | (_, List(_) | LargeList(_) | Struct(_) | Map(_, _)) => {
            Err(Misfit::new("the nested types differ"))
        }
        (_, Decimal128(p, s)) => to_decimal(a, *p, *s),
        (Timestamp(u, _), Timestamp(v, _)) if finer(u, v) => round_trip(a, to),
        (Timestamp(_, _), Timestamp(_, _)) => cast(a, to),
        (Date64, Date32) => round_trip(a, to),
        _ if lossless(a.data_type(), to) => cast(a, to),
        _ => Err(Misfit::new("the conversion could lose data")),
    }
}

/// A cast that errors instead of producing nulls.
fn cast(a: &ArrayRef, to: &DataType) -> Fit<ArrayRef> {
    let opts = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(a, to, &opts).map_err(|e| Misfit::new(e.to_string()))
}

/// A cast refused at the first value that does not cast back to itself (a timestamp with
/// digits below the target unit, a `date64` that is not midnight).
fn round_trip(a: &ArrayRef, to: &DataType) -> Fit<ArrayRef> {
    let out = cast(a, to)?;
    let back = cast(&out, a.data_type())?;
    let differs = arrow_ord::cmp::distinct(a, &back).map_err(|e| Misfit::new(e.to_string()))?;
    match (0..differs.len()).find(|&i| differs.value(i)) {
        Some(i) => Err(Misfit::at(
            i,
            format!(
                "has the value {}, which {to} cannot hold exactly",
                value_text(a, i)
            ),
        )),
        None => Ok(out),
    }
}

/// Whether time unit `u` is finer than `v` (a cast from `u` to `v` may drop digits).
fn finer(u: &arrow_schema::TimeUnit, v: &arrow_schema::TimeUnit) -> bool {
    use arrow_schema::TimeUnit::*;
    let rank = |u: &arrow_schema::TimeUnit| match u {
        Second => 0,
        Millisecond => 1,
        Microsecond => 2,
        Nanosecond => 3,
    };
    rank(u) > rank(v)
}

/// A list with the target element field, its values fitted.
fn fit_list(l: &ListArray, tf: &FieldRef, defaults: &Defaults) -> Fit<ArrayRef> {
    let values =
        fit_field(l.values(), tf, defaults).map_err(|m| m.inside(tf.name(), |r| owner(l, r)))?;
    ListArray::try_new(tf.clone(), l.offsets().clone(), values, l.nulls().cloned())
        .map(|l| Arc::new(l) as ArrayRef)
        .map_err(|e| Misfit::new(e.to_string()))
}

/// The row of `l` whose values hold value `r`.
fn owner(l: &ListArray, r: usize) -> usize {
    owner_of(l.offsets(), r)
}

fn owner_of(offsets: &OffsetBuffer<i32>, r: usize) -> usize {
    let r = i32::try_from(r).unwrap_or(i32::MAX);
    offsets.partition_point(|&o| o <= r).saturating_sub(1)
}

/// A struct with the target members, matched by name: a missing member takes its
/// write-default, else is null (refused when required); an unknown member is refused.
fn fit_struct(s: &StructArray, tfs: &Fields, defaults: &Defaults) -> Fit<ArrayRef> {
    for f in s.fields() {
        if tfs.find(f.name()).is_none() {
            return Err(Misfit::new(format!(
                "member '{}' is not in the table's struct",
                f.name()
            )));
        }
    }
    let mut cols = Vec::with_capacity(tfs.len());
    for tf in tfs {
        let col = match s.column_by_name(tf.name()) {
            Some(c) => fit(c, tf.data_type(), defaults).map_err(|m| m.inside(tf.name(), |r| r))?,
            None => match default_column(defaults, tf, s.len()) {
                Some(d) => d.map_err(|m| m.inside(tf.name(), |r| r))?,
                None if tf.is_nullable() => new_null_array(tf.data_type(), s.len()),
                None => {
                    return Err(Misfit::new(format!(
                        "required member '{}' is missing",
                        tf.name()
                    )))
                }
            },
        };
        if !tf.is_nullable() {
            if let Some(r) = col.logical_nulls().and_then(|n| first_null(&n, s.nulls())) {
                return Err(
                    Misfit::at(r, "is null, and the member is required").inside(tf.name(), |r| r)
                );
            }
        }
        cols.push(col);
    }
    StructArray::try_new_with_length(tfs.clone(), cols, s.nulls().cloned(), s.len())
        .map(|s| Arc::new(s) as ArrayRef)
        .map_err(|e| Misfit::new(e.to_string()))
}

/// A map with the target entries field, keys and values fitted by position.
fn fit_map(m: &MapArray, tf: &FieldRef, sorted: bool, defaults: &Defaults) -> Fit<ArrayRef> {
    let DataType::Struct(tfs) = tf.data_type() else {
        return Err(Misfit::new("the table's map has no entries struct"));
    };
    let entries = m.entries();
    if tfs.len() != 2 || entries.num_columns() != 2 {
        return Err(Misfit::new("a map's entries have a key and a value"));
    }
    let offsets = m.offsets();
    let mut cols = Vec::with_capacity(2);
    for (c, t) in entries.columns().iter().zip(tfs.iter()) {
        let col =
            fit_field(c, t, defaults).map_err(|e| e.inside(t.name(), |r| owner_of(offsets, r)))?;
        cols.push(col);
    }
    let entries = StructArray::try_new_with_length(tfs.clone(), cols, None, entries.len())
        .map_err(|e| Misfit::new(e.to_string()))?;
    MapArray::try_new(
        tf.clone(),
        offsets.clone(),
        entries,
        m.nulls().cloned(),
        sorted,
    )
    .map(|m| Arc::new(m) as ArrayRef)
    .map_err(|e| Misfit::new(e.to_string()))
}

/// `decimal(p, s)` from integers, decimals and strings, refusing a value that loses a digit
/// (more fractional digits than `s`) or does not fit `p` digits.
fn to_decimal(a: &ArrayRef, p: u8, s: i8) -> Fit<ArrayRef> {
    use DataType::*;
    let (values, from_scale): (Vec<Option<i128>>, i8) = match a.data_type() {
        Decimal128(_, fs) => (a.as_primitive::<Decimal128Type>().iter().collect(), *fs),
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 => {
            let ints = cast(a, &Int64)?;
            let ints = ints.as_primitive::<Int64Type>();
            (ints.iter().map(|v| v.map(i128::from)).collect(), 0)
        }
        Utf8 | LargeUtf8 | Utf8View => {
            let strings = cast(a, &Utf8)?;
            let mut out = Vec::with_capacity(a.len());
            for (i, v) in strings.as_string::<i32>().iter().enumerate() {
                out.push(match v {
                    Some(t) => Some(parse_decimal(t, p, s).map_err(|why| {
                        Misfit::at(i, format!("has the value '{t}', which {why}"))
                    })?),
                    None => None,
                });
            }
            (out, s)
        }
        _ => return Err(Misfit::new("the conversion could lose data")),
    };
    let mut out: Vec<i128> = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        out.push(match v {
            None => 0,
            Some(v) => rescale(*v, from_scale, p, s).map_err(|why| {
                Misfit::at(
                    i,
                    format!("has the value {}, which {why}", value_text(a, i)),
                )
            })?,
        });
    }
    let nulls = NullBuffer::from_iter(values.iter().map(|v| v.is_some()));
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    let d: Decimal128Array = PrimitiveArray::new(out.into(), nulls);
    d.with_precision_and_scale(p, s)
        .map(|d| Arc::new(d) as ArrayRef)
        .map_err(|e| Misfit::new(e.to_string()))
}

/// `v` at scale `from` as an unscaled value of `decimal(p, s)`, or why it cannot be.
pub(crate) fn rescale(v: i128, from: i8, p: u8, s: i8) -> std::result::Result<i128, String> {
    let diff = i32::from(s) - i32::from(from);
    let w = if diff >= 0 {
        pow10(diff).and_then(|m| v.checked_mul(m))
    } else {
        match pow10(-diff) {
            Some(d) if v % d == 0 => Some(v / d),
            None if v == 0 => Some(0),
            _ => return Err(format!("has more than {s} digits after the decimal point")),
        }
    };
    match (w, pow10(i32::from(p))) {
        (Some(w), Some(bound)) if w.unsigned_abs() < bound.unsigned_abs() => Ok(w),
        (Some(w), None) => Ok(w),
        _ => Err(format!(
            "has more than {} digits before the decimal point",
            i32::from(p) - i32::from(s)
        )),
    }
}

/// 10^n as an `i128` (`None` when negative or too large).
fn pow10(n: i32) -> Option<i128> {
    u32::try_from(n).ok().and_then(|n| 10i128.checked_pow(n))
}

/// Parses a decimal number (`-12.340`, `1e3`, `+.5`) exactly as an unscaled `decimal(p, s)`
/// value, or says why it cannot be one.
pub(crate) fn parse_decimal(text: &str, p: u8, s: i8) -> std::result::Result<i128, String> {
    let not = || "is not a decimal number".to_string();
    let t = text.trim();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i32>().map_err(|_| not())?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || int.bytes().chain(frac.bytes());
    if int.len() + frac.len() == 0 || !digits().all(|b| b.is_ascii_digit()) {
        return Err(not());
    }
    // The number is `d × 10^e` with `d` free of leading and trailing zeros.
    let all: String = digits().map(char::from).collect();
    let d = all.trim_start_matches('0');
    let trimmed = d.trim_end_matches('0');
    if trimmed.is_empty() {
        return Ok(0);
    }
    let frac_len = i32::try_from(frac.len()).map_err(|_| not())?;
    let zeros = (d.len() - trimmed.len()) as i32;
    let e = exp
        .checked_sub(frac_len)
        .and_then(|e| e.checked_add(zeros))
        .ok_or_else(not)?;
    // As unscaled at scale `s`: `d × 10^(e + s)`.
    let shift = e.checked_add(i32::from(s)).ok_or_else(not)?;
    if shift < 0 {
        return Err(format!("has more than {s} digits after the decimal point"));
    }
    let width = i64::from(shift) + trimmed.len() as i64;
    if width > i64::from(p) {
        return Err(format!(
            "has more than {} digits before the decimal point",
            i32::from(p) - i32::from(s)
        ));
    }
    let d: i128 = trimmed.parse().map_err(|_| not())?;
    let v = pow10(shift)
        .and_then(|m| d.checked_mul(m))
        .ok_or_else(not)?;
    Ok(if neg { -v } else { v })
}

/// A value for an error message.
fn value_text(a: &ArrayRef, i: usize) -> String {
    arrow_cast::display::array_value_to_string(a, i).unwrap_or_else(|_| "?".into())
}

/// Casts that never lose information (widening, re-encoding, timezone relabel).
fn lossless(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    matches!(
        (from, to),
        (Int8 | Int16 | Int32 | UInt8 | UInt16, Int32 | Int64)
            | (UInt32 | Int64, Int64)
            | (Float16 | Float32, Float32 | Float64)
            | (Float64, Float64)
            | (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8)
            | (Binary | LargeBinary | BinaryView, Binary | LargeBinary)
            | (Date32, Date32)
            | (FixedSizeBinary(_), FixedSizeBinary(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{Int32Builder, ListBuilder, MapBuilder, StringBuilder};
    use arrow_array::{Int32Array, Int64Array, StringArray, TimestampNanosecondArray};
    use arrow_schema::{Field, Schema};

    fn batch(name: &str, a: ArrayRef) -> RecordBatch {
        let f = Field::new(name, a.data_type().clone(), true);
        RecordBatch::try_new(Arc::new(Schema::new(vec![f])), vec![a]).unwrap()
    }

    fn conformer(ddl: &str) -> Conformer {
        Conformer::new(&crate::spec::parse_schema(ddl).unwrap(), "db.t").unwrap()
    }

    fn text(a: &ArrayRef) -> Vec<String> {
        (0..a.len()).map(|i| value_text(a, i)).collect()
    }

    #[test]
    fn widen_reorder_and_fill() {
        let c = conformer("id long not null, name string, extra double");
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("id", DataType::Int32, false),
            ])),
            vec![
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(Int32Array::from(vec![7])),
            ],
        )
        .unwrap();
        let out = c.conform(&b).unwrap();
        assert_eq!(out.schema().field(0).data_type(), &DataType::Int64);
        assert_eq!(out.column(2).null_count(), 1);
    }

    #[test]
    fn unknown_and_lossy_columns_fail() {
        let c = conformer("id int");
        let b = batch("zz", Arc::new(Int32Array::from(vec![1])));
        assert!(c.conform(&b).unwrap_err().to_string().contains("'zz'"));
        let b = batch("id", Arc::new(StringArray::from(vec!["x"])));
        assert!(c.conform(&b).is_err());
        let b = batch("id", Arc::new(Int64Array::from(vec![1])));
        assert!(c.conform(&b).is_err());
    }

    fn dec(v: Vec<Option<i128>>, p: u8, s: i8) -> ArrayRef {
        Arc::new(
            Decimal128Array::from(v)
                .with_precision_and_scale(p, s)
                .unwrap(),
        )
    }

    /// Regression (issue 14): a decimal(10,3) 12.349 was rounded to 12.35 in a decimal(10,2)
    /// column; it is refused, naming the column, the value and the row.
    #[test]
    fn decimal_scale_loss_is_refused() {
        let c = conformer("price decimal(10,2)");
        let b = batch("price", dec(vec![Some(12_340), None, Some(12_349)], 10, 3));
        let e = c
            .conform_from(&b, "'in.parquet'", 11)
            .unwrap_err()
            .to_string();
        assert!(e.contains("column 'price'"), "{e}");
        assert!(e.contains("12.349"), "{e}");
        assert!(e.contains("row 13 of 'in.parquet'"), "{e}");
        assert!(
            e.contains("more than 2 digits after the decimal point"),
            "{e}"
        );
        // Exact values rescale: 12.340 → 12.34, nulls stay.
        let b = batch("price", dec(vec![Some(12_340), None, Some(-5_000)], 10, 3));
        let out = c.conform(&b).unwrap();
        assert_eq!(text(out.column(0)), ["12.34", "", "-5.00"]);
    }

    #[test]
    fn decimal_widening_and_precision() {
        let c = conformer("d decimal(12,4)");
        let out = c
            .conform(&batch("d", dec(vec![Some(12_345_678)], 10, 2)))
            .unwrap();
        assert_eq!(text(out.column(0)), ["123456.7800"]);
        // decimal(10,2) 99999999.99 needs 8 integer digits; decimal(12,4) has 8: fits.
        let out = c
            .conform(&batch("d", dec(vec![Some(9_999_999_999)], 10, 2)))
            .unwrap();
        assert_eq!(text(out.column(0)), ["99999999.9900"]);
        let c = conformer("d decimal(5,2)");
        let e = c.conform(&batch("d", dec(vec![Some(1), Some(100_000)], 10, 2)));
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("1000.00") && e.contains("row 2 of the batch"),
            "{e}"
        );
        assert!(e.contains("more than 3 digits before"), "{e}");
        // Integers: exact, within the precision.
        let out = c
            .conform(&batch("d", Arc::new(Int32Array::from(vec![999, -7]))))
            .unwrap();
        assert_eq!(text(out.column(0)), ["999.00", "-7.00"]);
        let e = c.conform(&batch("d", Arc::new(Int64Array::from(vec![1000]))));
        assert!(e.unwrap_err().to_string().contains("1000"));
    }

    #[test]
    fn strings_parse_into_decimals_exactly() {
        for (t, want) in [
            ("12.34", Ok(1234)),
            ("12.340", Ok(1234)),
            ("  -0.5 ", Ok(-50)),
            ("+.5", Ok(50)),
            ("7", Ok(700)),
            ("1.2e1", Ok(1200)),
            ("1234500e-4", Ok(12345)),
            ("0.000", Ok(0)),
            (
                "000000000000000000000000000000000000000000000012.3",
                Ok(1230),
            ),
            (
                "12.3400000000000000000000000000000000000000000000",
                Ok(1234),
            ),
            ("99999999.99", Ok(9_999_999_999)),
        ] {
            assert_eq!(parse_decimal(t, 10, 2), want, "{t}");
        }
        for (t, why) in [
            ("12.349", "after"),
            ("0.001", "after"),
            ("100000000", "before"),
            ("1e8", "before"),
            ("1e-3", "after"),
            ("abc", "not a decimal"),
            ("1.2.3", "not a decimal"),
            ("", "not a decimal"),
            ("-", "not a decimal"),
            (".", "not a decimal"),
            ("1e", "not a decimal"),
            ("1e99999999999", "not a decimal"),
        ] {
            let e = parse_decimal(t, 10, 2).unwrap_err();
            assert!(e.contains(why), "{t}: {e}");
        }
        assert_eq!(
            parse_decimal("-99999999999999999999999999999999999999", 38, 0),
            Ok(-99_999_999_999_999_999_999_999_999_999_999_999_999)
        );
        assert!(parse_decimal("100000000000000000000000000000000000000", 38, 0).is_err());
        let c = conformer("price decimal(10,2)");
        let b = batch(
            "price",
            Arc::new(StringArray::from(vec![Some("1.5"), None, Some("12.349")])),
        );
        let e = c.conform_from(&b, "'in.csv'", 1).unwrap_err().to_string();
        assert!(
            e.contains("'12.349'") && e.contains("row 3 of 'in.csv'"),
            "{e}"
        );
        let b = batch(
            "price",
            Arc::new(StringArray::from(vec![Some("1.5"), None])),
        );
        assert_eq!(text(c.conform(&b).unwrap().column(0)), ["1.50", ""]);
    }

    #[test]
    fn rescale_bounds() {
        assert_eq!(
            rescale(5, 0, 38, 38),
            Err("has more than 0 digits before the decimal point".into())
        );
        assert_eq!(rescale(0, 0, 38, 38), Ok(0));
        assert_eq!(rescale(0, 76, 10, 2), Ok(0));
        assert!(rescale(1, 76, 10, 2).is_err());
        assert_eq!(rescale(-123, -1, 5, 0), Ok(-1230));
    }

    #[test]
    fn timestamps_keep_every_digit() {
        let c = conformer("ts timestamp");
        let ns: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![
            Some(1_000),
            None,
            Some(2_001),
        ]));
        let e = c.conform(&batch("ts", ns)).unwrap_err().to_string();
        assert!(e.contains("row 3 of the batch"), "{e}");
        let ns: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![Some(1_000), None]));
        let out = c.conform(&batch("ts", ns)).unwrap();
        assert_eq!(out.column(0).null_count(), 1);
    }

    fn map_array() -> ArrayRef {
        let mut m = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        m.keys().append_value("a");
        m.values().append_value(1);
        m.keys().append_value("b");
        m.values().append_null();
        m.append(true).unwrap();
        m.append(false).unwrap();
        m.append(true).unwrap();
        Arc::new(m.finish())
    }

    /// Regression (issue 14): nested columns whose field names, ids or nullability differ
    /// from the table's ("cannot relabel").
    #[test]
    fn nested_types_conform_at_every_level() {
        let c = conformer("m map<string, int>, l list<struct<x:int, y:string>>");
        let mut l = ListBuilder::new(arrow_array::builder::StructBuilder::from_fields(
            vec![Field::new("x", DataType::Int32, true)],
            0,
        ));
        l.values()
            .field_builder::<Int32Builder>(0)
            .unwrap()
            .append_value(4);
        l.values().append(true);
        l.append(true);
        l.append(true);
        l.append_null();
        let l: ArrayRef = Arc::new(l.finish());
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("m", map_array().data_type().clone(), true),
                Field::new("l", l.data_type().clone(), true),
            ])),
            vec![map_array(), l],
        )
        .unwrap();
        let out = c.conform(&b).unwrap();
        assert_eq!(out.schema().as_ref(), c.schema().as_ref());
        assert_eq!(text(out.column(0)), ["{a: 1, b: }", "", "{}"]);
        assert_eq!(text(out.column(1)), ["[{x: 4, y: }]", "[]", ""]);
    }

    #[test]
    fn nested_misfits_name_the_member_and_row() {
        use iceberg::spec::{MapType, NestedField, PrimitiveType, StructType, Type};
        let prim = Type::Primitive;
        let with = |f: NestedField| {
            let s = iceberg::spec::Schema::builder()
                .with_fields(vec![Arc::new(f)])
                .build()
                .unwrap();
            Conformer::new(&s, "db.t").unwrap()
        };
        let c = with(NestedField::optional(
            1,
            "m",
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(2, prim(PrimitiveType::String))),
                Arc::new(NestedField::map_value_element(
                    3,
                    prim(PrimitiveType::Int),
                    true,
                )),
            )),
        ));
        let e = c.conform(&batch("m", map_array())).unwrap_err().to_string();
        assert!(
            e.contains("column 'm.value'") && e.contains("row 1 of the batch"),
            "{e}"
        );
        let c = conformer("l list<decimal(4,1)>");
        let d = arrow_array::builder::Decimal128Builder::new()
            .with_precision_and_scale(5, 2)
            .unwrap();
        let mut l = ListBuilder::new(d);
        l.append(true);
        l.values().append_value(10);
        l.append(true);
        l.values().append_value(11);
        l.values().append_value(15);
        l.append(true);
        let l: ArrayRef = Arc::new(l.finish());
        let e = c.conform(&batch("l", l)).unwrap_err().to_string();
        assert!(
            e.contains("column 'l.element'") && e.contains("row 3 of the batch"),
            "{e}"
        );
        assert!(e.contains("0.11"), "{e}");
        let c = with(NestedField::optional(
            1,
            "s",
            Type::Struct(StructType::new(vec![
                Arc::new(NestedField::required(2, "a", prim(PrimitiveType::Int))),
                Arc::new(NestedField::optional(3, "b", prim(PrimitiveType::String))),
            ])),
        ));
        let s: ArrayRef = Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["x"])) as ArrayRef,
        )]));
        let e = c.conform(&batch("s", s)).unwrap_err().to_string();
        assert!(e.contains("required member 'a'"), "{e}");
        let s: ArrayRef = Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("z", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["x"])) as ArrayRef,
        )]));
        let e = c.conform(&batch("s", s)).unwrap_err().to_string();
        assert!(e.contains("member 'z'"), "{e}");
    }
}
