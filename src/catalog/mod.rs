//! Catalogs: where each table's current-metadata pointer lives, swapped atomically.
//!
//! * SQLite (the embedded default): pyiceberg `SqlCatalog` / Java `JdbcCatalog` schema.
//! * PostgreSQL: the same SQL catalog in a shared database, for writers on many machines.
//! * Iceberg REST: the server keeps the pointer and writes metadata; commits are sent as
//!   requirements + updates.
//! * Filesystem (Hadoop layout): `metadata/vN.metadata.json` created with a create-only put,
//!   plus `metadata/version-hint.text`.

mod fs;
mod rest;
mod sql;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use iceberg::spec::{TableMetadataBuilder, UnboundPartitionSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::spec::{FormatVersion, Schema, SortOrder, TableIdent, TableMetadata};
use crate::storage::{self, Storage};
use crate::table::{check_ident, check_namespace, ident_name, read_metadata, Table};

static COMMITS_IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Catalog commits (pointer swaps) under way in this process. A program stopping on a
/// signal can let them end first: a swap cut off may or may not have landed.
pub fn commits_in_flight() -> usize {
    COMMITS_IN_FLIGHT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Counts one commit under way while it lives.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        COMMITS_IN_FLIGHT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        COMMITS_IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The outcome of one attempt to swap a table's metadata pointer.
#[derive(Debug)]
pub enum CommitOutcome {
    /// The new metadata is current; here is the table at that version.
    Committed(Table),
    /// Another writer moved the pointer first; nothing changed. Reload, re-validate, retry.
    Conflict(String),
    /// The swap definitely did not happen and nothing changed, for a reason other than a
    /// conflict: the new metadata file could not be written (disk full, permission denied),
    /// the catalog refused the update (a read-only database), or a REST catalog answered a
    /// 4xx other than 409. Retrying the same commit will fail the same way until the cause
    /// is fixed.
    Failed(Error),
    /// The swap may or may not have happened (for example the catalog became unreachable
    /// after the update was sent).
    Unknown(Error),
}

/// What a new table looks like.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TableCreation {
    /// Schema (field ids are reassigned).
    pub schema: Schema,
    /// Partition spec (unpartitioned when empty).
    pub partition_spec: UnboundPartitionSpec,
    /// Sort order (unsorted when `None`).
    pub sort_order: Option<SortOrder>,
    /// Table properties (`format-version` here is honoured and removed).
    pub properties: HashMap<String, String>,
    /// Format version (2 by default).
    pub format_version: FormatVersion,
    /// Explicit location; default `<warehouse>/<namespace…>/<table>`.
    pub location: Option<String>,
    /// Store property keys under `write.`, `commit.`, `history.` and `floe.` that neither
    /// Iceberg nor floe defines (refused by default: [`crate::spec::check_property_keys`]).
    pub allow_unknown_properties: bool,
    /// Primary key columns, stored as the schema's `identifier-field-ids`
    /// ([`crate::spec::with_primary_key`]); none by default.
    pub primary_key: Vec<String>,
}

impl TableCreation {
    /// A v2, unpartitioned, unsorted table of `schema`.
    pub fn new(schema: Schema) -> Self {
        Self {
            schema,
            partition_spec: UnboundPartitionSpec::builder().build(),
            sort_order: None,
            properties: HashMap::new(),
            format_version: FormatVersion::V2,
            location: None,
            allow_unknown_properties: false,
            primary_key: Vec::new(),
        }
    }

    /// These primary key columns (required, primitive; see [`crate::spec::with_primary_key`]).
    /// A table created with a single-column key (these, or the schema's identifier fields)
    /// also gets a Parquet bloom filter on it (`write.parquet.bloom-filter-enabled.column.<key>`)
    /// unless the properties say otherwise.
    pub fn with_primary_key(
        mut self,
        columns: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.primary_key = columns.into_iter().map(Into::into).collect();
        self
    }

    /// This format version.
    pub fn with_format_version(mut self, v: FormatVersion) -> Self {
        self.format_version = v;
        self
    }

    /// This partition spec.
    pub fn with_partition_spec(mut self, spec: UnboundPartitionSpec) -> Self {
        self.partition_spec = spec;
        self
    }

    /// This sort order.
    pub fn with_sort_order(mut self, order: SortOrder) -> Self {
        self.sort_order = Some(order);
        self
    }

