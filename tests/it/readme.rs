//! The README's `floe …` examples name commands and options that exist: each example (from
//! every `sh` block, continuation lines joined, comments, redirections and pipes cut) is run
//! with `--help` appended, which the CLI parser accepts only if every command and option
//! before it is real. Values are not checked here.

use std::process::Command;

use crate::common::repo;

/// The `floe` command lines of the README's `sh` blocks, as argument lists.
fn examples() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            pending.clear();
            continue;
        }
        if !in_sh {
            continue;
        }
        if pending.is_empty() && !line.trim_start().starts_with("floe ") {
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        pending.push(' ');
        // A continuation: a trailing backslash, or a quote still open.
        if line.ends_with('\\') || !balanced(&pending) {
            continue;
        }
        out.push(words(&pending));
        pending.clear();
    }
    out
}

fn balanced(s: &str) -> bool {
    let (mut single, mut double) = (false, false);
    for c in s.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            _ => {}
        }
    }
    !single && !double
}

/// Shell words up to a comment, redirection or pipe (quotes removed).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut has_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has_word = true;
            }
            (None, '#' | '>' | '|') if !has_word => break,
            (None, c) if c.is_whitespace() => {
                if has_word {
                    words.push(std::mem::take(&mut cur));
                    has_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                has_word = true;
            }
        }
    }
    if has_word {
        words.push(cur);
    }
    words
}

#[test]
fn readme_examples_name_real_commands_and_options() {
    let examples = examples();
    assert!(examples.len() >= 60, "found {} examples", examples.len());
    let mut bad = Vec::new();
    for ex in &examples {
        assert_eq!(ex[0], "floe");
        // Shell variables: a value after an option (`--group "$g"`) becomes 1; elsewhere
        // (`floe $C create`) they stand for options shown next to the example.
        let mut args: Vec<String> = Vec::new();
        for (i, w) in ex.iter().enumerate().skip(1) {
            match w.strip_prefix('$') {
                Some(_) if ex[i - 1].starts_with("--") => args.push("1".into()),
                Some(_) => {}
                None => args.push(w.clone()),
            }
        }
        let o = Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(&args)
            .arg("--help")
            .env_remove("FLOE_CATALOG")
            .env_remove("FLOE_WAREHOUSE")
            .output()
            .unwrap();
        if !o.status.success() {
            bad.push(format!(
                "{}\n  {}",
                ex.join(" "),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "README examples the CLI refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn words_split_like_a_shell() {
    assert_eq!(
        words(r#"floe scan db.t --where "a = 'x y'" -o out.csv   # comment"#),
        [
            "floe",
            "scan",
            "db.t",
            "--where",
            "a = 'x y'",
            "-o",
            "out.csv"
        ]
    );
    assert_eq!(words("floe files db.t > f.json"), ["floe", "files", "db.t"]);
    assert_eq!(words("floe x ''"), ["floe", "x", ""]);
}
