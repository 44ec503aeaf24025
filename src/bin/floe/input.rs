//! Reading input files (Parquet, CSV, JSON lines) as Arrow batches for `append` and `upsert`.

use std::fs::File;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use floe::write::Conformer;

pub use crate::csv_options::CsvArgs;
use floe::{Error, Result};

/// Batches of one input file conformed to the table's schema (`conformer`'s): a value that does
/// not fit its column exactly is refused, naming the file and the row.
pub fn read_file(
    path: &str,
    conformer: &Conformer,
    csv: &CsvArgs,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>>>> {
    let conformer = conformer.clone();
    let source = format!("'{path}'");
    let mut next_row = 1u64;
    Ok(Box::new(
        read_raw(path, conformer.schema(), true, csv)?.map(move |b| {
            let b = b?;
            let first = next_row;
            next_row += b.num_rows() as u64;
            conformer.conform_from(&b, &source, first)
        }),
    ))
}

/// The batches of `files` (opened as `readers`, in the same order), counted into `progress`:
/// the files' bytes as planned work, rows as they come, each file once it ends.
pub fn counted(
    files: &[String],
    readers: Vec<Box<dyn Iterator<Item = Result<RecordBatch>>>>,
    progress: floe::progress::Progress,
) -> impl Iterator<Item = Result<RecordBatch>> {
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .collect();
    progress.add_planned(sizes.len() as u64, sizes.iter().sum());
    let positions: Vec<Option<crate::input_position::Position>> = files
        .iter()
        .map(|f| crate::input_position::take(f))
        .collect();
    readers
        .into_iter()
        .zip(sizes)
        .zip(positions)
        .flat_map(move |((reader, size), position)| {
            let p = progress.clone();
            let mut reader = reader.fuse();
            let mut done = false;
            // Bytes of this file counted so far, rows read from it.
            let (mut counted, mut rows) = (0u64, 0u64);
            std::iter::from_fn(move || match reader.next() {
                Some(b) => {
                    if let Ok(b) = &b {
                        p.add_rows_read(b.num_rows() as u64);
                        rows += b.num_rows() as u64;
                        if let Some(pos) = &position {
                            let now = pos.bytes_done(size, rows).max(counted);
                            p.add_bytes_read(now - counted);
                            counted = now;
                        }
                    }
                    Some(b)
                }
                None => {
                    if !std::mem::replace(&mut done, true) {
                        p.add_file_done(size.saturating_sub(counted));
                    }
                    None
                }
            })
        })
}

/// What an input file holds, by its name (or, for another name, a Parquet file's first bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// `.parquet` (or any name whose file starts with Parquet's magic bytes).
    Parquet,
    /// `.csv` (comma) or `.tsv` (tab), with a header line.
    Csv(u8),
    /// `.json`, `.jsonl`, `.ndjson`: one JSON object per line.
    JsonLines,
}

/// The kind of input `path` is; a name floe cannot place is refused saying what it takes.
pub fn input_kind(path: &str) -> Result<InputKind> {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".csv") {
        return Ok(InputKind::Csv(b','));
    }
    if lower.ends_with(".tsv") {
        return Ok(InputKind::Csv(b'\t'));
    }
    if [".json", ".jsonl", ".ndjson"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        return Ok(InputKind::JsonLines);
    }
    if [".parquet", ".parq", ".pq"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        return Ok(InputKind::Parquet);
    }
    let mut magic = [0u8; 4];
    let parquet = {
        use std::io::Read;
        open_input(path)?.read_exact(&mut magic).is_ok() && &magic == b"PAR1"
    };
    if parquet {
        return Ok(InputKind::Parquet);
    }
    Err(Error::new(
        floe::ErrorKind::InvalidInput,
        format!(
            "'{path}': floe reads Parquet (.parquet), CSV with a header line (.csv, .tsv) and JSON \
             lines (.json, .jsonl, .ndjson); this file is none of those by its name, nor a Parquet \
             file by its first bytes: rename it to its format's extension"
        ),
    ))
}

