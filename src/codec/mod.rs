//! Binary codecs of the spec that the `iceberg` crate lacks. Pure: no I/O.

pub mod avro;
pub mod dv;
pub mod parquet_pages;
