//! Iceberg REST catalog client: `rest+http://host:port[/path]` (or `rest+https://`).
//!
//! The server keeps each table's metadata pointer and writes the metadata files; floe sends
//! commits as `TableRequirement`s + `TableUpdate`s ([`changes`]), and a 409 is a conflict that
//! floe's retry re-validates. Authentication: none, a bearer token (`FLOE_REST_TOKEN`), or
//! OAuth2 client credentials (`id:secret` in the URI's user info or `FLOE_REST_CREDENTIAL`),
//! exchanged at `FLOE_REST_OAUTH2_SERVER_URI` (default `<uri>/v1/oauth/tokens`) for a token with
//! scope `FLOE_REST_SCOPE` (default `catalog`); an expired token is refreshed once per request.

pub(crate) mod changes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use iceberg::spec::TableMetadata;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use crate::error::{Error, ErrorKind, Result};
use crate::spec::TableIdent;
use crate::table::ident_name;

/// Whether `uri` names a REST catalog.
pub(crate) fn is_rest_uri(uri: &str) -> bool {
    uri.starts_with("rest+http://") || uri.starts_with("rest+https://")
}

/// `(http[s]://host[:port][/path], userinfo)` of a `rest+http[s]://[userinfo@]host…` URI.
pub(crate) fn parse_uri(uri: &str) -> Result<(String, Option<&str>)> {
    let rest = uri
        .strip_prefix("rest+")
        .filter(|r| r.starts_with("http://") || r.starts_with("https://"))
        .ok_or_else(|| {
            Error::invalid(format!(
                "'{uri}' is not a REST catalog URI; write rest+http://host:port or rest+https://host"
            ))
        })?;
    let (scheme, after) = rest.split_once("://").unwrap_or(("http", rest));
    let (authority, path) = match after.find('/') {
        Some(i) => (&after[..i], after[i..].trim_end_matches('/')),
        None => (after, ""),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if host.is_empty() {
        return Err(Error::invalid(format!(
            "REST catalog URI '{uri}' names no host; write rest+http://host:port"
        )));
    }
    Ok((format!("{scheme}://{host}{path}"), userinfo))
}

#[derive(Debug, Clone)]
enum Auth {
    None,
    Token(String),
    Credential {
        id: String,
        secret: String,
        server_uri: Option<String>,
        scope: String,
    },
}

/// What the server's `GET /v1/config` said.
#[derive(Debug)]
struct ServerConfig {
    /// The path prefix of every other endpoint (`v1/<prefix>/…`).
    prefix: Option<String>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    /// `http://host:port[/path]`, without a trailing slash.
    base: String,
    /// The URI as given, with any secret removed (for messages).
    shown: String,
    warehouse: Option<String>,
    auth: Auth,
    token: Mutex<Option<String>>,
    config: OnceCell<ServerConfig>,
}

/// A REST catalog connection (cheap to clone; contacted on first use).
#[derive(Debug, Clone)]
pub(crate) struct RestBackend {
    inner: Arc<Inner>,
}

impl RestBackend {
    /// The catalog URI without secrets, for messages.
    pub(crate) fn uri(&self) -> &str {
        &self.inner.shown
    }
}

/// The result of a commit request.
pub(crate) enum RestCommit {
    /// The server applied it: the new metadata location and metadata.
    Committed(String, Box<TableMetadata>),
    /// A requirement failed (409): nothing changed.
    Conflict(String),
    /// The request was refused (a 4xx other than 409, 501) or never sent: nothing changed.
    Failed(Error),
    /// The outcome is not known (500, 502, 503, 504, other 5xx, timeout, connection lost).
    Unknown(Error),
}

/// How a commit answered with a non-success `status` ended, as the REST spec and Iceberg
/// Java's commit error handler read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommitStatus {
    /// 409: a requirement failed.
    Conflict,
    /// A 4xx other than 409 (and 501 Not Implemented): the server did not apply the change.
    Failed,
    /// Any other status: the change may have been applied.
    Unknown,
}

