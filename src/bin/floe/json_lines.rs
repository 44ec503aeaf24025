//! JSON-lines input (one object per line), typed by a table's schema; an error names its line.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use floe::{Error, Result};

/// Batches of a JSON-lines file (one object per line), typed by the table's schema with every
/// column nullable; a key no column has is refused.
pub fn read_jsonl(
    path: &str,
    table_schema: &SchemaRef,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::new(
            floe::ErrorKind::NotFound,
            format!("cannot open input '{path}': {e}"),
        )
    })?;
    jsonl_reader(
        std::io::BufReader::new(file),
        table_schema,
        path.to_string(),
    )
}

/// Batches of JSON lines read from `input` (named `what` in errors), as [`read_jsonl`]; an
/// error names the line it is on (counted from 1).
pub fn jsonl_reader<R: std::io::BufRead + Send + 'static>(
    input: R,
    table_schema: &SchemaRef,
    what: String,
) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
    let loose = Arc::new(Schema::new(
        table_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    // Checked once up front, so the per-chunk decoders below cannot fail to build.
    decoder(&loose, 1)
        .map_err(|e| Error::new(floe::ErrorKind::InvalidInput, format!("{what}: {e}")))?;
    Ok(Box::new(JsonLines {
        input,
        schema: loose,
        what,
        line: 0,
        done: false,
    }))
}

/// Lines decoded per batch.
const JSON_LINES_PER_BATCH: usize = 65_536;

fn decoder(
    schema: &SchemaRef,
    rows: usize,
) -> std::result::Result<arrow::json::reader::Decoder, arrow::error::ArrowError> {
    arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(rows.max(1))
        .with_strict_mode(true)
        .build_decoder()
}

/// Decodes `text` (whole lines) into one batch.
fn decode_lines(
    schema: &SchemaRef,
    text: &[u8],
    rows: usize,
) -> std::result::Result<Option<RecordBatch>, arrow::error::ArrowError> {
    let mut d = decoder(schema, rows + 1)?;
    let mut at = 0;
    while at < text.len() {
        let n = d.decode(&text[at..])?;
        if n == 0 {
            break;
        }
        at += n;
    }
    d.flush()
}

/// JSON lines decoded a chunk of lines at a time; a chunk that fails is decoded again line by
/// line to say which line is wrong.
struct JsonLines<R> {
    input: R,
    schema: SchemaRef,
    what: String,
    /// Lines read so far.
    line: u64,
    done: bool,
}

impl<R: std::io::BufRead> Iterator for JsonLines<R> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let first_line = self.line + 1;
        let mut text = Vec::new();
        let mut starts = Vec::new();
        while starts.len() < JSON_LINES_PER_BATCH {
            let at = text.len();
            match self.input.read_until(b'\n', &mut text) {
                Ok(0) => {
                    self.done = true;
                    break;
                }
                Ok(_) => {
                    self.line += 1;
                    starts.push(at);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(Error::new(
                        floe::ErrorKind::Io,
                        format!("'{}': reading line {}: {e}", self.what, self.line + 1),
                    )));
                }
            }
        }
        if starts.is_empty() {
            return None;
        }
        match decode_lines(&self.schema, &text, starts.len()) {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => self.next(),
            Err(whole) => {
                self.done = true;
                // Find the first line that fails on its own (a line can only be judged whole).
                for (i, &at) in starts.iter().enumerate() {
                    let end = starts.get(i + 1).copied().unwrap_or(text.len());
                    if let Err(e) = decode_lines(&self.schema, &text[at..end], 1) {
                        return Some(Err(Error::new(
                            floe::ErrorKind::InvalidInput,
                            format!("'{}' line {}: {e}", self.what, first_line + i as u64),
                        )));
                    }
                }
                Some(Err(Error::new(
                    floe::ErrorKind::InvalidInput,
                    format!("'{}' lines {first_line}-{}: {whole}", self.what, self.line),
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_lines_errors_name_the_line() {
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::Int32, true),
        ]));
        let read = |text: &str| {
            super::jsonl_reader(
                std::io::Cursor::new(text.as_bytes().to_vec()),
                &schema,
                "c.jsonl".into(),
            )
            .unwrap()
            .collect::<floe::Result<Vec<_>>>()
        };
        let ok = read("{\"id\":1,\"n\":2}\n\n{\"id\":3}\n").unwrap();
        assert_eq!(ok.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
        let e = read("{\"id\":1}\n{\"id\":2,\"n\":\"x\"}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'c.jsonl' line 2:"), "{e}");
        let e = read("{\"id\":1}\n{\"id\":2}\n{\"id\":3,\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'c.jsonl' line 3:"), "{e}");
        let e = read("{\"id\":1,\"zz\":1}\n").unwrap_err().to_string();
        assert!(e.contains("line 1:") && e.contains("zz"), "{e}");
    }
}