    /// One more table property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// This location instead of the warehouse's default.
    pub fn with_location(mut self, location: impl Into<String>) -> Self {
        self.location = Some(location.into());
        self
    }
}

#[derive(Debug, Clone)]
enum Backend {
    Sql(sql::SqlBackend),
    Rest(rest::RestBackend),
    Fs,
}

/// A catalog: SQLite (default), PostgreSQL, Iceberg REST or filesystem.
#[derive(Debug, Clone)]
pub struct Catalog {
    name: String,
    warehouse: String,
    storage: Storage,
    backend: Backend,
}

fn ns_string(ident: &TableIdent) -> String {
    ident
        .namespace()
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join(".")
}

/// An absolute, lexically normalised path (`.` and `..` resolved): object-store keys and
/// the locations peers read must not contain them.
fn abs(path: &str) -> Result<PathBuf> {
    use std::path::Component;
    let p = PathBuf::from(path);
    let p = if p.is_absolute() {
        p
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("current directory").with_source(e))?
            .join(p)
    };
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

impl Catalog {
    /// Opens a catalog from a URI:
    /// `sqlite:////abs/catalog.db` (SQLAlchemy form, as pyiceberg writes it), `sqlite:/abs.db`
    /// or `sqlite:rel.db` (SQLite), `postgresql://user[:password]@host:port/database` (also
    /// `postgres://` and SQLAlchemy's `postgresql+psycopg2://`; PostgreSQL, contacted on first
    /// use), `rest+http://[id:secret@]host:port[/path]` or `rest+https://…` (Iceberg REST;
    /// the warehouse, e.g. `s3://bucket`, is sent to the server's `/v1/config`),
    /// `file:///dir` or `fs:dir` (filesystem catalog rooted at the warehouse). `None`
    /// means SQLite at `<warehouse>/catalog.db`. The warehouse defaults to `./warehouse`
    /// (SQLite: the directory of the database file when a URI is given); the catalog name
    /// defaults to `default`. A SQL catalog may keep its tables in an S3 warehouse
    /// (`s3://bucket/path`), reached as [`storage::S3Options::from_env`] describes.
    ///
    /// # Example
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// # use std::sync::Arc;
    /// # use arrow_array::{Int64Array, RecordBatch};
    /// # let dir = tempfile::tempdir()?;
    /// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
    /// # let ident = floe::table::parse_ident("db.t")?;
    /// # let schema = floe::spec::parse_schema("id long, v long")?;
    /// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
    /// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
    /// #     ("id", Arc::new(Int64Array::from_iter_values(r.clone())) as _),
    /// #     ("v", Arc::new(Int64Array::from_iter_values(r)) as _),
    /// # ])?) };
    /// // SQLite at <warehouse>/catalog.db, the schema pyiceberg's SqlCatalog uses.
    /// let cat = floe::Catalog::open(None, dir.path().join("warehouse").to_str(), None)?;
    /// assert!(cat.list_namespaces().await?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn open(uri: Option<&str>, warehouse: Option<&str>, name: Option<&str>) -> Result<Catalog> {
        Self::open_with_storage(uri, warehouse, name, Storage::new())
    }

    /// [`Catalog::open`] with the given storage (for example S3 settings not taken from the
    /// environment).
    pub fn open_with_storage(
        uri: Option<&str>,
        warehouse: Option<&str>,
        name: Option<&str>,
        storage: Storage,
    ) -> Result<Catalog> {
        Self::open_inner(uri, warehouse, name, storage, true)
    }

    /// [`Catalog::open`] for reading: creates no catalog database, directory or file. A
    /// SQLite catalog or filesystem warehouse that does not exist is a not-found error naming
    /// the path floe looked at.
    pub fn open_existing(
        uri: Option<&str>,
        warehouse: Option<&str>,
        name: Option<&str>,
    ) -> Result<Catalog> {
        Self::open_inner(uri, warehouse, name, Storage::new(), false)
    }

    fn open_inner(
        uri: Option<&str>,
        warehouse: Option<&str>,
        name: Option<&str>,
        storage: Storage,
        create: bool,
    ) -> Result<Catalog> {
        let sqlite = |db: PathBuf, name: String, wh: &Path| {
            if create {
                sql::SqlBackend::open(db, name)
            } else {
                sql::SqlBackend::open_existing(db, name, wh)
            }
        };
        let name = name.unwrap_or("default").to_string();
        if let Some(u) = uri.filter(|u| rest::is_rest_uri(u)) {
            let backend = rest::RestBackend::new(u, warehouse)?;
            return Ok(Catalog {
                name,
                warehouse: warehouse
                    .unwrap_or_default()
                    .trim_end_matches('/')
                    .to_string(),
                storage,
                backend: Backend::Rest(backend),
            });
        }
        if let Some(w) = warehouse {
            storage::check_store("warehouse", w)?;
        }
        if let Some(w) = warehouse.filter(|w| storage::s3_parts(w).is_some()) {
            return Self::open_remote(uri, w, name, storage, create);
        }
        let (backend, wh) = match uri {
            None => {
                let wh = abs(warehouse.unwrap_or("warehouse"))?;
                (Backend::Sql(sqlite(wh.join("catalog.db"), name.clone(), &wh)?), wh)
            }
            Some(u) if sql::is_postgres_uri(u) => {
                let target = sql::PgTarget::parse(u)?;
                let w = warehouse.unwrap_or("warehouse");
                let wh = abs(storage::local_path(w).unwrap_or(w))?;
                (Backend::Sql(sql::SqlBackend::postgres(target, name.clone())), wh)
            }
            Some(u) if u.starts_with("sqlite:") || u.ends_with(".db") => {
                let db = abs(sqlite_path(u))?;
                let wh = match warehouse {
                    Some(w) => abs(w)?,
                    None => db.parent().map(|p| p.to_path_buf()).unwrap_or_else(|| PathBuf::from("/")),
                };
                let backend = sqlite(db, name.clone(), &wh).map_err(|e| relative_hint(e, u))?;
                (Backend::Sql(backend), wh)
            }
            Some(u) if u.starts_with("file:") || u.starts_with("fs:") || u.starts_with('/') => {
                let p = u.strip_prefix("fs:").unwrap_or(u);
                storage::check_store("filesystem catalog warehouse", p)?;
                let p = storage::local_path(p).map(str::to_string).unwrap_or_else(|| p.to_string());
                let wh = abs(&p)?;
                if !create && !wh.is_dir() {
                    return Err(Error::not_found(format!(
                        "no filesystem catalog at {} (from catalog URI '{u}'): the directory \
                         does not exist",
                        wh.display()
                    )));
                }
                (Backend::Fs, wh)
            }
            Some(u) => {
                return Err(Error::unsupported(format!(
                    "catalog URI '{u}' is not supported yet; use sqlite:////abs/path/catalog.db (four slashes: absolute), sqlite:rel/catalog.db, postgresql://user@host:port/database or file:///warehouse"
                )))
            }
        };
        if create {
            std::fs::create_dir_all(&wh).map_err(|e| {
                Error::io(format!("creating warehouse {}", wh.display())).with_source(e)
            })?;
        }
        Ok(Catalog {
            name,
            warehouse: storage::to_uri(&wh),
            storage,
            backend,
        })
    }

