//! Written conventions the compiler does not check: the pure core does no I/O, imports
//! follow the layer map, no cycles within a module. What lints check (missing docs, `unwrap`,
//! unreachable `pub`) is the lib's `#![warn(...)]` and `cargo clippy -D warnings` in the test
//! command.

use std::path::{Path, PathBuf};

use crate::common::repo;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    crate::common::files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect()
}

/// The code of a file without its test items: each `#[cfg(test)]` and the item after it (a
/// `mod tests { … }` block to its closing brace, or an item to its end), so library code
/// after a test module is still seen.
fn non_test_code(p: &Path) -> String {
    strip_test_items(&std::fs::read_to_string(p).unwrap())
}

fn strip_test_items(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        rest = &rest[i + "#[cfg(test)]".len()..];
        rest = &rest[item_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `s` ends: after its `;` or its balanced `{ … }` block
/// (braces in string and char literals and comments are skipped).
fn item_end(s: &str) -> usize {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('{', '\''): skip to its closing quote.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[test]
fn test_items_are_cut_to_their_end_only() {
    let code = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() { let c = '{'; let s = \"}\"; }\n}\nfn b() {}\n#[cfg(test)]\nuse x::y;\nfn c() {}\n";
    let kept = strip_test_items(code);
    assert!(
        kept.contains("fn a()") && kept.contains("fn b()") && kept.contains("fn c()"),
        "{kept}"
    );
    assert!(!kept.contains("fn t()") && !kept.contains("x::y"), "{kept}");
}

/// The pure core: the modules ARCHITECTURE.md's layer map marks as doing no I/O, and every
/// file whose own doc says it is pure ("Pure.", "Pure: …" or "(pure)").
fn pure_files(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (name, io) in layer_map() {
        if io {
            continue;
        }
        let dir = src.join(&name);
        if dir.is_dir() {
            out.extend(rust_files(&dir));
        } else {
            out.push(src.join(format!("{name}.rs")));
        }
    }
    for f in rust_files(src) {
        let text = std::fs::read_to_string(&f).unwrap();
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        if ["Pure.", "Pure:", "(pure)"].iter().any(|w| doc.contains(w))
            && !out.contains(&f)
            && !f.ends_with("lib.rs")
        {
            out.push(f);
        }
    }
    out
}

#[test]
fn pure_core_does_no_io() {
    let src = repo().join("src");
    let pure = pure_files(&src);
    for must in [
        "spec/keyed_state.rs",
        "scan/plan.rs",
        "txn/validate.rs",
        "txn/summary.rs",
        "error.rs",
    ] {
        assert!(
            pure.contains(&src.join(must)),
            "{must} is not found pure: {pure:?}"
        );
    }
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
            if f.ends_with("progress.rs") && (banned == "tokio" || banned == "async fn") {
                continue; // counters scoped to a task (task-local), no I/O
            }
            assert!(
                !code.contains(banned),
                "{} is in the pure core but uses {banned}",
                f.display()
            );
        }
    }
}

/// The library's layers, lowest first, each with whether it does I/O: the rows of the
/// "Layer map" table in ARCHITECTURE.md (a module may use only the ones before it, and
/// itself). That table is the one copy of the map.
fn layer_map() -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## Layer map\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a '## Layer map' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut out = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let name = cells[0].trim_matches('`').to_string();
        let io = match cells.last().copied() {
            Some("no") => false,
            Some("yes") => true,
            other => panic!("ARCHITECTURE.md layer map: '{name}' has I/O {other:?}, not yes/no"),
        };
        out.push((name, io));
    }
    assert!(
        out.len() >= 10,
        "ARCHITECTURE.md's layer map has only {} rows",
        out.len()
    );
    out
}

/// The layer order alone.
fn layers() -> Vec<String> {
    layer_map().into_iter().map(|(name, _)| name).collect()
}

/// The layer map and `lib.rs` name the same modules.
#[test]
fn the_layer_map_names_every_module() {
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).unwrap();
    let mut declared: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            l.trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|m| m.strip_suffix(';'))
                .map(str::to_string)
        })
        .collect();
    let mut mapped = layers();
    declared.sort();
    mapped.sort();
    assert_eq!(
        declared, mapped,
        "src/lib.rs's modules and ARCHITECTURE.md's layer map differ: give each module a row \
         in the layer map, in its place"
    );
}

