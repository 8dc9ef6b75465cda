use memoryd::app::{RunningServer, start};
use memoryd::config::{Config, LlmApi, ProviderKind};
use reqwest::{Client, Method, RequestBuilder, Response};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const ADMIN_TOKEN: &str = "test-admin-token";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
    /// Postgres, the workspace files in the tests' object store.
    Bucket,
}

impl Backend {
    /// The database this backend keeps its records in.
    pub fn database(self) -> Self {
        match self {
            Self::Bucket => Self::Postgres,
            database => database,
        }
    }
}

/// The Postgres the tests use: `MEMORYD_TEST_DATABASE_URL`, else a
/// `memoryd_test` database on the local server, created when missing.
pub async fn postgres_url() -> String {
    if let Ok(url) = std::env::var("MEMORYD_TEST_DATABASE_URL") {
        return url;
    }
    let admin_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let base = admin_url.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin_url.clone());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
        .await
        .expect("the tests need a Postgres: set MEMORYD_TEST_DATABASE_URL or DATABASE_URL, or run scripts/test.sh");
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = 'memoryd_test'")
        .fetch_optional(&mut conn)
        .await
        .unwrap();
    if exists.is_none() {
        // Parallel test processes race here; losing the race is fine.
        let _ = sqlx::query("CREATE DATABASE memoryd_test").execute(&mut conn).await;
    }
    format!("{base}/memoryd_test")
}

/// A Postgres URL whose `search_path` is a schema of its own, so that tests
/// running at the same time never see (or claim) each other's rows.
pub async fn isolated_postgres_url() -> String {
    let url = postgres_url().await;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}

/// A connection of the test's own to memoryd's database.
pub enum Database {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Database {
    pub async fn connect(backend: Backend, url: &str) -> Self {
        match backend.database() {
            Backend::Sqlite => Self::Sqlite(<sqlx::SqliteConnection as sqlx::Connection>::connect(url).await.unwrap()),
            _ => Self::Postgres(<sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap()),
        }
    }

