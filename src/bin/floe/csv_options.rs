//! CSV reading options, named as DuckDB's `read_csv` names them: `--delim`, `--header`,
//! `--nullstr`, `--quote`, `--escape`, `--dateformat`, `--timestampformat`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Date32Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, FieldRef};
use floe::{Error, ErrorKind, Result};

/// How CSV input files are read (defaults: a header line, `,` — tab for `.tsv` —, `"` quotes
/// doubled inside quotes, an empty field as NULL, ISO timestamps).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CsvArgs {
    /// CSV: the field delimiter, one character (DuckDB's `delim`; `\t` for a tab).
    #[arg(long, value_parser = one_byte)]
    pub delim: Option<u8>,
    /// CSV: whether the first line names the columns (DuckDB's `header`, default true);
    /// `--header false` reads the fields as the table's columns, in order.
    #[arg(long)]
    pub header: Option<bool>,
    /// CSV: the text that stands for NULL (DuckDB's `nullstr`; default: an empty field).
    #[arg(long)]
    pub nullstr: Option<String>,
    /// CSV: the quote character (DuckDB's `quote`, default `"`).
    #[arg(long, value_parser = one_byte)]
    pub quote: Option<u8>,
    /// CSV: the escape character inside quotes (DuckDB's `escape`; default: a doubled quote).
    #[arg(long, value_parser = one_byte)]
    pub escape: Option<u8>,
    /// CSV: the format of timestamp columns in strftime codes (DuckDB's `timestampformat`),
    /// e.g. '%d/%m/%Y %H:%M:%S'; a timestamptz value without an offset is UTC.
    #[arg(long)]
    pub timestampformat: Option<String>,
    /// CSV: the format of date columns in strftime codes (DuckDB's `dateformat`), e.g.
    /// '%d/%m/%Y'.
    #[arg(long)]
    pub dateformat: Option<String>,
}

fn one_byte(s: &str) -> std::result::Result<u8, String> {
    match s {
        "\\t" | "\t" => Ok(b'\t'),
        _ if s.len() == 1 && s.is_ascii() => Ok(s.as_bytes()[0]),
        _ => Err(format!("'{s}': expected one ASCII character (or \\t)")),
    }
}

impl CsvArgs {
    /// Whether the file has a header line.
    pub fn has_header(&self) -> bool {
        self.header.unwrap_or(true)
    }

    /// `builder` with these options (the delimiter given by the caller).
    pub fn apply(
        &self,
        mut builder: arrow::csv::ReaderBuilder,
    ) -> Result<arrow::csv::ReaderBuilder> {
        if let Some(q) = self.quote {
            builder = builder.with_quote(q);
        }
        if let Some(e) = self.escape {
            builder = builder.with_escape(e);
        }
        if let Some(n) = &self.nullstr {
            let re = regex::Regex::new(&format!("^{}$", regex::escape(n))).map_err(|e| {
                Error::new(ErrorKind::InvalidInput, format!("--nullstr '{n}': {e}"))
            })?;
            builder = builder.with_null_regex(re);
        }
        Ok(builder)
    }

    /// A timestamp column read as text when `--timestampformat` is given, a date column
    /// when `--dateformat` is.
    pub fn reads_as_text(&self, t: &DataType) -> bool {
        match t {
            DataType::Timestamp(..) => self.timestampformat.is_some(),
            DataType::Date32 => self.dateformat.is_some(),
            _ => false,
        }
    }

    /// `b` with the text columns `fields` (timestamps and dates in the table) parsed by
    /// `--timestampformat` and `--dateformat`; the batch's first row is on line `first_line`
    /// of the file.
    pub fn temporals_from_text(
        &self,
        b: &RecordBatch,
        fields: &[FieldRef],
        path: &str,
        first_line: u64,
    ) -> Result<RecordBatch> {
        if fields.is_empty() {
            return Ok(b.clone());
        }
        let mismatch = |target: &arrow::datatypes::Field,
                        r: usize,
                        v: &str,
                        flag: &str,
                        fmt: &str,
                        e: chrono::ParseError| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{path}: in column '{}' on line {} of the file: '{v}' does not match \
                     --{flag} '{fmt}' ({e})",
                    target.name(),
                    first_line + r as u64
                ),
            )
        };
        crate::text_columns::decode_text_columns(b, fields, path, |target, text| {
            if target.data_type() == &DataType::Date32 {
                let fmt = self.dateformat.as_deref().unwrap_or("%Y-%m-%d");
                let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
                let parse = |r: usize| -> Result<i32> {
                    let v = text.value(r).trim();
                    let d = chrono::NaiveDate::parse_from_str(v, fmt)
                        .map_err(|e| mismatch(target, r, v, "dateformat", fmt, e))?;
                    i32::try_from((d - epoch).num_days()).map_err(|_| {
                        Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{path}: date '{v}' on line {} is out of range",
                                first_line + r as u64
                            ),
                        )
                    })
                };
                let days = (0..text.len())
                    .map(|r| (!text.is_null(r)).then(|| parse(r)).transpose())
                    .collect::<Result<Vec<Option<i32>>>>()?;
                return Ok(Arc::new(Date32Array::from(days)) as ArrayRef);
            }
            let fmt = self
                .timestampformat
                .as_deref()
                .unwrap_or("%Y-%m-%dT%H:%M:%S%.f");
            let tz = match target.data_type() {
                DataType::Timestamp(_, tz) => tz.clone(),
                _ => None,
            };
            let parse = |r: usize| -> Result<i64> {
                let v = text.value(r).trim();
                chrono::DateTime::parse_from_str(v, fmt)
                    .map(|d| d.timestamp_micros())
                    .or_else(|_| {
                        chrono::NaiveDateTime::parse_from_str(v, fmt)
                            .map(|d| d.and_utc().timestamp_micros())
                    })
                    .map_err(|e| mismatch(target, r, v, "timestampformat", fmt, e))
            };
            let micros = (0..text.len())
                .map(|r| (!text.is_null(r)).then(|| parse(r)).transpose())
                .collect::<Result<Vec<Option<i64>>>>()?;
            Ok(Arc::new(TimestampMicrosecondArray::from(micros).with_timezone_opt(tz)) as ArrayRef)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_character_options() {
        assert_eq!(super::one_byte(";"), Ok(b';'));
        assert_eq!(super::one_byte("\\t"), Ok(b'\t'));
        assert!(super::one_byte(";;").is_err());
    }
}
