//! The tests' S3-compatible server (scripts/test.sh starts moto's and names
//! it in MEMORYD_TEST_S3_ENDPOINT): a bucket for the tests, a fresh prefix
//! per test, the variables a memoryd process reads, and a client to look.

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use std::sync::Arc;

pub(crate) const BUCKET: &str = "memoryd-test";

fn endpoint() -> String {
    std::env::var("MEMORYD_TEST_S3_ENDPOINT")
        .expect("MEMORYD_TEST_S3_ENDPOINT names an S3-compatible server (scripts/test.sh starts one)")
}

/// `s3://memoryd-test/<fresh prefix>`, the bucket made if it is not there yet.
pub(crate) async fn fresh_prefix() -> (String, String) {
    static MADE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    MADE.get_or_init(|| async {
        // moto takes an unsigned request; a bucket there already is fine.
        let res = reqwest::Client::new().put(format!("{}/{BUCKET}", endpoint())).send().await.unwrap();
        assert!(res.status().is_success() || res.status() == 409, "making the bucket: {}", res.status());
    })
    .await;
    let prefix = format!("t-{}", uuid::Uuid::new_v4().simple());
    (format!("s3://{BUCKET}/{prefix}"), prefix)
}

/// Makes a memoryd keep its workspace files at `url` in the tests' bucket.
pub(crate) fn store_in(config: &mut memoryd::config::Config, url: &str) {
    config.storage = memoryd::config::Storage::Bucket(url.parse().unwrap());
    config.bucket_client = Some(bucket());
}

/// What a memoryd process needs to reach the tests' bucket.
pub(crate) fn process_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "memoryd-test".into()),
        ("AWS_SECRET_ACCESS_KEY", "memoryd-test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

/// A client of the tests' bucket, to look at what memoryd left there.
pub(crate) fn bucket() -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint())
        .with_allow_http(true)
        .with_bucket_name(BUCKET)
        .with_access_key_id("memoryd-test")
        .with_secret_access_key("memoryd-test")
        .with_region("us-east-1")
        .build()
        .unwrap();
    Arc::new(store)
}

/// How many objects hold `needle` under the bucket a memoryd process's
/// `env` names in `MEMORYD_STORAGE` (none named: 0).
pub(crate) async fn objects_holding(env: &[(&str, String)], needle: &str) -> usize {
    keys_holding(env, needle).await.len()
}

/// The keys (below the prefix) of the objects that hold `needle`, as [`objects_holding`] counts them.
pub(crate) async fn keys_holding(env: &[(&str, String)], needle: &str) -> Vec<String> {
    let Some(prefix) = prefix_of(env) else { return Vec::new() };
    let holds = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle.as_bytes());
    objects_under(&prefix).await.into_iter().filter(|(_, bytes)| holds(bytes)).map(|(key, _)| key).collect()
}

/// The key prefix in the tests' bucket that a memoryd process's `env` names
/// in `MEMORYD_STORAGE` (none named: its files are on the volume).
pub(crate) fn prefix_of(env: &[(&str, String)]) -> Option<String> {
    let (_, url) = env.iter().find(|(name, _)| *name == "MEMORYD_STORAGE")?;
    Some(url.strip_prefix(&format!("s3://{BUCKET}/")).expect("the tests' bucket").to_owned())
}

/// The keys under `prefix`, below it (no object is read).
pub(crate) async fn keys_under(prefix: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    let listed: Vec<_> = bucket().list(Some(&prefix.into())).try_collect().await.unwrap();
    let below = format!("{prefix}/");
    listed.into_iter().map(|meta| meta.location.as_ref().strip_prefix(&below).unwrap().to_owned()).collect()
}

/// Every object under `prefix`: key below the prefix → bytes.
pub(crate) async fn objects_under(prefix: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    use futures_util::TryStreamExt;
    let listed: Vec<_> = bucket().list(Some(&prefix.into())).try_collect().await.unwrap();
    let mut objects = std::collections::BTreeMap::new();
    for meta in listed {
        // Removed since the listing (a chore, a sweep): not there.
        let Some(bytes) = object(meta.location.as_ref()).await else { continue };
        let key = meta.location.as_ref().strip_prefix(&format!("{prefix}/")).unwrap().to_owned();
        objects.insert(key, bytes);
    }
    objects
}

/// The bytes of the object at `key` in the tests' bucket; `None` when absent.
pub(crate) async fn object(key: &str) -> Option<Vec<u8>> {
    match bucket().get(&key.into()).await {
        Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("{key}: {e}"),
    }
}

/// `env` for replica `name` of several started in `dir`: with a bucket, a
/// data dir of its own (replicas share no folder); on a volume, `dir`'s.
pub(crate) fn replica_env(
    env: &[(&'static str, String)],
    dir: &std::path::Path,
    name: &str,
) -> Vec<(&'static str, String)> {
    let mut env = env.to_vec();
    if prefix_of(&env).is_some() {
        env.push(("MEMORYD_DATA_DIR", dir.join(format!("{name}-data")).display().to_string()));
    }
    env
}
