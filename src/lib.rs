//! # floe
//!
//! Write and read Apache Iceberg tables (format v2 and v3) from Rust, with no JVM.
//!
//! Layers, lowest first: each module uses only the ones above it in this table (checked by
//! the `tidy` tests, which hold the same list).
//!
//! | module | role | I/O |
//! |---|---|---|
//! | [`error`] | one opaque [`Error`] with an actionable [`ErrorKind`] | no |
//! | [`spec`] | the Iceberg table model, typed properties, reserved field ids, DDL text forms | no |
//! | [`codec`] | binary codecs and checks the `iceberg` crate lacks (deletion vectors, Avro / Parquet guards) | no |
//! | `arrow_layout` | (private) Arrow type-layout helpers shared by the writer and the reader | no |
//! | [`progress`] | opt-in counters of files read and rows/bytes written, for progress bars | no |
//! | [`expr`] | predicates: one SQL parser, binding, evaluation, partition and metrics pruning | no |
//! | [`storage`] | every byte goes through `object_store` | yes |
//! | [`table`] | a loaded table; catalog-less opening of metadata files / directories | yes |
//! | [`catalog`] | SQLite / PostgreSQL (pyiceberg/JDBC schema), REST and filesystem catalogs | yes |
//! | [`scan`] | scan planning (pure) and reading to Arrow, deletes applied | yes |
//! | [`write`](mod@write) | Arrow to Parquet data and delete files (partitioned, sorted, rolled); commits nothing | yes |
//! | [`txn`] | snapshot producer, commit with retries and validation, [`txn::append`], clone | yes |
//! | [`dml`] | DELETE / UPDATE / MERGE in copy-on-write or merge-on-read | yes |
//! | [`maintenance`] | compaction, delete rewrites, snapshot expiry, orphan removal | yes |
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
