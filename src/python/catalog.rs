//! `floe._floe.Catalog`: a catalog opened as the CLI opens `--catalog` / `--warehouse`.

use std::collections::HashMap;

use floe::catalog::TableCreation;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::runtime::{invalid, run, to_py, to_py_json};
use crate::table::Table;

/// A catalog: SQLite (default, `<warehouse>/catalog.db`), PostgreSQL, REST or filesystem.
#[pyclass(module = "floe._floe", frozen)]
pub struct Catalog {
    pub(crate) inner: floe::Catalog,
    uri: Option<String>,
    warehouse: Option<String>,
    name: String,
}

impl Catalog {
    /// A handle on the same catalog (for tables it loads).
    pub(crate) fn same(&self) -> Catalog {
        Catalog {
            inner: self.inner.clone(),
            uri: self.uri.clone(),
            warehouse: self.warehouse.clone(),
            name: self.name.clone(),
        }
    }
}

#[pymethods]
impl Catalog {
    /// Opens the catalog at `uri` (or the SQLite catalog of `warehouse`); `create` makes a
    /// missing SQLite catalog (as `floe create` does), else it must exist.
    #[new]
    #[pyo3(signature = (uri=None, warehouse=None, name="default".to_string(), create=true))]
    fn new(
        uri: Option<String>,
        warehouse: Option<String>,
        name: String,
        create: bool,
    ) -> PyResult<Self> {
        let open = if create {
            floe::Catalog::open
        } else {
            floe::Catalog::open_existing
        };
        let inner = open(uri.as_deref(), warehouse.as_deref(), Some(&name)).map_err(|e| {
            to_py(match e.kind() {
                floe::ErrorKind::InvalidInput
                | floe::ErrorKind::NotFound
                | floe::ErrorKind::Unsupported => {
                    e.with_hint("choose the catalog with uri=... or warehouse=...")
                }
                _ => e,
            })
        })?;
        Ok(Catalog {
            inner,
            uri,
            warehouse,
            name,
        })
    }

    /// The catalog URI given (None: SQLite in the warehouse).
    #[getter]
    fn uri(&self) -> Option<String> {
        self.uri.clone()
    }

    /// The warehouse given.
    #[getter]
    fn warehouse(&self) -> Option<String> {
        self.warehouse.clone()
    }

