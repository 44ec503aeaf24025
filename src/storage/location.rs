//! Location strings as peers write them, and their mapping to object-store paths.
//!
//! Local files appear in three forms (`/abs/path`, `file:/abs/path`, `file:///abs/path`);
//! all of them name the same object. S3 objects are `s3://bucket/key` (`s3a://` and `s3n://`,
//! as Hadoop writes them, name the same object).

use crate::error::{Error, Result};

/// A location resolved to a store kind and a key inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// A local file; the key is the absolute path without its leading `/`.
    Local(String),
    /// An S3 object.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key inside the bucket (no leading `/`; may be empty for the bucket root).
        key: String,
    },
}

/// `(bucket, key)` of an `s3://`, `s3a://` or `s3n://` location.
pub(crate) fn s3_parts(location: &str) -> Option<(&str, &str)> {
    let rest = ["s3://", "s3a://", "s3n://"]
        .iter()
        .find_map(|p| location.strip_prefix(p))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    Some((bucket, key.trim_start_matches('/')))
}

/// Resolves any accepted location form.
pub(crate) fn resolve(location: &str) -> Result<Resolved> {
    if let Some((bucket, key)) = s3_parts(location) {
        if bucket.is_empty() {
            return Err(Error::invalid(format!(
                "location '{location}' names no bucket; write s3://bucket/path"
            )));
        }
        return Ok(Resolved::S3 {
            bucket: bucket.to_string(),
            key: key.trim_end_matches('/').to_string(),
        });
    }
    let path = local_path(location).ok_or_else(|| match scheme(location) {
        Some(_) => unsupported_store("location", location),
        None => Error::unsupported(format!(
            "location '{location}' is not absolute; use an absolute path, a {SUPPORTED}"
        )),
    })?;
    Ok(Resolved::Local(path.trim_start_matches('/').to_string()))
}

/// Parses a location as storage does before any I/O: its form, then the object key.
#[doc(hidden)]
pub fn check(location: &str) -> Result<()> {
    let key = match resolve(location)? {
        Resolved::Local(k) => k,
        Resolved::S3 { key, .. } => key,
    };
    object_store::path::Path::parse(&key)
        .map_err(|e| Error::invalid(format!("invalid location '{location}': {e}")))?;
    relocate(location, location, "/moved");
    Ok(())
}

/// The stores floe opens, for messages.
const SUPPORTED: &str =
    "file:///path URI or s3://bucket/path (also s3a:// and s3n://); a plain path is local";

/// The URI scheme of `location` (`abfs` in `abfs://c@a/p`, `file` in `file:/p`); `None` for
/// a plain path. A scheme is at least two characters (`C:` is a drive letter)
/// followed by `:/`.
pub fn scheme(location: &str) -> Option<&str> {
    let (head, rest) = location.split_once(':')?;
    let mut chars = head.chars();
    let first = chars.next()?;
    let valid = head.len() >= 2
        && first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && rest.starts_with('/');
    valid.then_some(head)
}

/// Whether floe can open locations of `scheme` (`file`, `s3`, `s3a`, `s3n`; lowercase, as
/// the location parsers match them).
fn supported_scheme(scheme: &str) -> bool {
    matches!(scheme, "file" | "s3" | "s3a" | "s3n")
}

/// The "unsupported store" error for `what` (`warehouse`, `location`) at `location`.
fn unsupported_store(what: &str, location: &str) -> Error {
    let scheme = scheme(location).unwrap_or_default();
    Error::unsupported(format!(
        "{what} '{location}' is on an unsupported store ('{scheme}://'): floe opens a local \
         path, a {SUPPORTED}"
    ))
}

/// Refuses a `what` (`warehouse`, `table location`) whose URI scheme floe cannot open (for
/// example `abfs://`, `gs://`, `hdfs://`), instead of taking it for a relative local path.
pub(crate) fn check_store(what: &str, location: &str) -> Result<()> {
    match scheme(location) {
        Some(s) if !supported_scheme(s) => Err(unsupported_store(what, location)),
        _ => Ok(()),
    }
}

