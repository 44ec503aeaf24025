//! Parquet writer properties from a table's `write.parquet.*` properties, and which columns
//! are better written without a dictionary.

use arrow_array::RecordBatch;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};
use crate::spec::TableProperties;

/// Top-level columns whose sampled values are mostly distinct: a dictionary would only cost
/// time (the Parquet writer would fall back to plain encoding after filling it), and with
/// many small files (one per partition) that cost is paid on nearly every value.
pub(super) fn high_cardinality_columns(sample: &RecordBatch) -> Vec<String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    };
    use arrow_schema::{DataType, TimeUnit};
    use std::collections::HashSet;
    let n = sample.num_rows().min(8192);
    if n < 1024 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (f, c) in sample.schema().fields().iter().zip(sample.columns()) {
        let c = c.slice(0, n);
        let distinct = match f.data_type() {
            DataType::Utf8 => c.as_string::<i32>().iter().collect::<HashSet<_>>().len(),
            DataType::LargeUtf8 => c.as_string::<i64>().iter().collect::<HashSet<_>>().len(),
            DataType::Binary => c.as_binary::<i32>().iter().collect::<HashSet<_>>().len(),
            DataType::Int32 => c
                .as_primitive::<Int32Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Date32 => c
                .as_primitive::<Date32Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Int64 => c
                .as_primitive::<Int64Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Timestamp(TimeUnit::Microsecond, _) => c
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Float64 => c
                .as_primitive::<Float64Type>()
                .iter()
                .map(|v| v.map(f64::to_bits))
                .collect::<HashSet<_>>()
                .len(),
            DataType::Float32 => c
                .as_primitive::<Float32Type>()
                .iter()
                .map(|v| v.map(f32::to_bits))
                .collect::<HashSet<_>>()
                .len(),
            _ => continue,
        };
        if distinct * 2 > n {
            out.push(f.name().clone());
        }
    }
    out
}

/// The distinct values a bloom filter of false positive probability `fpp` is sized for: no
/// more than a row group of `row_group_bytes` can hold (one per 2 encoded bytes: distinct
/// values of a column that packs tighter are few per row group, and an underestimate raises the
/// false positive rate: measured 24% at one per 8 bytes on shuffled longs), and few enough that the filter stays within `max_bytes`
/// (a split-block filter needs -8·n / ln(1 - fpp^(1/8)) bits for n values; its size is rounded
/// up to a power of two).
fn bloom_ndv(fpp: f64, max_bytes: usize, row_group_bytes: usize) -> u64 {
    let bytes = if max_bytes.is_power_of_two() {
        max_bytes
    } else {
        (max_bytes.next_power_of_two() / 2).max(32)
    };
    let per_value_bytes = 1.0 / -(1.0 - fpp.powf(1.0 / 8.0)).ln();
    ((bytes as f64 / per_value_bytes) as u64).clamp(1, (row_group_bytes / 2).max(1) as u64)
}

/// Parquet writer properties from the table's `write.parquet.*` properties; `plain_columns`
/// are written without a dictionary.
pub(crate) fn writer_properties(
    p: &TableProperties,
    plain_columns: &[String],
) -> Result<WriterProperties> {
    writer_properties_sized(p, plain_columns, p.parquet_row_group_size_bytes as usize)
}

/// The writer's batch size for a page row limit: the parquet writer checks the limit once per
/// batch, so a batch size that divides the limit (at most 1,024 rows, at least 256) ends
/// pages exactly at it; a limit without such a divisor gets 1,024-row batches (pages then
/// overshoot the limit by less than a batch).
fn write_batch_rows(page_row_limit: usize) -> usize {
    if page_row_limit <= 1024 {
        return page_row_limit.max(1);
    }
    (256..=1024)
        .rev()
        .find(|d| page_row_limit % d == 0)
        .unwrap_or(1024)
}

/// [`writer_properties`] with row groups of at most `row_group_bytes`.
pub(super) fn writer_properties_sized(
    p: &TableProperties,
    plain_columns: &[String],
    row_group_bytes: usize,
) -> Result<WriterProperties> {
    let level = p.parquet_compression_level;
    let codec = match p.parquet_compression.as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(1))
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        "snappy" => Compression::SNAPPY,
        "gzip" => Compression::GZIP(
            GzipLevel::try_new(level.unwrap_or(6) as u32)
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        "lz4" => Compression::LZ4_RAW,
        "brotli" => Compression::BROTLI(
            BrotliLevel::try_new(level.unwrap_or(1) as u32)
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        _ => Compression::UNCOMPRESSED,
    };
    let mut b = WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_bytes(Some(row_group_bytes))
        .set_max_row_group_row_count(None)
        .set_data_page_size_limit(p.parquet_page_size_bytes)
        .set_data_page_row_count_limit(p.parquet_page_row_limit)
        .set_write_batch_size(write_batch_rows(p.parquet_page_row_limit))
        .set_dictionary_page_size_limit(p.parquet_dict_size_bytes);
    for c in plain_columns {
        b = b.set_column_dictionary_enabled(
            parquet::schema::types::ColumnPath::from(c.as_str()),
            false,
        );
    }
    for (c, fpp) in &p.bloom_filter_columns {
        let path =
            parquet::schema::types::ColumnPath::new(c.split('.').map(String::from).collect());
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), *fpp)
            .set_column_bloom_filter_ndv(
                path,
                bloom_ndv(*fpp, p.bloom_filter_max_bytes, row_group_bytes),
            );
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::write_batch_rows;

    #[test]
    fn write_batches_divide_the_page_row_limit() {
        assert_eq!(write_batch_rows(20_000), 1000);
        assert_eq!(write_batch_rows(4_096), 1024);
        assert_eq!(write_batch_rows(3_000), 1000);
        assert_eq!(write_batch_rows(100), 100);
        assert_eq!(write_batch_rows(0), 1);
        // A prime: no divisor in range, pages overshoot by less than a batch.
        assert_eq!(write_batch_rows(20_011), 1024);
    }
}
