//! PostgreSQL connections for the SQL catalog (the synchronous `postgres` client; callers run
//! it on a blocking thread).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls};

use super::{Conn, DbError};
use crate::error::{Error, Result};

/// Where a PostgreSQL catalog lives: the parsed connection URI.
#[derive(Debug)]
pub(crate) struct PgTarget {
    config: Config,
    /// The URI without its password, for messages.
    display: String,
    /// The catalog tables have been checked (and created when missing) once.
    ready: AtomicBool,
}

/// Whether `uri` names a PostgreSQL catalog: `postgresql://`, `postgres://`, or SQLAlchemy's
/// `postgresql+<driver>://` (as pyiceberg is configured).
pub(crate) fn is_postgres_uri(uri: &str) -> bool {
    strip_driver(uri).is_some()
}

/// `postgresql+psycopg2://…` → `postgresql://…`; `None` when not a PostgreSQL URI.
fn strip_driver(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let base = scheme.split('+').next().unwrap_or(scheme);
    matches!(base, "postgresql" | "postgres").then(|| format!("postgresql://{rest}"))
}

/// The URI with the password replaced by `***`.
fn redact(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "postgresql://<unparsable URI>".to_string(),
    }
}

impl PgTarget {
    /// Parses `postgresql://user[:password]@host[:port]/database[?options]`. Nothing is
    /// contacted yet: the first operation connects (and creates the catalog tables).
    pub(crate) fn parse(uri: &str) -> Result<Self> {
        let plain = strip_driver(uri).ok_or_else(|| {
            Error::invalid(format!(
                "'{}' is not a PostgreSQL URI; use postgresql://user[:password]@host:port/database",
                redact(uri)
            ))
        })?;
        let display = redact(&plain);
        let mut config = Config::from_str(&plain).map_err(|e| {
            Error::invalid(format!(
                "postgres catalog {display}: cannot parse the URI ({e}); use postgresql://user[:password]@host:port/database"
            ))
        })?;
        if config.get_hosts().is_empty() {
            return Err(Error::invalid(format!(
                "postgres catalog {display}: the URI names no host; use postgresql://user[:password]@host:port/database"
            )));
        }
        if config.get_dbname().is_none() {
            return Err(Error::invalid(format!(
                "postgres catalog {display}: the URI names no database; use postgresql://user[:password]@host:port/database"
            )));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.application_name("floe");
        Ok(Self {
            config,
            display,
            ready: AtomicBool::new(false),
        })
    }

    /// The URI without its password.
    pub(crate) fn display(&self) -> &str {
        &self.display
    }

    fn host(&self) -> String {
        match self.config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".to_string(),
        }
    }

    fn port(&self) -> u16 {
        self.config.get_ports().first().copied().unwrap_or(5432)
    }

    fn host_port(&self) -> String {
        format!("{}:{}", self.host(), self.port())
    }

    fn user(&self) -> String {
        self.config
            .get_user()
            .unwrap_or("<current user>")
            .to_string()
    }

    fn db(&self) -> &str {
        self.config.get_dbname().unwrap_or("")
    }

    /// Turns a connection failure into an error that says what to do.
    fn connect_error(&self, e: postgres::Error) -> Error {
        let what = format!("postgres catalog {}", self.display);
        let hint = match e.code() {
            Some(c) if *c == SqlState::INVALID_CATALOG_NAME => format!(
                "database '{db}' does not exist on {hp}; create it first (CREATE DATABASE \"{db}\", or `createdb -h {h} -p {p} -U {u} {db}`)",
                db = self.db(),
                hp = self.host_port(),
                h = self.host(),
                p = self.port(),
                u = self.user(),
            ),
            Some(c)
                if *c == SqlState::INVALID_PASSWORD
                    || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
            {
                format!(
                    "PostgreSQL at {} refused user '{}': check the user and password in the catalog URI",
                    self.host_port(),
                    self.user()
                )
            }
            Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS => format!(
                "PostgreSQL at {} has no free connection slots; retry later or raise max_connections",
                self.host_port()
            ),
            Some(_) => format!("PostgreSQL at {} refused the connection", self.host_port()),
            None => format!(
                "cannot connect: is PostgreSQL running at {} and accepting TCP connections?",
                self.host_port()
            ),
        };
        Error::io(format!("{what}: {hint} ({})", detail(&e))).with_source(e)
    }

