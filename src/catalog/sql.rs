//! SQL catalog with the schema of pyiceberg's `SqlCatalog` and Java's `JdbcCatalog`, on
//! SQLite (embedded) or PostgreSQL (shared by many machines).
//!
//! Tables: `iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
//! previous_metadata_location[, iceberg_type])` and `iceberg_namespace_properties`. The
//! `iceberg_type` column (JDBC schema V1) is detected, never required. A commit is a
//! compare-and-swap on `metadata_location` in one `UPDATE` statement.
//!
//! The SQL is written once, with `?N` placeholders, against the small [`Conn`] trait; each
//! database supplies a connection (SQLite: a file; PostgreSQL: the `postgres` client).

mod pg;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{Error, ErrorKind, Result};

pub(crate) use pg::{is_postgres_uri, PgTarget};

/// A pointer store in a SQL database.
#[derive(Debug, Clone)]
pub(crate) struct SqlBackend {
    db: Db,
    catalog: String,
}

/// Which database holds the catalog tables.
#[derive(Debug, Clone)]
enum Db {
    Sqlite(PathBuf),
    Postgres(Arc<PgTarget>),
}

/// Result of a pointer swap.
pub(crate) enum Swap {
    /// The pointer moved.
    Done,
    /// The pointer was not at the expected location (another writer moved it).
    Stale,
    /// The database refused the update (read-only, disk full, locked, unreachable before
    /// the statement was sent): the pointer did not move.
    Refused(Error),
}

/// A failed statement: a unique-key violation (something already exists), a refusal the
/// database answered (the statement was not applied), or anything else (it may have been).
pub(crate) enum DbError {
    Unique,
    Refused(Error),
    Other(Error),
}

impl From<Error> for DbError {
    fn from(e: Error) -> Self {
        DbError::Other(e)
    }
}

/// The few operations the catalog needs from a database connection. Every parameter and
/// every result column of the catalog is text, so that is all a connection has to bind.
pub(crate) trait Conn {
    /// Runs `sql` (`?N` placeholders bound to `params`); the number of rows changed.
    fn execute(&mut self, sql: &str, params: &[&str]) -> std::result::Result<u64, DbError>;
    /// Runs a query; its first column, one entry per row.
    fn column(&mut self, sql: &str, params: &[&str]) -> Result<Vec<Option<String>>>;
    /// Whether `table` exists (in the connection's default schema).
    fn table_exists(&mut self, table: &str) -> Result<bool>;
    /// Whether `iceberg_tables` has the `iceberg_type` column (JDBC schema V1).
    fn has_type_column(&mut self) -> Result<bool>;
}

/// The catalog tables as pyiceberg and Java's `JdbcCatalog` (schema V1) create them.
const DDL: [(&str, &str); 2] = [
    (
        "iceberg_tables",
        "CREATE TABLE IF NOT EXISTS iceberg_tables (
            catalog_name VARCHAR(255) NOT NULL,
            table_namespace VARCHAR(255) NOT NULL,
            table_name VARCHAR(255) NOT NULL,
            metadata_location VARCHAR(1000),
            previous_metadata_location VARCHAR(1000),
            iceberg_type VARCHAR(5),
            PRIMARY KEY (catalog_name, table_namespace, table_name))",
    ),
    (
        "iceberg_namespace_properties",
        "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
            catalog_name VARCHAR(255) NOT NULL,
            namespace VARCHAR(255) NOT NULL,
            property_key VARCHAR(255) NOT NULL,
            property_value VARCHAR(1000),
            PRIMARY KEY (catalog_name, namespace, property_key))",
    ),
];

