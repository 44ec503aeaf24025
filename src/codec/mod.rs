//! Binary codecs of the spec that the `iceberg` crate lacks. Pure: no I/O.

pub(crate) mod avro;
pub mod dv;
pub(crate) mod manifest;
pub(crate) mod parquet_pages;