    /// Opens a connection. The first one of this catalog also checks the catalog tables,
    /// with `init` creating them when missing.
    pub(crate) fn connect(&self, init: impl FnOnce(&mut dyn Conn) -> Result<()>) -> Result<PgConn> {
        let client = self
            .config
            .connect(NoTls)
            .map_err(|e| self.connect_error(e))?;
        let mut c = PgConn { client };
        if !self.ready.load(Ordering::Acquire) {
            init(&mut c).map_err(|e| {
                e.context(format!(
                    "postgres catalog {}: checking the catalog tables",
                    self.display
                ))
            })?;
            self.ready.store(true, Ordering::Release);
        }
        Ok(c)
    }
}

/// One PostgreSQL connection, used for one catalog operation and then closed.
pub(crate) struct PgConn {
    client: Client,
}

/// `?N` placeholders (SQLite style, as the shared SQL is written) → `$N`.
fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// The informative part of a client error: the server's message, or the innermost cause
/// (such as "Connection refused").
fn detail(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_string();
    }
    let mut last: &dyn std::error::Error = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// A statement's error; the caller prefixes the catalog and the operation.
fn pg_err(e: postgres::Error) -> Error {
    let msg = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None if e.is_closed() => {
            format!("{e} (the connection to PostgreSQL was lost; is the server still running?)")
        }
        None => e.to_string(),
    };
    Error::io(msg).with_source(e)
}

fn bind<'a>(params: &'a [&'a str]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

impl Conn for PgConn {
    fn execute(&mut self, sql: &str, params: &[&str]) -> std::result::Result<u64, DbError> {
        match self
            .client
            .execute(dollar_params(sql).as_str(), &bind(params))
        {
            Ok(n) => Ok(n),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(DbError::Unique),
            // The server answered with an error: the (autocommit) statement was not applied.
            // A lost connection leaves that unknown.
            Err(e) if e.as_db_error().is_some() => Err(DbError::Refused(pg_err(e))),
            Err(e) => Err(DbError::Other(pg_err(e))),
        }
    }

    fn column(&mut self, sql: &str, params: &[&str]) -> Result<Vec<Option<String>>> {
        let rows = self
            .client
            .query(dollar_params(sql).as_str(), &bind(params))
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| r.try_get::<_, Option<String>>(0).map_err(pg_err))
            .collect()
    }

    fn table_exists(&mut self, table: &str) -> Result<bool> {
        let r = self.column("SELECT to_regclass(?1)::text", &[table])?;
        Ok(r.into_iter().next().flatten().is_some())
    }

    fn has_type_column(&mut self) -> Result<bool> {
        let r = self.column(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass('iceberg_tables')
             AND attname = 'iceberg_type' AND NOT attisdropped",
            &[],
        )?;
        Ok(!r.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert!(is_postgres_uri("postgresql://u@127.0.0.1:5432/db"));
        assert!(is_postgres_uri("postgres://u@h/db"));
        assert!(is_postgres_uri("postgresql+psycopg2://u@h/db"));
        assert!(!is_postgres_uri("sqlite:///x.db"));
        assert!(!is_postgres_uri("file:///w"));
        let t = PgTarget::parse("postgres://alice:s3cret@127.0.0.1:5433/cat").unwrap();
        assert!(!t.display().contains("s3cret"), "{}", t.display());
        assert!(t.display().contains("alice"), "{}", t.display());
        assert_eq!(t.host_port(), "127.0.0.1:5433");
        let e = PgTarget::parse("postgresql://u:pw@127.0.0.1:5432").unwrap_err();
        assert!(e.to_string().contains("no database"), "{e}");
        assert!(!e.to_string().contains("pw@"), "{e}");
    }

    #[test]
    fn placeholders() {
        assert_eq!(
            dollar_params("a = ?1 AND b = ?12 OR c = '?'"),
            "a = $1 AND b = $12 OR c = '?'"
        );
    }

    #[test]
    fn refused_connection_says_what_to_do() {
        // A port nothing listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let t = PgTarget::parse(&format!("postgresql://u@127.0.0.1:{port}/db")).unwrap();
        let e = t.connect(|_| Ok(())).err().unwrap();
        let s = e.to_string();
        assert!(s.contains("is PostgreSQL running at 127.0.0.1"), "{s}");
        assert!(
            s.contains("postgres catalog postgresql://u@127.0.0.1"),
            "{s}"
        );
    }
}
