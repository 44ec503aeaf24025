//! # floe
//!
//! Write and read Apache Iceberg tables (format v2 and v3) from Rust, with no JVM.
//!
//! Layers (each imports only the ones above it):
//!
//! | module | role | I/O |
//! |---|---|---|
//! | [`error`] | one opaque [`Error`] with an actionable [`ErrorKind`] | no |
//! | [`spec`] | the Iceberg table model, typed properties, DDL for schemas/partitions/sorts | no |
//! | [`codec`] | binary codecs the `iceberg` crate lacks (deletion vectors) | no |
//! | [`progress`] | opt-in counters of files read and rows/bytes written, for progress bars | no |
//! | [`expr`] | predicates: SQL-style parsing, partition and metrics pruning | no |
//! | [`storage`] | every byte goes through `object_store` | yes |
//! | [`catalog`] | SQLite (pyiceberg/JDBC schema) and filesystem (Hadoop) catalogs | yes |
//! | [`table`] | a loaded table; catalog-less opening of metadata files / directories | yes |
//! | [`scan`] | scan planning (pure) and reading to Arrow | yes |
//! | [`write`](mod@write) | Arrow to Parquet data files (partitioned, sorted, rolled); commits nothing | yes |
//! | [`dml`] | DELETE / UPDATE / MERGE in copy-on-write or merge-on-read | yes |
//! | [`maintenance`] | compaction (`rewrite_data_files`) | yes |
//! | [`txn`] | snapshot producer, commit with retries and validation, [`txn::append`], clone | yes |
//! | [`ingest`] | snapshot-dedup ingestion into staging, published by clone | yes |

mod arrow_layout;
pub mod catalog;
pub mod codec;
pub mod dml;
pub mod error;
pub mod expr;
pub mod ingest;
pub mod maintenance;
pub mod progress;
pub mod scan;
pub mod spec;
pub mod storage;
pub mod table;
pub mod txn;
pub mod write;

pub use catalog::{Catalog, CommitOutcome, TableCreation};
pub use error::{Error, ErrorKind, Result};
pub use table::Table;
