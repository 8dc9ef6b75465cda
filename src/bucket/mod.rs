//! Workspace files in an object store (S3 and compatibles): where a bucket
//! is (`s3://<bucket>/<prefix>`), the one function that turns a workspace
//! path into an object key, and the client, configured from the standard
//! `AWS_*` variables. A workspace's objects hold the same tree as its folder
//! on a volume: `<prefix>/<tenant_id>/<workspace>/<path in the workspace>`.

pub mod cache;
pub mod copy;
pub mod files;
pub mod imports;
mod reach;
pub mod recent;
pub mod rollouts;

use crate::domain::ids::WorkspaceName;
use crate::workspace::{PathError, each_relative_part};
use object_store::ObjectStore;
use object_store::path::Path as ObjectKey;
use std::sync::Arc;
use uuid::Uuid;

/// A request's limit, unless `AWS_TIMEOUT` says otherwise: a whole
/// rollout or a multipart part on a slow link (600 s, as the model's).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// How many times a failed request is tried again.
const RETRIES: usize = 5;

/// Workspace files in a bucket: where it is, and a client for it.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub url: BucketUrl,
    pub objects: Arc<dyn ObjectStore>,
    chore_turns: Arc<ChoreTurns>,
    /// Workspaces whose chores a pass not yet begun will do.
    chores_wanted: Arc<std::sync::Mutex<std::collections::HashSet<(Uuid, WorkspaceName)>>>,
    recent: Arc<recent::RecentObjects>,
    reach: Arc<reach::Reach>,
    /// A test hook: a pass of chores placing several files waits this long
    /// after placing its first, so that tests can look at a run half placed.
    pause_after_first_place: Option<std::time::Duration>,
}

/// A replica does a workspace's chores one caller at a time: jobs finishing
/// together in one workspace would otherwise each read the same chores and
/// each place every file (K closes, K² copies). Workspaces share a turn by
/// their hash, a bounded set of locks however many workspaces there are.
#[derive(Debug)]
struct ChoreTurns(Vec<tokio::sync::Mutex<()>>);

const CHORE_TURNS: usize = 256;

impl Bucket {
    pub fn new(url: BucketUrl, objects: Arc<dyn ObjectStore>) -> Self {
        let turns = (0..CHORE_TURNS).map(|_| tokio::sync::Mutex::new(())).collect();
        Self {
            url,
            objects,
            chore_turns: Arc::new(ChoreTurns(turns)),
            chores_wanted: Arc::default(),
            recent: Arc::default(),
            reach: Arc::default(),
            pause_after_first_place: None,
        }
    }

    /// The test hook of [`Bucket::pause_after_first_place`] (none: no pause).
    pub fn with_pause_after_first_place(self, pause: Option<std::time::Duration>) -> Self {
        Self { pause_after_first_place: pause, ..self }
    }

    /// Drops this replica's copies in memory of a workspace's objects (a
    /// forget of some of its conversations: their files' versions go by chores).
    pub fn forget_recent(&self, tenant: Uuid, workspace: &WorkspaceName) {
        self.recent.drop_under(&self.url.workspace_prefix(tenant, workspace));
    }

    /// Drops the copies in memory kept too long to serve (the sweep, on every replica).
    pub fn drop_expired_copies(&self) {
        self.recent.drop_expired();
    }

    /// Held while this replica does a workspace's chores.
    pub(crate) async fn chore_turn(&self, tenant: Uuid, workspace: &WorkspaceName) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (tenant, workspace.as_str()).hash(&mut hasher);
        self.chore_turns.0[hasher.finish() as usize % CHORE_TURNS].lock().await
    }

    /// Removes the objects of the rollouts at `rollout_paths` of a workspace
    /// (forgetting them); an object already gone is fine.
    pub async fn remove_rollouts(
        &self,
        tenant: Uuid,
        workspace: &WorkspaceName,
        rollout_paths: &[String],
    ) -> Result<(), rollouts::RolloutError> {
        let keys = rollout_paths
            .iter()
            .map(|path| self.url.object_key(tenant, workspace, path))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.remove_objects(keys).await?)
    }

    /// Removes every object of a tenant (`workspace` none) or of one of its
    /// workspaces: what forgetting either leaves of it in the bucket is nothing.
    pub async fn remove_all_of(
        &self,
        tenant: Uuid,
        workspace: Option<&WorkspaceName>,
    ) -> Result<usize, object_store::Error> {
        use futures_util::{StreamExt, TryStreamExt};
        let prefix = match workspace {
            Some(workspace) => self.url.workspace_prefix(tenant, workspace),
            None => self.url.tenant_prefix(tenant),
        };
        self.recent.drop_under(&prefix);
        let prefix = ObjectKey::parse(&prefix)?;
        let listed = self.objects.list(Some(&prefix)).map_ok(|meta| meta.location).boxed();
        let removed: Vec<ObjectKey> = self.objects.delete_stream(listed).try_collect().await?;
        // A read in flight during the removal may have kept a copy again.
        self.recent.drop_under(prefix.as_ref());
        Ok(removed.len())
    }

    /// Removes objects, many to a request where the store takes them so
    /// (S3's DeleteObjects); one already gone is fine.
    pub async fn remove_objects(&self, keys: Vec<ObjectKey>) -> Result<(), object_store::Error> {
        use futures_util::StreamExt;
        if keys.is_empty() {
            return Ok(());
        }
        self.recent.drop_keys(keys.iter().map(ObjectKey::as_ref));
        let listed = futures_util::stream::iter(keys.clone().into_iter().map(Ok)).boxed();
        let mut removed = self.objects.delete_stream(listed);
        while let Some(result) = removed.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // A read in flight during the removal may have kept a copy again.
        self.recent.drop_keys(keys.iter().map(ObjectKey::as_ref));
        Ok(())
    }
}

