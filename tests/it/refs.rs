//! Branches, tags, rollback and set-current-snapshot against a model: random sequences of ref
//! changes (legal and not) between appends; after each, floe's refs equal the model's and a
//! refused change commits nothing. At the end pyiceberg and Spark resolve every ref by name
//! (DuckDB by the metadata) and read the rows floe reads there, and expiry keeps what the refs
//! need.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::snapshot_refs::{is_ancestor, RefChange, Retention};
use floe::table::parse_ident;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::common::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Branch,
    Tag,
}

fn refs_of(t: &floe::Table) -> BTreeMap<String, (Kind, i64)> {
    floe::spec::refs(t.metadata())
        .into_iter()
        .map(|(n, r)| {
            let k = if r.is_branch() {
                Kind::Branch
            } else {
                Kind::Tag
            };
            (n, (k, r.snapshot_id))
        })
        .collect()
}

/// A random change and whether the model says it is legal (and what it does to the model).
fn pick(
    rng: &mut StdRng,
    model: &mut BTreeMap<String, (Kind, i64)>,
    md: &floe::spec::TableMetadata,
) -> (RefChange, bool) {
    let snaps: Vec<i64> = md.snapshots().map(|s| s.snapshot_id()).collect();
    let names = ["main", "dev", "qa", "v1", "v2"];
    let name = names[rng.gen_range(0..names.len())].to_string();
    let snap = snaps[rng.gen_range(0..snaps.len())];
    let current = md.current_snapshot_id().unwrap();
    let existing = model.get(&name).copied();
    match rng.gen_range(0..9) {
        0 => {
            let ok = existing.is_none();
            if ok {
                model.insert(name.clone(), (Kind::Branch, snap));
            }
            (
                RefChange::CreateBranch {
                    name,
                    snapshot: Some(snap),
                    retention: Retention::default(),
                },
                ok,
            )
        }
        1 => {
            let ok = existing.is_none();
            if ok {
                model.insert(name.clone(), (Kind::Tag, current));
            }
            (
                RefChange::CreateTag {
                    name,
                    snapshot: None,
                    retention: Retention::default(),
                },
                ok,
            )
        }
        2 => {
            let ok = matches!(existing, Some((Kind::Branch, _)));
            if ok {
                model.insert(name.clone(), (Kind::Branch, snap));
            }
            (
                RefChange::ReplaceBranch {
                    name,
                    snapshot: snap,
                    retention: None,
                },
                ok,
            )
        }
        3 => {
            let ok = matches!(existing, Some((Kind::Tag, _)));
            if ok {
                model.insert(name.clone(), (Kind::Tag, snap));
            }
            (
                RefChange::ReplaceTag {
                    name,
                    snapshot: snap,
                    retention: None,
                },
                ok,
            )
        }
        4 => {
            let ok = matches!(existing, Some((Kind::Branch, _))) && name != "main";
            if ok {
                model.remove(&name);
            }
            (RefChange::DropBranch(name), ok)
        }
        5 => {
            let ok = matches!(existing, Some((Kind::Tag, _)));
            if ok {
                model.remove(&name);
            }
            (RefChange::DropTag(name), ok)
        }
        6 => {
            let to = names[rng.gen_range(0..names.len())].to_string();
            let ok = match (existing, model.get(&to)) {
                (Some((Kind::Branch, from)), Some((_, target))) => is_ancestor(md, from, *target),
                _ => false,
            };
            if ok {
                let target = model[&to].1;
                model.insert(name.clone(), (Kind::Branch, target));
            }
            (RefChange::FastForward { name, to }, ok)
        }
        7 => {
            let ok = is_ancestor(md, snap, current);
            if ok {
                model.insert("main".into(), (Kind::Branch, snap));
            }
            (RefChange::RollbackTo(snap), ok)
        }
        _ => {
            model.insert("main".into(), (Kind::Branch, snap));
            (RefChange::SetCurrentSnapshot(snap), true)
        }
    }
}

