//! SQL catalog on SQLite with the schema of pyiceberg's `SqlCatalog` and Java's `JdbcCatalog`.
//!
//! Tables: `iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
//! previous_metadata_location[, iceberg_type])` and `iceberg_namespace_properties`. The
//! `iceberg_type` column (JDBC schema V1) is detected, never required. A commit is a
//! compare-and-swap on `metadata_location`.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Error, ErrorKind, Result};

/// A SQLite-backed pointer store.
#[derive(Debug, Clone)]
pub(crate) struct SqlBackend {
    path: PathBuf,
    catalog: String,
}

/// Result of a pointer swap.
pub(crate) enum Swap {
    Done,
    Stale,
}

impl SqlBackend {
    pub(crate) fn open(path: PathBuf, catalog: String) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display())).with_source(e))?;
        }
        let b = Self { path, catalog };
        let c = b.conn()?;
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS iceberg_tables (
                catalog_name VARCHAR(255) NOT NULL,
                table_namespace VARCHAR(255) NOT NULL,
                table_name VARCHAR(255) NOT NULL,
                metadata_location VARCHAR(1000),
                previous_metadata_location VARCHAR(1000),
                iceberg_type VARCHAR(5),
                PRIMARY KEY (catalog_name, table_namespace, table_name));
             CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
                catalog_name VARCHAR(255) NOT NULL,
                namespace VARCHAR(255) NOT NULL,
                property_key VARCHAR(255) NOT NULL,
                property_value VARCHAR(1000),
                PRIMARY KEY (catalog_name, namespace, property_key));",
        )
        .map_err(|e| b.err("creating catalog tables", e))?;
        Ok(b)
    }

    fn err(&self, what: &str, e: rusqlite::Error) -> Error {
        Error::io(format!("sqlite catalog {}: {what}", self.path.display())).with_source(e)
    }

    fn conn(&self) -> Result<Connection> {
        let c = Connection::open(&self.path).map_err(|e| self.err("open", e))?;
        c.busy_timeout(Duration::from_secs(30))
            .map_err(|e| self.err("busy_timeout", e))?;
        Ok(c)
    }

    fn has_type_column(c: &Connection) -> rusqlite::Result<bool> {
        let mut st = c.prepare("SELECT name FROM pragma_table_info('iceberg_tables')")?;
        let names: Vec<String> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(names.iter().any(|n| n.eq_ignore_ascii_case("iceberg_type")))
    }

    fn type_filter(c: &Connection) -> rusqlite::Result<&'static str> {
        Ok(if Self::has_type_column(c)? {
            " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        } else {
            ""
        })
    }

    pub(crate) fn namespaces(&self) -> Result<Vec<String>> {
        let c = self.conn()?;
        let q = "SELECT DISTINCT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?1
                 UNION SELECT DISTINCT table_namespace FROM iceberg_tables WHERE catalog_name = ?1 ORDER BY 1";
        let mut st = c.prepare(q).map_err(|e| self.err("list namespaces", e))?;
        let r = st
            .query_map([&self.catalog], |r| r.get(0))
            .and_then(|m| m.collect::<rusqlite::Result<Vec<String>>>())
            .map_err(|e| self.err("list namespaces", e))?;
        Ok(r)
    }

    pub(crate) fn create_namespace(&self, ns: &str, props: &[(String, String)]) -> Result<()> {
        let c = self.conn()?;
        let mut props = props.to_vec();
        if !props.iter().any(|(k, _)| k == "exists") {
            props.push(("exists".into(), "true".into()));
        }
        for (k, v) in props {
            c.execute(
                "INSERT OR REPLACE INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) VALUES (?1, ?2, ?3, ?4)",
                params![self.catalog, ns, k, v],
            )
            .map_err(|e| self.err("create namespace", e))?;
        }
        Ok(())
    }

    pub(crate) fn drop_namespace(&self, ns: &str) -> Result<()> {
        if !self.tables(ns)?.is_empty() {
            return Err(Error::invalid(format!(
                "namespace '{ns}' is not empty: drop its tables first"
            )));
        }
        let c = self.conn()?;
        c.execute(
            "DELETE FROM iceberg_namespace_properties WHERE catalog_name = ?1 AND namespace = ?2",
            params![self.catalog, ns],
        )
        .map_err(|e| self.err("drop namespace", e))?;
        Ok(())
    }

    pub(crate) fn tables(&self, ns: &str) -> Result<Vec<String>> {
        let c = self.conn()?;
        let f = Self::type_filter(&c).map_err(|e| self.err("list tables", e))?;
        let q = format!("SELECT table_name FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2{f} ORDER BY 1");
        let mut st = c.prepare(&q).map_err(|e| self.err("list tables", e))?;
        let r = st
            .query_map(params![self.catalog, ns], |r| r.get(0))
            .and_then(|m| m.collect::<rusqlite::Result<Vec<String>>>())
            .map_err(|e| self.err("list tables", e))?;
        Ok(r)
    }

    pub(crate) fn pointer(&self, ns: &str, name: &str) -> Result<Option<String>> {
        let c = self.conn()?;
        let f = Self::type_filter(&c).map_err(|e| self.err("load table", e))?;
        let q = format!("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3{f}");
        c.query_row(&q, params![self.catalog, ns, name], |r| {
            r.get::<_, Option<String>>(0)
        })
        .optional()
        .map(|o| o.flatten())
        .map_err(|e| self.err("load table", e))
    }

    pub(crate) fn insert(&self, ns: &str, name: &str, location: &str) -> Result<()> {
        let c = self.conn()?;
        let typed = Self::has_type_column(&c).map_err(|e| self.err("create table", e))?;
        let r = if typed {
            c.execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location, iceberg_type) VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
                params![self.catalog, ns, name, location],
            )
        } else {
            c.execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location) VALUES (?1, ?2, ?3, ?4, NULL)",
                params![self.catalog, ns, name, location],
            )
        };
        match r {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("table {ns}.{name} already exists"),
                ))
            }
            Err(e) => Err(self.err("create table", e)),
        }
    }

    pub(crate) fn swap(&self, ns: &str, name: &str, old: &str, new: &str) -> Result<Swap> {
        let c = self.conn()?;
        let n = c
            .execute(
                "UPDATE iceberg_tables SET metadata_location = ?1, previous_metadata_location = ?2
                 WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5 AND metadata_location = ?2",
                params![new, old, self.catalog, ns, name],
            )
            .map_err(|e| self.err("commit", e))?;
        Ok(if n == 1 { Swap::Done } else { Swap::Stale })
    }

    pub(crate) fn rename(&self, ns: &str, name: &str, to_ns: &str, to_name: &str) -> Result<()> {
        let c = self.conn()?;
        let n = c
            .execute(
                "UPDATE iceberg_tables SET table_namespace = ?1, table_name = ?2 WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5",
                params![to_ns, to_name, self.catalog, ns, name],
            )
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                    Error::new(ErrorKind::AlreadyExists, format!("table {to_ns}.{to_name} already exists"))
                }
                e => self.err("rename table", e),
            })?;
        if n == 0 {
            return Err(Error::not_found(format!(
                "table {ns}.{name} does not exist"
            )));
        }
        Ok(())
    }

    pub(crate) fn delete(&self, ns: &str, name: &str) -> Result<bool> {
        let c = self.conn()?;
        let n = c
            .execute("DELETE FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3", params![self.catalog, ns, name])
            .map_err(|e| self.err("drop table", e))?;
        Ok(n > 0)
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
}
