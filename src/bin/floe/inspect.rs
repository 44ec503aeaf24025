//! Read-only commands that inspect one table: describe, snapshots, files.

use floe::scan::{Scan, SnapshotSelector};
use floe::Result;
use serde_json::json;

use super::output::{print_json, print_table};
use super::{load, Cli};

/// A table by name, or a metadata file / table directory read without a catalog.
#[derive(clap::Args, Debug)]
pub struct TableRef {
    /// Table name (or use --metadata).
    pub name: Option<String>,
    /// Read a metadata.json or table directory without a catalog.
    #[arg(long)]
    pub metadata: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe snapshots`.
#[derive(clap::Args, Debug)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    pub table: TableRef,
    /// Only the snapshot ids, one per line, oldest first (for scripts: JSON readers such as
    /// jq 1.6 round 64-bit ids).
    #[arg(long, conflicts_with = "json")]
    pub ids: bool,
}

/// Arguments of `floe files`.
#[derive(clap::Args, Debug)]
pub struct FilesArgs {
    #[command(flatten)]
    pub table: TableRef,
    /// Snapshot id (default current).
    #[arg(long)]
    pub snapshot: Option<i64>,
}

/// `floe describe`.
pub async fn describe(cli: &Cli, a: &TableRef) -> Result<()> {
    let t = load(cli, a.name.as_deref(), a.metadata.as_deref()).await?;
    let md = t.metadata();
    let mut key: Vec<&str> = md
        .current_schema()
        .identifier_field_ids()
        .filter_map(|id| md.current_schema().name_by_field_id(id))
        .collect();
    key.sort_unstable();
    // A keyed table's merge rule: its engine, version and delete columns, per-column
    // functions and the columns that keep their states.
    let merge = if key.is_empty() {
        None
    } else {
        floe::spec::keyed::KeyedSpec::of(md, &t.name()).ok()
    };
    let merge_json = merge.as_ref().map(|m| {
        json!({
            "engine": m.engine.name(),
            "version_column": m.version,
            "delete_column": m.delete,
            "functions": m.aggregates.iter().map(|a| json!({
                "column": a.column,
                "function": a.function.name(),
                "input": a.function.input(),
                "default": !a.explicit,
                "state_columns": a.function.state_columns(&a.column).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    });
    let v = json!({
        "table": t.name(),
        "location": md.location(),
        "metadata_location": t.metadata_location(),
        "format_version": md.format_version() as u8,
        "table_uuid": md.uuid().to_string(),
        "schema": md.current_schema().as_ref(),
        "primary_key": key,
        "merge": merge_json,
        "partition_spec": md.default_partition_spec().as_ref(),
        "sort_order": md.default_sort_order().as_ref(),
        "properties": md.properties(),
        "current_snapshot_id": md.current_snapshot_id(),
        "next_row_id": (md.format_version() as u8 >= 3).then(|| md.next_row_id()),
    });
    if a.json {
        print_json(&v);
    } else {
        outln!("table         {}", t.name());
        outln!("location      {}", md.location());
        outln!("metadata      {}", t.metadata_location());
        outln!("format        v{}", md.format_version() as u8);
        outln!("schema        {}", schema_text(md.current_schema()));
        if !key.is_empty() {
            outln!("primary key   {}", key.join(", "));
        }
        if let Some(m) = &merge {
            let mut rule = m.engine.name().to_string();
            if let Some(v) = &m.version {
                rule += &format!(", version column {v}");
            }
            if let Some(d) = &m.delete {
                rule += &format!(", delete column {d}");
            }
            outln!("merge engine  {rule}");
            for a in &m.aggregates {
                let f = match a.function.input() {
                    Some(i) => format!("{}:{i}", a.function.name()),
                    None => a.function.name().to_string(),
                };
                let states: Vec<String> = a
                    .function
                    .state_columns(&a.column)
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect();
                let states = if states.is_empty() {
                    String::new()
                } else {
                    format!(" (state: {})", states.join(", "))
                };
                let default = if a.explicit { "" } else { " (default)" };
                outln!("  {:<15} {f}{default}{states}", a.column);
            }
        }
        let spec = md.default_partition_spec();
        let spec_text: Vec<String> = spec
            .fields()
            .iter()
            .map(|f| {
                format!(
                    "{}={}({})",
                    f.name,
                    f.transform,
                    md.current_schema()
                        .name_by_field_id(f.source_id)
                        .unwrap_or("?")
                )
            })
            .collect();
        outln!(
            "partitioned   {}",
            if spec_text.is_empty() {
                "no".into()
            } else {
                spec_text.join(", ")
            }
        );
        let so = md.default_sort_order();
        let so_text: Vec<String> = so
            .fields
            .iter()
            .map(|f| {
                format!(
                    "{}({}) {} {}",
                    f.transform,
                    md.current_schema()
                        .name_by_field_id(f.source_id)
                        .unwrap_or("?"),
                    f.direction,
                    f.null_order
                )
            })
            .collect();
        outln!(
            "sorted        {}",
            if so_text.is_empty() {
                "no".into()
            } else {
                so_text.join(", ")
            }
        );
        outln!(
            "snapshot      {}",
            md.current_snapshot_id()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "none".into())
        );
        let mut props: Vec<_> = md.properties().iter().collect();
        props.sort();
        for (k, v) in props {
            outln!("property      {k}={v}");
        }
    }
    Ok(())
}

/// `floe snapshots`.
pub async fn snapshots(cli: &Cli, args: &SnapshotsArgs) -> Result<()> {
    let a = &args.table;
    let t = load(cli, a.name.as_deref(), a.metadata.as_deref()).await?;
    let mut snaps: Vec<_> = t.metadata().snapshots().cloned().collect();
    snaps.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
    if args.ids {
        snaps.iter().for_each(|s| outln!("{}", s.snapshot_id()));
    } else if a.json {
        let v: Vec<_> = snaps.iter().map(|s| super::report::snapshot(s)).collect();
        print_json(&json!(v));
    } else {
        // The refs naming each snapshot; `main` is the current snapshot.
        let mut refs: std::collections::HashMap<i64, Vec<String>> = Default::default();
        for (name, r) in floe::spec::refs(t.metadata()) {
            let kind = if r.is_branch() { "" } else { "tag " };
            refs.entry(r.snapshot_id)
                .or_default()
                .push(format!("{kind}{name}"));
        }
        for names in refs.values_mut() {
            names.sort();
        }
        let current = t.metadata().current_snapshot_id();
        let rows: Vec<Vec<String>> = snaps
            .iter()
            .map(|s| {
                let p = &s.summary().additional_properties;
                let mut marks = refs.get(&s.snapshot_id()).cloned().unwrap_or_default();
                if current == Some(s.snapshot_id()) && !marks.iter().any(|m| m == "main") {
                    marks.insert(0, "current".into());
                }
                vec![
                    s.snapshot_id().to_string(),
                    s.sequence_number().to_string(),
                    chrono::DateTime::from_timestamp_millis(s.timestamp_ms())
                        .map(|d| d.to_rfc3339())
                        .unwrap_or_default(),
                    s.summary().operation.as_str().to_string(),
                    p.get("added-records").cloned().unwrap_or_default(),
                    p.get("total-records").cloned().unwrap_or_default(),
                    marks.join(", "),
                ]
            })
            .collect();
        print_table(
            &[
                "snapshot_id",
                "seq",
                "committed_at",
                "operation",
                "added_records",
                "total_records",
                "refs",
            ],
            &rows,
        );
    }
    Ok(())
}

/// `floe files`.
pub async fn files(cli: &Cli, a: &FilesArgs) -> Result<()> {
    let t = load(cli, a.table.name.as_deref(), a.table.metadata.as_deref()).await?;
    let mut scan = Scan::new(&t);
    if let Some(s) = a.snapshot {
        scan = scan.snapshot(SnapshotSelector::Id(s));
    }
    let plan = scan.plan().await?;
    if a.table.json {
        let v: Vec<_> = plan
            .files
            .iter()
            .map(|f| json!({
                "file_path": f.file.file_path(),
                "record_count": f.file.record_count(),
                "file_size_in_bytes": f.file.file_size_in_bytes(),
                "partition": f.spec.partition_to_path(&f.partition, t.metadata().current_schema().clone()),
                "spec_id": f.spec.spec_id(),
                "sequence_number": f.sequence_number,
                "deletes": f.deletes.iter().map(|d| json!({
                    "file_path": d.file.file_path(),
                    "content": match (d.file.content_type(), d.is_dv()) {
                        (floe::spec::DataContentType::EqualityDeletes, _) => "equality",
                        (_, true) => "deletion-vector",
                        _ => "position",
                    },
                    "record_count": d.file.record_count(),
                    "sequence_number": d.sequence_number,
                })).collect::<Vec<_>>(),
            }))
            .collect();
        print_json(&json!(v));
    } else {
        let rows: Vec<Vec<String>> = plan
            .files
            .iter()
            .map(|f| {
                vec![
                    f.file.file_path().to_string(),
                    f.spec
                        .partition_to_path(&f.partition, t.metadata().current_schema().clone()),
                    f.file.record_count().to_string(),
                    f.file.file_size_in_bytes().to_string(),
                    f.deletes.len().to_string(),
                ]
            })
            .collect();
        print_table(
            &["file_path", "partition", "records", "bytes", "delete_files"],
            &rows,
        );
    }
    Ok(())
}

fn schema_text(s: &floe::spec::Schema) -> String {
    s.as_struct()
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{} {}{}",
                f.name,
                f.field_type,
                if f.required { " not null" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
