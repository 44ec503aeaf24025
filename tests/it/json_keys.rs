//! Every command's `--json` output uses one vocabulary: the keys listed in the user guide's
//! JSON output page (`docs/src/reference/json.md`), snake_case, each list entry used by some command. Values that are
//! Iceberg's own JSON (schema, partition spec, sort order, snapshot summary, properties, a
//! plan's filter) keep the spec's keys and are not walked.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::common::repo;
use crate::common::{floe, floe_in, text};

/// Keys whose values are Iceberg's JSON, not floe's.
const ICEBERG_JSON: &[&str] = &[
    "schema",
    "partition_spec",
    "sort_order",
    "summary",
    "properties",
    "filter",
    // A tombstone's key: the table's key columns by name.
    "key",
];

fn walk(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                if !ICEBERG_JSON.contains(&k.as_str()) {
                    walk(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
        _ => {}
    }
}

/// The page that lists the keys.
const JSON_PAGE: &str = "docs/src/reference/json.md";

/// The keys of the JSON output page's list: the backticked words of the lines after its
/// `Keys:` line, up to the next heading.
fn listed_keys() -> BTreeSet<String> {
    let page = std::fs::read_to_string(repo().join(JSON_PAGE)).unwrap();
    let start = page
        .find("\nKeys:")
        .unwrap_or_else(|| panic!("{JSON_PAGE} has no 'Keys:' list"));
    let list = &page[start..];
    let list = &list[..list.find("\n#").unwrap_or(list.len())];
    let mut keys = BTreeSet::new();
    for (i, part) in list.split('`').enumerate() {
        if i % 2 == 1 {
            keys.insert(part.to_string());
        }
    }
    keys
}

/// Runs `floe args… --json` (in `dir`, warehouse `wh`) and returns the documents' keys.
fn keys_of(dir: &Path, wh: &Path, args: &[&str], out: &mut BTreeSet<String>) -> String {
    let mut a: Vec<&str> = args.to_vec();
    a.push("--json");
    let o = if wh.as_os_str().is_empty() {
        floe_in(dir, &a)
    } else {
        floe(wh, &a)
    };
    assert!(o.status.success(), "floe {a:?}:\n{}", text(&o));
    let s = String::from_utf8(o.stdout.clone()).unwrap();
    // One document, or (scan) one object per line.
    match serde_json::from_str::<Value>(&s) {
        Ok(v) => walk(&v, out),
        Err(_) => {
            for l in s.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("{a:?}: {e}: {l}"));
                assert!(v.is_object(), "{a:?}: {l}");
            }
        }
    }
    s
}

