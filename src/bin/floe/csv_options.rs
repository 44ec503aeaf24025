//! CSV reading options, named as DuckDB's `read_csv` names them: `--delim`, `--header`,
//! `--nullstr`, `--quote`, `--escape`, `--timestampformat`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
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

    /// A timestamp column read as text when `--timestampformat` is given.
    pub fn reads_as_text(&self, t: &DataType) -> bool {
        self.timestampformat.is_some() && matches!(t, DataType::Timestamp(..))
    }

    /// `b` with the text columns `fields` (timestamps in the table) parsed by
    /// `--timestampformat`; rows count from 1 at `first_row`.
    pub fn timestamps_from_text(
        &self,
        b: &RecordBatch,
        fields: &[FieldRef],
        path: &str,
        first_row: u64,
    ) -> Result<RecordBatch> {
        let Some(fmt) = &self.timestampformat else {
            return Ok(b.clone());
        };
        if fields.is_empty() {
            return Ok(b.clone());
        }
        let schema = b.schema();
        let mut out_fields = Vec::with_capacity(b.num_columns());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(b.num_columns());
        for (f, c) in schema.fields().iter().zip(b.columns()) {
            let Some(target) = fields.iter().find(|t| t.name() == f.name()) else {
                out_fields.push(f.clone());
                columns.push(c.clone());
                continue;
            };
            let DataType::Timestamp(_, tz) = target.data_type() else {
                out_fields.push(f.clone());
                columns.push(c.clone());
                continue;
            };
            let text = c.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("{path}: column '{}' was not read as text", f.name()),
                )
            })?;
            let mut micros = Vec::with_capacity(text.len());
            for r in 0..text.len() {
                if text.is_null(r) {
                    micros.push(None);
                    continue;
                }
                let v = text.value(r).trim();
                let parsed = chrono::DateTime::parse_from_str(v, fmt)
                    .map(|d| d.timestamp_micros())
                    .or_else(|_| {
                        chrono::NaiveDateTime::parse_from_str(v, fmt)
                            .map(|d| d.and_utc().timestamp_micros())
                    })
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{path}: in column '{}' on line {} of the file: '{v}' does not \
                                 match --timestampformat '{fmt}' ({e})",
                                f.name(),
                                first_row + r as u64 + u64::from(self.has_header())
                            ),
                        )
                    })?;
                micros.push(Some(parsed));
            }
            let array = TimestampMicrosecondArray::from(micros).with_timezone_opt(tz.clone());
            out_fields.push(Arc::new(Field::new(
                f.name(),
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, tz.clone()),
                true,
            )));
            columns.push(Arc::new(array));
        }
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(out_fields)),
            columns,
        )?)
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