    /// A SQL catalog whose warehouse is on S3 (the catalog database stays local).
    fn open_remote(
        uri: Option<&str>,
        warehouse: &str,
        name: String,
        storage: Storage,
        create: bool,
    ) -> Result<Catalog> {
        let Some((bucket, _)) = storage::s3_parts(warehouse).filter(|(b, _)| !b.is_empty()) else {
            return Err(Error::invalid(format!(
                "warehouse '{warehouse}' names no bucket; write s3://bucket/path"
            )));
        };
        storage
            .s3_options()
            .map_err(|e| e.context(format!("warehouse '{warehouse}'")))?;
        let backend = match uri {
            Some(u) if sql::is_postgres_uri(u) => {
                Backend::Sql(sql::SqlBackend::postgres(sql::PgTarget::parse(u)?, name.clone()))
            }
            Some(u) if u.starts_with("sqlite:") || u.ends_with(".db") => {
                let db = abs(sqlite_path(u))?;
                Backend::Sql(if create {
                    sql::SqlBackend::open(db, name.clone())?
                } else {
                    sql::SqlBackend::open_existing(db, name.clone(), Path::new(warehouse))?
                })
            }
            None => {
                return Err(Error::invalid(format!(
                    "warehouse '{warehouse}' is on S3 (bucket '{bucket}'), so the catalog cannot \
                     live inside it: give a catalog URI, e.g. sqlite:////abs/path/catalog.db"
                )))
            }
            Some(u) => {
                return Err(Error::unsupported(format!(
                    "catalog '{u}' cannot keep tables in the S3 warehouse '{warehouse}': the \
                     filesystem (Hadoop) catalog is local-only; use a SQL catalog (sqlite:////abs/path/catalog.db \
                     or postgresql://…)"
                )))
            }
        };
        Ok(Catalog {
            name,
            warehouse: warehouse.trim_end_matches('/').to_string(),
            storage,
            backend,
        })
    }

    /// Catalog name (`catalog_name` column of the SQL catalog).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Warehouse URI (`file:///…` or `s3://bucket/…`).
    pub fn warehouse(&self) -> &str {
        &self.warehouse
    }
    /// Storage of this catalog's tables.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Where a new table lives unless told otherwise: `<warehouse>/<namespace…>/<table>`.
    pub fn default_location(&self, ident: &TableIdent) -> String {
        let mut loc = self.warehouse.clone();
        for part in ident.namespace().iter() {
            loc = storage::join(&loc, part);
        }
        storage::join(&loc, ident.name())
    }

    /// Namespaces (dotted).
    pub async fn list_namespaces(&self) -> Result<Vec<String>> {
        match &self.backend {
            Backend::Sql(b) => {
                let b = b.clone();
                blocking(move || b.namespaces()).await
            }
            Backend::Rest(r) => r.namespaces().await,
            Backend::Fs => fs::namespaces(&self.storage, &self.warehouse).await,
        }
    }

    /// Creates namespace `ns` when it is missing (tables are created into it).
    async fn ensure_namespace(&self, ns: &str) -> Result<()> {
        if !self.list_namespaces().await?.iter().any(|n| n == ns) {
            self.create_namespace(ns, &[]).await?;
        }
        Ok(())
    }

