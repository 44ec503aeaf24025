//! S3 buckets: configuration from the environment (as the AWS SDK reads it), one cached
//! `AmazonS3` store per bucket, and the once-per-bucket check that the server honours
//! create-only (`If-None-Match: *`) puts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// The environment variable that turns create-only puts off for servers that ignore them.
pub const CONDITIONAL_PUT_ENV: &str = "FLOE_S3_CONDITIONAL_PUT";

/// How S3 buckets are reached. [`S3Options::from_env`] reads the AWS SDK's variables.
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct S3Options {
    /// Endpoint URL (`http://127.0.0.1:8333`); `None` means AWS.
    pub endpoint: Option<String>,
    /// Region (default `us-east-1`).
    pub region: Option<String>,
    /// Access key id (static credentials).
    pub access_key_id: Option<String>,
    /// Secret access key (static credentials).
    pub secret_access_key: Option<String>,
    /// Session token (temporary credentials).
    pub session_token: Option<String>,
    /// Virtual-hosted-style requests (`bucket.host`); path-style (`host/bucket`) otherwise.
    pub virtual_hosted_style: bool,
    /// Whether the server honours `If-None-Match: *` on PUT (default). When `false`,
    /// create-only writes are refused (filesystem catalog) or become plain writes of
    /// uniquely named files (SQL catalog metadata).
    pub conditional_put: bool,
    /// Other `object_store` S3 settings (`aws_copy_if_not_exists`, …) as key/value pairs.
    pub extra: Vec<(String, String)>,
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "***"),
            )
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .field("virtual_hosted_style", &self.virtual_hosted_style)
            .field("conditional_put", &self.conditional_put)
            .field("extra", &self.extra)
            .finish()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

impl S3Options {
    /// A server at `endpoint` in `region` with static credentials, honouring conditional
    /// puts (MinIO, SeaweedFS, a local test server).
    pub fn static_credentials(
        endpoint: impl Into<String>,
        region: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: Some(endpoint.into()),
            region: Some(region.into()),
            access_key_id: Some(access_key_id.into()),
            secret_access_key: Some(secret_access_key.into()),
            conditional_put: true,
            ..Self::default()
        }
    }

    /// Reads `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` / `AWS_ENDPOINT`,
    /// `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_S3_FORCE_PATH_STYLE`, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`,
    /// `AWS_COPY_IF_NOT_EXISTS` and `FLOE_S3_CONDITIONAL_PUT` (`disabled` turns create-only
    /// puts off). Path-style requests are the default; virtual-hosted style only when
    /// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true` and no `AWS_S3_FORCE_PATH_STYLE=true`.
    pub fn from_env() -> Result<Self> {
        let endpoint = env("AWS_ENDPOINT_URL_S3")
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .or_else(|| env("AWS_ENDPOINT"));
        let force_path = env("AWS_S3_FORCE_PATH_STYLE").is_some_and(|v| truthy(&v));
        let virtual_hosted =
            !force_path && env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST").is_some_and(|v| truthy(&v));
        let conditional_put = match env(CONDITIONAL_PUT_ENV) {
            None => true,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "enabled" | "etag" | "true" | "1" => true,
                "disabled" | "false" | "0" => false,
                other => {
                    return Err(Error::invalid(format!(
                        "{CONDITIONAL_PUT_ENV}='{other}' is not understood; use 'enabled' (default) or 'disabled'"
                    )))
                }
            },
        };
        let mut extra = Vec::new();
        if let Some(v) = env("AWS_COPY_IF_NOT_EXISTS") {
            extra.push(("aws_copy_if_not_exists".to_string(), v));
        }
        Ok(Self {
            endpoint,
            region: env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")),
            access_key_id: env("AWS_ACCESS_KEY_ID"),
            secret_access_key: env("AWS_SECRET_ACCESS_KEY"),
            session_token: env("AWS_SESSION_TOKEN"),
            virtual_hosted_style: virtual_hosted,
            conditional_put,
            extra,
        })
    }

    fn describe(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| "AWS S3".to_string())
    }

    /// Builds the store of one bucket.
    fn build(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_region(self.region.clone().unwrap_or_else(|| "us-east-1".into()))
            .with_virtual_hosted_style_request(self.virtual_hosted_style);
        if let Some(e) = &self.endpoint {
            b = b
                .with_endpoint(e.clone())
                .with_allow_http(e.starts_with("http://"));
        }
        if let (Some(k), Some(s)) = (&self.access_key_id, &self.secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            if let Some(t) = &self.session_token {
                b = b.with_token(t);
            }
        }
        for (k, v) in &self.extra {
            let key = k.parse().map_err(|e| {
                Error::invalid(format!(
                    "S3 option '{k}' is not an object_store setting: {e}"
                ))
            })?;
            b = b.with_config(key, v);
        }
        let store = b.build().map_err(|e| {
            Error::invalid(format!(
                "cannot configure S3 bucket '{bucket}' at {}: {e}; check the AWS_* environment \
                 (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
                self.describe()
            ))
        })?;
        Ok(Arc::new(store))
    }
}

