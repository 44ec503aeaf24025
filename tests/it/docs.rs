//! The documentation stays true to the code and to itself: the CLI reference page is the CLI's
//! own `--help` output, every relative link of the README, the top-level guides and the user
//! guide (`docs/src`) points at a file (and heading) that exists, every page of the guide is
//! in its table of contents, and the table-property reference names every property floe
//! knows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::{floe_cmd, repo};

/// The generated CLI reference page, relative to the repository.
const CLI_PAGE: &str = "docs/src/reference/cli.md";

/// `floe ARGS… --help`, as the CLI prints it (no catalog or warehouse from the environment).
fn help(args: &[String]) -> String {
    let o = floe_cmd().args(args).arg("--help").output().unwrap();
    assert!(
        o.status.success(),
        "floe {} --help failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The subcommands a help text lists under "Commands:" (clap's `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    let Some(start) = help.find("\nCommands:\n") else {
        return Vec::new();
    };
    help[start + "\nCommands:\n".len()..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   ")) // a wrapped description
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// One section per command, depth first in the order `--help` lists them.
fn reference_of(path: &mut Vec<String>, out: &mut String) {
    let text = help(path);
    let title = if path.is_empty() {
        "floe".to_string()
    } else {
        format!("floe {}", path.join(" "))
    };
    let level = if path.len() <= 1 { "##" } else { "###" };
    out.push_str(&format!(
        "{level} {title}\n\n```text\n{}\n```\n\n",
        text.trim_end()
    ));
    for sub in subcommands(&text) {
        path.push(sub);
        reference_of(path, out);
        path.pop();
    }
}

/// The page `docs/src/reference/cli.md` should hold.
fn cli_reference() -> String {
    let mut out = String::from(
        "# CLI reference\n\n\
         <!-- Generated from the CLI's own --help by tests/it/docs.rs; do not edit. To \
         regenerate: bash tools/docs/cli_reference.sh -->\n\n\
         Every command and option of `floe`, as `floe <command> --help` prints them. The \
         [tour of the CLI](../cli-tour.md) shows them at work; exit codes and global options \
         are explained there too.\n\n",
    );
    reference_of(&mut Vec::new(), &mut out);
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

#[test]
fn cli_reference_is_current() {
    let want = cli_reference();
    let page = repo().join(CLI_PAGE);
    if std::env::var("FLOE_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        std::fs::write(&page, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&page).unwrap_or_default();
    if have != want {
        let diff = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(have.lines().count().min(want.lines().count()));
        panic!(
            "{CLI_PAGE} is stale (the CLI's --help changed; first difference at line {}): \
             regenerate it with `bash tools/docs/cli_reference.sh` (or \
             `FLOE_UPDATE_DOCS=1 cargo test --test it docs::cli_reference_is_current`) and \
             commit the page",
            diff + 1
        );
    }
    for cmd in ["scan", "rewrite-data-files", "branch", "tag", "upsert"] {
        assert!(
            want.contains(&format!("# floe {cmd}\n")),
            "the reference has no section for floe {cmd}"
        );
    }
}

#[test]
fn subcommands_are_read_from_help() {
    let help = "Usage: floe <COMMAND>\n\nCommands:\n  create  Create a table\n  \
                branch  Manage branches\n          of a table\n  help    Print this\n\n\
                Options:\n  --json\n";
    assert_eq!(subcommands(help), ["create", "branch"]);
}

/// The markdown files whose links are checked: the top-level guides and every page of the
/// user guide.
pub(crate) fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut out: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    out.extend(guide_pages());
    out
}

/// Every `.md` file under `docs/src`, sorted.
pub(crate) fn guide_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("docs/src"), &mut out);
    out.sort();
    out
}

/// A markdown text without its fenced and indented code blocks and inline code spans (links
/// there are not links), line by line.
fn prose_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            out.push(String::new());
            continue;
        }
        if fence || line.starts_with("    ") && !line.trim_start().starts_with(['-', '*', '|']) {
            out.push(String::new());
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        out.push(kept);
    }
    out
}