    pub async fn run(&mut self, sql: &'static str) {
        match self {
            Self::Postgres(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
            Self::Sqlite(c) => sqlx::raw_sql(sql).execute(c).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The one text a `SELECT …` answers.
    pub async fn text(&mut self, sql: &str) -> String {
        let sql_text = || sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Self::Postgres(c) => sqlx::query_scalar::<_, String>(sql_text()).fetch_one(c).await,
            Self::Sqlite(c) => sqlx::query_scalar::<_, String>(sql_text()).fetch_one(c).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The one number a `SELECT count(*) …` answers.
    pub async fn count(&mut self, sql: &str) -> i64 {
        let sql_text = || sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Self::Postgres(c) => sqlx::query_scalar::<_, i64>(sql_text()).fetch_one(c).await,
            Self::Sqlite(c) => sqlx::query_scalar::<_, i64>(sql_text()).fetch_one(c).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

pub struct TestApp {
    pub server: Option<RunningServer>,
    pub base: String,
    pub client: Client,
    pub data_dir: PathBuf,
    /// The database this memoryd uses (a schema of its own on Postgres).
    pub database_url: String,
    /// Where its workspace files are in the tests' bucket (`Backend::Bucket`).
    pub bucket_prefix: Option<String>,
    _dir: tempfile::TempDir,
}

pub struct Tenant {
    pub id: String,
    pub key: String,
}

impl TestApp {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    pub async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database_url = match backend.database() {
            Backend::Sqlite => None,
            _ => Some(isolated_postgres_url().await),
        };
        let mut config = Config::embedded(dir.path().join("data"), database_url);
        let mut bucket_prefix = None;
        if backend == Backend::Bucket {
            let (url, prefix) = crate::s3::fresh_prefix().await;
            crate::s3::store_in(&mut config, &url);
            bucket_prefix = Some(prefix);
        }
        config.admin_token = Some(ADMIN_TOKEN.into());
        config.model.base_url = "http://127.0.0.1:9/v1".into();
        config.model.timeout = Duration::from_secs(10);
        config.jobs.worker_concurrency = 4;
        config.jobs.max_attempts = 3;
        config.jobs.retry_base = Duration::from_millis(50);
        config.jobs.lease = Duration::from_secs(30);
        adjust(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (data_dir, database_url) = (config.data_dir.clone(), config.database_url());
        let server = start(config, listener).await.expect("memoryd starts");
        let base = format!("http://{}", server.addr);
        Self { server: Some(server), base, client: Client::new(), data_dir, database_url, bucket_prefix, _dir: dir }
    }

    pub fn request(&self, method: Method, path: &str, key: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{}", self.base, path)).bearer_auth(key)
    }

    /// Sends a request without a body and returns its JSON answer.
    pub async fn json(&self, method: Method, path: &str, key: &str) -> Value {
        self.request(method, path, key).send().await.unwrap().json().await.unwrap()
    }

    pub async fn tenant(&self) -> Tenant {
        let res = self
            .request(Method::POST, "/v1/admin/tenants", ADMIN_TOKEN)
            .json(&json!({"name": "acme"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201);
        let body: Value = res.json().await.unwrap();
        Tenant { id: body["tenant_id"].as_str().unwrap().into(), key: body["api_key"].as_str().unwrap().into() }
    }

    pub async fn post_segment(&self, key: &str, session: &str, layout: &str, body: Value) -> Response {
        self.request(Method::POST, &format!("/v1/sessions/{session}/layouts/{layout}/segments"), key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Polls the tenant's jobs of `kind` until none is queued or running.
    pub async fn settled_jobs(&self, key: &str, query: &str) -> Vec<Value> {
        let started = std::time::Instant::now();
        loop {
            let body = self.json(Method::GET, &format!("/v1/jobs?{query}"), key).await;
            let jobs = body["jobs"].as_array().unwrap().clone();
            if !jobs.is_empty() && jobs.iter().all(|j| !matches!(j["state"].as_str(), Some("queued" | "running"))) {
                return jobs;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "jobs did not settle: {jobs:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Until no publish is under way in this memoryd's data dir (its manifests gone).
    pub async fn publishes_done(&self) {
        let started = std::time::Instant::now();
        let pending = || {
            std::fs::read_dir(self.data_dir.join("publish"))
                .map(|entries| entries.flatten().any(|e| e.path().extension().is_some_and(|x| x == "json")))
                .unwrap_or(false)
        };
        while pending() {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "a publish never finished");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Polls a job until it is neither queued nor running; its last state.
    pub async fn wait_for_job(&self, key: &str, job_id: &str) -> Value {
        let started = std::time::Instant::now();
        loop {
            let job = self.json(Method::GET, &format!("/v1/jobs/{job_id}"), key).await;
            if !matches!(job["state"].as_str(), Some("queued" | "running")) {
                return job;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "the job did not finish: {job}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub fn workspace_dir(&self, tenant: &Tenant, workspace: &str) -> PathBuf {
        self.data_dir.join("workspaces").join(&tenant.id).join(workspace)
    }

    /// A workspace file as memoryd's readers see it, wherever the files
    /// live: on the volume, or (a bucket) the current version of a memory
    /// file, a rollout's object and journal; `None` when absent.
    pub async fn file_bytes(&self, tenant: &Tenant, workspace: &str, path: &str) -> Option<Vec<u8>> {
        let bucket = self.bucket_prefix.as_deref().map(|prefix| (self.database_url.as_str(), prefix));
        stored_file(&self.data_dir, bucket, &tenant.id, workspace, path).await
    }

    /// The paths of the workspace's files under folder `dir` (memory files
    /// on a bucket: rollouts there are not files), wherever they live.
    pub async fn files_under(&self, tenant: &Tenant, workspace: &str, dir: &str) -> Vec<String> {
        let Some(_) = &self.bucket_prefix else {
            let root = self.workspace_dir(tenant, workspace);
            let found = walk(&root.join(dir));
            return found.iter().map(|p| p.strip_prefix(&root).unwrap().to_string_lossy().into_owned()).collect();
        };
        current_files_under(&self.database_url, &tenant.id, workspace, dir).await
    }

    /// Every file of a workspace as memoryd's readers see it, by path:
    /// the folder's on a volume; in a bucket the current memory files and
    /// every rollout the database holds lines of.
    pub async fn all_files(&self, tenant: &Tenant, workspace: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut found = std::collections::BTreeMap::new();
        let Some(_) = &self.bucket_prefix else {
            let root = self.workspace_dir(tenant, workspace);
            for path in walk(&root) {
                let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                found.insert(relative, std::fs::read(&path).unwrap());
            }
            return found;
        };
        let store = memoryd::store::connect(&self.database_url).await.unwrap();
        let (id, ws) = (tenant.id.parse().unwrap(), memoryd::domain::ids::WorkspaceName::parse(workspace).unwrap());
        let mut paths: Vec<String> =
            store.current_files(id, &ws).await.unwrap().files.into_iter().map(|f| f.0).collect();
        paths.extend(store.export_view(id, &ws).await.unwrap().rollouts.into_iter().map(|r| r.rollout_path));
        for path in paths {
            let bytes = self.file_bytes(tenant, workspace, &path).await.unwrap_or_else(|| panic!("{path} unreadable"));
            found.insert(path, bytes);
        }
        found
    }

    /// What is stored of a workspace, once what its last job left to do
    /// afterwards is done (up to ten seconds): the files in its folder on a
    /// volume, every object under its prefix in a bucket (memoryd's own
    /// included); relative paths.
    pub async fn stored_of(&self, tenant: &Tenant, workspace: &str) -> Vec<String> {
        let started = std::time::Instant::now();
        loop {
            let stored = self.stored_now(tenant, workspace).await;
            if stored.is_empty() || started.elapsed() > std::time::Duration::from_secs(10) {
                return stored;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// What is stored of a workspace now, as [`Self::stored_of`] tells it.
    pub async fn stored_now(&self, tenant: &Tenant, workspace: &str) -> Vec<String> {
        match &self.bucket_prefix {
            None => {
                let root = self.workspace_dir(tenant, workspace);
                walk(&root).iter().map(|p| p.strip_prefix(&root).unwrap().to_string_lossy().into_owned()).collect()
            }
            Some(prefix) => {
                let under = format!("{prefix}/{}/{workspace}", tenant.id);
                crate::s3::objects_under(&under).await.into_keys().collect()
            }
        }
    }

    /// A workspace file as a reader outside memoryd sees it: the volume's
    /// file, or the object at its plain key in a bucket; `None` when absent.
    pub async fn outside_bytes(&self, tenant: &Tenant, workspace: &str, path: &str) -> Option<Vec<u8>> {
        outside_file(&self.data_dir, self.bucket_prefix.as_deref(), &tenant.id, workspace, path).await
    }

    /// [`Self::file_bytes`] as text, which must be there.
    pub async fn file_text(&self, tenant: &Tenant, workspace: &str, path: &str) -> String {
        let bytes = self.file_bytes(tenant, workspace, path).await;
        String::from_utf8(bytes.unwrap_or_else(|| panic!("{path} is not there"))).unwrap()
    }
}

/// Makes a test app use the fake model over `api` (`responses` or `chat_completions`).
pub fn use_model(fake: &crate::fake_llm::FakeLlm, api: &str) -> impl FnOnce(&mut Config) + use<> {
    let base = fake.base_url.clone();
    let api = api.to_owned();
    move |c: &mut Config| {
        c.model.provider = Some(ProviderKind::Openai);
        c.model.base_url = base;
        c.model.api = if api == "chat_completions" { LlmApi::ChatCompletions } else { LlmApi::Responses };
        c.model.api_key = Some("test-model-key".into());
    }
}

/// Status, problem `code` and body of a response.
pub async fn status_code_body(res: Response) -> (u16, String, Value) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    let code = body["code"].as_str().unwrap_or("").to_owned();
    (status, code, body)
}

/// One test module of `$name`: a `#[tokio::test]` per row, each calling
/// `$name` with its backend.
#[macro_export]
macro_rules! backend_rows {
    ([$($row:ident => $backend:ident),*] $name:ident) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $row() {
                    super::$name($crate::harness::Backend::$backend).await
                }
            )*
        }
    };
}

/// Runs each listed test body once against Postgres, once against SQLite
/// and once against Postgres with the workspace files in an object store.
#[macro_export]
macro_rules! every_backend {
    ($($name:ident),* $(,)?) => {
        $($crate::backend_rows!([postgres => Postgres, sqlite => Sqlite, bucket => Bucket] $name);)*
    };
}

/// Runs each listed test body once against Postgres and once against SQLite
/// (tests of the database alone, or that choose their storage themselves).
#[macro_export]
macro_rules! both_databases {
    ($($name:ident),* $(,)?) => {
        $($crate::backend_rows!([postgres => Postgres, sqlite => Sqlite] $name);)*
    };
}

/// Runs each listed test body once against Postgres, its replicas sharing
/// one volume, and once with the workspace files in an object store, each
/// replica with a data dir of its own (`s3::replica_env`): tests of several
/// replicas, which SQLite does not serve.
#[macro_export]
macro_rules! replicated {
    ($($name:ident),* $(,)?) => {
        $($crate::backend_rows!([postgres => Postgres, bucket => Bucket] $name);)*
    };
}

/// A workspace file of the deployment with data dir `data_dir` as memoryd's
/// readers see it: on the volume, or (`bucket`: its database and key prefix)
/// the current version of a memory file or a rollout's object and journal.
pub async fn stored_file(
    data_dir: &Path,
    bucket: Option<(&str, &str)>,
    tenant: &str,
    workspace: &str,
    path: &str,
) -> Option<Vec<u8>> {
    let Some((database_url, prefix)) = bucket else {
        return std::fs::read(data_dir.join("workspaces").join(tenant).join(workspace).join(path)).ok();
    };
    let store = memoryd::store::connect(database_url).await.unwrap();
    let url = format!("s3://{}/{prefix}", crate::s3::BUCKET).parse().unwrap();
    let bucket = memoryd::bucket::Bucket::new(url, crate::s3::bucket());
    let (id, ws) = (tenant.parse().unwrap(), memoryd::domain::ids::WorkspaceName::parse(workspace).unwrap());
    if let Some(version) = store.current_file(id, &ws, path).await.unwrap() {
        return Some(bucket.read_version(id, &ws, path, &version).await.unwrap());
    }
    let rollout = memoryd::domain::ids::RolloutId::from_file_name(path)?;
    for stored in memoryd::store::with_implicit_default(store.stored_layouts(id).await.unwrap()) {
        let at = memoryd::store::journal_records::RolloutAt {
            tenant: id,
            workspace: &ws,
            layout: &stored.name,
            rollout: &rollout,
        };
        let sessions = stored.layout.sessions_dir.normalized.as_str();
        if path.strip_prefix(sessions).is_some_and(|rest| rest.starts_with('/'))
            && let Some(bytes) = bucket.rollout_bytes(store.as_ref(), at, path).await.unwrap()
        {
            return Some(bytes);
        }
    }
    None
}

/// A workspace file of the deployment with data dir `data_dir` as a reader
/// outside memoryd sees it: the volume's file, or the object at its plain
/// key under `bucket_prefix`; `None` when absent.
pub async fn outside_file(
    data_dir: &Path,
    bucket_prefix: Option<&str>,
    tenant: &str,
    workspace: &str,
    path: &str,
) -> Option<Vec<u8>> {
    match bucket_prefix {
        None => std::fs::read(data_dir.join("workspaces").join(tenant).join(workspace).join(path)).ok(),
        Some(prefix) => crate::s3::object(&format!("{prefix}/{tenant}/{workspace}/{path}")).await,
    }
}

/// The paths of a workspace's current memory files under folder `dir` (a
/// bucket's: the database records them), of the deployment on `database_url`.
pub async fn current_files_under(database_url: &str, tenant: &str, workspace: &str, dir: &str) -> Vec<String> {
    let store = memoryd::store::connect(database_url).await.unwrap();
    let (id, ws) = (tenant.parse().unwrap(), memoryd::domain::ids::WorkspaceName::parse(workspace).unwrap());
    let current = store.current_files(id, &ws).await.unwrap();
    current.files.into_iter().map(|(path, _)| path).filter(|p| p.starts_with(&format!("{dir}/"))).collect()
}

/// Every file under `dir` (none when it is not there).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let (mut found, mut stack) = (Vec::new(), vec![dir.to_path_buf()]);
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() { stack.push(path) } else { found.push(path) }
        }
    }
    found
}