fn commit_status(status: u16) -> CommitStatus {
    match status {
        409 => CommitStatus::Conflict,
        400..=499 | 501 => CommitStatus::Failed,
        _ => CommitStatus::Unknown,
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Percent-encodes one path segment.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A namespace as a path segment: levels joined by the unit separator (0x1F).
fn ns_segment<'a>(levels: impl IntoIterator<Item = &'a str>) -> String {
    segment(&levels.into_iter().collect::<Vec<_>>().join("\u{1f}"))
}

/// The path segment of a table's namespace.
fn ident_ns(ident: &TableIdent) -> String {
    ns_segment(ident.namespace().iter().map(String::as_str))
}

/// A table identifier as the protocol's JSON writes it.
fn ident_json(ident: &TableIdent) -> Value {
    json!({"namespace": ident.namespace().iter().collect::<Vec<_>>(), "name": ident.name()})
}

impl RestBackend {
    /// Parses `rest+http://[id:secret@]host:port[/path]`; `warehouse` is sent to
    /// `GET /v1/config`. Nothing is contacted yet.
    pub(crate) fn new(uri: &str, warehouse: Option<&str>) -> Result<Self> {
        let (base, userinfo) = parse_uri(uri)?;
        let credential = userinfo
            .map(|u| u.to_string())
            .or_else(|| env("FLOE_REST_CREDENTIAL"));
        let auth = if let Some(c) = credential {
            let (id, secret) = c.split_once(':').unwrap_or(("", c.as_str()));
            Auth::Credential {
                id: percent_decode(id),
                secret: percent_decode(secret),
                server_uri: env("FLOE_REST_OAUTH2_SERVER_URI"),
                scope: env("FLOE_REST_SCOPE").unwrap_or_else(|| "catalog".into()),
            }
        } else if let Some(t) = env("FLOE_REST_TOKEN") {
            Auth::Token(t)
        } else {
            Auth::None
        };
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| Error::io("cannot build an HTTP client").with_source(e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                shown: format!("rest+{base}"),
                base,
                warehouse: warehouse.map(str::to_string),
                auth,
                token: Mutex::new(None),
                config: OnceCell::new(),
            }),
        })
    }

    /// The catalog URI without credentials.
    pub(crate) fn shown(&self) -> &str {
        &self.inner.shown
    }

    async fn config(&self) -> Result<&ServerConfig> {
        self.inner
            .config
            .get_or_try_init(|| async {
                let mut url = format!("{}/v1/config", self.inner.base);
                if let Some(w) = &self.inner.warehouse {
                    url.push_str(&format!("?warehouse={}", segment(w)));
                }
                let v = self.send(Method::GET, &url, None).await?;
                let mut properties = HashMap::new();
                for part in ["defaults", "overrides"] {
                    if let Some(o) = v.get(part).and_then(Value::as_object) {
                        for (k, val) in o {
                            if let Some(s) = val.as_str() {
                                properties.insert(k.clone(), s.to_string());
                            }
                        }
                    }
                }
                Ok(ServerConfig {
                    prefix: properties.remove("prefix"),
                })
            })
            .await
    }

    async fn url(&self, path: &str) -> Result<String> {
        let cfg = self.config().await?;
        Ok(match &cfg.prefix {
            Some(p) => format!("{}/v1/{}/{path}", self.inner.base, segment(p)),
            None => format!("{}/v1/{path}", self.inner.base),
        })
    }

    fn table_path(ident: &TableIdent) -> String {
        format!(
            "namespaces/{}/tables/{}",
            ident_ns(ident),
            segment(ident.name())
        )
    }

    async fn fetch_token(&self) -> Result<Option<String>> {
        let Auth::Credential {
            id,
            secret,
            server_uri,
            scope,
        } = &self.inner.auth
        else {
            return Ok(match &self.inner.auth {
                Auth::Token(t) => Some(t.clone()),
                _ => None,
            });
        };
        let url = server_uri
            .clone()
            .unwrap_or_else(|| format!("{}/v1/oauth/tokens", self.inner.base));
        let resp = self
            .inner
            .http
            .post(&url)
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", id.as_str()),
                ("client_secret", secret.as_str()),
                ("scope", scope.as_str()),
            ])
            .send()
            .await
            .map_err(|e| {
                Error::io(format!(
                    "cannot reach the OAuth2 token endpoint {url} of REST catalog {}",
                    self.inner.shown
                ))
                .with_source(e)
            })?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(Error::invalid(format!(
                "REST catalog {} refused the client credentials ({status}): {}; check \
                 FLOE_REST_CREDENTIAL or the URI's id:secret",
                self.inner.shown,
                error_message(&body)
            )));
        }
        let v: Value = serde_json::from_str(&body).map_err(|e| {
            Error::corrupt(format!("the token response of {url} is not JSON")).with_source(e)
        })?;
        let token = v
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::corrupt(format!("the token response of {url} has no access_token"))
            })?;
        Ok(Some(token.to_string()))
    }

    async fn token(&self, refresh: bool) -> Result<Option<String>> {
        if !refresh {
            if let Ok(g) = self.inner.token.lock() {
                if let Some(t) = g.as_ref() {
                    return Ok(Some(t.clone()));
                }
            }
        }
        let t = self.fetch_token().await?;
        if let Ok(mut g) = self.inner.token.lock() {
            *g = t.clone();
        }
        Ok(t)
    }

    /// Sends a request and returns the JSON body of a 2xx answer (`null` when empty). Any
    /// other status is an error of the matching kind carrying the server's message.
    async fn send(&self, method: Method, url: &str, body: Option<&Value>) -> Result<Value> {
        let (status, text) = self.exchange(method, url, body).await?;
        if status.is_success() {
            if text.trim().is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&text).map_err(|e| {
                Error::corrupt(format!(
                    "REST catalog {} answered {url} with invalid JSON",
                    self.inner.shown
                ))
                .with_source(e)
            });
        }
        Err(self.status_error(status, &text, url))
    }

    /// Sends a request (refreshing the token once on 401/419) and returns status and body.
    async fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, String)> {
        let mut refresh = false;
        loop {
            let mut req = self.inner.http.request(method.clone(), url);
            if let Some(t) = self.token(refresh).await? {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req
                    .header("content-type", "application/json")
                    .body(serde_json::to_vec(b)?);
            }
            let resp = req.send().await.map_err(|e| {
                Error::io(format!(
                    "REST catalog {} did not answer {method} {url}; is the server up?",
                    self.inner.shown
                ))
                .with_source(e)
            })?;
            let status = resp.status();
            let text = resp.text().await.map_err(|e| {
                Error::io(format!(
                    "the answer of REST catalog {} to {method} {url} was cut off",
                    self.inner.shown
                ))
                .with_source(e)
            })?;
            let expired = status == StatusCode::UNAUTHORIZED || status.as_u16() == 419;
            if expired && !refresh && matches!(self.inner.auth, Auth::Credential { .. }) {
                refresh = true;
                continue;
            }
            return Ok((status, text));
        }
    }

    fn status_error(&self, status: StatusCode, text: &str, url: &str) -> Error {
        let msg = format!(
            "REST catalog {} answered {status} to {url}: {}",
            self.inner.shown,
            error_message(text)
        );
        let kind = match status.as_u16() {
            404 => ErrorKind::NotFound,
            409 => ErrorKind::AlreadyExists,
            400 | 406 | 422 => ErrorKind::InvalidInput,
            401 | 403 => {
                return Error::invalid(format!(
                    "{msg}; check the credentials (FLOE_REST_CREDENTIAL, FLOE_REST_TOKEN)"
                ))
            }
            501 => ErrorKind::Unsupported,
            _ => ErrorKind::Io,
        };
        Error::new(kind, msg)
    }

    async fn pages(&self, path: &str, key: &str) -> Result<Vec<Value>> {
        let url = self.url(path).await?;
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let u = match &token {
                Some(t) => format!("{url}?pageToken={}", segment(t)),
                None => url.clone(),
            };
            let v = self.send(Method::GET, &u, None).await?;
            if let Some(items) = v.get(key).and_then(Value::as_array) {
                out.extend(items.iter().cloned());
            }
            match v.get("next-page-token").and_then(Value::as_str) {
                Some(t) if !t.is_empty() && token.as_deref() != Some(t) => {
                    token = Some(t.to_string())
                }
                _ => return Ok(out),
            }
        }
    }

    /// Namespaces, dotted (top level).
    pub(crate) async fn namespaces(&self) -> Result<Vec<String>> {
        let items = self.pages("namespaces", "namespaces").await?;
        Ok(items
            .iter()
            .filter_map(Value::as_array)
            .map(|levels| {
                levels
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(".")
            })
            .collect())
    }

    /// Creates a namespace; one that exists already is fine.
    pub(crate) async fn create_namespace(
        &self,
        ns: &str,
        props: &[(String, String)],
    ) -> Result<()> {
        let url = self.url("namespaces").await?;
        let levels: Vec<&str> = ns.split('.').collect();
        let props: HashMap<&str, &str> = props
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        match self
            .send(
                Method::POST,
                &url,
                Some(&json!({"namespace": levels, "properties": props})),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Drops an empty namespace.
    pub(crate) async fn drop_namespace(&self, ns: &str) -> Result<()> {
        let url = self
            .url(&format!("namespaces/{}", ns_segment(ns.split('.'))))
            .await?;
        match self.send(Method::DELETE, &url, None).await {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(Error::invalid(format!(
                "namespace '{ns}' is not empty: drop its tables first"
            ))),
            other => other.map(|_| ()),
        }
    }

    /// Table names of a namespace.
    pub(crate) async fn tables(&self, ns: &str) -> Result<Vec<String>> {
        let items = self
            .pages(
                &format!("namespaces/{}/tables", ns_segment(ns.split('.'))),
                "identifiers",
            )
            .await?;
        Ok(items
            .iter()
            .filter_map(|i| i.get("name").and_then(Value::as_str))
            .map(str::to_string)
            .collect())
    }

    /// A table's current metadata location and metadata; `None` when it does not exist.
    pub(crate) async fn load(&self, ident: &TableIdent) -> Result<Option<(String, TableMetadata)>> {
        let url = self.url(&Self::table_path(ident)).await?;
        match self.send(Method::GET, &url, None).await {
            Ok(v) => self.load_result(ident, v).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn load_result(&self, ident: &TableIdent, v: Value) -> Result<(String, TableMetadata)> {
        let name = ident_name(ident);
        let loc = v
            .get("metadata-location")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "REST catalog {} returned table {name} without a metadata-location",
                    self.inner.shown
                ))
            })?;
        let md = v.get("metadata").cloned().ok_or_else(|| {
            Error::corrupt(format!(
                "REST catalog {} returned table {name} without metadata",
                self.inner.shown
            ))
        })?;
        let md: TableMetadata = serde_json::from_value(md).map_err(|e| {
            Error::corrupt(format!(
                "REST catalog {} returned metadata of table {name} ({loc}) that floe cannot read",
                self.inner.shown
            ))
            .with_source(e)
        })?;
        Ok((loc, md))
    }

    /// Creates a table from a `CreateTableRequest` body; the server writes its first metadata.
    pub(crate) async fn create(
        &self,
        ident: &TableIdent,
        request: Value,
    ) -> Result<(String, TableMetadata)> {
        let url = self
            .url(&format!("namespaces/{}/tables", ident_ns(ident)))
            .await?;
        let v = self.send(Method::POST, &url, Some(&request)).await?;
        self.load_result(ident, v)
    }

    /// Registers an existing metadata file as a table.
    pub(crate) async fn register(
        &self,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> Result<(String, TableMetadata)> {
        let url = self
            .url(&format!("namespaces/{}/register", ident_ns(ident)))
            .await?;
        let v = self
            .send(
                Method::POST,
                &url,
                Some(&json!({"name": ident.name(), "metadata-location": metadata_location})),
            )
            .await?;
        self.load_result(ident, v)
    }

    /// Sends one commit: `base` → `new` as requirements and updates.
    pub(crate) async fn commit(
        &self,
        ident: &TableIdent,
        base: &TableMetadata,
        new: &TableMetadata,
    ) -> RestCommit {
        // Until the request is sent, a failure commits nothing.
        let c = match changes::diff(base, new) {
            Ok(c) => c,
            Err(e) => return RestCommit::Failed(e),
        };
        let url = match self.url(&Self::table_path(ident)).await {
            Ok(u) => u,
            Err(e) => return RestCommit::Failed(e),
        };
        let body = json!({
            "identifier": ident_json(ident),
            "requirements": c.requirements,
            "updates": c.updates,
        });
        let (status, text) = match self.exchange(Method::POST, &url, Some(&body)).await {
            Ok(r) => r,
            Err(e) => return RestCommit::Unknown(e),
        };
        if status.is_success() {
            let parsed = serde_json::from_str(&text)
                .map_err(|e| Error::corrupt("invalid JSON commit response").with_source(e))
                .and_then(|v| self.load_result(ident, v));
            return match parsed {
                Ok((loc, md)) => RestCommit::Committed(loc, Box::new(md)),
                Err(e) => RestCommit::Unknown(e),
            };
        }
        match commit_status(status.as_u16()) {
            CommitStatus::Conflict => RestCommit::Conflict(format!(
                "table {} was changed by another writer ({})",
                ident_name(ident),
                error_message(&text)
            )),
            CommitStatus::Failed => RestCommit::Failed(
                self.status_error(status, &text, &url)
                    .context(format!("commit to table {} refused", ident_name(ident))),
            ),
            // The spec's "commit state unknown" answers: the change may have been applied.
            CommitStatus::Unknown => RestCommit::Unknown(self.status_error(status, &text, &url)),
        }
    }

    /// Renames a table.
    pub(crate) async fn rename(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        let url = self.url("tables/rename").await?;
        self.send(
            Method::POST,
            &url,
            Some(&json!({"source": ident_json(from), "destination": ident_json(to)})),
        )
        .await
        .map(|_| ())
    }

    /// Removes a table from the catalog (files are kept: `purgeRequested=false`).
    pub(crate) async fn drop(&self, ident: &TableIdent) -> Result<()> {
        let url = self.url(&Self::table_path(ident)).await?;
        self.send(Method::DELETE, &format!("{url}?purgeRequested=false"), None)
            .await
            .map(|_| ())
    }
}

