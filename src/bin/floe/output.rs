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

/// Output files being written under their temporary names (removed on Ctrl-C).
static PARTIAL: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Removes the output files still being written (the process is stopping on a signal).
pub fn remove_partial_files() {
    if let Ok(files) = PARTIAL.lock() {
        for f in files.iter() {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn forget_partial(path: &str) {
    if let Ok(mut files) = PARTIAL.lock() {
        files.retain(|f| f != path);
    }
}

fn io_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("writing output: {e}"))
}

/// Rows written in one output format as they arrive, so a scan's memory stays bounded by a
/// batch (the `table` format, which sizes its columns from every row, keeps them: it shows
/// at most `--limit` rows). A file is written under a temporary name beside it and renamed
/// when complete, so a failed, abandoned or interrupted write (Ctrl-C drops the writer) leaves
/// no partial output file and an existing file as it was.
pub struct BatchWriter {
    format: Format,
    out: Option<String>,
    /// The temporary file being written (renamed to `out` when finished).
    partial: Option<String>,
    /// The columns when no row comes (a table header, a CSV header line, a Parquet schema).
    schema: arrow::datatypes::SchemaRef,
    open: Option<Open>,
    table_rows: Vec<RecordBatch>,
    /// Top-level `uuid` columns, printed in their standard form in the text formats.
    uuid_columns: Vec<String>,
}

enum Open {
    Csv(crate::csv_out::CsvOut),
    Json(arrow::json::Writer<Box<dyn Write + Send>, arrow::json::writer::LineDelimited>),
    Parquet(parquet::arrow::ArrowWriter<Box<dyn Write + Send>>),
}

impl BatchWriter {
    /// A writer of `format` to the file `out` (stdout when `None`).
    pub fn new(
        format: Format,
        out: Option<&str>,
        schema: arrow::datatypes::SchemaRef,
    ) -> Result<Self> {
        if format == Format::Parquet && out.is_none() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "--format parquet needs -o FILE",
            ));
        }
        Ok(Self {
            format,
            out: out.map(str::to_string),
            partial: None,
            schema,
            open: None,
            table_rows: Vec::new(),
            uuid_columns: Vec::new(),
        })
    }

    /// Prints these top-level columns (Iceberg `uuid`, stored as 16 bytes) as
    /// `8-4-4-4-12` hex text in the table, CSV and JSON formats.
    pub fn with_uuid_columns(mut self, names: Vec<String>) -> Self {
        self.uuid_columns = names;
        self
    }

    /// `b` with its uuid columns as text (unchanged for Parquet or without uuid columns).
    fn printable(&self, b: &RecordBatch) -> Result<RecordBatch> {
        if self.format == Format::Parquet || self.uuid_columns.is_empty() {
            return Ok(b.clone());
        }
        uuids_as_text(b, &self.uuid_columns)
    }

    fn sink(&mut self) -> Result<Box<dyn Write + Send>> {
        Ok(match &self.out {
            Some(p) => {
                let path = std::path::Path::new(p);
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .ok_or_else(|| io_err(format!("{p}: not a file name")))?;
                let partial = path
                    .with_file_name(format!(".{name}.floe-partial-{}", std::process::id()))
                    .to_string_lossy()
                    .to_string();
                if let Ok(mut files) = PARTIAL.lock() {
                    files.push(partial.clone());
                }
                let f = std::fs::File::create(&partial).map_err(|e| {
                    forget_partial(&partial);
                    io_err(format!("{p}: {e}"))
                })?;
                self.partial = Some(partial);
                Box::new(std::io::BufWriter::new(f))
            }
            None => Box::new(std::io::BufWriter::new(Stdout)),
        })
    }

    /// Moves the finished temporary file to its name.
    fn publish(&mut self) -> Result<()> {
        if let (Some(partial), Some(out)) = (self.partial.take(), &self.out) {
            forget_partial(&partial);
            std::fs::rename(&partial, out).map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                io_err(format!("{out}: {e}"))
            })?;
        }
        Ok(())
    }

    /// Writes `b` (the first batch opens the output with its schema).
    pub fn write(&mut self, b: &RecordBatch) -> Result<()> {
        let written = self.write_inner(b);
        if written.is_err() {
            self.abandon();
        }
        written
    }

    fn write_inner(&mut self, b: &RecordBatch) -> Result<()> {
        let b = &self.printable(b)?;
        if self.format == Format::Table {
            self.table_rows.push(b.clone());
            return Ok(());
        }
        if self.open.is_none() {
            let sink = self.sink()?;
            self.open = Some(match self.format {
                Format::Csv => Open::Csv(crate::csv_out::CsvOut::new(sink)),
                Format::Json => Open::Json(
                    // Every column in every row, NULL as null.
                    arrow::json::WriterBuilder::new()
                        .with_explicit_nulls(true)
                        .build::<_, arrow::json::writer::LineDelimited>(sink),
                ),
                _ => {
                    let props = parquet::file::properties::WriterProperties::builder()
                        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
                        .build();
                    Open::Parquet(
                        parquet::arrow::ArrowWriter::try_new(sink, b.schema(), Some(props))
                            .map_err(io_err)?,
                    )
                }
            });
        }
        match self.open.as_mut() {
            Some(Open::Csv(w)) => w.write(&crate::csv_nested::to_json_text(b)?),
            Some(Open::Json(w)) => w.write(b).map_err(io_err),
            Some(Open::Parquet(w)) => w.write(b).map_err(io_err),
            None => Ok(()),
        }
    }

    /// Ends the output (no rows still shows the columns).
    pub fn finish(mut self) -> Result<()> {
        let finished = self.finish_inner();
        if finished.is_err() {
            self.abandon();
        }
        finished
    }

    fn finish_inner(&mut self) -> Result<()> {
        if self.format == Format::Table {
            let rows = std::mem::take(&mut self.table_rows);
            let rows = if rows.is_empty() {
                vec![self.printable(&RecordBatch::new_empty(self.schema.clone()))?]
            } else {
                rows
            };
            let s = arrow::util::pretty::pretty_format_batches(&rows).map_err(io_err)?;
            let mut sink = self.sink()?;
            writeln!(sink, "{s}").map_err(io_err)?;
            sink.flush().map_err(io_err)?;
            drop(sink);
            return self.publish();
        }
        if self.open.is_none() {
            self.write_inner(&RecordBatch::new_empty(self.schema.clone()))?;
        }
        match self.open.take() {
            Some(Open::Csv(w)) => w.finish()?,
            Some(Open::Json(mut w)) => {
                w.finish().map_err(io_err)?;
                w.into_inner().flush().map_err(io_err)?
            }
            Some(Open::Parquet(w)) => w.close().map(|_| ()).map_err(io_err)?,
            None => {}
        }
        self.publish()
    }

    /// Drops what was written to a file (after a failed read); an existing file of that
    /// name is left as it was.
    pub fn abandon(&mut self) {
        self.open = None;
        if let Some(p) = self.partial.take() {
            forget_partial(&p);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `b` with the named `FixedSizeBinary(16)` columns as UUID text.
fn uuids_as_text(b: &RecordBatch, names: &[String]) -> Result<RecordBatch> {
    use arrow::array::{Array, FixedSizeBinaryArray, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = b.schema();
    let mut fields = Vec::with_capacity(b.num_columns());
    let mut columns = Vec::with_capacity(b.num_columns());
    for (f, c) in schema.fields().iter().zip(b.columns()) {
        let bytes = c.as_any().downcast_ref::<FixedSizeBinaryArray>();
        match bytes {
            Some(a) if a.value_length() == 16 && names.contains(f.name()) => {
                let text: StringArray = (0..a.len())
                    .map(|i| {
                        (!a.is_null(i)).then(|| {
                            uuid::Uuid::from_slice(a.value(i))
                                .map(|u| u.hyphenated().to_string())
                                .unwrap_or_default()
                        })
                    })
                    .collect();
                fields.push(std::sync::Arc::new(Field::new(
                    f.name(),
                    DataType::Utf8,
                    f.is_nullable(),
                )));
                columns.push(std::sync::Arc::new(text) as arrow::array::ArrayRef);
            }
            _ => {
                fields.push(f.clone());
                columns.push(c.clone());
            }
        }
    }
    Ok(RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(fields)),
        columns,
    )?)
}

impl Drop for BatchWriter {
    /// An unfinished write (an error, or Ctrl-C dropping the command) leaves no file.
    fn drop(&mut self) {
        self.abandon();
    }
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
