//! The `--json` documents of the commands that change a table: one vocabulary for all of
//! them (docs/src/reference/json.md; `tests/it/json_keys.rs` checks every key against that list).
//!
//! Keys are snake_case. A count ends in `_count` and names what it counts (`records`, `data_files`,
//! `delete_files`, `bytes`, `manifests`, …) as Iceberg's Spark procedures name their result
//! columns; a duration is `elapsed_ms` (whole milliseconds); the table a command changed is
//! `table`. Values that are Iceberg's own JSON (a schema, a partition spec, a sort order, a
//! snapshot summary, table properties) keep the spec's keys.

use std::time::Instant;

use serde_json::{json, Value};

fn ms(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

fn secs_to_ms(s: f64) -> u64 {
    (s * 1000.0).round() as u64
}

/// `append`.
pub fn append(table: &str, r: &crate::txn::AppendResult, started: Instant) -> Value {
    json!({
        "table": table,
        "snapshot_id": r.snapshot_id,
        "added_records_count": r.added_records,
        "added_data_files_count": r.added_files,
        "added_bytes_count": r.added_bytes,
        "elapsed_ms": ms(started),
    })
}

/// `alter` and `sql "ALTER TABLE …"`: what the commit changed (the CLI adds the new schema,
/// partition spec, sort order and properties).
pub fn alter(table: &str, r: &crate::txn::AlterResult) -> Value {
    json!({
        "table": table,
        "metadata_location": r.table.metadata_location(),
        "format_version": r.table.metadata().format_version() as u8,
        "changes_count": r.changes,
        "attempts_count": r.attempts,
    })
}

/// `delete`, `update`, `merge`, `sql`.
pub fn dml(r: &crate::dml::RowLevelResult, mode: &str, started: Instant) -> Value {
    json!({
        "table": r.table.name(),
        "snapshot_id": r.snapshot_id,
        "mode": mode,
        "deleted_records_count": r.removed_rows,
        "added_records_count": r.written_rows,
        "rewritten_records_count": r.rewritten_rows,
        "removed_data_files_count": r.removed_data_files,
        "added_data_files_count": r.added_data_files,
        "added_delete_files_count": r.added_delete_files,
        "added_bytes_count": r.written_bytes,
        "aligned": r.aligned.as_ref().map(|a| json!({
            "source_partitions_count": a.source_partitions,
            "read_partitions_count": a.target_partitions_read,
            "spilled_bytes_count": a.spilled_bytes,
        })),
        "merged": r.merged.as_ref().map(|m| json!({
            "updated_records_count": m.updated,
            "deleted_records_count": m.deleted,
            "inserted_records_count": m.inserted,
        })),
        "elapsed_ms": ms(started),
    })
}

/// `rewrite-data-files` (Spark's `rewrite_data_files` result columns).
pub fn rewrite_data_files(
    table: &str,
    r: &crate::maintenance::RewriteResult,
    started: Instant,
) -> Value {
    let mut v = json!({
        "table": table,
        "snapshot_id": r.snapshot_id,
        "rewritten_data_files_count": r.rewritten_data_files_count,
        "added_data_files_count": r.added_data_files_count,
        "rewritten_bytes_count": r.rewritten_bytes_count,
        "failed_data_files_count": r.failed_data_files_count,
        "removed_delete_files_count": r.removed_delete_files_count,
        "file_groups_count": r.file_groups,
        "elapsed_ms": ms(started),
    });
    if let (Some(reason), Some(m)) = (&r.reason, v.as_object_mut()) {
        m.insert("reason".into(), json!(reason));
    }
    v
}

/// `rewrite-position-delete-files` (Spark's `rewrite_position_delete_files` columns).
pub fn rewrite_position_delete_files(
    table: &str,
    r: &crate::maintenance::RewriteDeletesResult,
    started: Instant,
) -> Value {
    json!({
        "table": table,
        "snapshot_id": r.snapshot_id,
        "rewritten_delete_files_count": r.rewritten_delete_files_count,
        "added_delete_files_count": r.added_delete_files_count,
        "rewritten_bytes_count": r.rewritten_bytes_count,
        "added_bytes_count": r.added_bytes_count,
        "elapsed_ms": ms(started),
    })
}

/// `rewrite-manifests` (Spark's `rewrite_manifests` columns).
pub fn rewrite_manifests(
    table: &str,
    r: &crate::maintenance::RewriteManifestsResult,
    started: Instant,
) -> Value {
    json!({
        "table": table,
        "snapshot_id": r.snapshot_id,
        "rewritten_manifests_count": r.rewritten_manifests_count,
        "added_manifests_count": r.added_manifests_count,
        "elapsed_ms": ms(started),
    })
}

/// `expire-snapshots` (Spark's `expire_snapshots` columns, position and equality delete
/// files counted together).
pub fn expire_snapshots(
    table: &str,
    r: &crate::maintenance::ExpireResult,
    dry_run: bool,
    started: Instant,
) -> Value {
    json!({
        "table": table,
        "dry_run": dry_run,
        "expired_snapshot_ids": r.expired_snapshot_ids,
        "deleted_data_files_count": r.deleted_data_files_count,
        "deleted_delete_files_count": r.deleted_delete_files_count,
        "deleted_manifest_files_count": r.deleted_manifest_files_count,
        "deleted_manifest_lists_count": r.deleted_manifest_lists_count,
        "deleted_tombstone_files_count": r.deleted_tombstone_files_count,
        "metadata_location": r.metadata_location,
        "cleanup_error": r.cleanup_error,
        "elapsed_ms": ms(started),
    })
}

/// `remove-orphan-files` (Spark's `orphan_file_location` column, as a list).
pub fn remove_orphan_files(
    table: &str,
    r: &crate::maintenance::OrphanResult,
    started: Instant,
) -> Value {
    json!({
        "table": table,
        "dry_run": !r.deleted,
        "orphan_file_locations": r.orphan_file_locations,
        "orphan_files_count": r.orphan_file_locations.len(),
        "elapsed_ms": ms(started),
    })
}

/// `clone`, and the publish of `ingest-snapshot`.
pub fn clone(source: &str, r: &crate::txn::CloneResult, elapsed_ms: u64) -> Value {
    json!({
        "table": r.target,
        "source": source,
        "snapshot_id": r.snapshot_id,
        "source_snapshot_id": r.source_snapshot_id,
        "replaced": r.replaced,
        "data_files_count": r.data_files,
        "copied_manifests_count": r.copied_manifests,
        "reused_manifests_count": r.reused_manifests,
        "refs": r.refs,
        "elapsed_ms": elapsed_ms,
    })
}

/// `ingest-snapshot`.
pub fn ingest_snapshot(staging: &str, r: &crate::ingest::IngestResult, started: Instant) -> Value {
    let c = &r.changes;
    json!({
        "table": staging,
        "snapshot_id": r.staging_snapshots.last(),
        "staging_snapshot_ids": r.staging_snapshots,
        "strategy": r.strategy.to_string(),
        "mode": r.mode.to_string(),
        "snapshot_records_count": r.snapshot_rows,
        "partitions_count": r.partitions,
        "unchanged_records_count": c.unchanged,
        "updated_records_count": c.updated,
        "inserted_records_count": c.inserted,
        "stale_records_count": c.stale,
        "duplicate_records_count": c.duplicates,
        "merged_partitions_count": c.merged_partitions,
        "hashed_partitions_count": c.hashed_partitions,
        "added_records_count": r.written_rows,
        "added_bytes_count": r.written_bytes,
        "added_data_files_count": r.added_data_files,
        "added_delete_files_count": r.added_delete_files,
        "removed_data_files_count": r.removed_data_files,
        "expired_data_files_count": r.expired_data_files,
        "published": r.published.as_ref().map(|p| {
            clone(staging, p, secs_to_ms(r.publish_seconds))
        }),
        "ingest_elapsed_ms": secs_to_ms(r.ingest_seconds),
        "elapsed_ms": ms(started),
    })
}

/// `drop`.
pub fn drop(table: &str, purged: bool, r: &crate::maintenance::DropResult) -> Value {
    json!({
        "table": table,
        "purged": purged,
        "deleted_files_count": r.deleted_files,
        "kept_shared_files_count": r.kept_shared_files,
    })
}

/// `upsert`.
pub fn upsert(
    name: &str,
    sink_id: &Option<String>,
    checkpoint: Option<i64>,
    r: &crate::keyed::UpsertResult,
    started: Instant,
) -> Value {
    json!({
        "table": name,
        "snapshot_id": r.snapshot_id,
        "sink_id": sink_id,
        "checkpoint": checkpoint,
        "committed_checkpoint": r.committed_checkpoint,
        "already_committed": r.already_committed,
        "input_records_count": r.input_rows,
        "keys_count": r.keys,
        "inserted_records_count": r.inserted,
        "updated_records_count": r.updated,
        "deleted_records_count": r.deleted,
        "deleted_absent_keys_count": r.deleted_absent,
        "stale_records_count": r.ignored,
        "tombstone_records_count": r.tombstone_records,
        "added_data_files_count": r.added_data_files,
        "added_delete_files_count": r.added_delete_files,
        "added_bytes_count": r.written_bytes,
        "added_columns": r.added_columns,
        "attempts_count": r.attempts,
        "lookup": r.lookup,
        "parts_count": r.parts,
        "elapsed_ms": started.elapsed().as_millis() as u64,
    })
}

/// One row of `snapshots --json`.
pub fn snapshot(s: &crate::spec::Snapshot) -> Value {
    json!({
        "snapshot_id": s.snapshot_id(),
        "parent_snapshot_id": s.parent_snapshot_id(),
        "sequence_number": s.sequence_number(),
        "timestamp_ms": s.timestamp_ms(),
        "operation": s.summary().operation.as_str(),
        "summary": s.summary().additional_properties,
        "manifest_list": s.manifest_list(),
        "first_row_id": s.first_row_id(),
        "added_rows": s.added_rows_count(),
    })
}