#[tokio::test]
async fn random_ref_changes_agree_with_the_model_and_the_peers() {
    let (dir, cat) = sqlite_catalog();
    let ident = parse_ident("db.refs").unwrap();
    let mut t = cat
        .create_table(
            &ident,
            floe::TableCreation::new(floe::spec::parse_schema("id long not null").unwrap()),
        )
        .await
        .unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut next = 0i64;
    let mut refused = 0;
    for step in 0..60 {
        if step % 4 == 0 {
            let n = rng.gen_range(1..5);
            let b = RecordBatch::try_from_iter([(
                "id",
                Arc::new(Int64Array::from_iter_values(next..next + n)) as _,
            )])
            .unwrap();
            next += n;
            t = floe::txn::append(&cat, &t, [Ok(b)]).await.unwrap().table;
        }
        let mut model = refs_of(&t);
        let before = t.metadata_location().to_string();
        let (change, legal) = pick(&mut rng, &mut model, t.metadata());
        match floe::txn::manage_refs(&cat, &ident, &change).await {
            Ok(nt) => {
                assert!(legal, "step {step}: {change:?} was accepted");
                t = nt;
            }
            Err(e) => {
                assert!(!legal, "step {step}: {change:?} was refused: {e}");
                refused += 1;
                t = cat.load_table(&ident).await.unwrap();
                assert_eq!(t.metadata_location(), before, "a refused change committed");
            }
        }
        assert_eq!(refs_of(&t), model, "step {step}: {change:?}");
        assert_eq!(
            t.metadata().current_snapshot_id(),
            model.get("main").map(|r| r.1)
        );
    }
    assert!(refused > 5, "the sequence should try illegal changes too");
    // Every ref reads as the snapshot it names, in floe and in the peers (by name).
    let mut checks = Vec::new();
    for (name, (kind, id)) in refs_of(&t) {
        let by_ref = Scan::new(&t)
            .snapshot(SnapshotSelector::Ref(name.clone()))
            .count()
            .await
            .unwrap();
        let by_id = Scan::new(&t)
            .snapshot(SnapshotSelector::Id(id))
            .count()
            .await
            .unwrap();
        assert_eq!(by_ref, by_id, "{name}");
        let expected = dir.path().join(format!("expected-{name}.parquet"));
        floe_expected(&t, Some(id), &expected).await;
        checks.push(json!({
            "name": format!("ref {name}"),
            "metadata": t.metadata_location(),
            "ref": name,
            "ref_type": if kind == Kind::Branch { "branch" } else { "tag" },
            "expected": expected.to_string_lossy(),
        }));
    }
    if let Some(py) = peers_python() {
        peer_check_env(&py, dir.path(), &checks, &[]);
    }
    // Expiry keeps every snapshot a ref points at.
    let o = floe::maintenance::ExpireOptions::default().with_older_than_ms(i64::MAX);
    floe::maintenance::expire_snapshots(&cat, &t, &o)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    for (name, (_, id)) in refs_of(&t) {
        assert!(
            t.metadata().snapshot_by_id(id).is_some(),
            "{name} lost its snapshot"
        );
    }
}

