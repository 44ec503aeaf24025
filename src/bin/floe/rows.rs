//! Rows held in memory (a metadata table, a changelog) filtered by `--where`, projected by
//! `--columns` (struct fields by path), counted or printed in `--format`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, MapArray, RecordBatch, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use floe::{Error, Result};
use serde_json::json;

use super::output::{print_json, BatchWriter, Format};

/// The output flags `scan` and `changes` share (flattened into both).
#[derive(clap::Args, Debug, Clone)]
pub struct OutputArgs {
    /// Columns to return (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = crate::item)]
    pub columns: Option<Vec<String>>,
    /// Print only the row count.
    #[arg(long)]
    pub count: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// At most this many rows (table format defaults to 100).
    #[arg(long)]
    pub limit: Option<usize>,
    /// JSON output (same as --format json).
    #[arg(long)]
    pub json: bool,
}

/// How rows are filtered, projected and printed.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    /// `--where`.
    pub filter: Option<&'a str>,
    /// `--columns`.
    pub columns: Option<&'a [String]>,
    /// `--count`.
    pub count: bool,
    /// `--format`.
    pub format: Format,
    /// `--output`.
    pub output: Option<&'a str>,
    /// `--limit`.
    pub limit: Option<usize>,
    /// `--json`.
    pub json: bool,
}

impl<'a> Rows<'a> {
    /// The options of a command's `--where` (`filter`) and output flags.
    pub fn of(filter: Option<&'a str>, o: &'a OutputArgs) -> Self {
        Rows {
            filter,
            columns: o.columns.as_deref(),
            count: o.count,
            format: o.format,
            output: o.output.as_deref(),
            limit: o.limit,
            json: o.json,
        }
    }
}

/// Filters, projects, limits and prints `b` (`what` names it in errors).
pub fn print_rows(mut b: RecordBatch, what: &str, o: &Rows) -> Result<()> {
    if let Some(f) = o.filter {
        let keep = floe::expr::parse_expr(f)?
            .bind_predicate(&b.schema())
            .map_err(|e| e.context(what.to_string()))?
            .evaluate_predicate(&b)?;
        b = arrow::compute::filter_record_batch(&b, &keep)?;
    }
    if let Some(cols) = o.columns {
        let schema = b.schema();
        let unknown = |c: &str| {
            Error::new(
                floe::ErrorKind::InvalidInput,
                format!(
                    "unknown column '{c}' in {what}; its columns: {} (a struct's fields as \
                     a.b)",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        };
        let mut fields = Vec::with_capacity(cols.len());
        let mut columns = Vec::with_capacity(cols.len());
        for c in cols {
            let names = schema.fields().iter().map(|f| f.name().as_str());
            if let Some(i) = floe::spec::resolve_column(names, c)? {
                fields.push(schema.field(i).clone());
                columns.push(b.column(i).clone());
                continue;
            }
            // `data_file.file_path`, `readable_metrics.id.lower_bound`: a struct's field,
            // named by its path (the longest top-level name first: names may hold dots).
            let (field, col) = nested_column(&b, c).ok_or_else(|| unknown(c))?;
            fields.push(field);
            columns.push(col);
        }
        b = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    }
    if o.count {
        if o.json {
            print_json(&json!({"record_count": b.num_rows()}))
        } else {
            outln!("{}", b.num_rows())
        }
        return Ok(());
    }
    let format = if o.json { Format::Json } else { o.format };
    let limit = o
        .limit
        .or(if format == Format::Table && o.output.is_none() {
            Some(100)
        } else {
            None
        });
    if let Some(l) = limit {
        b = b.slice(0, l.min(b.num_rows()));
    }
    if matches!(format, Format::Json | Format::Csv) {
        // JSON objects have string keys: the metric maps' column ids become "1", "2", ….
        let columns = b
            .columns()
            .iter()
            .map(string_map_keys)
            .collect::<Result<Vec<_>>>()?;
        let fields: Vec<_> = b
            .schema()
            .fields()
            .iter()
            .zip(&columns)
            .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
            .collect();
        b = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    }
    let mut out = BatchWriter::new(format, o.output, b.schema())?;
    out.write(&b)?;
    out.finish()?;
    if let Some(path) = o.output {
        eprintln!("wrote {} rows to {path}", b.num_rows());
    }
    Ok(())
}

/// `a` with the keys of its maps (in structs too) cast to strings, for JSON.
fn string_map_keys(a: &ArrayRef) -> Result<ArrayRef> {
    match a.data_type() {
        DataType::Map(f, sorted) => {
            let m = a.as_map();
            let DataType::Struct(fs) = f.data_type() else {
                return Ok(a.clone());
            };
            let keys = arrow::compute::cast(m.keys(), &DataType::Utf8)?;
            let values = string_map_keys(m.values())?;
            let fs = Fields::from(vec![
                Field::new(fs[0].name(), DataType::Utf8, false),
                Field::new(fs[1].name(), values.data_type().clone(), true),
            ]);
            let entries = StructArray::try_new(fs.clone(), vec![keys, values], None)?;
            let field = Arc::new(Field::new(f.name(), DataType::Struct(fs), false));
            Ok(Arc::new(MapArray::try_new(
                field,
                m.offsets().clone(),
                entries,
                m.nulls().cloned(),
                *sorted,
            )?))
        }
        DataType::Struct(fs) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(string_map_keys)
                .collect::<Result<Vec<_>>>()?;
            let fs: Fields = fs
                .iter()
                .zip(&columns)
                .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                .collect();
            Ok(Arc::new(StructArray::try_new(
                fs,
                columns,
                s.nulls().cloned(),
            )?))
        }
        _ => Ok(a.clone()),
    }
}

/// Column `path` of `b` reached through struct fields (`data_file.file_path`), named `path`;
/// fields match case-insensitively, a field name may itself contain dots.
fn nested_column(b: &RecordBatch, path: &str) -> Option<(Field, ArrayRef)> {
    fn walk(fields: &Fields, columns: &[ArrayRef], rest: &str) -> Option<(DataType, ArrayRef)> {
        // The longest matching field name first (`tags.element` is one name).
        let mut hits: Vec<usize> = (0..fields.len())
            .filter(|&i| {
                let n = fields[i].name();
                rest.len() >= n.len()
                    && rest[..n.len()].eq_ignore_ascii_case(n)
                    && (rest.len() == n.len() || rest.as_bytes()[n.len()] == b'.')
            })
            .collect();
        hits.sort_by_key(|&i| std::cmp::Reverse(fields[i].name().len()));
        for i in hits {
            let n = fields[i].name().len();
            if rest.len() == n {
                return Some((fields[i].data_type().clone(), columns[i].clone()));
            }
            if let DataType::Struct(sub) = fields[i].data_type() {
                let s = columns[i].as_struct();
                // A null struct makes its fields null.
                let children: Vec<ArrayRef> = match s.nulls() {
                    Some(n) => s
                        .columns()
                        .iter()
                        .map(|c| {
                            let keep = arrow::array::BooleanArray::new(n.inner().clone(), None);
                            arrow::compute::nullif(c, &arrow::compute::not(&keep).ok()?).ok()
                        })
                        .collect::<Option<Vec<_>>>()?,
                    None => s.columns().to_vec(),
                };
                if let Some(hit) = walk(sub, &children, &rest[n + 1..]) {
                    return Some(hit);
                }
            }
        }
        None
    }
    let schema = b.schema();
    let (dt, col) = walk(schema.fields(), b.columns(), path)?;
    Some((Field::new(path, dt, true), col))
}