/// The `error.message` of an Iceberg REST error body, or the body itself.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            let msg = e.get("message")?.as_str()?.to_string();
            Some(match e.get("type").and_then(Value::as_str) {
                Some(t) => format!("{t}: {msg}"),
                None => msg,
            })
        })
        .unwrap_or_else(|| body.chars().take(300).collect())
}

pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_and_segments() {
        assert!(is_rest_uri("rest+http://127.0.0.1:8181"));
        assert!(!is_rest_uri("http://127.0.0.1:8181"));
        let b = RestBackend::new(
            "rest+http://id:s%40c@127.0.0.1:8181/api/",
            Some("s3://lake"),
        )
        .unwrap();
        assert_eq!(b.inner.base, "http://127.0.0.1:8181/api");
        assert_eq!(b.shown(), "rest+http://127.0.0.1:8181/api");
        match &b.inner.auth {
            Auth::Credential { id, secret, .. } => {
                assert_eq!((id.as_str(), secret.as_str()), ("id", "s@c"))
            }
            other => panic!("{other:?}"),
        }
        assert!(RestBackend::new("rest+http://", None).is_err());
        assert!(RestBackend::new("rest+ftp://x", None).is_err());
        assert_eq!(ns_segment(["a", "b c"]), "a%1Fb%20c");
        assert_eq!(
            error_message(r#"{"error":{"message":"m","type":"T","code":409}}"#),
            "T: m"
        );
    }

    #[test]
    fn commit_answers_per_the_spec() {
        assert_eq!(commit_status(409), CommitStatus::Conflict);
        for s in [400, 401, 403, 404, 406, 419, 422, 501] {
            assert_eq!(commit_status(s), CommitStatus::Failed, "{s}");
        }
        for s in [500, 502, 503, 504, 507, 302] {
            assert_eq!(commit_status(s), CommitStatus::Unknown, "{s}");
        }
    }
}