    /// Creates a namespace (no error if it exists).
    pub async fn create_namespace(&self, ns: &str, props: &[(String, String)]) -> Result<()> {
        check_namespace(ns)?;
        match &self.backend {
            Backend::Sql(b) => {
                let (b, ns, props) = (b.clone(), ns.to_string(), props.to_vec());
                blocking(move || b.create_namespace(&ns, &props)).await
            }
            Backend::Rest(r) => r.create_namespace(ns, props).await,
            Backend::Fs => fs::create_namespace(&self.warehouse, ns),
        }
    }

    /// Drops an empty namespace.
    pub async fn drop_namespace(&self, ns: &str) -> Result<()> {
        if !self.list_namespaces().await?.iter().any(|n| n == ns) {
            return Err(Error::not_found(format!("namespace '{ns}' does not exist")));
        }
        match &self.backend {
            Backend::Sql(b) => {
                let (b, ns) = (b.clone(), ns.to_string());
                blocking(move || b.drop_namespace(&ns)).await
            }
            Backend::Rest(r) => r.drop_namespace(ns).await,
            Backend::Fs => {
                if !self.list_tables(ns).await?.is_empty() {
                    return Err(Error::invalid(format!(
                        "namespace '{ns}' is not empty: drop its tables first"
                    )));
                }
                fs::drop_namespace(&self.warehouse, ns)
            }
        }
    }

    /// Tables of a namespace.
    pub async fn list_tables(&self, ns: &str) -> Result<Vec<TableIdent>> {
        let names = match &self.backend {
            Backend::Sql(b) => {
                let (b, n) = (b.clone(), ns.to_string());
                blocking(move || b.tables(&n)).await?
            }
            Backend::Rest(r) => r.tables(ns).await?,
            Backend::Fs => fs::tables(&self.storage, &self.warehouse, ns).await?,
        };
        names
            .into_iter()
            .map(|t| {
                let mut parts: Vec<String> = ns.split('.').map(str::to_string).collect();
                parts.push(t);
                TableIdent::from_strs(parts).map_err(Error::from)
            })
            .collect()
    }

    async fn pointer(&self, ident: &TableIdent) -> Result<Option<String>> {
        match &self.backend {
            Backend::Sql(b) => {
                let (b, ns, n) = (b.clone(), ns_string(ident), ident.name().to_string());
                blocking(move || b.pointer(&ns, &n)).await
            }
            Backend::Rest(r) => Ok(r.load(ident).await?.map(|(loc, _)| loc)),
            Backend::Fs => fs::pointer(&self.storage, &self.default_location(ident)).await,
        }
    }

    /// Loads the table `name` names, or (Spark's form) a branch of one:
    /// `ns.table.branch_dev` is branch `dev` of `ns.table` when no table of that name exists.
    pub async fn load_write_target(&self, name: &str) -> Result<Table> {
        let ident = crate::table::parse_ident(name)?;
        match self.load_table(&ident).await {
            Err(e) if e.kind() == crate::ErrorKind::NotFound => {
                let Some((parent, branch)) = name
                    .rsplit_once('.')
                    .and_then(|(p, last)| Some((p, last.strip_prefix("branch_")?)))
                    .filter(|(p, _)| p.contains('.'))
                else {
                    return Err(e);
                };
                let table = self
                    .load_table(&crate::table::parse_ident(parent)?)
                    .await
                    .map_err(|_| e)?;
                table.on_branch(branch)
            }
            r => r,
        }
    }