/// Rows of `t` at the head of `branch`, sorted.
async fn branch_rows(t: &floe::Table, branch: &str) -> Vec<(i64, i64)> {
    let sel = SnapshotSelector::Ref(branch.to_string());
    let batches = Scan::new(t).snapshot(sel).to_batches().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let id = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..b.num_rows() {
            out.push((id.value(r), v.value(r)));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn writes_to_a_branch_leave_main_untouched_and_peers_read_both() {
    for version in [2u8, 3] {
        let (dir, cat) = sqlite_catalog();
        let ident = parse_ident("db.wb").unwrap();
        let mut c =
            floe::TableCreation::new(floe::spec::parse_schema("id long not null, v long").unwrap());
        c.format_version = if version == 3 {
            floe::spec::FormatVersion::V3
        } else {
            floe::spec::FormatVersion::V2
        };
        for k in ["write.delete.mode", "write.update.mode", "write.merge.mode"] {
            c.properties.insert(k.into(), "merge-on-read".into());
        }
        let t = cat.create_table(&ident, c).await.unwrap();
        let batch = |ids: std::ops::Range<i64>| {
            RecordBatch::try_from_iter([
                (
                    "id",
                    Arc::new(Int64Array::from_iter_values(ids.clone())) as _,
                ),
                (
                    "v",
                    Arc::new(Int64Array::from_iter_values(ids.map(|i| i * 10))) as _,
                ),
            ])
            .unwrap()
        };
        floe::txn::append(&cat, &t, [Ok(batch(0..20))])
            .await
            .unwrap();
        floe::txn::manage_refs(
            &cat,
            &ident,
            &RefChange::CreateBranch {
                name: "dev".into(),
                snapshot: None,
                retention: Retention::default(),
            },
        )
        .await
        .unwrap();
        let mut model: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::from([
            ("main", (0..20).map(|i| (i, i * 10)).collect()),
            ("dev", (0..20).map(|i| (i, i * 10)).collect()),
        ]);
        let mut rng = StdRng::seed_from_u64(version as u64);
        let mut next = 20i64;
        for step in 0..16 {
            let branch = if rng.gen_bool(0.6) { "dev" } else { "main" };
            let target = if branch == "main" {
                "db.wb".to_string()
            } else {
                "db.wb.branch_dev".to_string()
            };
            let rows = model.get_mut(branch).unwrap();
            match rng.gen_range(0..3) {
                0 => {
                    let n = rng.gen_range(1..6);
                    let t = cat.load_write_target(&target).await.unwrap();
                    floe::txn::append(&cat, &t, [Ok(batch(next..next + n))])
                        .await
                        .unwrap();
                    rows.extend((next..next + n).map(|i| (i, i * 10)));
                    next += n;
                }
                1 => {
                    let m = rng.gen_range(2..7);
                    floe::dml::execute(
                        &cat,
                        &format!("DELETE FROM {target} WHERE id % {m} = 1"),
                        None,
                    )
                    .await
                    .unwrap();
                    rows.retain(|(i, _)| i % m != 1);
                }
                _ => {
                    let m = rng.gen_range(2..7);
                    floe::dml::execute(
                        &cat,
                        &format!("UPDATE {target} SET v = v + 1 WHERE id % {m} = 0"),
                        None,
                    )
                    .await
                    .unwrap();
                    for r in rows.iter_mut() {
                        if r.0 % m == 0 {
                            r.1 += 1;
                        }
                    }
                }
            }
            rows.sort();
            let t = cat.load_table(&ident).await.unwrap();
            for b in ["main", "dev"] {
                assert_eq!(
                    branch_rows(&t, b).await,
                    model[b],
                    "v{version} step {step} {b}"
                );
            }
        }
        let t = cat.load_table(&ident).await.unwrap();
        let mut checks = Vec::new();
        for b in ["main", "dev"] {
            let id = floe::spec::refs(t.metadata())
                .into_iter()
                .find(|(n, _)| n == b)
                .unwrap()
                .1
                .snapshot_id;
            let expected = dir.path().join(format!("expected-{b}.parquet"));
            floe_expected(&t, Some(id), &expected).await;
            checks.push(json!({
                "name": format!("v{version} branch {b}"),
                "metadata": t.metadata_location(),
                "ref": b,
                "expected": expected.to_string_lossy(),
            }));
        }
        if let Some(py) = peers_python() {
            peer_check_env(&py, dir.path(), &checks, &[]);
        }
        // Tags are not written.
        floe::txn::manage_refs(
            &cat,
            &ident,
            &RefChange::CreateTag {
                name: "t".into(),
                snapshot: None,
                retention: Retention::default(),
            },
        )
        .await
        .unwrap();
        let e = cat.load_write_target("db.wb.branch_t").await.unwrap_err();
        assert!(e.to_string().contains("tag"), "{e}");
    }
}

#[tokio::test]
async fn clone_with_all_refs_copies_branches_and_tags() {
    for version in [2u8, 3] {
        let (dir, cat) = sqlite_catalog();
        let ident = parse_ident("db.src").unwrap();
        let mut c =
            floe::TableCreation::new(floe::spec::parse_schema("id long not null, v long").unwrap());
        c.format_version = if version == 3 {
            floe::spec::FormatVersion::V3
        } else {
            floe::spec::FormatVersion::V2
        };
        c.properties
            .insert("write.delete.mode".into(), "merge-on-read".into());
        let t = cat.create_table(&ident, c).await.unwrap();
        let batch = |ids: std::ops::Range<i64>| {
            RecordBatch::try_from_iter([
                (
                    "id",
                    Arc::new(Int64Array::from_iter_values(ids.clone())) as _,
                ),
                ("v", Arc::new(Int64Array::from_iter_values(ids)) as _),
            ])
            .unwrap()
        };
        floe::txn::append(&cat, &t, [Ok(batch(0..10))])
            .await
            .unwrap();
        let change = |c: RefChange| {
            let cat = cat.clone();
            let ident = ident.clone();
            async move { floe::txn::manage_refs(&cat, &ident, &c).await.unwrap() }
        };
        change(RefChange::CreateTag {
            name: "first".into(),
            snapshot: None,
            retention: Retention {
                max_ref_age_ms: Some(86_400_000),
                ..Default::default()
            },
        })
        .await;
        change(RefChange::CreateBranch {
            name: "dev".into(),
            snapshot: None,
            retention: Retention {
                min_snapshots_to_keep: Some(3),
                ..Default::default()
            },
        })
        .await;
        let dev = cat.load_write_target("db.src.branch_dev").await.unwrap();
        floe::txn::append(&cat, &dev, [Ok(batch(100..105))])
            .await
            .unwrap();
        floe::dml::execute(&cat, "DELETE FROM db.src.branch_dev WHERE id < 3", None)
            .await
            .unwrap();
        let t = cat.load_table(&ident).await.unwrap();
        floe::txn::append(&cat, &t, [Ok(batch(10..20))])
            .await
            .unwrap();
        floe::dml::execute(&cat, "DELETE FROM db.src WHERE id % 4 = 0", None)
            .await
            .unwrap();
        change(RefChange::CreateTag {
            name: "now".into(),
            snapshot: None,
            retention: Retention::default(),
        })
        .await;
        let src = cat.load_table(&ident).await.unwrap();
        let target = parse_ident("db.copy").unwrap();
        let r = floe::txn::clone_table_all_refs(
            &cat,
            &src,
            &floe::scan::SnapshotSelector::Current,
            &target,
        )
        .await
        .unwrap();
        let copy = cat.load_table(&target).await.unwrap();
        // Same refs (but history), same kinds and retention; each reads as its source ref.
        let src_refs = floe::spec::refs(src.metadata());
        let copy_refs = floe::spec::refs(copy.metadata());
        assert_eq!(
            src_refs.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            copy_refs.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        assert_eq!(r.refs.len(), src_refs.len() - 1);
        // "now" and main share one snapshot in the copy, as in the source.
        let at = |refs: &[(String, iceberg::spec::SnapshotReference)], n: &str| {
            refs.iter().find(|(x, _)| x == n).unwrap().1.clone()
        };
        assert_eq!(
            at(&copy_refs, "now").snapshot_id,
            at(&copy_refs, "main").snapshot_id
        );
        let mut checks = Vec::new();
        for (name, sr) in &src_refs {
            let cr = at(&copy_refs, name);
            assert_eq!(cr.is_branch(), sr.is_branch(), "{name}");
            if name != "main" {
                assert_eq!(cr.retention, sr.retention, "{name}");
            }
            let rows = branch_rows(&src, name).await;
            assert_eq!(branch_rows(&copy, name).await, rows, "v{version} {name}");
            let expected = dir.path().join(format!("expected-{name}.parquet"));
            floe_expected(&src, Some(sr.snapshot_id), &expected).await;
            checks.push(json!({
                "name": format!("v{version} clone ref {name}"),
                "metadata": copy.metadata_location(),
                "ref": name,
                "ref_type": if sr.is_branch() { "branch" } else { "tag" },
                "expected": expected.to_string_lossy(),
            }));
        }
        if let Some(py) = peers_python() {
            peer_check_env(&py, dir.path(), &checks, &[]);
        }
        // The copy's branch takes writes of its own.
        let dev = cat.load_write_target("db.copy.branch_dev").await.unwrap();
        floe::txn::append(&cat, &dev, [Ok(batch(200..201))])
            .await
            .unwrap();
        let copy = cat.load_table(&target).await.unwrap();
        assert_eq!(
            branch_rows(&copy, "dev").await.len(),
            branch_rows(&src, "dev").await.len() + 1
        );
        // A clone without --all-refs has main only.
        let r = floe::txn::clone_table(
            &cat,
            &src,
            &floe::scan::SnapshotSelector::Current,
            &parse_ident("db.plain").unwrap(),
            false,
        )
        .await
        .unwrap();
        assert!(r.refs.is_empty());
        let plain = cat
            .load_table(&parse_ident("db.plain").unwrap())
            .await
            .unwrap();
        assert_eq!(floe::spec::refs(plain.metadata()).len(), 1);
    }
}

/// After a schema change a branch reads in the table's current schema (it moves on under it)
/// and a tag in its snapshot's, as Iceberg Java's `SnapshotUtil.schemaFor(table, ref)`
/// resolves them; a snapshot id or a time reads in the snapshot's schema.
#[tokio::test]
async fn a_branch_reads_in_the_current_schema_and_a_tag_in_its_snapshots() {
    let (_d, cat) = sqlite_catalog();
    let ident = parse_ident("db.schemas").unwrap();
    let schema = floe::spec::parse_schema("id long not null, v long").unwrap();
    let t = cat
        .create_table(&ident, floe::TableCreation::new(schema))
        .await
        .unwrap();
    let b = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1, 2])) as _),
        ("v", Arc::new(Int64Array::from(vec![10, 20])) as _),
    ])
    .unwrap();
    let t = floe::txn::append(&cat, &t, [Ok(b)]).await.unwrap().table;
    let snap = t.current_snapshot().unwrap().snapshot_id();
    for change in [
        RefChange::CreateBranch {
            name: "dev".into(),
            snapshot: None,
            retention: Retention::default(),
        },
        RefChange::CreateTag {
            name: "v1".into(),
            snapshot: None,
            retention: Retention::default(),
        },
    ] {
        floe::txn::manage_refs(&cat, &ident, &change).await.unwrap();
    }
    for clause in ["RENAME COLUMN v TO w", "ADD COLUMN x long"] {
        floe::txn::alter_table(
            &cat,
            &ident,
            &floe::spec::parse_alter_clause(clause).unwrap(),
        )
        .await
        .unwrap();
    }
    let t = cat.load_table(&ident).await.unwrap();
    let columns = |sel: SnapshotSelector| {
        let s = Scan::new(&t).snapshot(sel);
        async move {
            let b = s.to_batches().await.unwrap();
            let names: Vec<String> = b[0]
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            names.join(",")
        }
    };
    assert_eq!(columns(SnapshotSelector::Ref("dev".into())).await, "id,w,x");
    assert_eq!(
        columns(SnapshotSelector::Ref("main".into())).await,
        "id,w,x"
    );
    assert_eq!(columns(SnapshotSelector::Current).await, "id,w,x");
    assert_eq!(columns(SnapshotSelector::Ref("v1".into())).await, "id,v");
    assert_eq!(columns(SnapshotSelector::Id(snap)).await, "id,v");
}