impl SqlBackend {
    /// A catalog in the SQLite file at `path` (created with its tables when missing).
    pub(crate) fn open(path: PathBuf, catalog: String) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display())).with_source(e))?;
        }
        Self::init(Self {
            db: Db::Sqlite(path),
            catalog,
        })
    }

    /// An existing SQLite catalog, read-only as far as floe's own choices go: no directory or
    /// file is created, and a missing database is a not-found error naming its path.
    pub(crate) fn open_existing(path: PathBuf, catalog: String, warehouse: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::not_found(format!(
                "no catalog at {} (warehouse {}): nothing has been created there yet; open the \
                 warehouse or catalog URI of an existing catalog, or create a table first",
                path.display(),
                warehouse.display()
            )));
        }
        Self::init(Self {
            db: Db::Sqlite(path),
            catalog,
        })
    }

    /// A catalog in a PostgreSQL database. Nothing is contacted yet: the first operation
    /// connects, on a blocking thread, and creates the catalog tables when missing.
    pub(crate) fn postgres(target: PgTarget, catalog: String) -> Self {
        Self {
            db: Db::Postgres(Arc::new(target)),
            catalog,
        }
    }

    fn init(b: Self) -> Result<Self> {
        let mut c = b.conn()?;
        create_tables(c.as_mut())
            .map_err(|e| b.ctx("opening (creating the catalog tables when missing)", e))?;
        Ok(b)
    }

    /// Where the catalog lives, for messages: `sqlite catalog /p/c.db` or
    /// `postgres catalog postgresql://user@host:port/db`.
    pub(crate) fn describe(&self) -> String {
        match &self.db {
            Db::Sqlite(p) => format!("sqlite catalog {}", p.display()),
            Db::Postgres(t) => format!("postgres catalog {}", t.display()),
        }
    }

    fn err(&self, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::io(format!("{}: {what}", self.describe())).with_source(e)
    }

    /// Prefixes a connection's error with the catalog and the operation.
    fn ctx(&self, what: &str, e: Error) -> Error {
        e.context(format!("{}: {what}", self.describe()))
    }

    fn fail(&self, what: &str, e: DbError) -> Error {
        match e {
            DbError::Unique => Error::io(format!(
                "{}: {what}: unexpected duplicate key",
                self.describe()
            )),
            DbError::Refused(e) | DbError::Other(e) => self.ctx(what, e),
        }
    }

    fn conn(&self) -> Result<Box<dyn Conn>> {
        match &self.db {
            Db::Sqlite(path) => {
                let c = Connection::open(path).map_err(|e| self.err("open", e))?;
                c.busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .map_err(|e| self.err("busy_timeout", e))?;
                Ok(Box::new(SqliteConn { c }))
            }
            Db::Postgres(t) => Ok(Box::new(t.connect(create_tables)?)),
        }
    }

    fn type_filter(c: &mut dyn Conn) -> Result<&'static str> {
        Ok(if c.has_type_column()? {
            " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        } else {
            ""
        })
    }

    pub(crate) fn namespaces(&self) -> Result<Vec<String>> {
        let mut c = self.conn()?;
        let q = "SELECT DISTINCT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?1
                 UNION SELECT DISTINCT table_namespace FROM iceberg_tables WHERE catalog_name = ?1 ORDER BY 1";
        let r = c
            .column(q, &[&self.catalog])
            .map_err(|e| self.ctx("list namespaces", e))?;
        Ok(r.into_iter().flatten().collect())
    }

    pub(crate) fn create_namespace(&self, ns: &str, props: &[(String, String)]) -> Result<()> {
        let mut c = self.conn()?;
        let mut props = props.to_vec();
        if !props.iter().any(|(k, _)| k == "exists") {
            props.push(("exists".into(), "true".into()));
        }
        for (k, v) in props {
            c.execute(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (catalog_name, namespace, property_key) DO UPDATE SET property_value = excluded.property_value",
                &[&self.catalog, ns, &k, &v],
            )
            .map_err(|e| self.fail("create namespace", e))?;
        }
        Ok(())
    }

    pub(crate) fn drop_namespace(&self, ns: &str) -> Result<()> {
        if !self.tables(ns)?.is_empty() {
            return Err(Error::invalid(format!(
                "namespace '{ns}' is not empty: drop its tables first"
            )));
        }
        let mut c = self.conn()?;
        c.execute(
            "DELETE FROM iceberg_namespace_properties WHERE catalog_name = ?1 AND namespace = ?2",
            &[&self.catalog, ns],
        )
        .map_err(|e| self.fail("drop namespace", e))?;
        Ok(())
    }

    pub(crate) fn tables(&self, ns: &str) -> Result<Vec<String>> {
        let mut c = self.conn()?;
        let f = Self::type_filter(c.as_mut()).map_err(|e| self.ctx("list tables", e))?;
        let q = format!("SELECT table_name FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2{f} ORDER BY 1");
        let r = c
            .column(&q, &[&self.catalog, ns])
            .map_err(|e| self.ctx("list tables", e))?;
        Ok(r.into_iter().flatten().collect())
    }

    pub(crate) fn pointer(&self, ns: &str, name: &str) -> Result<Option<String>> {
        let mut c = self.conn()?;
        let f = Self::type_filter(c.as_mut()).map_err(|e| self.ctx("load table", e))?;
        let q = format!("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3{f}");
        let r = c
            .column(&q, &[&self.catalog, ns, name])
            .map_err(|e| self.ctx("load table", e))?;
        Ok(r.into_iter().next().flatten())
    }

    pub(crate) fn insert(&self, ns: &str, name: &str, location: &str) -> Result<()> {
        let mut c = self.conn()?;
        let typed = c
            .has_type_column()
            .map_err(|e| self.ctx("create table", e))?;
        let q = if typed {
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location, iceberg_type) VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')"
        } else {
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location) VALUES (?1, ?2, ?3, ?4, NULL)"
        };
        match c.execute(q, &[&self.catalog, ns, name, location]) {
            Ok(_) => Ok(()),
            Err(DbError::Unique) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("table {ns}.{name} already exists"),
            )),
            Err(e) => Err(self.fail("create table", e)),
        }
    }

    /// The compare-and-swap: one `UPDATE … WHERE metadata_location = <old>`. An error means
    /// the outcome is unknown (the statement may have been applied); [`Swap::Refused`] that
    /// it was not.
    pub(crate) fn swap(&self, ns: &str, name: &str, old: &str, new: &str) -> Result<Swap> {
        // No connection: the statement was never sent.
        let mut c = match self.conn() {
            Ok(c) => c,
            Err(e) => return Ok(Swap::Refused(e.context("commit: not sent"))),
        };
        let r = c.execute(
            "UPDATE iceberg_tables SET metadata_location = ?1, previous_metadata_location = ?2
             WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5 AND metadata_location = ?2",
            &[new, old, &self.catalog, ns, name],
        );
        match r {
            Ok(1) => Ok(Swap::Done),
            Ok(_) => Ok(Swap::Stale),
            Err(DbError::Other(e)) => Err(self.ctx("commit", e)),
            Err(e) => Ok(Swap::Refused(self.fail("commit refused", e))),
        }
    }

    pub(crate) fn rename(&self, ns: &str, name: &str, to_ns: &str, to_name: &str) -> Result<()> {
        let mut c = self.conn()?;
        let n = c
            .execute(
                "UPDATE iceberg_tables SET table_namespace = ?1, table_name = ?2 WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5",
                &[to_ns, to_name, &self.catalog, ns, name],
            )
            .map_err(|e| match e {
                DbError::Unique => Error::new(
                    ErrorKind::AlreadyExists,
                    format!("table {to_ns}.{to_name} already exists"),
                ),
                e => self.fail("rename table", e),
            })?;
        if n == 0 {
            return Err(Error::not_found(format!(
                "table {ns}.{name} does not exist"
            )));
        }
        Ok(())
    }

    pub(crate) fn delete(&self, ns: &str, name: &str) -> Result<bool> {
        let mut c = self.conn()?;
        let n = c
            .execute(
                "DELETE FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3",
                &[&self.catalog, ns, name],
            )
            .map_err(|e| self.fail("drop table", e))?;
        Ok(n > 0)
    }
}