    /// Loads a table's current metadata.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        if let Backend::Rest(r) = &self.backend {
            let (loc, md) = r.load(ident).await?.ok_or_else(|| self.no_table(ident))?;
            return Ok(Table::new(ident.clone(), md, loc, self.storage.clone()));
        }
        let loc = self
            .pointer(ident)
            .await?
            .ok_or_else(|| self.no_table(ident))?;
        let md = read_metadata(&self.storage, &loc)
            .await
            .map_err(|e| e.context(format!("table {}", ident_name(ident))))?;
        Ok(Table::new(ident.clone(), md, loc, self.storage.clone()))
    }

    fn no_table(&self, ident: &TableIdent) -> Error {
        Error::not_found(format!(
            "table {} does not exist in catalog '{}' ({}, warehouse {})",
            ident_name(ident),
            self.name,
            self.describe(),
            self.warehouse
        ))
    }

    /// Where the catalog lives, for messages (`sqlite catalog /wh/catalog.db`).
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sql(b) => b.describe(),
            Backend::Rest(r) => format!("REST catalog {}", r.uri()),
            Backend::Fs => format!("filesystem catalog {}", self.warehouse),
        }
    }

    /// Whether a table exists.
    pub async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.pointer(ident).await?.is_some())
    }

    /// Creates a table (and its namespace when missing).
    pub async fn create_table(&self, ident: &TableIdent, creation: TableCreation) -> Result<Table> {
        check_ident(ident)?;
        let name = ident_name(ident);
        let mut creation = creation;
        if !creation.primary_key.is_empty() {
            creation.schema = crate::spec::with_primary_key(creation.schema, &creation.primary_key)
                .map_err(|e| e.context(format!("creating {name}")))?;
        }
        // A single-column key gets a bloom filter by default: key lookups (`=`, `IN`) skip
        // the row groups without the key.
        let key: Vec<i32> = creation.schema.identifier_field_ids().collect();
        if let [id] = key.as_slice() {
            if let Some(key) = creation.schema.name_by_field_id(*id) {
                creation
                    .properties
                    .entry(format!("write.parquet.bloom-filter-enabled.column.{key}"))
                    .or_insert_with(|| "true".to_string());
            }
        }
        // Merge engines: the state columns their functions keep, then the rule checked whole.
        creation.schema =
            crate::spec::keyed::with_state_columns(creation.schema, &creation.properties)
                .map_err(|e| e.context(format!("creating {name}")))?;
        if crate::spec::keyed::is_keyed(&creation.schema, &creation.properties) {
            crate::spec::keyed::KeyedSpec::check(&creation.schema, &creation.properties, &name)?;
        }
        if self.table_exists(ident).await? {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("table {name} already exists"),
            ));
        }
        let mut props = creation.properties.clone();
        let mut fv = creation.format_version;
        if let Some(v) = props.remove("format-version") {
            fv = match v.trim() {
                "1" => FormatVersion::V1,
                "2" => FormatVersion::V2,
                "3" => FormatVersion::V3,
                _ => {
                    return Err(Error::invalid(format!(
                        "format-version '{v}' is not 1, 2 or 3"
                    )))
                }
            };
        }
        // A keyed v2 table gets one position delete file per partition per commit (as Flink's
        // upsert writers), not one per data file a batch touches: a batch of scattered keys
        // touches most files. Readers apply both alike.
        if !key.is_empty() && fv == FormatVersion::V2 {
            props
                .entry("write.delete.granularity".to_string())
                .or_insert_with(|| "partition".to_string());
        }
        if !creation.allow_unknown_properties {
            crate::spec::check_property_keys(&props)
                .map_err(|e| e.context(format!("creating table {name}")))?;
        }
        crate::spec::TableProperties::parse(&props)
            .map_err(|e| e.context(format!("creating {name}")))?;
        crate::spec::maintain_policy::MaintainPolicy::of(&props)
            .map_err(|e| e.context(format!("creating {name}")))?;
        if let Some(l) = &creation.location {
            storage::check_store("table location", l)
                .map_err(|e| e.context(format!("creating {name}")))?;
        }
        check_features(&creation.schema, fv).map_err(|e| e.context(format!("creating {name}")))?;
        crate::spec::check_layout(&creation.partition_spec, creation.sort_order.as_ref())
            .map_err(|e| e.context(format!("creating {name}")))?;
        if let Backend::Rest(r) = &self.backend {
            return self.create_rest_table(r, ident, creation, fv, props).await;
        }
        let location = self
            .fresh_location(ident, creation.location.as_deref())
            .await?;
        let sort = creation
            .sort_order
            .clone()
            .unwrap_or_else(SortOrder::unsorted_order);
        let md = TableMetadataBuilder::new(
            creation.schema,
            creation.partition_spec,
            sort,
            location.clone(),
            fv,
            props,
        )
        .and_then(|b| b.build())
        .map_err(|e| Error::invalid(format!("creating {name}: {e}")))?
        .metadata;
        self.create_table_from_metadata(ident, md).await
    }

    /// The location of a new table: `explicit`, refused if it holds files; or the default
    /// location, or (if files are there, for example of a dropped table another one still
    /// references) the default with a UUID suffix, as Iceberg Java's unique table locations.
    async fn fresh_location(&self, ident: &TableIdent, explicit: Option<&str>) -> Result<String> {
        let name = ident_name(ident);
        if let Some(l) = explicit {
            if self.storage.has_objects(l).await? {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "creating {name}: location {l} already holds files (of another table?); \
                         choose another location or remove them"
                    ),
                ));
            }
            return Ok(l.to_string());
        }
        let default = self.default_location(ident);
        if matches!(self.backend, Backend::Fs) || !self.storage.has_objects(&default).await? {
            // The filesystem catalog's layout fixes the location; an existing table there
            // is found by `table_exists`.
            return Ok(default);
        }
        Ok(format!("{default}-{}", uuid::Uuid::new_v4().simple()))
    }

    /// A REST catalog creates the table itself (location and first metadata are the server's).
    async fn create_rest_table(
        &self,
        r: &rest::RestBackend,
        ident: &TableIdent,
        creation: TableCreation,
        fv: FormatVersion,
        mut props: HashMap<String, String>,
    ) -> Result<Table> {
        self.ensure_namespace(&ns_string(ident)).await?;
        let version = match fv {
            FormatVersion::V1 => "1",
            FormatVersion::V2 => "2",
            FormatVersion::V3 => "3",
        };
        props.insert("format-version".into(), version.into());
        let mut request = serde_json::json!({
            "name": ident.name(),
            "schema": creation.schema,
            "partition-spec": creation.partition_spec,
            "properties": props,
        });
        if let Some(o) = &creation.sort_order {
            request["write-order"] = serde_json::to_value(o)?;
        }
        if let Some(l) = &creation.location {
            request["location"] = serde_json::Value::String(l.clone());
        }
        let (loc, md) = r
            .create(ident, request)
            .await
            .map_err(|e| e.context(format!("creating {}", ident_name(ident))))?;
        if md.format_version() != fv {
            return Err(Error::unsupported(format!(
                "REST catalog {} created table {} with format version {} instead of {}: the \
                 server does not support that version",
                r.shown(),
                ident_name(ident),
                md.format_version(),
                fv
            )));
        }
        Ok(Table::new(ident.clone(), md, loc, self.storage.clone()))
    }

    /// Creates a table whose first metadata is `md` as given (ids, snapshots and location
    /// kept; clones use it). The namespace is created when missing.
    pub async fn create_table_from_metadata(
        &self,
        ident: &TableIdent,
        md: TableMetadata,
    ) -> Result<Table> {
        check_ident(ident)?;
        let name = ident_name(ident);
        if self.table_exists(ident).await? {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("table {name} already exists"),
            ));
        }
        let location = md.location().to_string();
        let ns = ns_string(ident);
        self.ensure_namespace(&ns).await?;
        match &self.backend {
            Backend::Sql(b) => {
                let meta_loc = sql_metadata_location(&location, None);
                self.write_metadata(&meta_loc, &md).await?;
                let (b, n, l) = (b.clone(), ident.name().to_string(), meta_loc.clone());
                if let Err(e) = blocking(move || b.insert(&ns, &n, &l)).await {
                    let _ = self.storage.delete(&meta_loc).await;
                    return Err(e);
                }
                Ok(Table::new(
                    ident.clone(),
                    md,
                    meta_loc,
                    self.storage.clone(),
                ))
            }
            Backend::Rest(r) => {
                let meta_loc = sql_metadata_location(&location, None);
                self.write_metadata(&meta_loc, &md).await?;
                let registered = self.register_rest(r, ident, &meta_loc, &md).await;
                if registered.is_err() {
                    let _ = self.storage.delete(&meta_loc).await;
                }
                registered
            }
            Backend::Fs => {
                if location.trim_end_matches('/') != self.default_location(ident) {
                    return Err(Error::invalid(format!(
                        "table {name}: a filesystem (Hadoop) catalog keeps each table at \
                         <warehouse>/<namespace>/<table>, not at {location}"
                    )));
                }
                let meta_loc = fs::version_location(&location, 1);
                self.storage
                    .put_if_absent(&meta_loc, Bytes::from(serde_json::to_vec(&md)?))
                    .await
                    .map_err(|e| {
                        if e.kind() == ErrorKind::AlreadyExists {
                            Error::new(
                                ErrorKind::AlreadyExists,
                                format!("table {name} already exists"),
                            )
                        } else {
                            e
                        }
                    })?;
                fs::write_hint(&self.storage, &location, 1).await?;
                Ok(Table::new(
                    ident.clone(),
                    md,
                    meta_loc,
                    self.storage.clone(),
                ))
            }
        }
    }

    /// Registers an existing metadata file as a new table.
    pub async fn register_table(
        &self,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> Result<Table> {
        check_ident(ident)?;
        let md = read_metadata(&self.storage, metadata_location).await?;
        match &self.backend {
            Backend::Sql(b) => {
                let ns = ns_string(ident);
                self.ensure_namespace(&ns).await?;
                let (b, n, l) = (
                    b.clone(),
                    ident.name().to_string(),
                    metadata_location.to_string(),
                );
                blocking(move || b.insert(&ns, &n, &l)).await?;
                Ok(Table::new(
                    ident.clone(),
                    md,
                    metadata_location.to_string(),
                    self.storage.clone(),
                ))
            }
            Backend::Rest(r) => self.register_rest(r, ident, metadata_location, &md).await,
            Backend::Fs => Err(Error::unsupported(
                "register_table is not available in a filesystem catalog",
            )),
        }
    }

    /// Registers `metadata_location` (holding `md`) with a REST catalog and checks that the
    /// server serves it as written: one that answers with other metadata (SeaweedFS 4.48
    /// returns an empty stub) would hide the table's data, so that is an error.
    async fn register_rest(
        &self,
        r: &rest::RestBackend,
        ident: &TableIdent,
        metadata_location: &str,
        md: &TableMetadata,
    ) -> Result<Table> {
        let (loc, got) = r.register(ident, metadata_location).await?;
        if got.uuid() != md.uuid() || got.current_snapshot_id() != md.current_snapshot_id() {
            let _ = r.drop(ident).await;
            return Err(Error::unsupported(format!(
                "REST catalog {} registered table {} with metadata other than the file it was \
                 given ({metadata_location}); this server cannot create a table from existing \
                 metadata (register-table), so keep clones and registered tables in a SQL catalog",
                r.shown(),
                ident_name(ident)
            )));
        }
        Ok(Table::new(ident.clone(), got, loc, self.storage.clone()))
    }

    /// Writes a SQL catalog's metadata file. Its name is unique (a UUID), so where create-only
    /// puts are disabled (`FLOE_S3_CONDITIONAL_PUT=disabled`) a plain write is still safe: the
    /// catalog's compare-and-swap decides which metadata file is current.
    async fn write_metadata(&self, location: &str, md: &TableMetadata) -> Result<()> {
        let bytes = Bytes::from(serde_json::to_vec(md)?);
        self.storage.put_unique(location, bytes).await
    }

    /// Swaps `base`'s pointer to `new` metadata: the catalog's compare-and-swap.
    pub async fn commit(&self, base: &Table, new: TableMetadata) -> CommitOutcome {
        let _in_flight = InFlight::enter();
        let ident = base.ident().clone();
        match &self.backend {
            Backend::Sql(b) => {
                let loc = sql_metadata_location(new.location(), Some(base.metadata_location()));
                if let Err(e) = self.write_metadata(&loc, &new).await {
                    // The pointer was never swapped: nothing is committed (a timed-out put
                    // that landed after all is an orphan for remove-orphan-files).
                    return CommitOutcome::Failed(
                        e.context(format!("writing the new metadata file '{loc}'")),
                    );
                }
                let (b2, ns, n, old, l) = (
                    b.clone(),
                    ns_string(&ident),
                    ident.name().to_string(),
                    base.metadata_location().to_string(),
                    loc.clone(),
                );
                match blocking(move || b2.swap(&ns, &n, &old, &l)).await {
                    Ok(sql::Swap::Done) => {
                        CommitOutcome::Committed(Table::new(ident, new, loc, self.storage.clone()))
                    }
                    Ok(sql::Swap::Stale) => {
                        let _ = self.storage.delete(&loc).await;
                        CommitOutcome::Conflict(format!(
                            "table {} was changed by another writer",
                            ident_name(&ident)
                        ))
                    }
                    Ok(sql::Swap::Refused(e)) => {
                        let _ = self.storage.delete(&loc).await;
                        CommitOutcome::Failed(e)
                    }
                    Err(e) => CommitOutcome::Unknown(e),
                }
            }
            Backend::Rest(r) => match r.commit(&ident, base.metadata(), &new).await {
                rest::RestCommit::Committed(loc, md) => {
                    CommitOutcome::Committed(Table::new(ident, *md, loc, self.storage.clone()))
                }
                rest::RestCommit::Conflict(msg) => CommitOutcome::Conflict(msg),
                rest::RestCommit::Failed(e) => CommitOutcome::Failed(e),
                rest::RestCommit::Unknown(e) => CommitOutcome::Unknown(e),
            },
            Backend::Fs => {
                let Some(v) = fs::version_of(base.metadata_location()) else {
                    return CommitOutcome::Failed(Error::invalid(format!(
                        "'{}' is not a vN.metadata.json file",
                        base.metadata_location()
                    )));
                };
                let loc = fs::version_location(new.location(), v + 1);
                let bytes = match serde_json::to_vec(&new) {
                    Ok(b) => Bytes::from(b),
                    Err(e) => return CommitOutcome::Failed(e.into()),
                };
                match self.storage.put_if_absent(&loc, bytes).await {
                    Ok(()) => {
                        // The hint is advisory; readers fall back to listing.
                        let _ = fs::write_hint(&self.storage, new.location(), v + 1).await;
                        CommitOutcome::Committed(Table::new(ident, new, loc, self.storage.clone()))
                    }
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => CommitOutcome::Conflict(
                        format!("table {} was changed by another writer", ident_name(&ident)),
                    ),
                    // A local create-only put that failed created nothing (it writes a staging
                    // file, then links it into place); elsewhere the put may have landed.
                    Err(e) if storage::local_path(&loc).is_some() => CommitOutcome::Failed(
                        e.context(format!("writing the new metadata file '{loc}'")),
                    ),
                    Err(e) => CommitOutcome::Unknown(e),
                }
            }
        }
    }

    /// Renames a table (SQL catalog only; Hadoop tables are named by their directory).
    pub async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        check_ident(to)?;
        match &self.backend {
            Backend::Sql(b) => {
                let (b, a, an, z, zn) = (
                    b.clone(),
                    ns_string(from),
                    from.name().to_string(),
                    ns_string(to),
                    to.name().to_string(),
                );
                self.ensure_namespace(&z).await?;
                blocking(move || b.rename(&a, &an, &z, &zn)).await
            }
            Backend::Rest(r) => {
                self.ensure_namespace(&ns_string(to)).await?;
                r.rename(from, to).await
            }
            Backend::Fs => Err(Error::unsupported(
                "a filesystem (Hadoop) catalog cannot rename tables",
            )),
        }
    }

    /// Removes a table from the catalog. Its files stay (a filesystem catalog's table exists
    /// by its `metadata/` directory, which goes); `floe::maintenance::drop_table` purges them
    /// without touching files other tables share.
    pub async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        match &self.backend {
            Backend::Sql(b) => {
                let (b, ns, n) = (b.clone(), ns_string(ident), ident.name().to_string());
                if !blocking(move || b.delete(&ns, &n)).await? {
                    return Err(Error::not_found(format!(
                        "table {} does not exist",
                        ident_name(ident)
                    )));
                }
            }
            Backend::Rest(r) => r.drop(ident).await?,
            Backend::Fs => {
                self.storage
                    .delete_prefix(&storage::join(table.metadata().location(), "metadata"))
                    .await?;
            }
        }
        Ok(())
    }
}

