//! The bridge: one tokio runtime, futures run with the GIL released and Ctrl-C honoured,
//! floe errors as Python exceptions by kind, Arrow in and out through the C stream interface.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_pyarrow::{FromPyArrow, IntoPyArrow};
use arrow_schema::SchemaRef;
use floe::{Error, ErrorKind};
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;

pyo3::create_exception!(
    _floe,
    FloeError,
    PyException,
    "Base class of floe's errors."
);
pyo3::create_exception!(
    _floe,
    ConflictError,
    FloeError,
    "Another writer committed a conflicting change; nothing was committed."
);
pyo3::create_exception!(
    _floe,
    NotFoundError,
    FloeError,
    "A table, namespace, snapshot, ref or file does not exist."
);
pyo3::create_exception!(
    _floe,
    AlreadyExistsError,
    FloeError,
    "The thing being created already exists."
);
pyo3::create_exception!(
    _floe,
    InvalidInputError,
    FloeError,
    "The input (schema, expression, option, data) is invalid."
);
pyo3::create_exception!(
    _floe,
    CommitStateUnknownError,
    FloeError,
    "A commit was sent but its outcome is unknown; reload the table before retrying."
);
pyo3::create_exception!(
    _floe,
    CorruptError,
    FloeError,
    "A file on storage is malformed or truncated."
);
pyo3::create_exception!(
    _floe,
    UnsupportedError,
    FloeError,
    "The table or file uses a feature floe does not implement."
);
pyo3::create_exception!(
    _floe,
    StorageError,
    FloeError,
    "Storage or catalog I/O failed."
);

/// A floe error as the exception of its kind, with floe's message (and its causes).
pub fn to_py(e: Error) -> PyErr {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!("\n  caused by: {s}"));
        src = s.source();
    }
    match e.kind() {
        ErrorKind::Conflict => ConflictError::new_err(msg),
        ErrorKind::NotFound => NotFoundError::new_err(msg),
        ErrorKind::AlreadyExists => AlreadyExistsError::new_err(msg),
        ErrorKind::InvalidInput => InvalidInputError::new_err(msg),
        ErrorKind::CommitStateUnknown => CommitStateUnknownError::new_err(msg),
        ErrorKind::Corrupt => CorruptError::new_err(msg),
        ErrorKind::Unsupported => UnsupportedError::new_err(msg),
        ErrorKind::Io => StorageError::new_err(msg),
        _ => FloeError::new_err(msg),
    }
}

/// An invalid-input error.
pub fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, msg)
}

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("floe")
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| PyRuntimeError::new_err(format!("cannot start floe's runtime: {e}")))
}

/// Runs `fut` on the runtime with the GIL released. Every 50 ms the caller's thread checks
/// for signals: a Ctrl-C (or any signal handler raising) cancels the work — the future is
/// dropped at its next await, so a commit it had not reached is never made — and the
/// handler's exception (`KeyboardInterrupt`) is raised.
pub fn run<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = floe::Result<T>> + Send + 'static,
{
    let rt = runtime()?;
    let mut handle = rt.spawn(fut);
    loop {
        let done = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(50), &mut handle).await
            })
        });
        match done {
            Ok(Ok(r)) => return r.map_err(to_py),
            Ok(Err(e)) => {
                return Err(PyRuntimeError::new_err(format!(
                    "floe's work stopped unexpectedly: {e}"
                )))
            }
            Err(_) => {
                if let Err(signal) = py.check_signals() {
                    handle.abort();
                    // Wait until the work is dropped (its cleanup done) before returning.
                    let _ = py.detach(|| rt.block_on(&mut handle));
                    return Err(signal);
                }
            }
        }
    }
}

/// Drives `fut` on the calling thread (inside the runtime) with the GIL released, as
/// [`run`] does for spawned work: every 50 ms the thread checks for signals, and a Ctrl-C
/// drops `fut` and raises the handler's exception (`KeyboardInterrupt`). For futures that
/// borrow (a scan stream's next batch: `StreamExt::next` is cancel-safe).
pub fn block_on_interruptible<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    let mut fut = std::pin::pin!(fut);
    loop {
        let done = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(50), fut.as_mut()).await
            })
        });
        match done {
            Ok(v) => return Ok(v),
            Err(_) => py.check_signals()?,
        }
    }
}

/// The batches of a Python object with `__arrow_c_stream__` (pyarrow Table or
/// RecordBatchReader, polars DataFrame, DuckDB relation, …) or `__arrow_c_array__` (a
/// record batch), read lazily through the C stream interface.
pub type Batches = Box<dyn Iterator<Item = floe::Result<RecordBatch>> + Send>;

/// Opens `data` as a stream of batches (see [`Batches`]).
pub fn batches_of(data: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Batches)> {
    if data.hasattr("__arrow_c_stream__")? {
        let reader = arrow_array::ffi_stream::ArrowArrayStreamReader::from_pyarrow_bound(data)?;
        let schema = reader.schema();
        let it = reader.map(|b| b.map_err(|e| invalid(format!("reading the input rows: {e}"))));
        return Ok((schema, Box::new(it)));
    }
    if data.hasattr("__arrow_c_array__")? {
        let b = RecordBatch::from_pyarrow_bound(data)?;
        return Ok((b.schema(), Box::new(std::iter::once(Ok(b)))));
    }
    Err(InvalidInputError::new_err(format!(
        "expected Arrow data (an object with __arrow_c_stream__ or __arrow_c_array__: a pyarrow \
         Table, RecordBatch or RecordBatchReader, a polars DataFrame, …), got {}",
        data.get_type().name()?
    )))
}

/// `batches` as a `pyarrow.Table` (no copy).
pub fn to_pyarrow_table<'py>(
    py: Python<'py>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyAny>> {
    let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(
        batches.into_iter().map(Ok),
        schema,
    ));
    reader.into_pyarrow(py)?.call_method0("read_all")
}

/// A JSON value as a Python object (dicts, lists, numbers, strings, None).
pub fn to_py_json<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let text = v.to_string();
    py.import("json")?.call_method1("loads", (text,))
}
