//! One file walker for the tests (and the fuzz bench, which includes this file).

use std::path::{Path, PathBuf};

/// Every path under `dir` (files and directories), sorted; empty when `dir` does not exist.
pub fn paths_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Every file under `dir`, sorted; empty when `dir` does not exist.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    paths_under(dir)
        .into_iter()
        .filter(|p| p.is_file())
        .collect()
}
