//! floe's integration tests: one binary, one module per area.

mod append_scan;
mod bad_input;
mod catalog;
mod changelog;
mod cli;
mod clone;
mod common;
mod differential;
mod dml;
mod docs;
mod evolution;
mod evolution_nested;
mod faults;
mod files;
mod fixture_maintenance;
mod fixtures;
mod fuzz;
mod ingest;
mod input_formats;
mod interop;
mod json_keys;
mod keyed;
mod keyed_lifecycle;
mod maintenance;
mod manifest_merge;
mod manifest_reader;
mod merge_aligned;
mod merge_engines;
mod metadata_tables;
mod model;
mod newcomer;
mod postgres;
mod readme;
mod refs;
mod regress_cli;
mod regress_dv;
mod regress_types;
mod rest;
mod s3;
mod scale_out;
mod sink;
mod tidy;
mod wap;

/// Records over-large allocations on fuzz worker threads only (see `fuzz::engine`).
#[global_allocator]
static ALLOC: fuzz::engine::CappedAlloc = fuzz::engine::CappedAlloc;