/// Refuses schema features the format version does not have (v3-only types and defaults).
fn check_features(schema: &Schema, fv: FormatVersion) -> Result<()> {
    use crate::spec::{PrimitiveType, Type};
    if fv == FormatVersion::V3 {
        return Ok(());
    }
    for f in schema.field_id_to_fields().values() {
        if let Type::Primitive(PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs) =
            f.field_type.as_ref()
        {
            return Err(Error::invalid(format!(
                "column '{}' has type {} which needs format-version 3; create the table with format-version 3",
                f.name, f.field_type
            )));
        }
        if f.initial_default.is_some() || f.write_default.is_some() {
            return Err(Error::invalid(format!(
                "column '{}' has a default value, which needs format-version 3",
                f.name
            )));
        }
    }
    Ok(())
}

/// A missing `sqlite:///p` catalog (relative, in SQLAlchemy's form) where `/p` exists: say
/// that four slashes make the path absolute.
fn relative_hint(e: Error, uri: &str) -> Error {
    match uri.strip_prefix("sqlite:///") {
        Some(rel) if e.kind() == ErrorKind::NotFound && !rel.starts_with('/') => {
            let absolute = format!("/{rel}");
            if Path::new(&absolute).is_file() {
                e.context(format!(
                    "'{uri}' is a path relative to the current directory; \
                     sqlite:///{absolute} (four slashes) is the absolute {absolute}"
                ))
            } else {
                e
            }
        }
        _ => e,
    }
}

