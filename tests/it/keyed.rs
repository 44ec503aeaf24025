//! Keyed tables: a primary key stored as the schema's identifier fields, as Flink, pyiceberg's
//! `upsert` and Spark's `SET IDENTIFIER FIELDS` read it.

use crate::catalog::pyice;
use crate::common::*;

#[test]
fn a_primary_key_is_the_schemas_identifier_fields_for_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.users",
            "--schema",
            "user_id long not null, region string not null, plan string, ver long",
            "--primary-key",
            "region,USER_ID",
            "--format-version",
            "3",
        ],
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "db.users", "--json"])).unwrap();
    assert_eq!(
        v["primary_key"],
        serde_json::json!(["region", "user_id"]),
        "{v}"
    );
    let ids = v["schema"]["identifier-field-ids"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(ids, 2, "{v}");
    assert!(ok(&wh, &["describe", "db.users"]).contains("primary key   region, user_id"));
    // pyiceberg opens the table through the same SQLite catalog and sees the same key.
    let uri = format!("sqlite:///{}", wh.join("catalog.db").display());
    if let Some(listed) = pyice(&["list", &uri, wh.to_str().unwrap()]) {
        let t = &listed["tables"][0];
        assert_eq!(
            t["identifier_fields"],
            serde_json::json!(["region", "user_id"]),
            "{listed}"
        );
    }
}

#[test]
fn bad_primary_keys_are_refused_and_create_nothing() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let schema = "id long not null, opt long, d double not null, tags list<string>";
    for (key, why) in [
        ("opt", "must be required"),
        ("nope", "no such column"),
        ("d", "float and double"),
        ("tags", "primitive"),
        ("id,id", "named twice"),
    ] {
        let o = floe(
            &wh,
            &["create", "db.t", "--schema", schema, "--primary-key", key],
        );
        assert_eq!(o.status.code(), Some(2), "{key}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why) && err.contains("db.t"), "{key}: {err}");
        // Refused before the catalog is opened: not even the catalog file is made.
        assert!(!wh.exists(), "{key}: left {:?}", paths_under(&wh));
    }
}