/// `s3://<bucket>[/<prefix>]`: a bucket and the key prefix memoryd's objects live under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketUrl {
    bucket: String,
    /// Without leading or trailing slashes; empty: the bucket's root.
    /// Checked when parsed: a key as it is.
    prefix: String,
}

impl std::str::FromStr for BucketUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let rest = raw.strip_prefix("s3://").ok_or_else(|| format!("{raw} is not s3://<bucket>/<prefix>"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if !valid_bucket_name(bucket) {
            return Err(format!(
                "{bucket:?} is not a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, \
                 starting and ending with a letter or digit"
            ));
        }
        let prefix = prefix.trim_end_matches('/');
        let bad_part = |p: &str| p.is_empty() || p == "." || p == "..";
        if !prefix.is_empty() && (prefix.split('/').any(bad_part) || ObjectKey::parse(prefix).is_err()) {
            return Err(format!("{prefix:?} is not a key prefix: no empty, '.' or '..' parts, no control characters"));
        }
        Ok(Self { bucket: bucket.to_owned(), prefix: prefix.to_owned() })
    }
}

impl std::fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

fn valid_bucket_name(name: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name.bytes().all(allowed)
        && edge(name.as_bytes().first())
        && edge(name.as_bytes().last())
        && !name.contains("..")
}

impl BucketUrl {
    /// The same bucket with `part` (one valid key part) added to the prefix.
    pub fn under(&self, part: &str) -> Self {
        let prefix = if self.prefix.is_empty() { part.to_owned() } else { format!("{}/{part}", self.prefix) };
        Self { bucket: self.bucket.clone(), prefix }
    }

    /// The prefix as a key, as it is written (none: the bucket's root).
    pub fn prefix_key(&self) -> Option<ObjectKey> {
        (!self.prefix.is_empty()).then(|| ObjectKey::parse(&self.prefix).expect("checked when parsed"))
    }

    /// The key prefix of one tenant's workspaces.
    pub fn tenant_prefix(&self, tenant: Uuid) -> String {
        if self.prefix.is_empty() { tenant.to_string() } else { format!("{}/{tenant}", self.prefix) }
    }

    /// A key no object has, which the reachability probe asks for (no
    /// tenant's: tenants' keys start with their id).
    fn own_probe_key(&self) -> String {
        if self.prefix.is_empty() { ".memoryd-probe".into() } else { format!("{}/.memoryd-probe", self.prefix) }
    }

    /// The key prefix of one tenant's workspace.
    pub fn workspace_prefix(&self, tenant: Uuid, workspace: &WorkspaceName) -> String {
        format!("{}/{}", self.tenant_prefix(tenant), workspace.as_str())
    }

    /// The one gate between a path in a workspace (from anywhere) and the
    /// bucket: the key lies under the workspace's prefix, by the same rules
    /// as a path on a volume, and is a key every S3 store takes as it is.
    /// memoryd's own folder (`.memoryd`, its files' versions) is none of
    /// them: a layout's folder there could pass a rollout for a version.
    pub(crate) fn own_key(
        &self,
        tenant: Uuid,
        workspace: &WorkspaceName,
        relative: &str,
    ) -> Result<ObjectKey, PathError> {
        self.key_under(tenant, workspace, &format!("{}/{relative}", files::OWN_FOLDER))
    }

    pub fn object_key(&self, tenant: Uuid, workspace: &WorkspaceName, relative: &str) -> Result<ObjectKey, PathError> {
        let mut first = None;
        each_relative_part(relative, |name| {
            first.get_or_insert_with(|| name.to_owned());
        })?;
        if first.as_deref() == Some(files::OWN_FOLDER) {
            return Err(PathError::Escapes(relative.to_owned()));
        }
        self.key_under(tenant, workspace, relative)
    }