/// The database path of a SQLite catalog URI: SQLAlchemy/pyiceberg form `sqlite:////abs.db`
/// (absolute), `sqlite:///rel.db` (relative); also `sqlite:/abs.db`, `sqlite:rel.db` and a
/// bare `*.db` path.
/// Parses a catalog URI as [`Catalog::open`] does (form, host, credentials, database or
/// warehouse path) without opening, creating or contacting anything.
#[doc(hidden)]
pub fn check_uri(uri: &str) -> Result<()> {
    if rest::is_rest_uri(uri) {
        if let (_, Some(userinfo)) = rest::parse_uri(uri)? {
            let (id, secret) = userinfo.split_once(':').unwrap_or(("", userinfo));
            rest::percent_decode(id);
            rest::percent_decode(secret);
        }
    } else if sql::is_postgres_uri(uri) {
        sql::PgTarget::parse(uri)?;
    } else if uri.starts_with("sqlite:") || uri.ends_with(".db") {
        abs(sqlite_path(uri))?;
    } else if uri.starts_with("file:") || uri.starts_with("fs:") || uri.starts_with('/') {
        let p = uri.strip_prefix("fs:").unwrap_or(uri);
        abs(storage::local_path(p).unwrap_or(p))?;
    } else {
        return Err(Error::unsupported(format!(
            "catalog URI '{uri}' is not supported"
        )));
    }
    Ok(())
}

