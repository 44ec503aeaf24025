//! Reading back columns of the data files a batch just added (by name: floe wrote them), to
//! learn the position each written row landed at.

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::error::{Error, Result};
use crate::table::Table;

/// The `columns` of data file `path` of `table`, in row order (a column the file lacks is
/// left out).
pub(crate) async fn read_back(
    table: &Table,
    path: &str,
    columns: &[String],
) -> Result<Vec<RecordBatch>> {
    let bytes = table.storage().get(path).await?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| {
            let arrow = b.schema().clone();
            let leaves = columns
                .iter()
                .filter_map(|n| arrow.index_of(n).ok())
                .collect::<Vec<_>>();
            let mask = ProjectionMask::roots(b.parquet_schema(), leaves);
            b.with_projection(mask).build()
        })
        .map_err(|e| Error::corrupt(format!("reading back '{path}': {e}")))?;
    reader
        .map(|b| b.map_err(|e| Error::corrupt(format!("reading back '{path}': {e}"))))
        .collect()
}