    /// A key under a workspace's prefix by the volume's rules, memoryd's own folder included.
    fn key_under(&self, tenant: Uuid, workspace: &WorkspaceName, relative: &str) -> Result<ObjectKey, PathError> {
        let mut key = self.workspace_prefix(tenant, workspace);
        if each_relative_part(relative, |name| {
            key.push('/');
            key.push_str(name);
        })? == 0
        {
            return Err(PathError::Empty);
        }
        ObjectKey::parse(&key).map_err(|_| PathError::Escapes(relative.to_owned()))
    }

    /// A client for the bucket, with credentials, region and endpoint from
    /// the standard variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …); writes may be
    /// conditional on an object's ETag.
    /// Each request is limited to `timeout` unless `AWS_TIMEOUT` says otherwise.
    pub fn open(&self, timeout: std::time::Duration) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
        use object_store::ClientConfigKey;
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        // A request that fails is tried again five times, backing off from
        // 0.1 s (the AWS SDKs' standard mode tries three), within the
        // client's 3 minutes: a store that refuses connections is given up on
        // within seconds — a request then answers 503, a job's attempt fails
        // to be retried once it answers again — where ten retries took about
        // a minute. A long transfer keeps its retries.
        let retry = object_store::RetryConfig { max_retries: RETRIES, ..Default::default() };
        builder = builder.with_retry(retry);
        if std::env::var_os("AWS_TIMEOUT").is_none() {
            let limit = format!("{}s", timeout.as_secs().max(1));
            builder = builder.with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), limit);
        }
        Ok(Arc::new(builder.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_urls_name_a_bucket_and_a_prefix() {
        let url: BucketUrl = "s3://memoryd-data/prod/eu/".parse().unwrap();
        assert_eq!((url.bucket.as_str(), url.prefix.as_str()), ("memoryd-data", "prod/eu"));
        assert_eq!(url.to_string(), "s3://memoryd-data/prod/eu");
        let root: BucketUrl = "s3://memoryd".parse().unwrap();
        assert_eq!(
            (root.bucket.as_str(), root.prefix.as_str(), root.to_string().as_str()),
            ("memoryd", "", "s3://memoryd")
        );
        for bad in [
            "memoryd",
            "http://memoryd/x",
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://-edge",
            "s3://a..b",
            "s3://a_b",
            "s3://bucket//x",
            "s3://bucket/a/../b",
            "s3://bucket/./a",
        ] {
            assert!(bad.parse::<BucketUrl>().is_err(), "{bad}");
        }
        assert!(format!("s3://{}", "a".repeat(64)).parse::<BucketUrl>().is_err());
    }

    #[test]
    fn keys_lie_under_their_workspace_by_the_volumes_rules() {
        let url: BucketUrl = "s3://memoryd/p".parse().unwrap();
        let tenant = Uuid::nil();
        let workspace = WorkspaceName::parse("ws").unwrap();
        let key = |rel: &str| url.object_key(tenant, &workspace, rel).map(|k| k.to_string());
        let base = format!("p/{tenant}/ws");
        assert_eq!(key("memories/MEMORY.md").unwrap(), format!("{base}/memories/MEMORY.md"));
        assert_eq!(key("./sessions//r.jsonl").unwrap(), format!("{base}/sessions/r.jsonl"));
        assert!(matches!(key("../other/x"), Err(PathError::Escapes(_))));
        assert!(matches!(key("a/../../x"), Err(PathError::Escapes(_))));
        assert!(matches!(key("/etc/passwd"), Err(PathError::Absolute(_))));
        assert!(matches!(key(""), Err(PathError::Empty)));
        assert!(matches!(key("."), Err(PathError::Empty)));
        assert!(matches!(key(".memoryd/versions/x"), Err(PathError::Escapes(_))), "memoryd's own folder");
        assert!(matches!(key("./.memoryd"), Err(PathError::Escapes(_))));
        assert!(key("memories/.memoryd").is_ok(), "only at the workspace's top");
        let root: BucketUrl = "s3://memoryd".parse().unwrap();
        assert_eq!(root.object_key(tenant, &workspace, "x").unwrap().to_string(), format!("{tenant}/ws/x"));
        assert_eq!(root.prefix_key(), None);
        // A prefix is written as it is given, characters a URL would escape included.
        let odd: BucketUrl = "s3://memoryd/team~x".parse().unwrap();
        assert_eq!(odd.prefix_key().unwrap().as_ref(), "team~x");
        assert!(odd.object_key(tenant, &workspace, "x").unwrap().as_ref().starts_with("team~x/"));
    }
}
