//! # floe
//!
//! Write and read Apache Iceberg tables (format v2 and v3) from Rust, with no JVM.
//!
//! The modules are layers, lowest first: each uses only the ones before it. The layer map
//! (each module's role and whether it does I/O), a map of the source files and the
//! invariants the code keeps are in `ARCHITECTURE.md` at the root of the repository (the
//! `tidy` tests read the layer order from it); the user guide is under `docs/`.
//!
//! Where to start:
//!
//! - [`Catalog::open`] opens a catalog (SQLite by default, PostgreSQL, Iceberg REST or the
//!   Hadoop filesystem layout) and [`Catalog::create_table`] / [`Catalog::load_table`] give a
//!   [`Table`].
//! - [`txn::append`] writes Arrow batches as one `append` snapshot; [`txn::clone_table`]
//!   clones a table without copying its files.
//! - [`scan::Scan`] plans and reads a table to Arrow (filters, projection, time travel,
//!   deletes applied); [`scan::Changelog`] reads what changed between snapshots.
//! - [`dml::execute`] runs `DELETE`, `UPDATE` and `MERGE INTO` in copy-on-write or
//!   merge-on-read; [`dml::delete_by_key`] writes equality deletes.
//! - [`keyed::upsert`] and [`keyed::KeyedWriter`] apply versioned upserts and deletes to keyed
//!   tables (the CDC sink and the merge engines).
//! - [`maintenance`]: [`maintenance::rewrite_data_files`], [`maintenance::expire_snapshots`],
//!   [`maintenance::remove_orphan_files`] and the other Spark procedures.
//! - [`ingest::ingest_snapshot`] ingests full snapshots into a staging table and publishes
//!   them by clone.
//!
//! ## Example
//!
//! A table in a local warehouse (SQLite catalog), written, read and changed row by row:
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, StringArray};
//! use floe::expr::parse_expr;
//! use floe::scan::{Scan, SnapshotSelector};
//! use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
//! use floe::table::parse_ident;
//! use floe::{Catalog, TableCreation};
//!
//! let dir = tempfile::tempdir()?;
//! let warehouse = dir.path().join("warehouse");
//! let cat = Catalog::open(None, warehouse.to_str(), None)?;
//! let schema = parse_schema("id long, name string")?;
//! let creation = TableCreation::new(schema.clone())
//!     .with_partition_spec(parse_partition_spec("bucket(4, id)", &schema)?)
//!     .with_format_version(FormatVersion::V3)
//!     .with_property("write.delete.mode", "merge-on-read");
//! let table = cat.create_table(&parse_ident("db.events")?, creation).await?;
//!
//! // One `append` snapshot; batches are conformed to the table schema by column name.
//! let batch = RecordBatch::try_from_iter([
//!     ("id", Arc::new(Int64Array::from_iter_values(0..100)) as _),
//!     ("name", Arc::new(StringArray::from_iter_values((0..100).map(|i| format!("n{i}")))) as _),
//! ])?;
//! let r = floe::txn::append(&cat, &table, [Ok(batch)]).await?;
//! assert_eq!(r.added_records, 100);
//!
//! // Scans filter with the same SQL expressions DML uses.
//! let rows = Scan::new(&r.table).filter(parse_expr("id < 10")?).to_batches().await?;
//! assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
//!
//! // Row-level changes: SQL in, a snapshot out (here a deletion vector, merge-on-read).
//! let d = floe::dml::execute(&cat, "DELETE FROM db.events WHERE id % 10 = 7", None).await?;
//! assert_eq!(d.removed_rows, 10);
//!
//! // A zero-copy clone of the current snapshot.
//! floe::txn::clone_table(&cat, &d.table, &SnapshotSelector::Current, &parse_ident("db.copy")?, false)
//!     .await?;
//! let copy = cat.load_table(&parse_ident("db.copy")?).await?;
//! let n: usize = Scan::new(&copy).to_batches().await?.iter().map(|b| b.num_rows()).sum();
//! assert_eq!(n, 90);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod arrow_layout;
pub mod catalog;
pub mod codec;
pub mod dml;
pub mod error;
pub mod expr;
pub mod ingest;
pub mod keyed;
pub mod maintenance;
pub mod pending;
pub mod progress;
pub mod report;
pub mod scan;
pub mod spec;
pub mod storage;
pub mod table;
pub mod txn;
pub mod write;

pub use catalog::{Catalog, CommitOutcome, TableCreation};
pub use error::{Error, ErrorKind, Result};
pub use table::Table;
