//! Rendering results: human tables or JSON (`--json`), and batches as table/CSV/JSON/Parquet.

use std::io::Write;

use arrow::array::RecordBatch;
use floe::{Error, ErrorKind, Result};

/// Output format of `scan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text table.
    Table,
    /// CSV with a header.
    Csv,
    /// One JSON object per row.
    Json,
    /// A Parquet file (needs -o).
    Parquet,
}

/// Ends the process when writing to stdout failed: quietly (status 0) when the reader went
/// away (`floe files … | head`), else with the error (status 1).
fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to stdout: {e}");
    std::process::exit(1);
}

/// Writes one line to stdout (see [`stdout_failed`] for a closed or failing stdout).
pub fn line(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}") {
        stdout_failed(&e);
    }
}

/// stdout as a [`Write`] that ends the process as [`stdout_failed`] does.
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stdout().write(buf).map_err(|e| stdout_failed(&e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush().map_err(|e| stdout_failed(&e))
    }
}

fn io_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("writing output: {e}"))
}

/// Writes batches in `format` to `out`.
pub fn write_batches(
    batches: &[RecordBatch],
    schema: arrow::datatypes::SchemaRef,
    format: Format,
    out: Option<&str>,
) -> Result<()> {
    // No rows still shows the columns (a table header, a CSV header line).
    let empty;
    let batches = match batches {
        [] => {
            empty = [RecordBatch::new_empty(schema.clone())];
            &empty[..]
        }
        b => b,
    };
    if format == Format::Parquet && out.is_none() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "--format parquet needs -o FILE",
        ));
    }
    let sink: Box<dyn Write + Send> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| io_err(format!("{p}: {e}")))?,
        )),
        None => Box::new(std::io::BufWriter::new(Stdout)),
    };
    let written = write_to(sink, batches, schema, format);
    // A failed write leaves no partial output file behind.
    if let (Err(_), Some(p)) = (&written, out) {
        let _ = std::fs::remove_file(p);
    }
    written
}

fn write_to(
    mut sink: Box<dyn Write + Send>,
    batches: &[RecordBatch],
    schema: arrow::datatypes::SchemaRef,
    format: Format,
) -> Result<()> {
    match format {
        Format::Table => {
            let s = arrow::util::pretty::pretty_format_batches(batches).map_err(io_err)?;
            writeln!(sink, "{s}").map_err(io_err)?;
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(sink);
            for b in batches {
                w.write(&crate::csv_nested::to_json_text(b)?)
                    .map_err(io_err)?;
            }
        }
        Format::Json => {
            // Every column in every row, NULL as null.
            let mut w = arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, arrow::json::writer::LineDelimited>(sink);
            for b in batches {
                w.write(b).map_err(io_err)?;
            }
            w.finish().map_err(io_err)?;
        }
        Format::Parquet => {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
                .build();
            let mut w =
                parquet::arrow::ArrowWriter::try_new(sink, schema, Some(props)).map_err(io_err)?;
            for b in batches {
                w.write(b).map_err(io_err)?;
            }
            w.close().map_err(io_err)?;
        }
    }
    Ok(())
}

/// Prints a JSON value.
pub fn print_json(v: &serde_json::Value) {
    outln!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Prints rows as an aligned table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<w$}", c, w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    outln!("{}", line(header.iter().map(|s| s.to_string()).collect()));
    for r in rows {
        outln!("{}", line(r.clone()));
    }
}