/// The absolute local path of a `file:` / plain location, or `None` for other schemes.
pub fn local_path(location: &str) -> Option<&str> {
    if let Some(rest) = location.strip_prefix("file://") {
        // file:///abs -> /abs ; file://localhost/abs -> /abs
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        return rest.starts_with('/').then_some(rest);
    }
    if let Some(rest) = location.strip_prefix("file:") {
        return rest.starts_with('/').then_some(rest);
    }
    location.starts_with('/').then_some(location)
}

/// Canonical form floe writes into metadata for a local directory: `file:///abs/path`.
pub(crate) fn to_uri(path: &std::path::Path) -> String {
    let s = path.to_string_lossy();
    let s = s.trim_end_matches('/');
    format!("file://{s}")
}

/// Joins a location and a relative child with exactly one `/`.
pub fn join(base: &str, child: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        child.trim_start_matches('/')
    )
}

/// Rewrites `location` when it starts with `from` (in any local form) to start with `to`.
pub(crate) fn relocate(location: &str, from: &str, to: &str) -> Option<String> {
    let (loc, base) = (local_path(location)?, local_path(from)?);
    let base = base.trim_end_matches('/');
    let rest = loc.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with('/')).then(|| join(to, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_local_forms_resolve_alike() {
        let want = Resolved::Local("tmp/t/data/a.parquet".into());
        for l in [
            "/tmp/t/data/a.parquet",
            "file:/tmp/t/data/a.parquet",
            "file:///tmp/t/data/a.parquet",
        ] {
            assert_eq!(resolve(l).unwrap(), want, "{l}");
        }
        assert!(resolve("gs://b/k").is_err());
        assert!(resolve("relative/x").is_err());
        assert!(resolve("s3:///k").is_err());
    }

    #[test]
    fn unknown_schemes_are_unsupported_stores() {
        for l in [
            "abfs://c@acct.dfs.core.windows.net/wh",
            "abfss://c@acct.dfs.core.windows.net/wh",
            "gs://bucket/wh",
            "az://c/wh",
            "hdfs://nn:8020/wh",
            "wasbs://c@a/wh",
            "HDFS:/wh",
            "S3://b/wh",
        ] {
            let e = check_store("warehouse", l).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Unsupported, "{l}");
            let m = e.to_string();
            assert!(m.contains(l) && m.contains("unsupported store"), "{m}");
            assert!(m.contains("s3://") && m.contains("file://"), "{m}");
            let e = resolve(&format!("{l}/t/data/a.parquet")).unwrap_err();
            assert!(e.to_string().contains("unsupported store"), "{e}");
        }
        for l in [
            "warehouse",
            "./w",
            "/abs/w",
            "file:///abs/w",
            "file:/abs/w",
            "s3://b/w",
            "s3n://b",
            "c:/x",
            "my:dir",
        ] {
            check_store("warehouse", l).unwrap();
        }
    }

    #[test]
    fn s3_forms_resolve_alike() {
        let want = Resolved::S3 {
            bucket: "b".into(),
            key: "wh/t/data/a.parquet".into(),
        };
        for l in [
            "s3://b/wh/t/data/a.parquet",
            "s3a://b/wh/t/data/a.parquet",
            "s3n://b/wh/t/data/a.parquet",
        ] {
            assert_eq!(resolve(l).unwrap(), want, "{l}");
        }
        assert_eq!(
            resolve("s3://b/wh/").unwrap(),
            Resolved::S3 {
                bucket: "b".into(),
                key: "wh".into()
            }
        );
    }

    #[test]
    fn relocation_by_prefix() {
        assert_eq!(
            relocate("file:/tmp/x/t/data/a.parquet", "file:///tmp/x/t", "/new/t").as_deref(),
            Some("/new/t/data/a.parquet")
        );
        assert_eq!(relocate("/tmp/x/tt/a", "/tmp/x/t", "/new"), None);
    }
}