/// The targets of a text's inline links `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push(target.trim_matches(['<', '>']).to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// The anchors of a markdown file's headings, as GitHub and mdBook make them: lower case,
/// letters, digits, `-` and `_` kept, spaces as `-`, everything else dropped; a repeated
/// heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let title: String = title.trim().replace('`', "");
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        out.insert(candidate);
    }
    out
}

#[test]
fn anchors_are_made_like_github() {
    let a = anchors("# floe\n## Staging → target: snapshot ingestion\n### `--ref` and tags\n```sh\n# not a heading\n```\n## floe\n");
    let want: BTreeSet<String> = [
        "floe",
        "staging--target-snapshot-ingestion",
        "--ref-and-tags",
        "floe-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(a, want);
    assert_eq!(
        link_targets(
            "see [a](x.md#b) and `[c](no.md)` and [d](https://x.org)\n```\n[e](no.md)\n```\n"
        ),
        ["x.md#b", "https://x.org"]
    );
}

#[test]
fn relative_links_point_at_files_and_headings_that_exist() {
    let root = repo();
    let canonical_root = root.canonicalize().unwrap();
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                bad.push(format!("{rel}: {target}: no such file"));
                continue;
            }
            if dest
                .canonicalize()
                .is_ok_and(|d| !d.starts_with(&canonical_root))
            {
                bad.push(format!("{rel}: {target}: outside the repository"));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let is_md = dest.extension().is_some_and(|x| x == "md");
            let found = is_md && anchors(&std::fs::read_to_string(&dest).unwrap()).contains(anchor);
            if !found {
                bad.push(format!("{rel}: {target}: no heading with that anchor"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "broken links in the docs:\n{}",
        bad.join("\n")
    );
    assert!(checked > 50, "only {checked} links checked");
}

#[test]
fn every_guide_page_is_in_the_summary() {
    let src = repo().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .iter()
        .filter(|t| !t.is_empty()) // a part title without a page: `[Concepts]()`
        .map(|t| src.join(t.split('#').next().unwrap()))
        .collect();
    for page in guide_pages() {
        if page.ends_with("SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page),
            "{} is not in docs/src/SUMMARY.md: add it there (mdBook builds only listed pages)",
            page.strip_prefix(&src).unwrap().display()
        );
    }
    for l in &listed {
        assert!(
            l.exists(),
            "SUMMARY.md lists {} which does not exist",
            l.display()
        );
    }
}

/// The string literals of a `const NAME: &[&str] = &[…];` in a Rust source.
fn const_strings(code: &str, name: &str) -> Vec<String> {
    let start = code
        .find(&format!("const {name}: &[&str] = &["))
        .unwrap_or_else(|| panic!("no const {name}"));
    let body = &code[start..];
    let body = &body[..body.find("];").unwrap()];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_property_reference_names_every_known_property() {
    let root = repo();
    let page = std::fs::read_to_string(root.join("docs/src/reference/properties.md")).unwrap();
    let keys_rs = std::fs::read_to_string(root.join("src/spec/property_keys.rs")).unwrap();
    let mut keys = const_strings(&keys_rs, "KNOWN");
    keys.extend(const_strings(&keys_rs, "PREFIXES"));
    // And every key the typed properties read (their literals outside the tests).
    let props = std::fs::read_to_string(root.join("src/spec/properties.rs")).unwrap();
    let policy = std::fs::read_to_string(root.join("src/spec/maintain_policy.rs")).unwrap();
    let props = props.split("#[cfg(test)]").next().unwrap().to_string()
        + policy.split("#[cfg(test)]").next().unwrap();
    for lit in props.split('"').skip(1).step_by(2) {
        // The key a literal starts with (a per-column family `format!("….column.{col}")`
        // gives its prefix, an error message `"k='{v}'…"` its key).
        let key: String = lit
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-_".contains(*c))
            .collect();
        let lit = key.trim_end_matches('.');
        if ["write.", "commit.", "history.", "gc.", "floe."]
            .iter()
            .any(|p| lit.starts_with(p))
        {
            keys.push(lit.to_string());
        }
    }
    assert!(keys.len() > 80, "found {} keys", keys.len());
    let missing: Vec<_> = keys
        .iter()
        .filter(|k| !page.contains(&format!("`{k}")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/src/reference/properties.md does not name these table properties: {missing:?}"
    );
}