/// Creates the catalog tables that are missing (existing ones, with or without
/// `iceberg_type`, are left as they are).
fn create_tables(c: &mut dyn Conn) -> Result<()> {
    for (table, ddl) in DDL {
        if c.table_exists(table)? {
            continue;
        }
        if let Err(e) = c.execute(ddl, &[]) {
            // Another process may have created it at the same moment (PostgreSQL can
            // report that as a unique violation in its system catalogs).
            if !c.table_exists(table)? {
                return Err(match e {
                    DbError::Unique => Error::io(format!("creating catalog table {table} failed")),
                    DbError::Refused(e) | DbError::Other(e) => {
                        e.context(format!("creating catalog table {table}"))
                    }
                });
            }
        }
    }
    Ok(())
}

/// A SQLite connection (one per operation; SQLite's own locking serialises writers).
struct SqliteConn {
    c: Connection,
}

/// A SQLite error as floe's: a database another process keeps locked past the busy timeout
/// is a `Conflict` (retryable: nothing was changed), the rest I/O.
fn sqlite_err(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode as C;
    if matches!(
        e.sqlite_error_code(),
        Some(C::DatabaseBusy | C::DatabaseLocked)
    ) {
        return Error::new(
            ErrorKind::Conflict,
            format!(
                "the database is locked by another process and stayed locked for the {} s floe \
                 waits ({e}); nothing was changed: retry once it is released",
                SQLITE_BUSY_TIMEOUT.as_secs()
            ),
        )
        .with_source(e);
    }
    Error::io(e.to_string()).with_source(e)
}

/// How long a SQLite statement waits for another process's lock.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether SQLite refused a statement before applying it: a single statement in autocommit
/// mode is rolled back when it fails with one of these (read-only database, disk full,
/// locked, a constraint or trigger). An I/O error or corruption may strike while the
/// transaction commits, so its outcome is unknown.
fn sqlite_refused(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode as C;
    matches!(
        e.sqlite_error_code(),
        Some(
            C::ReadOnly
                | C::DiskFull
                | C::DatabaseBusy
                | C::DatabaseLocked
                | C::CannotOpen
                | C::PermissionDenied
                | C::ConstraintViolation
                | C::TooBig
                | C::AuthorizationForStatementDenied
                | C::ApiMisuse
        )
    )
}

