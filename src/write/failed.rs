//! The error of a data or delete file that could not be written: it names the file, the
//! cause in plain words and that nothing was committed (the writers' own messages, such as
//! the parquet writer's "Failed to finish parquet writer.", name none of them).

use crate::error::{Error, ErrorKind};

/// Wraps `e`, raised writing the `what` (`data file`, `position delete file`, …) at `path`.
pub(crate) fn write_failed(what: &str, path: &str, e: impl Into<Error>) -> Error {
    let e = e.into();
    if e.message().contains("nothing was committed") {
        return e;
    }
    Error::new(
        ErrorKind::Io,
        format!(
            "writing {what} '{path}' failed: {}; nothing was committed",
            cause(&e)
        ),
    )
    .with_source(e)
}

/// The I/O cause of `e` in plain words (the first OS error of a known kind in its chain),
/// else its innermost message.
fn cause(e: &Error) -> String {
    let mut innermost = e.message().to_string();
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        // Storage layers wrap their own errors in `io::Error::other`: look past those.
        if let Some(words) = s.downcast_ref::<std::io::Error>().and_then(io_cause) {
            return words;
        }
        innermost = s.to_string();
        src = s.source();
    }
    let lower = innermost.to_lowercase();
    for (needle, words) in PHRASES {
        if lower.contains(needle) {
            return words.to_string();
        }
    }
    innermost
}

/// Substrings of OS error texts and the words floe reports for them.
const PHRASES: [(&str, &str); 6] = [
    ("no space left", "no space left on device"),
    ("permission denied", "permission denied"),
    ("read-only file system", "read-only file system"),
    ("not a directory", "a parent of the file is not a directory"),
    ("quota exceeded", "disk quota exceeded"),
    (
        "file exists",
        "a parent of the file exists and is not a directory",
    ),
];

fn io_cause(io: &std::io::Error) -> Option<String> {
    use std::io::ErrorKind as K;
    Some(
        match io.kind() {
            K::PermissionDenied => "permission denied",
            K::StorageFull => "no space left on device",
            K::ReadOnlyFilesystem => "read-only file system",
            K::NotADirectory => "a parent of the file is not a directory",
            K::QuotaExceeded => "disk quota exceeded",
            // Creating the file's directories where a parent is a file.
            K::AlreadyExists => "a parent of the file exists and is not a directory",
            _ => return None,
        }
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_file_the_cause_and_that_nothing_was_committed() {
        let io = std::io::Error::from_raw_os_error(28); // ENOSPC
        let inner = Error::io("Failed to finish parquet writer.").with_source(io);
        let e = write_failed("data file", "/w/t/data/a.parquet", inner);
        let first = e.to_string();
        assert_eq!(
            first,
            "writing data file '/w/t/data/a.parquet' failed: no space left on device; nothing \
             was committed"
        );
        let again = write_failed("data file", "/x", e);
        assert!(again.to_string().starts_with("writing data file '/w/t"));
        let text = Error::io("Unexpected => Permission denied (os error 13)");
        let e = write_failed(
            "position delete file",
            "/p",
            Error::io("x").with_source(text),
        );
        assert!(e.to_string().contains(": permission denied;"), "{e}");
    }
}
