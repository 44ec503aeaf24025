//! `floe._floe`: the native module of the `floe` Python package (the Python API lives in
//! `src/python/floe/`, which wraps these classes and turns their JSON results into
//! dataclasses). Like the CLI, it uses only the library's public API; it is the outermost
//! layer, next to `src/bin/floe`.
//!
//! Every call that does I/O or compute runs on a tokio runtime with the GIL released; the
//! calling thread wakes every 50 ms to check for signals, and a Ctrl-C cancels the work
//! (dropping its future: a commit not yet made is never made) and raises
//! `KeyboardInterrupt`. Arrow data crosses through the Arrow C data / C stream interface
//! (no copies).
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use pyo3::prelude::*;

mod catalog;
mod runtime;
mod table;

/// The module: the classes, the exceptions.
#[pymodule]
fn _floe(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<catalog::Catalog>()?;
    m.add_class::<table::Table>()?;
    m.add_class::<table::Sink>()?;
    m.add_class::<table::ScanBatches>()?;
    m.add("FloeError", py.get_type::<runtime::FloeError>())?;
    m.add("ConflictError", py.get_type::<runtime::ConflictError>())?;
    m.add("NotFoundError", py.get_type::<runtime::NotFoundError>())?;
    m.add(
        "AlreadyExistsError",
        py.get_type::<runtime::AlreadyExistsError>(),
    )?;
    m.add(
        "InvalidInputError",
        py.get_type::<runtime::InvalidInputError>(),
    )?;
    m.add(
        "CommitStateUnknownError",
        py.get_type::<runtime::CommitStateUnknownError>(),
    )?;
    m.add("CorruptError", py.get_type::<runtime::CorruptError>())?;
    m.add(
        "UnsupportedError",
        py.get_type::<runtime::UnsupportedError>(),
    )?;
    m.add("StorageError", py.get_type::<runtime::StorageError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
