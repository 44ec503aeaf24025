//! floe's integration tests: one binary, one module per area.

mod append_scan;
mod bad_input;
mod catalog;
mod cli;
mod clone;
mod common;
mod dml;
mod fixture_maintenance;
mod fixtures;
mod ingest;
mod interop;
mod maintenance;
mod postgres;
mod regress_cli;
mod rest;
mod s3;
mod scale_out;
mod tidy;
