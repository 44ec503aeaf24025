//! The rewrite as plan, tasks and commit across processes; partial progress; options through the CLI.

use super::*;

/// The rewrite split across processes: plan once, run each file group in its own process,
/// commit all results at once; a partial or repeated commit is refused.
#[test]
fn rewrite_as_plan_tasks_and_commit_in_separate_processes() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.dist",
            "--schema",
            "id long, cat string",
            "--partition-by",
            "cat",
            "--property",
            "write.delete.mode=merge-on-read",
        ],
    );
    for f in 0..4 {
        let csv = d.path().join(format!("d{f}.csv"));
        let mut s = String::from("id,cat\n");
        for i in f * 100..(f + 1) * 100 {
            s.push_str(&format!("{i},{}\n", if i % 2 == 0 { "a" } else { "b" }));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.dist", csv.to_str().unwrap()]);
    }
    ok(&wh, &["delete", "db.dist", "--where", "id % 9 = 0"]);
    let before = id_sum_and_count(&wh, "db.dist");
    let plan = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.dist",
            "--plan-only",
            "--option",
            "min-input-files=2",
        ],
    );
    let plan_file = d.path().join("plan.json");
    std::fs::write(&plan_file, &plan).unwrap();
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let groups = v["tasks"].as_array().unwrap().len();
    assert_eq!(groups, 2, "one group per partition: {plan}");
    // Each task in its own process, at the same time.
    let children: Vec<_> = (0..groups)
        .map(|g| {
            crate::common::floe_cmd()
                .arg("--warehouse")
                .arg(&wh)
                .args([
                    "rewrite-data-files",
                    "db.dist",
                    "--execute-task",
                    plan_file.to_str().unwrap(),
                    "--group",
                    &g.to_string(),
                ])
                .output()
                .unwrap()
        })
        .collect();
    let mut results = Vec::new();
    for (g, o) in children.into_iter().enumerate() {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let f = d.path().join(format!("result-{g}.json"));
        std::fs::write(&f, &o.stdout).unwrap();
        results.push(f.to_string_lossy().to_string());
    }
    assert_eq!(
        id_sum_and_count(&wh, "db.dist"),
        before,
        "tasks commit nothing"
    );
    let o = floe(
        &wh,
        &["rewrite-data-files", "db.dist", "--commit", &results[0]],
    );
    assert!(!o.status.success(), "a partial commit is refused");
    let mut args = vec!["rewrite-data-files", "db.dist", "--commit"];
    args.extend(results.iter().map(String::as_str));
    let v: serde_json::Value = serde_json::from_str(&ok(&wh, &args)).unwrap();
    assert_eq!(v["rewritten_data_files_count"], 8, "{v}");
    assert_eq!(v["added_data_files_count"], 2, "{v}");
    assert_eq!(id_sum_and_count(&wh, "db.dist"), before);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.dist", "--json"])).unwrap();
    assert_eq!(files.as_array().unwrap().len(), 2);
    assert!(files
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["deletes"].as_array().unwrap().is_empty()));
    let o = floe(&wh, &args);
    assert!(
        !o.status.success(),
        "the same results cannot be committed twice"
    );
}

/// With partial progress the groups land in several `replace` commits.
#[test]
fn rewrite_with_partial_progress_commits_in_batches() {
    use crate::common::ok;
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.pp",
            "--schema",
            "id long, cat string",
            "--partition-by",
            "cat",
        ],
    );
    for f in 0..3 {
        let csv = d.path().join(format!("p{f}.csv"));
        let mut s = String::from("id,cat\n");
        for i in f * 90..(f + 1) * 90 {
            s.push_str(&format!("{i},{}\n", ["a", "b", "c"][i % 3]));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.pp", csv.to_str().unwrap()]);
    }
    let before = id_sum_and_count(&wh, "db.pp");
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.pp",
            "--option",
            "min-input-files=2",
            "--option",
            "partial-progress.enabled=true",
            "--option",
            "partial-progress.max-commits=3",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["file_groups_count"], 3, "{v}");
    assert_eq!(v["rewritten_data_files_count"], 9, "{v}");
    assert_eq!(v["failed_data_files_count"], 0, "{v}");
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.pp", "--json"])).unwrap();
    let replaces = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["operation"] == "replace")
        .count();
    assert_eq!(replaces, 3);
    assert_eq!(id_sum_and_count(&wh, "db.pp"), before);
}

/// The three options through the CLI (`--option k=v`): bad values are refused with what to
/// use instead; a plan carries them to its tasks and its commit, which then also removes the
/// dangling partition-scoped delete file.
#[test]
fn rewrite_options_through_the_cli_and_a_distributed_plan() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.opts",
            "--schema",
            "id long, v string",
            "--property",
            "write.delete.mode=merge-on-read",
            "--property",
            "write.delete.granularity=partition",
        ],
    );
    let add = |f: usize| {
        let csv = d.path().join(format!("o{f}.csv"));
        let mut s = String::from("id,v\n");
        for i in f * 100..(f + 1) * 100 {
            s.push_str(&format!("{i},v{i}\n"));
        }
        std::fs::write(&csv, s).unwrap();
        ok(&wh, &["append", "db.opts", csv.to_str().unwrap()]);
    };
    for f in 0..3 {
        add(f);
    }
    // One position delete file for the (only) partition, over the three files.
    ok(&wh, &["delete", "db.opts", "--where", "id % 5 = 0"]);
    add(3);
    let before = id_sum_and_count(&wh, "db.opts");
    let fails = |opt: &str, wants: &[&str]| {
        let o = floe(&wh, &["rewrite-data-files", "db.opts", "--option", opt]);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{opt} accepted");
        for w in wants {
            assert!(err.contains(w), "{opt}: error lacks '{w}':\n{err}");
        }
    };
    fails(
        "rewrite-job-order=largest",
        &[
            "largest",
            "none, bytes-asc, bytes-desc, files-asc, files-desc",
        ],
    );
    fails("output-spec-id=3", &["db.opts", "spec ids: 0"]);
    fails("output-spec-id=x", &["output-spec-id", "whole number"]);
    fails("remove-dangling-deletes=maybe", &["true or false"]);
    let plan = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--plan-only",
            "--option",
            "rewrite-all=true",
            "--option",
            "rewrite-job-order=files-desc",
            "--option",
            "output-spec-id=0",
            "--option",
            "remove-dangling-deletes=true",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(v["remove_dangling_deletes"], true, "{plan}");
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{plan}");
    assert_eq!(tasks[0]["output_spec_id"], 0, "{plan}");
    let plan_file = d.path().join("plan.json");
    std::fs::write(&plan_file, &plan).unwrap();
    let result = ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--execute-task",
            plan_file.to_str().unwrap(),
            "--group",
            "0",
        ],
    );
    let result_file = d.path().join("result.json");
    std::fs::write(&result_file, &result).unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "rewrite-data-files",
            "db.opts",
            "--commit",
            result_file.to_str().unwrap(),
        ],
    ))
    .unwrap();
    assert_eq!(v["rewritten_data_files_count"], 4, "{v}");
    assert_eq!(v["removed_delete_files_count"], 1, "{v}");
    assert_eq!(id_sum_and_count(&wh, "db.opts"), before);
    let files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.opts", "--json"])).unwrap();
    assert!(files
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["deletes"].as_array().unwrap().is_empty()));
}
