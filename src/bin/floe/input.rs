//! Reading input files (Parquet, CSV) as Arrow batches for `append`.

use std::fs::File;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use floe::{Error, Result};

/// Batches of one input file, typed for CSV by the table's schema.
pub fn read_file(
    path: &str,
    table_schema: &SchemaRef,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>>>> {
    let file = File::open(path).map_err(|e| {
        Error::new(
            floe::ErrorKind::NotFound,
            format!("cannot open input '{path}': {e}"),
        )
    })?;
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".csv") || lower.ends_with(".csv.gz") || lower.ends_with(".tsv") {
        // CSV columns are read by header name with the table's types.
        let mut header = String::new();
        {
            use std::io::BufRead;
            let f = File::open(path).map_err(|e| {
                Error::new(
                    floe::ErrorKind::NotFound,
                    format!("cannot open '{path}': {e}"),
                )
            })?;
            std::io::BufReader::new(f)
                .read_line(&mut header)
                .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
        }
        let delim = if lower.ends_with(".tsv") { b'\t' } else { b',' };
        let mut fields = Vec::new();
        for name in header.trim_end_matches(['\n', '\r']).split(delim as char) {
            let name = name.trim().trim_matches('"');
            let f = table_schema.field_with_name(name).map_err(|_| {
                Error::new(
                    floe::ErrorKind::InvalidInput,
                    format!("{path}: CSV column '{name}' is not in the table schema"),
                )
            })?;
            fields.push(Arc::new(f.as_ref().clone().with_nullable(true)));
        }
        let schema = Arc::new(Schema::new(fields));
        let reader = arrow::csv::ReaderBuilder::new(schema)
            .with_header(true)
            .with_delimiter(delim)
            .with_batch_size(65536)
            .build(file)
            .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
        let p = path.to_string();
        return Ok(Box::new(reader.map(move |r| {
            r.map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{p}: {e}")))
        })));
    }
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| {
            Error::new(
                floe::ErrorKind::InvalidInput,
                format!("'{path}' is not a readable Parquet file: {e}"),
            )
        })?;
    let reader = builder
        .with_batch_size(65536)
        .build()
        .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{path}: {e}")))?;
    let p = path.to_string();
    Ok(Box::new(reader.map(move |r| {
        r.map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{p}: {e}")))
    })))
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
