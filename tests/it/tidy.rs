//! Written conventions, checked: the pure core does no I/O, the library does not `unwrap`.

use std::path::{Path, PathBuf};

use crate::common::repo;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// The text of a file before its `#[cfg(test)]` module.
fn non_test_code(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap();
    match s.find("#[cfg(test)]") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[test]
fn pure_core_does_no_io() {
    let src = repo().join("src");
    let mut pure: Vec<PathBuf> = Vec::new();
    pure.extend(rust_files(&src.join("spec")));
    pure.extend(rust_files(&src.join("expr")));
    pure.extend(rust_files(&src.join("codec")));
    pure.push(src.join("scan/plan.rs"));
    pure.push(src.join("scan/delete_index.rs"));
    pure.push(src.join("txn/summary.rs"));
    pure.push(src.join("txn/validate.rs"));
    pure.push(src.join("maintenance/rewrite_plan.rs"));
    pure.push(src.join("ingest/dedup.rs"));
    pure.push(src.join("error.rs"));
    for f in pure {
        let code = non_test_code(&f);
        for banned in [
            "crate::storage",
            "crate::catalog",
            "tokio",
            "async fn",
            "std::fs",
            "object_store::",
            "rusqlite",
        ] {
            if f.ends_with("error.rs") && (banned == "rusqlite" || banned == "object_store::") {
                continue; // error conversions only
            }
            assert!(
                !code.contains(banned),
                "{} is in the pure core but uses {banned}",
                f.display()
            );
        }
    }
}

#[test]
fn library_code_does_not_unwrap() {
    for f in rust_files(&repo().join("src")) {
        if f.to_string_lossy().contains("/bin/") {
            continue;
        }
        let code = non_test_code(&f);
        for (i, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            assert!(
                !line.contains(".unwrap()"),
                "{}:{}: unwrap in library code: {line}",
                f.display(),
                i + 1
            );
        }
    }
}

#[test]
fn every_public_item_is_documented() {
    let mut seen = 0;
    for f in rust_files(&repo().join("src")) {
        let code = non_test_code(&f);
        let lines: Vec<&str> = code.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            let is_pub = [
                "pub fn ",
                "pub async fn ",
                "pub struct ",
                "pub enum ",
                "pub trait ",
                "pub type ",
                "pub const ",
                "pub mod ",
            ]
            .iter()
            .any(|p| l.starts_with(p));
            if !is_pub {
                continue;
            }
            seen += 1;
            let mut j = i;
            let mut documented = false;
            while j > 0 {
                j -= 1;
                let prev = lines[j].trim_start();
                if prev.starts_with("///") || prev.starts_with("//!") {
                    documented = true;
                    break;
                }
                if prev.starts_with("#[") {
                    continue;
                }
                break;
            }
            let is_mod_decl = l.starts_with("pub mod ") && l.ends_with(';');
            assert!(
                documented || is_mod_decl,
                "{}:{}: public item without a doc comment: {l}",
                f.display(),
                i + 1
            );
        }
    }
    assert!(seen > 50, "the check saw only {seen} public items");
}
