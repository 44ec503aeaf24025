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

/// Deletes committed after the plan (here: between the tasks and the commit, by another
/// process) to the files the tasks rewrote are carried onto the new files: the commit lands
/// and the deleted rows stay deleted, in v2 (new position delete files, nothing of the plan's
/// removed) as in v3 (a deletion vector replaced). An equality delete cannot be carried
/// without the starting sequence number: that commit is refused as a conflict.
#[test]
fn deletes_committed_after_the_plan_are_carried_onto_a_distributed_commit() {
    use crate::common::ok;
    for fv in ["2", "3"] {
        let d = tempfile::tempdir().unwrap();
        let wh = d.path().join("wh");
        ok(
            &wh,
            &[
                "create",
                "db.late",
                "--schema",
                "id long, cat string",
                "--partition-by",
                "cat",
                "--format-version",
                fv,
                "--property",
                "write.delete.mode=merge-on-read",
            ],
        );
        for f in 0..3 {
            let csv = d.path().join(format!("d{f}.csv"));
            let mut s = String::from("id,cat\n");
            for i in f * 50..(f + 1) * 50 {
                s.push_str(&format!("{i},{}\n", if i % 2 == 0 { "a" } else { "b" }));
            }
            std::fs::write(&csv, s).unwrap();
            ok(&wh, &["append", "db.late", csv.to_str().unwrap()]);
        }
        ok(&wh, &["delete", "db.late", "--where", "id % 10 = 0"]);
        let plan = ok(
            &wh,
            &[
                "rewrite-data-files",
                "db.late",
                "--plan-only",
                "--option",
                "rewrite-all=true",
            ],
        );
        let plan_file = d.path().join("plan.json");
        std::fs::write(&plan_file, &plan).unwrap();
        let groups = serde_json::from_str::<serde_json::Value>(&plan).unwrap()["tasks"]
            .as_array()
            .unwrap()
            .len();
        let mut results = Vec::new();
        for g in 0..groups {
            let out = ok(
                &wh,
                &[
                    "rewrite-data-files",
                    "db.late",
                    "--execute-task",
                    plan_file.to_str().unwrap(),
                    "--group",
                    &g.to_string(),
                ],
            );
            let f = d.path().join(format!("result-{g}.json"));
            std::fs::write(&f, out).unwrap();
            results.push(f.to_string_lossy().to_string());
        }
        // Another writer deletes rows of the rewritten files before the commit.
        ok(&wh, &["delete", "db.late", "--where", "id % 7 = 1"]);
        let after_delete = id_sum_and_count(&wh, "db.late");
        let mut args = vec!["rewrite-data-files", "db.late", "--commit"];
        args.extend(results.iter().map(String::as_str));
        let v: serde_json::Value = serde_json::from_str(&ok(&wh, &args)).unwrap();
        assert_eq!(v["rewritten_data_files_count"], 6, "v{fv}: {v}");
        assert_eq!(
            id_sum_and_count(&wh, "db.late"),
            after_delete,
            "v{fv}: no deleted row comes back"
        );
        // The carried deletes apply to the new files only: one delete file per new file.
        let files: serde_json::Value =
            serde_json::from_str(&ok(&wh, &["files", "db.late", "--json"])).unwrap();
        let files = files.as_array().unwrap();
        assert_eq!(files.len(), 2, "v{fv}: {files:?}");
        ok(&wh, &["delete", "db.late", "--where", "id % 11 = 3"]);
        let rows = ok(&wh, &["scan", "db.late", "--format", "csv"]);
        let mut ids: Vec<i64> = rows
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        ids.sort();
        let expected: Vec<i64> = (0..150)
            .filter(|i| i % 10 != 0 && i % 7 != 1 && i % 11 != 3)
            .collect();
        assert_eq!(ids, expected, "v{fv}");
    }
}

