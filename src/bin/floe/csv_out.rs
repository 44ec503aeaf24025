//! CSV output (`--format csv`): a header line, then each row's values as arrow displays
//! them, NULL as nothing and an empty string (or empty bytes) as `""` — as DuckDB's
//! `COPY … TO` writes them, so that the two read back apart; a field is quoted only where
//! it must be (a comma, a quote or a line break in it).

use std::io::Write;

use arrow::array::{Array, RecordBatch};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use floe::{Error, ErrorKind, Result};

/// A CSV writer of batches of one schema.
pub struct CsvOut {
    out: Box<dyn Write + Send>,
    wrote_header: bool,
    line: String,
    value: String,
}

fn io_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("writing CSV: {e}"))
}

/// Appends `v` to `line` as one CSV field.
fn push_field(line: &mut String, v: &str) {
    if v.is_empty() || v.contains([',', '"', '\n', '\r']) {
        line.push('"');
        line.push_str(&v.replace('"', "\"\""));
        line.push('"');
    } else {
        line.push_str(v);
    }
}

impl CsvOut {
    /// A writer to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out,
            wrote_header: false,
            line: String::new(),
            value: String::new(),
        }
    }

    /// Writes `b`'s rows (the first call writes the header line, even without rows).
    pub fn write(&mut self, b: &RecordBatch) -> Result<()> {
        if !self.wrote_header {
            self.line.clear();
            for (i, f) in b.schema().fields().iter().enumerate() {
                if i > 0 {
                    self.line.push(',');
                }
                push_field(&mut self.line, f.name());
            }
            self.line.push('\n');
            self.out.write_all(self.line.as_bytes()).map_err(io_err)?;
            self.wrote_header = true;
        }
        let options = FormatOptions::default().with_null("");
        let formatters = b
            .columns()
            .iter()
            .zip(b.schema().fields())
            .map(|(c, f)| {
                if c.data_type().is_nested() {
                    return Err(io_err(format!(
                        "column '{}' is nested ({}); CSV holds flat values",
                        f.name(),
                        c.data_type()
                    )));
                }
                ArrayFormatter::try_new(c.as_ref(), &options).map_err(io_err)
            })
            .collect::<Result<Vec<_>>>()?;
        let one_column = formatters.len() == 1;
        for row in 0..b.num_rows() {
            self.line.clear();
            for (i, (f, c)) in formatters.iter().zip(b.columns()).enumerate() {
                if i > 0 {
                    self.line.push(',');
                }
                if c.is_null(row) {
                    // A line with nothing on it would be skipped as blank.
                    if one_column {
                        self.line.push_str("\"\"");
                    }
                    continue;
                }
                self.value.clear();
                f.value(row)
                    .write(&mut self.value)
                    .map_err(|e| io_err(format!("row {}, column {}: {e}", row + 1, i + 1)))?;
                push_field(&mut self.line, &self.value);
            }
            self.line.push('\n');
            self.out.write_all(self.line.as_bytes()).map_err(io_err)?;
        }
        Ok(())
    }

    /// The output, flushed.
    pub fn finish(mut self) -> Result<()> {
        self.out.flush().map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A `Write` whose bytes the test can read after the writer has it.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn null_and_empty_print_apart_and_fields_quote_only_when_they_must() {
        let b = RecordBatch::try_from_iter([
            (
                "s",
                Arc::new(arrow::array::StringArray::from(vec![
                    Some(""),
                    None,
                    Some("a,b"),
                    Some("say \"hi\""),
                    Some("two\nlines"),
                    Some(" plain "),
                ])) as _,
            ),
            (
                "n",
                Arc::new(arrow::array::Int64Array::from(vec![
                    Some(1),
                    None,
                    Some(-3),
                    Some(4),
                    Some(5),
                    Some(6),
                ])) as _,
            ),
        ])
        .unwrap();
        let buf = Shared::default();
        let mut w = CsvOut::new(Box::new(buf.clone()));
        w.write(&b).unwrap();
        w.finish().unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "s,n\n\"\",1\n,\n\"a,b\",-3\n\"say \"\"hi\"\"\",4\n\"two\nlines\",5\n plain ,6\n"
        );
        // One column: a NULL row is not a blank line.
        let one = RecordBatch::try_from_iter([(
            "n",
            Arc::new(arrow::array::Int64Array::from(vec![None, Some(2)])) as _,
        )])
        .unwrap();
        let buf = Shared::default();
        let mut w = CsvOut::new(Box::new(buf.clone()));
        w.write(&one).unwrap();
        w.write(&RecordBatch::new_empty(one.schema())).unwrap();
        w.finish().unwrap();
        assert_eq!(
            String::from_utf8(buf.0.lock().unwrap().clone()).unwrap(),
            "n\n\"\"\n2\n"
        );
    }
}