/// The schema of an input file as floe would read it without a table: a Parquet file's own,
/// or inferred from the first 10,000 rows of CSV / JSON lines (arrow-csv's and arrow-json's
/// inference: whole numbers → long, decimals → double, true/false → boolean, ISO dates and
/// timestamps → date / timestamp, the rest → string; a column with no value → string).
pub fn infer_schema(path: &str) -> Result<SchemaRef> {
    const ROWS: usize = 10_000;
    let fail = |e: &dyn std::fmt::Display| {
        Error::new(
            floe::ErrorKind::InvalidInput,
            format!("'{path}': cannot infer a schema: {e}"),
        )
    };
    let inferred = match input_kind(path)? {
        InputKind::Parquet => return parquet_schema(path),
        InputKind::Csv(delim) => {
            let (schema, _) = arrow::csv::reader::Format::default()
                .with_header(true)
                .with_delimiter(delim)
                .infer_schema(open_input(path)?, Some(ROWS))
                .map_err(|e| fail(&e))?;
            schema
        }
        InputKind::JsonLines => {
            let (schema, _) = arrow::json::reader::infer_json_schema(
                std::io::BufReader::new(open_input(path)?),
                Some(ROWS),
            )
            .map_err(|e| fail(&e))?;
            schema
        }
    };
    if inferred.fields().is_empty() {
        return Err(fail(&"it has no columns (an empty file?)"));
    }
    Ok(Arc::new(Schema::new(
        inferred
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                // A UTF-8 byte order mark is not part of the first column's name.
                let name = if i == 0 {
                    f.name().trim_start_matches('\u{feff}')
                } else {
                    f.name()
                };
                Field::new(name, iceberg_friendly(f.data_type()), true)
            })
            .collect::<Vec<_>>(),
    )))
}

