//! Catalog-level commands: create, register, rename and drop tables; list namespaces and tables.

use std::collections::HashMap;

use floe::catalog::TableCreation;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::{ident_name, parse_ident};
use floe::{Error, ErrorKind, Result};
use serde_json::json;

use super::output::print_json;
use super::{catalog, catalog_creating, input, kv, report, Cli};

/// Create a table.
#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Table name (ns.table).
    pub name: String,
    /// Schema DDL, e.g. 'id long, name string, ts timestamptz'.
    #[arg(long, required_unless_present = "schema_from")]
    pub schema: Option<String>,
    /// Take the schema from a file instead: a Parquet file's own, or inferred from CSV
    /// (.csv, .tsv) or JSON lines (.json, .jsonl, .ndjson); see it first with --dry-run.
    #[arg(long, conflicts_with = "schema")]
    pub schema_from: Option<String>,
    /// Print the schema as DDL (for --schema / --schema-from) and create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Partition spec, e.g. 'day(ts), bucket(16,id)'.
    #[arg(long)]
    pub partition_by: Option<String>,
    /// Sort order, e.g. 'id desc nulls last'.
    #[arg(long)]
    pub sort_by: Option<String>,
    /// Table property k=v (repeatable).
    #[arg(long = "property", value_parser = kv)]
    pub properties: Vec<(String, String)>,
    /// Format version (1, 2 or 3).
    #[arg(long, default_value_t = 2)]
    pub format_version: u8,
    /// Explicit table location.
    #[arg(long)]
    pub location: Option<String>,
    /// Primary key columns (comma-separated; each `not null`), stored as the schema's
    /// identifier fields.
    #[arg(long, value_delimiter = ',', value_parser = crate::item)]
    pub primary_key: Vec<String>,
    /// Store --property keys under write., commit., history. or floe. that neither
    /// Iceberg nor floe defines (by default a typo there is refused).
    #[arg(long)]
    pub allow_unknown_properties: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// List, create or drop namespaces.
#[derive(clap::Args, Debug)]
pub struct NamespacesArgs {
    /// Create this namespace.
    #[arg(long)]
    pub create: Option<String>,
    /// Drop this (empty) namespace.
    #[arg(long)]
    pub drop: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// List tables (of one namespace or all).
#[derive(clap::Args, Debug)]
pub struct TablesArgs {
    /// Namespace.
    pub namespace: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// Rename a table.
#[derive(clap::Args, Debug)]
pub struct RenameArgs {
    /// Current name.
    pub from: String,
    /// New name.
    pub to: String,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// Drop a table (with --purge, delete its files too).
#[derive(clap::Args, Debug)]
pub struct DropArgs {
    /// Table name.
    pub name: String,
    /// Delete data and metadata files.
    #[arg(long)]
    pub purge: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// Register an existing metadata file as a table.
#[derive(clap::Args, Debug)]
pub struct RegisterArgs {
    /// Table name.
    pub name: String,
    /// Metadata file location.
    pub metadata: String,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `floe create`.
pub async fn create(cli: &Cli, a: &CreateArgs) -> Result<()> {
    let CreateArgs {
        name,
        schema,
        schema_from,
        partition_by,
        sort_by,
        properties,
        format_version,
        location,
        primary_key,
        allow_unknown_properties,
        dry_run,
        json,
    } = a;
    let ident = parse_ident(name)?;
    let schema = match (schema, schema_from) {
        (Some(ddl), _) => parse_schema(ddl)?,
        (None, Some(file)) => floe::spec::schema_from_arrow(input::infer_schema(file)?.as_ref())
            .map_err(|e| e.context(format!("the schema of '{file}'")))?,
        (None, None) => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "give --schema DDL or --schema-from FILE (.parquet, .csv, .tsv, .jsonl)",
            ))
        }
    };
    let mut c = TableCreation::new(schema.clone());
    if let Some(p) = partition_by {
        c.partition_spec = parse_partition_spec(p, &schema)?;
    }
    if let Some(s) = sort_by {
        c.sort_order = Some(parse_sort_order(s, &schema)?);
    }
    c.properties = properties.iter().cloned().collect::<HashMap<_, _>>();
    c.format_version = match format_version {
        1 => FormatVersion::V1,
        2 => FormatVersion::V2,
        3 => FormatVersion::V3,
        v => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("--format-version {v}: expected 1, 2 or 3"),
            ))
        }
    };
    c.location = location.clone();
    c.allow_unknown_properties = *allow_unknown_properties;
    // Refused before the catalog is opened, so bad input creates nothing.
    if !primary_key.is_empty() {
        if schema_from.is_some() {
            c.schema = required_columns(c.schema, primary_key)?;
        }
        c.schema = floe::spec::with_primary_key(c.schema, primary_key)
            .map_err(|e| e.context(format!("creating {name}")))?;
    }
    if !c.allow_unknown_properties {
        floe::spec::check_property_keys(&c.properties)
            .map_err(|e| e.with_hint("pass --allow-unknown-properties to store it anyway"))?;
    }
    if *dry_run {
        let ddl = floe::spec::schema_ddl(&c.schema);
        if *json {
            print_json(&json!({"table": ident_name(&ident), "schema": ddl, "dry_run": true}));
        } else {
            outln!("{ddl}");
            outln!(
                "(dry run: nothing created; pass this to --schema, edited as you like, or drop \
                 --dry-run)"
            );
        }
        return Ok(());
    }
    let cat = catalog_creating(cli)?;
    let t = cat.create_table(&ident, c).await?;
    let relocated = location.is_none() && t.metadata().location() != cat.default_location(&ident);
    if *json {
        print_json(&json!({
            "table": ident_name(&ident),
            "location": t.metadata().location(),
            "metadata_location": t.metadata_location(),
            "format_version": t.metadata().format_version() as u8,
            "relocated": relocated,
        }));
        return Ok(());
    }
    outln!(
        "created {} at {}",
        ident_name(&ident),
        t.metadata().location()
    );
    if relocated {
        outln!(
            "  (its default location {} holds another table's files)",
            cat.default_location(&ident)
        );
    }
    Ok(())
}