/// One bucket's store and whether its create-only puts were checked.
#[derive(Debug)]
pub(crate) struct Bucket {
    pub(crate) name: String,
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) conditional_put: bool,
    endpoint: String,
    probed: tokio::sync::OnceCell<()>,
}

impl Bucket {
    pub(crate) fn new(
        name: &str,
        endpoint: &str,
        store: Arc<dyn ObjectStore>,
        conditional_put: bool,
    ) -> Self {
        Self {
            name: name.to_string(),
            store,
            conditional_put,
            endpoint: endpoint.to_string(),
            probed: tokio::sync::OnceCell::new(),
        }
    }

    /// Checks once (per bucket and runtime) that a create-only put of an existing key
    /// fails; the probe object goes next to `key`, the first file created, with its suffix
    /// (S3 table buckets accept only the Iceberg layout's names).
    pub(crate) async fn ensure_conditional_put(&self, key: &str) -> Result<()> {
        self.probed
            .get_or_try_init(|| {
                probe_conditional_put(&*self.store, &self.name, &self.endpoint, key)
            })
            .await
            .map(|_| ())
    }
}

/// Writes a probe object twice with `PutMode::Create`: the second write must fail with
/// `AlreadyExists`. A server that accepts it (ignores `If-None-Match`) would let two
/// writers overwrite each other's metadata files, so this fails and names the option.
pub(crate) async fn probe_conditional_put(
    store: &dyn ObjectStore,
    bucket: &str,
    endpoint: &str,
    next_to: &str,
) -> Result<()> {
    let (prefix, file) = next_to
        .trim_matches('/')
        .rsplit_once('/')
        .unwrap_or(("", next_to.trim_matches('/')));
    let suffix = if file.ends_with(".metadata.json") {
        ".metadata.json"
    } else {
        file.rfind('.').map(|i| &file[i..]).unwrap_or("")
    };
    let name = format!(
        "floe-conditional-put-probe-{}{suffix}",
        uuid::Uuid::new_v4()
    );
    let key = if prefix.is_empty() {
        name
    } else {
        format!("{prefix}/{name}")
    };
    let path = StorePath::parse(&key)
        .map_err(|e| Error::invalid(format!("invalid probe key '{key}': {e}")))?;
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let loc = format!("s3://{bucket}/{key}");
    let unsafe_server = |what: &str| {
        Error::unsupported(format!(
            "S3 bucket '{bucket}' at {endpoint} {what}: a create-only put (If-None-Match: *) of \
             the existing object '{loc}' was not refused, so floe cannot create metadata files \
             without risking a silent overwrite. Use a server that honours conditional puts, or \
             set {CONDITIONAL_PUT_ENV}=disabled (then only a SQL catalog may commit: its \
             compare-and-swap protects commits and metadata file names are unique; a \
             filesystem catalog refuses to commit)"
        ))
    };
    let first = store
        .put_opts(&path, PutPayload::from(Bytes::from_static(b"1")), create())
        .await;
    match first {
        Ok(_) => {}
        Err(object_store::Error::NotImplemented { .. }) => {
            return Err(unsafe_server("does not support conditional puts"))
        }
        Err(e) => {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "checking conditional puts on S3 bucket '{bucket}' at {endpoint} (writing \
                     '{loc}') failed: is the server reachable and are the credentials right?"
                ),
            )
            .with_source(e))
        }
    }
    let second = store
        .put_opts(&path, PutPayload::from(Bytes::from_static(b"2")), create())
        .await;
    let _ = store.delete(&path).await;
    match second {
        Err(object_store::Error::AlreadyExists { .. })
        | Err(object_store::Error::Precondition { .. }) => Ok(()),
        Ok(_) => Err(unsafe_server("ignores conditional puts")),
        Err(object_store::Error::NotImplemented { .. }) => {
            Err(unsafe_server("does not support conditional puts"))
        }
        Err(e) => Err(Error::new(
            ErrorKind::Io,
            format!(
                "checking conditional puts on S3 bucket '{bucket}' at {endpoint} (second write \
                 of '{loc}') failed"
            ),
        )
        .with_source(e)),
    }
}

