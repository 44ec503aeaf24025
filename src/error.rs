//! The one error type of floe: an opaque [`Error`] with an actionable [`ErrorKind`].

use std::fmt;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A table, namespace, snapshot, ref or file does not exist.
    NotFound,
    /// The thing being created already exists.
    AlreadyExists,
    /// The caller's input (schema, expression, option, data) is invalid.
    InvalidInput,
    /// Another writer committed a change that conflicts with this one; nothing was committed.
    Conflict,
    /// A commit was sent but its outcome is unknown; reload the table before retrying.
    CommitStateUnknown,
    /// A file on storage is malformed or truncated.
    Corrupt,
    /// The table or file uses a feature floe does not implement (yet).
    Unsupported,
    /// Storage or catalog I/O failed.
    Io,
}

/// floe's error: a kind, a message naming the file/table and what to do, and an optional cause.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Result alias used throughout floe.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Creates an error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Prefixes the message with more context (for example the table name).
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }

    /// Appends what to do, in the caller's terms (a CLI names its flags).
    pub fn with_hint(mut self, hint: impl fmt::Display) -> Self {
        self.message = format!("{}; {hint}", self.message);
        self
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub(crate) fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }
    pub(crate) fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, message)
    }

    /// A panic caught while reading data file `path` (a decoder bug or a file it cannot
    /// handle): an error, so that a read never ends early without one.
    pub(crate) fn read_panicked(path: &str, panic: &(dyn std::any::Any + Send)) -> Self {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        Self::corrupt(format!(
            "data file '{path}': the Parquet reader panicked ({what}); the file may be corrupt \
             or use a layout the reader cannot decode"
        ))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        let mut src = self.source.as_deref().map(|s| s as &dyn std::error::Error);
        while let Some(s) = src {
            write!(f, "\n  caused by: {s}")?;
            src = s.source();
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The kind of a floe error that reached the `iceberg` crate (through floe's storage under its
/// `FileIO`) and came back inside one of its errors.
pub(crate) fn carried_kind(e: &iceberg::Error) -> Option<ErrorKind> {
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(ours) = s.downcast_ref::<Error>() {
            return Some(ours.kind);
        }
        src = s.source();
    }
    None
}

/// Maps an `iceberg` crate error into ours, keeping it as the cause; a floe error it carries
/// keeps its kind.
impl From<iceberg::Error> for Error {
    fn from(e: iceberg::Error) -> Self {
        use iceberg::ErrorKind as K;
        let kind = carried_kind(&e).unwrap_or(match e.kind() {
            K::DataInvalid => ErrorKind::Corrupt,
            K::FeatureUnsupported => ErrorKind::Unsupported,
            K::TableNotFound | K::NamespaceNotFound => ErrorKind::NotFound,
            K::TableAlreadyExists | K::NamespaceAlreadyExists => ErrorKind::AlreadyExists,
            K::CatalogCommitConflicts => ErrorKind::Conflict,
            _ => ErrorKind::Io,
        });
        let msg = e.message().to_string();
        Error::new(kind, msg).with_source(e)
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::new(ErrorKind::InvalidInput, format!("arrow: {e}")).with_source(e)
    }
}

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        let kind = match &e {
            object_store::Error::NotFound { .. } => ErrorKind::NotFound,
            object_store::Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            object_store::Error::Precondition { .. } => ErrorKind::Conflict,
            _ => ErrorKind::Io,
        };
        Error::new(kind, format!("storage: {e}")).with_source(e)
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::new(ErrorKind::Io, format!("sqlite catalog: {e}")).with_source(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::new(ErrorKind::Corrupt, format!("json: {e}")).with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floe_error_keeps_its_kind_through_the_iceberg_crate() {
        // Storage under the iceberg crate's FileIO: our NotFound inside its DataInvalid,
        // wrapped once more by its reader.
        let ours = Error::not_found("data file 's3://b/x.parquet' does not exist");
        let inner = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "read").with_source(ours);
        let outer =
            iceberg::Error::new(iceberg::ErrorKind::Unexpected, "reader").with_source(inner);
        assert_eq!(carried_kind(&outer), Some(ErrorKind::NotFound));
        assert_eq!(Error::from(outer).kind(), ErrorKind::NotFound);
        let theirs = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "bad footer");
        assert_eq!(Error::from(theirs).kind(), ErrorKind::Corrupt);
    }
}