#[test]
fn every_commands_json_uses_the_listed_keys() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let wh = dir.join("wh");
    let w = wh.as_path();
    std::fs::write(dir.join("in.csv"), "id,name\n1,a\n2,b\n3,c\n").unwrap();
    std::fs::write(dir.join("kv.csv"), "id,ver,v\n1,1,a\n1,2,b\n2,1,c\n").unwrap();
    let inp = dir.join("in.csv").to_string_lossy().to_string();
    let kv = dir.join("kv.csv").to_string_lossy().to_string();
    let mut keys = BTreeSet::new();
    let k = &mut keys;
    keys_of(
        dir,
        Path::new(""),
        &["quickstart", "--dir", "q", "--rows", "2000"],
        k,
    );
    keys_of(
        dir,
        w,
        &[
            "create",
            "db.t",
            "--schema",
            "id long, name string",
            "--property",
            "write.delete.mode=merge-on-read",
        ],
        k,
    );
    keys_of(dir, w, &["namespaces", "--create", "db"], k);
    keys_of(dir, w, &["namespaces", "--create", "tmp"], k);
    keys_of(dir, w, &["namespaces", "--drop", "tmp"], k);
    for _ in 0..3 {
        keys_of(dir, w, &["append", "db.t", &inp], k);
    }
    keys_of(dir, w, &["scan", "db.t"], k);
    keys_of(dir, w, &["scan", "db.t", "--count"], k);
    keys_of(
        dir,
        w,
        &["scan", "db.t", "--where", "id = 2", "--explain"],
        k,
    );
    keys_of(dir, w, &["changes", "db.t"], k);
    keys_of(dir, w, &["changes", "db.t", "--net-changes", "--count"], k);
    keys_of(dir, w, &["namespaces"], k);
    std::fs::write(
        dir.join("ch.csv"),
        "id,v,ver,del\n1,a,1,0\n2,b,1,0\n2,,2,1\n",
    )
    .unwrap();
    let ch = dir.join("ch.csv").to_string_lossy().to_string();
    keys_of(
        dir,
        w,
        &[
            "create",
            "db.keyed",
            "--schema",
            "id long not null, v string, ver long, del int",
            "--primary-key",
            "id",
            "--property",
            "floe.merge.version-column=ver",
            "--property",
            "floe.merge.delete-column=del",
        ],
        k,
    );
    keys_of(
        dir,
        w,
        &[
            "upsert",
            "db.keyed",
            &ch,
            "--sink-id",
            "s",
            "--checkpoint",
            "1",
        ],
        k,
    );
    keys_of(dir, w, &["tombstones", "db.keyed", "--list"], k);
    keys_of(
        dir,
        w,
        &[
            "expire-tombstones",
            "db.keyed",
            "--older-than",
            "2000-01-01T00:00:00Z",
        ],
        k,
    );
    // maintain: a plan and a pass on a table whose policy makes every step count.
    keys_of(
        dir,
        w,
        &[
            "create",
            "db.m",
            "--schema",
            "id long, name string",
            "--format-version",
            "2",
            "--property",
            "write.delete.mode=merge-on-read",
            "--property",
            "floe.maintain.rewrite-data-files.min-input-files=2",
            "--property",
            "history.expire.max-snapshot-age-ms=0",
        ],
        k,
    );
    for _ in 0..2 {
        keys_of(dir, w, &["append", "db.m", &inp], k);
    }
    keys_of(dir, w, &["delete", "db.m", "--where", "id = 1"], k);
    keys_of(dir, w, &["delete", "db.m", "--where", "id = 2"], k);
    keys_of(dir, w, &["maintain", "db.m", "--dry-run"], k);
    keys_of(dir, w, &["maintain", "db.m"], k);
    keys_of(
        dir,
        w,
        &[
            "alter",
            "db.keyed",
            "--set",
            "floe.maintain.tombstones.max-age-ms=0",
        ],
        k,
    );
    keys_of(dir, w, &["maintain", "db.keyed", "--dry-run"], k);
    // sink: files arriving in a directory, one pass.
    let inbox = dir.join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::write(inbox.join("a.csv"), "id,v,ver,del\n3,c,1,0\n").unwrap();
    std::fs::write(inbox.join("b.csv"), "id,v,ver,del\n4,d,1,0\n").unwrap();
    let inbox = inbox.to_string_lossy().to_string();
    // Maintained between its commits: the second commit comes after a pass. One document
    // per commit (keys_of walks a single document only).
    let sunk = keys_of(
        dir,
        w,
        &[
            "sink",
            "db.keyed",
            "--from",
            &inbox,
            "--once",
            "--sink-id",
            "d",
            "--max-batch-rows",
            "1",
            "--maintain",
            "--maintain-interval",
            "1ms",
        ],
        k,
    );
    for l in sunk.lines().filter(|l| !l.trim().is_empty()) {
        walk(&serde_json::from_str(l).unwrap(), k);
    }
    keys_of(dir, w, &["tables"], k);
    keys_of(dir, w, &["describe", "db.t"], k);

    keys_of(dir, w, &["snapshots", "db.t"], k);
    keys_of(dir, w, &["delete", "db.t", "--where", "id = 1"], k);
    keys_of(
        dir,
        w,
        &["update", "db.t", "--set", "name = 'z'", "--where", "id = 2"],
        k,
    );
    keys_of(
        dir,
        w,
        &["merge", "db.t", "--source", &inp, "--on", "id"],
        k,
    );
    // On a table bucketed by the key the MERGE runs one partition at a time (`aligned`).
    let bucketed = [
        "create",
        "db.b",
        "--schema",
        "id long, name string",
        "--partition-by",
        "bucket(4, id)",
    ];
    keys_of(dir, w, &bucketed, k);
    keys_of(
        dir,
        w,
        &["merge", "db.b", "--source", &inp, "--on", "id"],
        k,
    );
    keys_of(dir, w, &["sql", "DELETE FROM db.t WHERE id = 3"], k);
    keys_of(dir, w, &["files", "db.t"], k);
    let plan = keys_of(
        dir,
        w,
        &[
            "rewrite-data-files",
            "db.t",
            "--plan-only",
            "--option",
            "rewrite-all=true",
        ],
        k,
    );
    let group = serde_json::from_str::<Value>(&plan).unwrap()["tasks"][0]["group"].to_string();
    let plan_file = dir.join("plan.json");
    std::fs::write(&plan_file, &plan).unwrap();
    let plan_path = plan_file.to_string_lossy().to_string();
    let r0 = keys_of(
        dir,
        w,
        &[
            "rewrite-data-files",
            "db.t",
            "--execute-task",
            &plan_path,
            "--group",
            &group,
        ],
        k,
    );
    let r0_file = dir.join("r0.json");
    std::fs::write(&r0_file, &r0).unwrap();
    keys_of(
        dir,
        w,
        &[
            "rewrite-data-files",
            "db.t",
            "--commit",
            &r0_file.to_string_lossy(),
        ],
        k,
    );
    keys_of(dir, w, &["rewrite-data-files", "db.t"], k);
    keys_of(dir, w, &["rewrite-position-delete-files", "db.t"], k);
    keys_of(dir, w, &["rewrite-manifests", "db.t"], k);
    keys_of(
        dir,
        w,
        &["expire-snapshots", "db.t", "--retain-last", "1"],
        k,
    );
    keys_of(dir, w, &["remove-orphan-files", "db.t", "--dry-run"], k);
    keys_of(dir, w, &["clone", "db.t", "db.c"], k);
    keys_of(dir, w, &["clone", "db.t", "db.c", "--replace"], k);
    keys_of(
        dir,
        w,
        &["create", "db.kv", "--schema", "id long, ver long, v string"],
        k,
    );
    keys_of(
        dir,
        w,
        &[
            "ingest-snapshot",
            "db.kv",
            &kv,
            "--key",
            "id",
            "--version",
            "ver",
            "--publish",
            "db.kvp",
        ],
        k,
    );
    keys_of(dir, w, &["rename", "db.c", "db.c2"], k);
    let described = keys_of(dir, w, &["describe", "db.c2"], k);
    keys_of(dir, w, &["tag", "create", "db.c2", "t1"], k);
    keys_of(dir, w, &["branch", "create", "db.c2", "b1"], k);
    keys_of(
        dir,
        w,
        &["branch", "fast-forward", "db.c2", "b1", "--to", "main"],
        k,
    );
    keys_of(dir, w, &["tag", "drop", "db.c2", "t1"], k);
    keys_of(dir, w, &["clone", "db.c2", "db.c4", "--all-refs"], k);
    keys_of(
        dir,
        w,
        &["alter", "db.c2", "--set", "write.wap.enabled=true"],
        k,
    );
    let staged = keys_of(dir, w, &["append", "db.c2", &inp, "--wap-id", "w1"], k);
    let staged: Value = serde_json::from_str(&staged).unwrap();
    let staged = staged["snapshot_id"].as_i64().unwrap().to_string();
    keys_of(dir, w, &["cherrypick", "db.c2", &staged], k);
    keys_of(
        dir,
        w,
        &["alter", "db.c2", "ADD", "COLUMN", "extra", "long"],
        k,
    );
    keys_of(
        dir,
        w,
        &[
            "sql",
            "ALTER TABLE db.c2 SET TBLPROPERTIES ('commit.retry.num-retries'='5')",
        ],
        k,
    );
    let md: Value = serde_json::from_str(&described).unwrap();
    let md = md["metadata_location"].as_str().unwrap().to_string();
    keys_of(dir, w, &["drop", "db.c2"], k);
    keys_of(dir, w, &["register", "db.c3", &md], k);
    keys_of(dir, w, &["drop", "db.c3", "--purge"], k);

    let not_snake: Vec<_> = keys
        .iter()
        .filter(|k| {
            !k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(
        not_snake.is_empty(),
        "keys that are not snake_case: {not_snake:?}"
    );
    let listed = listed_keys();
    let unlisted: Vec<_> = keys.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "keys the JSON output list ({JSON_PAGE}) does not have: {unlisted:?}"
    );
    let unused: Vec<_> = listed.difference(&keys).collect();
    assert!(
        unused.is_empty(),
        "keys of {JSON_PAGE} no command printed (stale list, or a command left out here): \
         {unused:?}"
    );
}