/// Random rounds of a rewrite raced by merge-on-read DELETEs and UPDATEs committed between
/// its tasks and its commit, some removing whole files: every commit lands with the writers'
/// deletes carried (or is refused), and the rows always equal a model of the writes, for
/// floe and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_writes_racing_a_rewrite_agree_with_the_model() {
    use crate::common::{floe, ok};
    use rand::{Rng, SeedableRng};
    for fv in ["2", "3"] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4704 + fv.len() as u64);
        let d = tempfile::tempdir().unwrap();
        let wh = d.path().join("wh");
        ok(
            &wh,
            &[
                "create",
                "db.r",
                "--schema",
                "id long, cat string, v long",
                "--partition-by",
                "cat",
                "--format-version",
                fv,
                "--property",
                "write.delete.mode=merge-on-read",
                "--property",
                "write.update.mode=merge-on-read",
            ],
        );
        // id → (cat, v); v equal across rows, so v2's rows are told apart by id only.
        let mut model: std::collections::BTreeMap<i64, (String, i64)> = Default::default();
        let mut next = 0i64;
        let (mut carried, mut refused, mut over_removed) = (0, 0, 0);
        for round in 0..6 {
            let mut removed_inputs = false;
            for _ in 0..rng.gen_range(2..4) {
                let mut s = String::from("id,cat,v\n");
                for _ in 0..rng.gen_range(5..40) {
                    let cat = ["a", "b", "c"][rng.gen_range(0..3)];
                    s.push_str(&format!("{next},{cat},0\n"));
                    model.insert(next, (cat.to_string(), 0));
                    next += 1;
                }
                let csv = d.path().join("in.csv");
                std::fs::write(&csv, s).unwrap();
                ok(&wh, &["append", "db.r", csv.to_str().unwrap()]);
            }
            let plan = ok(
                &wh,
                &[
                    "rewrite-data-files",
                    "db.r",
                    "--plan-only",
                    "--option",
                    "rewrite-all=true",
                ],
            );
            let plan_file = d.path().join("plan.json");
            std::fs::write(&plan_file, &plan).unwrap();
            let groups = serde_json::from_str::<serde_json::Value>(&plan).unwrap()["tasks"]
                .as_array()
                .map_or(0, Vec::len);
            let mut results = Vec::new();
            for g in 0..groups {
                let out = ok(
                    &wh,
                    &[
                        "rewrite-data-files",
                        "db.r",
                        "--execute-task",
                        plan_file.to_str().unwrap(),
                        "--group",
                        &g.to_string(),
                    ],
                );
                let f = d.path().join(format!("result-{round}-{g}.json"));
                std::fs::write(&f, out).unwrap();
                results.push(f.to_string_lossy().to_string());
            }
            // Writers between the tasks and the commit.
            for _ in 0..rng.gen_range(0..4) {
                let (m, r) = (rng.gen_range(2..9i64), rng.gen_range(0..9i64));
                if rng.gen_bool(0.2) {
                    // A whole partition's files removed: carried as every row deleted.
                    let cat = ["a", "b", "c"][rng.gen_range(0..3)];
                    ok(
                        &wh,
                        &["delete", "db.r", "--where", &format!("cat = '{cat}'")],
                    );
                    removed_inputs |= model.values().any(|(c, _)| c == cat);
                    model.retain(|_, (c, _)| c != cat);
                } else if rng.gen_bool(0.5) {
                    ok(
                        &wh,
                        &["delete", "db.r", "--where", &format!("id % {m} = {r}")],
                    );
                    model.retain(|id, _| id % m != r);
                } else {
                    let set = format!("v = v + {}", round + 1);
                    ok(
                        &wh,
                        &[
                            "update",
                            "db.r",
                            "--set",
                            &set,
                            "--where",
                            &format!("id % {m} = {r}"),
                        ],
                    );
                    for (id, (_, v)) in model.iter_mut() {
                        if id % m == r {
                            *v += round as i64 + 1;
                        }
                    }
                }
            }
            if !results.is_empty() {
                let mut args = vec!["rewrite-data-files", "db.r", "--commit"];
                args.extend(results.iter().map(String::as_str));
                let o = floe(&wh, &args);
                match o.status.code() {
                    Some(0) => {
                        carried += 1;
                        over_removed += usize::from(removed_inputs);
                    }
                    Some(4) => refused += 1,
                    c => panic!("v{fv}: commit exited {c:?}: {}", crate::common::text(&o)),
                }
            }
            let out = ok(&wh, &["scan", "db.r", "--format", "csv"]);
            let mut got: Vec<(i64, String, i64)> = out
                .lines()
                .skip(1)
                .map(|l| {
                    let c: Vec<&str> = l.split(',').collect();
                    (
                        c[0].parse().unwrap(),
                        c[1].to_string(),
                        c[2].parse().unwrap(),
                    )
                })
                .collect();
            got.sort();
            let want: Vec<(i64, String, i64)> = model
                .iter()
                .map(|(id, (c, v))| (*id, c.clone(), *v))
                .collect();
            assert_eq!(got, want, "v{fv}, round {round}");
        }
        assert!(
            carried >= 3 && over_removed >= 1,
            "v{fv}: only {carried} commits landed ({refused} refused), \
             {over_removed} over removed inputs"
        );
        let cat = floe::Catalog::open_existing(None, Some(wh.to_str().unwrap()), None).unwrap();
        let t = cat.load_table(&parse_ident("db.r").unwrap()).await.unwrap();
        let expected = d.path().join("expected.parquet");
        floe_expected(&t, None, &expected).await;
        if let Some(py) = peers_python() {
            peer_check(
                &py,
                d.path(),
                &[Check {
                    name: format!("carried-v{fv}"),
                    metadata: t.metadata_location().to_string(),
                    snapshot_id: None,
                    expected: expected.to_string_lossy().into_owned(),
                    engines: None,
                    refuse: None,
                }],
            );
        }
    }
}