/// A file's schema with its top-level `columns` made `not null`: a key taken from a file
/// (whose columns are nullable whether or not they hold a null) is required.
fn required_columns(schema: floe::spec::Schema, columns: &[String]) -> Result<floe::spec::Schema> {
    let fields: Vec<_> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            if columns.iter().any(|c| c == &f.name) {
                let mut k = f.as_ref().clone();
                k.required = true;
                std::sync::Arc::new(k)
            } else {
                f.clone()
            }
        })
        .collect();
    floe::spec::Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("primary key columns: {e}")))
}

/// `floe namespaces`.
pub async fn namespaces(cli: &Cli, a: &NamespacesArgs) -> Result<()> {
    let NamespacesArgs { create, drop, json } = a;
    let cat = match create {
        Some(_) => catalog_creating(cli)?,
        None => catalog(cli)?,
    };
    if let Some(ns) = create {
        let exists = cat.list_namespaces().await?.iter().any(|n| n == ns);
        if !exists {
            cat.create_namespace(ns, &[]).await?;
        }
        if *json {
            print_json(&json!({"namespace": ns, "created": !exists}));
        } else if exists {
            outln!("namespace {ns} already exists (nothing changed)");
        } else {
            outln!("created namespace {ns}");
        }
    }
    if let Some(ns) = drop {
        cat.drop_namespace(ns).await?;
        if *json {
            print_json(&json!({"namespace": ns, "dropped": true}));
        } else {
            outln!("dropped namespace {ns}");
        }
    }
    if create.is_none() && drop.is_none() {
        let ns = cat.list_namespaces().await?;
        if *json {
            print_json(&json!(ns))
        } else {
            ns.iter().for_each(|n| outln!("{n}"))
        }
    }
    Ok(())
}

/// `floe tables`.
pub async fn tables(cli: &Cli, a: &TablesArgs) -> Result<()> {
    let TablesArgs { namespace, json } = a;
    let cat = catalog(cli)?;
    let nss = match namespace {
        Some(n) => vec![n.clone()],
        None => cat.list_namespaces().await?,
    };
    let mut names = Vec::new();
    for ns in nss {
        for t in cat.list_tables(&ns).await? {
            names.push(ident_name(&t));
        }
    }
    if *json {
        print_json(&json!(names))
    } else {
        names.iter().for_each(|n| outln!("{n}"))
    }
    Ok(())
}

/// `floe rename`.
pub async fn rename(cli: &Cli, a: &RenameArgs) -> Result<()> {
    let RenameArgs { from, to, json } = a;
    catalog(cli)?
        .rename_table(&parse_ident(from)?, &parse_ident(to)?)
        .await?;
    if *json {
        print_json(&json!({"from": from, "to": to}));
    } else {
        outln!("renamed {from} to {to}");
    }
    Ok(())
}

/// `floe drop`.
pub async fn drop(cli: &Cli, a: &DropArgs) -> Result<()> {
    let DropArgs { name, purge, json } = a;
    let r = floe::maintenance::drop_table(&catalog(cli)?, &parse_ident(name)?, *purge).await?;
    if *json {
        print_json(&report::drop(name, *purge, &r));
    } else if *purge {
        let kept = match r.kept_shared_files {
            0 => String::new(),
            n => format!(", {n} kept (another table still references them)"),
        };
        outln!("dropped {name}: {} files deleted{kept}", r.deleted_files);
    } else {
        outln!("dropped {name} (files kept; --purge deletes them)");
    }
    Ok(())
}

/// `floe register`.
pub async fn register(cli: &Cli, a: &RegisterArgs) -> Result<()> {
    let RegisterArgs {
        name,
        metadata,
        json,
    } = a;
    let t = catalog_creating(cli)?
        .register_table(&parse_ident(name)?, metadata)
        .await?;
    if *json {
        print_json(&json!({"table": t.name(), "metadata_location": t.metadata_location()}));
        return Ok(());
    }
    outln!("registered {} at {}", t.name(), t.metadata_location());
    Ok(())
}