fn sqlite_path(u: &str) -> &str {
    u.strip_prefix("sqlite:///")
        .or_else(|| u.strip_prefix("sqlite://"))
        .or_else(|| u.strip_prefix("sqlite:"))
        .unwrap_or(u)
}

/// `<location>/metadata/NNNNN-<uuid>.metadata.json`, numbered after the previous one.
fn sql_metadata_location(table_location: &str, previous: Option<&str>) -> String {
    let next = previous
        .and_then(|p| p.rsplit('/').next())
        .and_then(|f| f.split('-').next())
        .and_then(|n| n.parse::<u64>().ok())
        .map(|n| n + 1)
        .unwrap_or(if previous.is_some() { 1 } else { 0 });
    storage::join(
        table_location,
        &format!("metadata/{next:05}-{}.metadata.json", uuid::Uuid::new_v4()),
    )
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::io("catalog task failed").with_source(e))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised() {
        assert_eq!(abs("/a/./b/../c").unwrap(), PathBuf::from("/a/c"));
        assert!(!abs("./w").unwrap().to_string_lossy().contains("/./"));
    }

    #[test]
    fn metadata_names_count_up() {
        let a = sql_metadata_location("file:///w/t", None);
        assert!(a.starts_with("file:///w/t/metadata/00000-"), "{a}");
        let b = sql_metadata_location("file:///w/t", Some(&a));
        assert!(b.starts_with("file:///w/t/metadata/00001-"), "{b}");
    }
}
