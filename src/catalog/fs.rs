//! Filesystem (Hadoop) catalog layout: `<warehouse>/<ns…>/<table>/metadata/vN.metadata.json`.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::storage::{self, Storage};

/// `<table>/metadata/vN.metadata.json`.
pub(super) fn version_location(table_location: &str, v: u64) -> String {
    storage::join(table_location, &format!("metadata/v{v}.metadata.json"))
}

/// N of a `…/vN.metadata.json` location.
pub(super) fn version_of(location: &str) -> Option<u64> {
    location
        .rsplit('/')
        .next()?
        .strip_prefix('v')?
        .strip_suffix(".metadata.json")?
        .parse()
        .ok()
}

/// Writes `version-hint.text` (and drops a stale Hadoop `.crc` sidecar).
pub(super) async fn write_hint(storage: &Storage, table_location: &str, v: u64) -> Result<()> {
    let crc = storage::join(table_location, "metadata/.version-hint.text.crc");
    storage.delete(&crc).await?;
    storage
        .put(
            &storage::join(table_location, "metadata/version-hint.text"),
            Bytes::from(v.to_string()),
        )
        .await
}

/// The current metadata file of a Hadoop table, if the directory holds one.
pub(super) async fn pointer(storage: &Storage, table_location: &str) -> Result<Option<String>> {
    match crate::table::find_latest_metadata(storage, table_location).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if e.kind() == crate::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn dir_of(warehouse: &str, ns: &str) -> Result<std::path::PathBuf> {
    let base = storage::local_path(warehouse)
        .ok_or_else(|| Error::unsupported("filesystem catalog needs a local warehouse"))?;
    let mut p = std::path::PathBuf::from(base);
    for part in ns.split('.').filter(|s| !s.is_empty()) {
        p.push(part);
    }
    Ok(p)
}

fn subdirs(p: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Namespaces: directories (recursively) that are not tables.
pub(super) async fn namespaces(_storage: &Storage, warehouse: &str) -> Result<Vec<String>> {
    let root = dir_of(warehouse, "")?;
    let mut out = Vec::new();
    let mut stack = vec![(root, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for name in subdirs(&dir) {
            let p = dir.join(&name);
            if p.join("metadata").is_dir() {
                continue;
            }
            let full = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.push(full.clone());
            stack.push((p, full));
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn create_namespace(warehouse: &str, ns: &str) -> Result<()> {
    let p = dir_of(warehouse, ns)?;
    std::fs::create_dir_all(&p).map_err(|e| {
        Error::io(format!("creating namespace directory {}", p.display())).with_source(e)
    })
}

pub(super) fn drop_namespace(warehouse: &str, ns: &str) -> Result<()> {
    let p = dir_of(warehouse, ns)?;
    std::fs::remove_dir(&p).map_err(|e| {
        Error::io(format!("removing namespace directory {}", p.display())).with_source(e)
    })
}

/// Tables: child directories with a `metadata/` directory.
pub(super) async fn tables(_storage: &Storage, warehouse: &str, ns: &str) -> Result<Vec<String>> {
    let p = dir_of(warehouse, ns)?;
    Ok(subdirs(&p)
        .into_iter()
        .filter(|n| p.join(n).join("metadata").is_dir())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            version_of("file:///w/t/metadata/v12.metadata.json"),
            Some(12)
        );
        assert_eq!(version_of("/w/t/metadata/00001-x.metadata.json"), None);
        assert_eq!(
            version_location("/w/t", 3),
            "/w/t/metadata/v3.metadata.json"
        );
    }
}