/// Stores are cached per settings, bucket and tokio runtime: an HTTP connection pool must not
/// outlive the runtime its connections were made on ("runtime dropped the dispatch task").
type Registry = Mutex<HashMap<(S3Options, String, Option<tokio::runtime::Id>), Arc<Bucket>>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The cached bucket for `options` in the current runtime (built on first use).
pub(crate) fn bucket(options: &S3Options, name: &str) -> Result<Arc<Bucket>> {
    let runtime = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
    let key = (options.clone(), name.to_string(), runtime);
    let mut map = registry()
        .lock()
        .map_err(|_| Error::io("S3 store cache poisoned by a panic"))?;
    if let Some(b) = map.get(&key) {
        return Ok(b.clone());
    }
    let store = options.build(name)?;
    let b = Arc::new(Bucket::new(
        name,
        &options.describe(),
        store,
        options.conditional_put,
    ));
    map.insert(key, b.clone());
    Ok(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use futures::stream::BoxStream;
    use object_store::memory::InMemory;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
        PutMultipartOptions, PutResult,
    };

    /// A store that ignores `PutMode` (as Garage does): every put overwrites.
    #[derive(Debug, Default)]
    pub(crate) struct IgnoresConditions(pub(crate) InMemory);

    impl std::fmt::Display for IgnoresConditions {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "IgnoresConditions")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for IgnoresConditions {
        async fn put_opts(
            &self,
            location: &StorePath,
            payload: PutPayload,
            _opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.0
                .put_opts(location, payload, PutOptions::default())
                .await
        }
        async fn put_multipart_opts(
            &self,
            location: &StorePath,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &StorePath,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<StorePath>>,
        ) -> BoxStream<'static, object_store::Result<StorePath>> {
            self.0.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&StorePath>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&StorePath>,
        ) -> object_store::Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &StorePath,
            to: &StorePath,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn probe_accepts_a_store_that_refuses_overwrites() {
        let store = InMemory::new();
        probe_conditional_put(&store, "b", "mem", "wh/db/t/metadata/00001-x.metadata.json")
            .await
            .unwrap();
        // The probe object is gone.
        let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(None))
            .await
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn probe_detects_a_store_that_ignores_conditional_puts() {
        let store = IgnoresConditions::default();
        let e = probe_conditional_put(&store, "b", "http://x", "wh/x.parquet")
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{msg}");
        assert!(msg.contains("ignores conditional puts"), "{msg}");
        assert!(msg.contains("FLOE_S3_CONDITIONAL_PUT=disabled"), "{msg}");
        assert!(
            msg.contains("s3://b/wh/floe-conditional-put-probe-"),
            "{msg}"
        );
    }
}