    /// The catalog name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// Creates a table; `schema` is DDL text or `arrow_schema` a pyarrow schema.
    #[pyo3(signature = (ident, schema=None, arrow_schema=None, partition_by=None, sort_by=None,
        properties=HashMap::new(), primary_key=Vec::new(), format_version=2, location=None,
        allow_unknown_properties=false))]
    #[allow(clippy::too_many_arguments)]
    fn create_table(
        &self,
        py: Python<'_>,
        ident: String,
        schema: Option<String>,
        arrow_schema: Option<Bound<'_, PyAny>>,
        partition_by: Option<String>,
        sort_by: Option<String>,
        properties: HashMap<String, String>,
        primary_key: Vec<String>,
        format_version: u8,
        location: Option<String>,
        allow_unknown_properties: bool,
    ) -> PyResult<Table> {
        let schema = match (schema, arrow_schema) {
            (Some(ddl), None) => parse_schema(&ddl).map_err(to_py)?,
            (None, Some(s)) => {
                let s =
                    <arrow_schema::Schema as arrow_pyarrow::FromPyArrow>::from_pyarrow_bound(&s)?;
                floe::spec::schema_from_arrow(&s).map_err(to_py)?
            }
            _ => {
                return Err(to_py(invalid(
                    "give schema= (a pyarrow schema or DDL text)",
                )))
            }
        };
        let mut c = TableCreation::new(schema.clone());
        if let Some(p) = partition_by {
            c.partition_spec = parse_partition_spec(&p, &schema).map_err(to_py)?;
        }
        if let Some(s) = sort_by {
            c.sort_order = Some(parse_sort_order(&s, &schema).map_err(to_py)?);
        }
        c.properties = properties;
        c.format_version = match format_version {
            1 => FormatVersion::V1,
            2 => FormatVersion::V2,
            3 => FormatVersion::V3,
            v => {
                return Err(to_py(invalid(format!(
                    "format_version={v}: expected 1, 2 or 3"
                ))))
            }
        };
        c.location = location;
        c.primary_key = primary_key;
        c.allow_unknown_properties = allow_unknown_properties;
        let id = parse_ident(&ident).map_err(to_py)?;
        let cat = self.inner.clone();
        let t = run(py, async move { cat.create_table(&id, c).await })?;
        Ok(Table::new(self.same(), t))
    }

    /// Loads a table (`ns.table`, or `ns.table.branch_<b>` for a branch).
    fn load_table(&self, py: Python<'_>, ident: String) -> PyResult<Table> {
        let cat = self.inner.clone();
        let t = run(py, async move { cat.load_write_target(&ident).await })?;
        Ok(Table::new(self.same(), t))
    }

    /// Whether the table exists.
    fn table_exists(&self, py: Python<'_>, ident: String) -> PyResult<bool> {
        let cat = self.inner.clone();
        let id = parse_ident(&ident).map_err(to_py)?;
        run(py, async move { cat.table_exists(&id).await })
    }

    /// The namespaces.
    fn list_namespaces(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let cat = self.inner.clone();
        run(py, async move { cat.list_namespaces().await })
    }

    /// Creates a namespace.
    fn create_namespace(&self, py: Python<'_>, namespace: String) -> PyResult<()> {
        let cat = self.inner.clone();
        run(
            py,
            async move { cat.create_namespace(&namespace, &[]).await },
        )
    }

    /// Drops an empty namespace.
    fn drop_namespace(&self, py: Python<'_>, namespace: String) -> PyResult<()> {
        let cat = self.inner.clone();
        run(py, async move { cat.drop_namespace(&namespace).await })
    }

    /// The tables of a namespace, as `ns.table` names.
    fn list_tables<'py>(&self, py: Python<'py>, namespace: String) -> PyResult<Bound<'py, PyList>> {
        let cat = self.inner.clone();
        let ids = run(py, async move { cat.list_tables(&namespace).await })?;
        let names: Vec<String> = ids.iter().map(floe::table::ident_name).collect();
        PyList::new(py, names)
    }

    /// Renames a table.
    fn rename_table(&self, py: Python<'_>, from_ident: String, to_ident: String) -> PyResult<()> {
        let cat = self.inner.clone();
        let (from, to) = (
            parse_ident(&from_ident).map_err(to_py)?,
            parse_ident(&to_ident).map_err(to_py)?,
        );
        run(py, async move { cat.rename_table(&from, &to).await })
    }

    /// Runs one SQL statement as `floe sql` does: `ALTER TABLE …` (a rename, or schema,
    /// partition, sort order and property changes in one commit) or `DELETE` / `UPDATE` /
    /// `MERGE INTO` (the CLI's `--json` documents).
    fn sql<'py>(&self, py: Python<'py>, statement: String) -> PyResult<Bound<'py, PyAny>> {
        let cat = self.inner.clone();
        if floe::spec::is_alter_table(&statement) {
            if let Some((from, to)) = floe::spec::parse_rename_table(&statement) {
                let (f, t) = (
                    parse_ident(&from).map_err(to_py)?,
                    parse_ident(&to).map_err(to_py)?,
                );
                run(py, async move { cat.rename_table(&f, &t).await })?;
                return to_py_json(py, &serde_json::json!({"renamed": from, "to": to}));
            }
            let (name, changes) = floe::spec::parse_alter_table(&statement).map_err(to_py)?;
            let id = parse_ident(&name).map_err(to_py)?;
            let r = run(py, async move {
                floe::txn::alter_table(&cat, &id, &changes).await
            })?;
            return to_py_json(py, &floe::report::alter(&name, &r));
        }
        let started = std::time::Instant::now();
        let r = run(py, async move {
            floe::dml::execute_with(&cat, &statement, None, None).await
        })?;
        to_py_json(
            py,
            &floe::report::dml(&r, crate::table::mode_name(r.mode), started),
        )
    }

    /// Drops a table; with `purge`, deletes its files too (the CLI's `drop --json` result).
    #[pyo3(signature = (ident, purge=false))]
    fn drop_table<'py>(
        &self,
        py: Python<'py>,
        ident: String,
        purge: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cat = self.inner.clone();
        let id = parse_ident(&ident).map_err(to_py)?;
        let r = run(py, async move {
            floe::maintenance::drop_table(&cat, &id, purge).await
        })?;
        to_py_json(py, &floe::report::drop(&ident, purge, &r))
    }
}