impl Conn for SqliteConn {
    fn execute(&mut self, sql: &str, params: &[&str]) -> std::result::Result<u64, DbError> {
        match self
            .c
            .execute(sql, rusqlite::params_from_iter(params.iter()))
        {
            Ok(n) => Ok(n as u64),
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
            {
                Err(DbError::Unique)
            }
            Err(e @ rusqlite::Error::SqliteFailure(..)) if sqlite_refused(&e) => {
                Err(DbError::Refused(sqlite_err(e)))
            }
            Err(e) => Err(DbError::Other(sqlite_err(e))),
        }
    }

    fn column(&mut self, sql: &str, params: &[&str]) -> Result<Vec<Option<String>>> {
        let mut st = self.c.prepare(sql).map_err(sqlite_err)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                r.get::<_, Option<String>>(0)
            })
            .and_then(|m| m.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(sqlite_err)
    }

    fn table_exists(&mut self, table: &str) -> Result<bool> {
        let n = self.column(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1",
            &[table],
        )?;
        Ok(!n.is_empty())
    }

    fn has_type_column(&mut self) -> Result<bool> {
        let names = self.column("SELECT name FROM pragma_table_info('iceberg_tables')", &[])?;
        Ok(names
            .iter()
            .flatten()
            .any(|n| n.eq_ignore_ascii_case("iceberg_type")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_and_pyiceberg_schema_without_type_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.db");
        {
            // pyiceberg's V0 schema: no iceberg_type column.
            let c = Connection::open(&p).unwrap();
            c.execute_batch(
                "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL,
                 table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000),
                 PRIMARY KEY (catalog_name, table_namespace, table_name));",
            )
            .unwrap();
        }
        let b = SqlBackend::open(p, "default".into()).unwrap();
        b.insert("db", "t", "/m1").unwrap();
        assert!(b.insert("db", "t", "/m1").is_err());
        assert_eq!(b.pointer("db", "t").unwrap().as_deref(), Some("/m1"));
        assert!(matches!(
            b.swap("db", "t", "/m1", "/m2").unwrap(),
            Swap::Done
        ));
        assert!(matches!(
            b.swap("db", "t", "/m1", "/m3").unwrap(),
            Swap::Stale
        ));
        assert_eq!(b.pointer("db", "t").unwrap().as_deref(), Some("/m2"));
        assert_eq!(b.tables("db").unwrap(), vec!["t".to_string()]);
        assert_eq!(b.namespaces().unwrap(), vec!["db".to_string()]);
    }

    #[test]
    fn refused_statements_are_told_from_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.db");
        let b = SqlBackend::open(p.clone(), "default".into()).unwrap();
        b.insert("db", "t", "/m1").unwrap();
        // A read-only database (as a file without write permission opens) refuses the swap.
        let ro =
            Connection::open_with_flags(&p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let mut c = SqliteConn { c: ro };
        let r = c.execute(
            "UPDATE iceberg_tables SET metadata_location = ?1 WHERE table_name = ?2",
            &["/m2", "t"],
        );
        assert!(matches!(r, Err(DbError::Refused(_))));
        // A duplicate key is still a duplicate; a trigger's abort is a refusal, not one.
        assert!(matches!(
            b.conn().unwrap().execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name) VALUES ('default', 'db', 't')",
                &[]
            ),
            Err(DbError::Unique)
        ));
        let c = Connection::open(&p).unwrap();
        c.execute_batch(
            "CREATE TRIGGER ro BEFORE UPDATE ON iceberg_tables BEGIN SELECT RAISE(ABORT, 'ro'); END;",
        )
        .unwrap();
        assert!(matches!(
            b.swap("db", "t", "/m1", "/m2").unwrap(),
            Swap::Refused(_)
        ));
        assert_eq!(b.pointer("db", "t").unwrap().as_deref(), Some("/m1"));
    }

    #[test]
    fn namespace_properties_are_upserted() {
        let dir = tempfile::tempdir().unwrap();
        let b = SqlBackend::open(dir.path().join("c.db"), "default".into()).unwrap();
        b.create_namespace("a", &[("k".into(), "1".into())])
            .unwrap();
        b.create_namespace("a", &[("k".into(), "2".into())])
            .unwrap();
        assert_eq!(b.namespaces().unwrap(), vec!["a".to_string()]);
        let mut c = b.conn().unwrap();
        let v = c
            .column(
                "SELECT property_value FROM iceberg_namespace_properties WHERE namespace = ?1 AND property_key = ?2",
                &["a", "k"],
            )
            .unwrap();
        assert_eq!(v, vec![Some("2".to_string())]);
    }
}