/// The `crate::…` and `super::…` paths a file's code (not its comments or tests) names, each
/// as its segments (a `use a::{b, c::d}` group gives `a::b` and `a::c::d`).
fn paths_named(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for root in ["crate::", "super::"] {
            let mut rest = line;
            while let Some(i) = rest.find(root) {
                let before = rest[..i].chars().last();
                rest = &rest[i + root.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue; // `self::super::`, `foo_crate::`
                }
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{'))
                    .unwrap_or(rest.len());
                let head = &rest[..end];
                let root = root.trim_end_matches(':').to_string();
                match head.split_once('{') {
                    // A group: take everything up to its closing brace on this line.
                    Some((prefix, _)) => {
                        let close = rest.find('}').unwrap_or(rest.len());
                        let inner = &rest[prefix.len() + 1..close];
                        for item in inner.split(',') {
                            let item = item.trim().split(" as ").next().unwrap_or("");
                            let path = format!("{prefix}{item}");
                            out.push((root.clone(), segments(&path)));
                        }
                    }
                    None => out.push((root.clone(), segments(head))),
                }
            }
        }
    }
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// A source file's module path under `src/` (`src/scan/plan.rs` is `["scan", "plan"]`,
/// `src/scan/mod.rs` is `["scan"]`).
fn module_of(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The library's files: not `lib.rs`, and not the outermost layer, which is two separate
/// crates over the library's public API — the CLI (`src/bin`) and the Python package's
/// binding crate (`src/python`, whose `crate::` paths name its own modules).
fn library_files(src: &Path) -> Vec<PathBuf> {
    rust_files(src)
        .into_iter()
        .filter(|f| {
            !f.starts_with(src.join("bin"))
                && !f.starts_with(src.join("python"))
                && !f.ends_with("lib.rs")
        })
        .collect()
}

/// The Python binding is a crate of its own under `src/python` (a workspace member): it can
/// use only the library's public API, as the CLI does.
#[test]
fn the_python_binding_is_a_crate_over_the_public_api() {
    let root = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    assert!(
        root.contains("members = [\".\", \"src/python\"]"),
        "src/python is not a workspace member"
    );
    let binding = std::fs::read_to_string(repo().join("src/python/Cargo.toml")).unwrap();
    assert!(
        binding.contains("floe = { path = \"../..\" }"),
        "src/python does not depend on floe by path"
    );
    assert!(binding.contains("crate-type = [\"cdylib\"]"));
}

#[test]
fn imports_follow_the_layer_map() {
    let src = repo().join("src");
    let layers = layers();
    let mut checked = 0;
    for f in library_files(&src) {
        let me = module_of(&src, &f);
        let layer = |m: &str| layers.iter().position(|l| l == m);
        let mine = layer(&me[0]).unwrap_or_else(|| {
            panic!(
                "{}: module '{}' is not in the layer map (ARCHITECTURE.md)",
                f.display(),
                me[0]
            )
        });
        for (root, path) in paths_named(&non_test_code(&f)) {
            if root != "crate" || path.is_empty() || path[0] == me[0] {
                continue;
            }
            checked += 1;
            match layer(&path[0]) {
                Some(theirs) => assert!(
                    theirs < mine,
                    "{}: '{}' uses crate::{}, which sits above it in the layer map \
                     (ARCHITECTURE.md): move the shared item down",
                    f.display(),
                    me[0],
                    path.join("::")
                ),
                None => assert!(
                    ["Error", "ErrorKind", "Result", "Table", "Catalog"]
                        .contains(&path[0].as_str()),
                    "{}: crate::{} is not a module of the layer map",
                    f.display(),
                    path.join("::")
                ),
            }
        }
    }
    assert!(checked > 100, "the check saw only {checked} imports");
}

#[test]
fn files_of_a_module_do_not_import_each_other_in_a_cycle() {
    use std::collections::{BTreeMap, BTreeSet};
    let src = repo().join("src");
    let files = library_files(&src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    // The module a path names: its longest prefix that is a file.
    let resolve = |path: &[String]| {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let me = module_of(&src, f);
        // `super::` of module `a::b` is `a` (for `a/b.rs` and `a/b/mod.rs` alike).
        let parent = me[..me.len() - 1].to_vec();
        for (root, path) in paths_named(&non_test_code(f)) {
            let full: Vec<String> = if root == "crate" {
                path
            } else {
                parent.iter().cloned().chain(path).collect()
            };
            if let Some(t) = resolve(&full) {
                if t != me && t.first() == me.first() {
                    edges.entry(me.clone()).or_default().insert(t);
                }
            }
        }
    }
    // Depth-first search for a cycle, reporting its files.
    fn visit(
        v: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) {
        if done.contains(v) {
            return;
        }
        if let Some(i) = stack.iter().position(|s| s == v) {
            let cycle: Vec<String> = stack[i..].iter().map(|m| m.join("/")).collect();
            panic!(
                "files import each other in a cycle: {} -> {}; move what they share into \
                 its own file",
                cycle.join(" -> "),
                v.join("/")
            );
        }
        stack.push(v.clone());
        for w in edges.get(v).into_iter().flatten() {
            visit(w, edges, stack, done);
        }
        stack.pop();
        done.insert(v.clone());
    }
    let mut done = BTreeSet::new();
    for v in edges.keys() {
        visit(v, &edges, &mut Vec::new(), &mut done);
    }
    assert!(
        edges.len() > 15,
        "the check saw only {} importing files",
        edges.len()
    );
}

/// The library's futures are `Send`: callers can spawn them on a multi-threaded runtime (a
/// stream closure that borrows instead of owning makes a future not `Send` for every
/// lifetime, which only shows where a caller spawns it).
#[test]
fn public_futures_are_send() {
    fn is_send<T: Send>(_: T) {}
    let d = tempfile::tempdir().unwrap();
    let cat = floe::Catalog::open(None, d.path().join("wh").to_str(), None).unwrap();
    let ident = floe::table::parse_ident("db.t").unwrap();
    // `spawnable!(cat, ident, t => body)`: `body` awaited in a future owning the catalog
    // and identifier, with the table `t` loaded.
    macro_rules! spawnable {
        ($c:ident, $i:ident, $t:ident => $($body:tt)*) => {{
            let ($c, $i) = (cat.clone(), ident.clone());
            is_send(async move {
                let $t = $c.load_table(&$i).await?;
                let _ = (&$t, &$i);
                $($body)*;
                Ok::<_, floe::Error>(())
            });
        }};
    }
    spawnable!(cat, ident, t => floe::scan::Scan::new(&t).to_batches().await?);
    spawnable!(cat, ident, t =>
        floe::txn::append(
            &cat,
            &t,
            Vec::<floe::Result<arrow_array::RecordBatch>>::new()
        )
        .await?
    );
    spawnable!(cat, ident, t => floe::dml::execute(&cat, "DELETE FROM db.t WHERE true", None).await?);
    spawnable!(cat, ident, t =>
        floe::keyed::upsert(
            &cat,
            &ident,
            &floe::keyed::ChangeBatch::new(),
            &Default::default()
        )
        .await?
    );
    spawnable!(cat, ident, t => floe::keyed::tombstones(&t, true).await?);
    spawnable!(cat, ident, t => floe::maintenance::remove_orphan_files(&cat, &t, None, true).await?);
    spawnable!(cat, ident, t =>
        floe::maintenance::rewrite_data_files(&cat, &t, None, &Default::default(), None).await?
    );
    spawnable!(cat, ident, t =>
        floe::maintenance::rewrite_position_delete_files(&cat, &t, &Default::default()).await?
    );
    spawnable!(cat, ident, t => floe::maintenance::rewrite_manifests(&cat, &t, None).await?);
    spawnable!(cat, ident, t => floe::maintenance::drop_table(&cat, &ident, true).await?);
    spawnable!(cat, ident, t =>
        floe::txn::clone_table(
            &cat,
            &t,
            &floe::scan::SnapshotSelector::Current,
            &ident,
            false
        )
        .await?
    );
}