/// An inferred Arrow type as one an Iceberg column has: timestamps in microseconds, no-value
/// columns as strings, nested types element by element.
fn iceberg_friendly(t: &DataType) -> DataType {
    use arrow::datatypes::TimeUnit;
    match t {
        DataType::Null => DataType::Utf8,
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        DataType::List(f) => DataType::List(Arc::new(
            f.as_ref()
                .clone()
                .with_data_type(iceberg_friendly(f.data_type()))
                .with_nullable(true),
        )),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| {
                    Arc::new(
                        f.as_ref()
                            .clone()
                            .with_data_type(iceberg_friendly(f.data_type()))
                            .with_nullable(true),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Opens an input file; a missing one is NotFound, naming it.
pub fn open_input(path: &str) -> Result<File> {
    File::open(path).map_err(|e| {
        Error::new(
            floe::ErrorKind::NotFound,
            format!("cannot open input '{path}': {e}"),
        )
    })
}

/// Batches of one input file as stored, typed for CSV by the table's schema (decimal columns
/// as text when `decimals_as_text`: the CSV reader drops digits beyond a column's scale).
pub fn read_raw(
    path: &str,
    table_schema: &SchemaRef,
    decimals_as_text: bool,
    csv: &CsvArgs,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
    read_raw_as(path, input_kind(path)?, table_schema, decimals_as_text, csv)
}

/// [`read_raw`] of a file whose kind is given (`--format`), whatever its name.
pub fn read_raw_as(
    path: &str,
    kind: InputKind,
    table_schema: &SchemaRef,
    decimals_as_text: bool,
    csv: &CsvArgs,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
    let file = open_input(path)?;
    if kind == InputKind::JsonLines {
        return crate::json_lines::jsonl_reader(
            std::io::BufReader::new(crate::input_position::counting(path, file)),
            table_schema,
            path.to_string(),
        );
    }
    if let InputKind::Csv(default_delim) = kind {
        let delim = csv.delim.unwrap_or(default_delim);
        let quote = csv.quote.unwrap_or(b'"') as char;
        // CSV columns are read by header name with the table's types (without a header
        // line: the table's columns, in order).
        let names: Vec<String> = if csv.has_header() {
            csv_header(path, delim, quote)?
        } else {
            table_schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        };
        let mut fields = Vec::new();
        let mut nested = Vec::new();
        let mut binaries = Vec::new();
        let mut stamps = Vec::new();
        for name in &names {
            let name = name.as_str();
            let f = table_schema.field_with_name(name).map_err(|_| {
                Error::new(
                    floe::ErrorKind::InvalidInput,
                    format!("{path}: CSV column '{name}' is not in the table schema"),
                )
            })?;
            let f = match f.data_type() {
                DataType::Decimal128(..) if decimals_as_text => {
                    Field::new(name, DataType::Utf8, true)
                }
                // Bytes are hex text in CSV (a uuid may be in its 8-4-4-4-12 form), as
                // `scan --format csv` writes them.
                DataType::FixedSizeBinary(_) | DataType::Binary | DataType::LargeBinary => {
                    binaries.push(Arc::new(f.as_ref().clone()));
                    Field::new(name, DataType::Utf8, true)
                }
                // Timestamps and dates in the user's format are parsed from text.
                t if csv.reads_as_text(t) => {
                    stamps.push(Arc::new(f.as_ref().clone()));
                    Field::new(name, DataType::Utf8, true)
                }
                // Nested values are JSON text in CSV (as `scan --format csv` writes them).
                t if crate::csv_nested::is_nested(t) => {
                    nested.push(Arc::new(f.as_ref().clone()));
                    Field::new(name, DataType::Utf8, true)
                }
                _ => f.as_ref().clone().with_nullable(true),
            };
            fields.push(Arc::new(f));
        }
        let schema = Arc::new(Schema::new(fields));
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let builder = arrow::csv::ReaderBuilder::new(schema)
            .with_header(csv.has_header())
            .with_delimiter(delim)
            .with_batch_size(65536);
        let reader = csv
            .apply(builder)?
            .build(crate::input_position::counting(path, file))
            .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
        let p = path.to_string();
        let options = csv.clone();
        let mut next_row = 1u64;
        return Ok(Box::new(reader.map(move |r| {
            let b = r.map_err(|e| {
                Error::new(
                    floe::ErrorKind::InvalidInput,
                    format!("{p}: {}", csv_error(&e.to_string(), &names)),
                )
            })?;
            let first = next_row;
            next_row += b.num_rows() as u64;
            // The file's line of the batch's first row.
            let line = first + u64::from(options.has_header());
            let b = crate::csv_bytes::bytes_from_text(&b, &binaries, &p, line)?;
            let b = options.temporals_from_text(&b, &stamps, &p, line)?;
            if nested.is_empty() {
                Ok(b)
            } else {
                crate::csv_nested::from_json_text(&b, &nested, &p, first)
            }
        })));
    }
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| {
            Error::new(
                floe::ErrorKind::InvalidInput,
                format!("'{path}' is not a readable Parquet file: {e}"),
            )
        })?;
    let rows = builder.metadata().file_metadata().num_rows();
    crate::input_position::parquet(path, u64::try_from(rows).unwrap_or(0));
    let reader = builder
        .with_batch_size(65536)
        .build()
        .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
    let p = path.to_string();
    Ok(Box::new(reader.map(move |r| {
        r.map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{p}: {e}")))
    })))
}

/// The column names of a CSV file's header line (a UTF-8 byte order mark dropped, quotes
/// around a name removed); an empty first line or a name given twice is refused.
fn csv_header(path: &str, delim: u8, quote: char) -> Result<Vec<String>> {
    use std::io::BufRead;
    let mut header = String::new();
    std::io::BufReader::new(open_input(path)?)
        .read_line(&mut header)
        .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
    let header = header.strip_prefix('\u{feff}').unwrap_or(&header);
    let header = header.trim_end_matches(['\n', '\r']);
    if header.trim().is_empty() {
        return Err(Error::new(
            floe::ErrorKind::InvalidInput,
            format!(
                "{path}: the CSV file has no header line (it is empty or starts with a blank \
                 line); its first line must name the columns (or pass --header false)"
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut names = Vec::new();
    for name in header.split(delim as char) {
        let name = name.trim().trim_matches(quote).to_string();
        if !seen.insert(name.clone()) {
            return Err(Error::new(
                floe::ErrorKind::InvalidInput,
                format!("{path}: the CSV header names column '{name}' twice; each column once"),
            ));
        }
        names.push(name);
    }
    Ok(names)
}

/// A CSV parse error in the file's terms: arrow-csv names a 0-based column index and counts
/// lines from the first data row; say the column's name and the file's line (the header is
/// line 1).
fn csv_error(msg: &str, names: &[String]) -> String {
    let number_after = |key: &str| -> Option<(usize, usize, usize)> {
        let at = msg.find(key)? + key.len();
        let digits = msg[at..].chars().take_while(char::is_ascii_digit).count();
        Some((
            msg.find(key)?,
            at + digits,
            msg[at..at + digits].parse().ok()?,
        ))
    };
    let (Some((c0, c1, col)), Some((l0, l1, line))) =
        (number_after("for column "), number_after(" at line "))
    else {
        return msg.to_string();
    };
    if c1 != l0 {
        return msg.to_string();
    }
    let name = names.get(col).map(String::as_str).unwrap_or("?");
    format!(
        "{}in column '{name}' on line {} of the file{}",
        &msg[..c0],
        line + 1,
        &msg[l1..]
    )
}

/// The Arrow schema of a Parquet file.
pub fn parquet_schema(path: &str) -> Result<SchemaRef> {
    let file = File::open(path).map_err(|e| {
        Error::new(
            floe::ErrorKind::NotFound,
            format!("cannot open '{path}': {e}"),
        )
    })?;
    let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).map_err(
        |e| {
            Error::new(
                floe::ErrorKind::InvalidInput,
                format!("'{path}' is not a readable Parquet file: {e}"),
            )
        },
    )?;
    Ok(b.schema().clone())
}

#[cfg(test)]
mod tests {
    #[test]
    fn csv_errors_name_the_column_and_the_file_line() {
        let names = ["id".to_string(), "name".to_string(), "n".to_string()];
        let m = "Parser error: Error while parsing value 'x' as type 'Int32' for column 2 at line 2. Row data: '[2,b,x]'";
        assert_eq!(
            super::csv_error(m, &names),
            "Parser error: Error while parsing value 'x' as type 'Int32' in column 'n' on line 3 of the file. Row data: '[2,b,x]'"
        );
        assert_eq!(super::csv_error("other", &names), "other");
    }
}
