//! `memoryd copy-to-bucket s3://<bucket>/<prefix>`: a stopped deployment's
//! workspaces copied from its data dir into a bucket, in the bucket's
//! layout — what an export holds, file by file: rollouts up to what the
//! database committed, the memory files as the last committed run left
//! them — then read back and checked, byte for byte.

use super::BucketUrl;
use crate::config::Config;
use crate::domain::ids::{LayoutName, RolloutId, WorkspaceName};
use crate::domain::portability::ExportedRollout;
use crate::jobs::{PublishOwner, finish_pending_publishes};
use crate::store::journal_records::RolloutAt;
use crate::store::workspace_files::{FileVersion, VersionChanges};
use crate::store::{DynStore, Store, with_implicit_default};
use crate::workspace::Volumes;
use crate::workspace::archive::{ArchiveEntry, entries_taken, snapshot};
use crate::workspace::publish::Publisher;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectKey;
use object_store::{ObjectStore, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use uuid::Uuid;

/// Objects written (and read back) at once.
const COPIES_AT_ONCE: usize = 8;

/// A file at most this long is one PUT; a longer one is uploaded in parts of
/// this size (S3 takes parts of 5 MiB and more), two at a time: at most
/// about 200 MiB in flight over all uploads.
const PART_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, clap::Args)]
pub struct CopyArgs {
    /// Where the workspaces go: `s3://<bucket>/<prefix>`; credentials,
    /// region and endpoint from the standard AWS_* variables.
    #[arg(value_name = "S3_URL")]
    pub destination: BucketUrl,
    #[command(flatten)]
    pub config: Config,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{0}")]
    Refused(String),
    #[error("the database: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("the data dir: {0}")]
    Volume(#[from] std::io::Error),
    #[error("the bucket: {0}")]
    Bucket(#[from] object_store::Error),
    #[error("the check failed: {0}")]
    Check(String),
}

/// What a copy did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Copied {
    pub workspaces: usize,
    pub files: usize,
    pub bytes: u64,
    /// Folders of workspaces the database does not know (left out).
    pub unknown: usize,
}

/// One object written: its key, length and SHA-256; the file it holds and
/// the version the store gave it (none for a copy of another object).
pub(crate) struct Written {
    pub key: ObjectKey,
    pub len: u64,
    pub digest: [u8; 32],
    pub relative: String,
    pub e_tag: Option<String>,
}

pub async fn copy_to_bucket(args: &CopyArgs) -> Result<Copied, CopyError> {
    let config = &args.config;
    config.validate().map_err(CopyError::Refused)?;
    let volumes = Volumes::new(&config.data_dir, 0);
    let store = open_deployment(config).await?;
    let mut copied = Copied::default();
    let mut workspaces = Vec::new();
    for (tenant, tenant_dir) in volumes.tenant_dirs() {
        for workspace in crate::workspace::workspaces_in(&tenant_dir) {
            if !store.workspace_known(tenant, &workspace).await? {
                tracing::warn!(%tenant, %workspace, "a workspace folder the database does not know is left out");
                copied.unknown += 1;
            } else if store.workspace_forgetting(tenant, &workspace).await? {
                let why =
                    format!("workspace {workspace} of tenant {tenant} is being forgotten: start memoryd to finish");
                return Err(CopyError::Refused(why));
            } else if let Some(why) = served_since_copied(store.as_ref(), &args.destination, tenant, &workspace).await?
            {
                return Err(CopyError::Refused(why));
            } else {
                workspaces.push((tenant, workspace));
            }
        }
    }
    let bucket = args.destination.open(super::REQUEST_TIMEOUT)?;
    let mut written = Vec::new();
    for (tenant, workspace) in workspaces {
        let (files, versions) =
            copy_workspace(&store, &volumes, &args.destination, &bucket, tenant, &workspace).await?;
        copied.workspaces += 1;
        copied.files += files.len();
        copied.bytes += files.iter().map(|w| w.len).sum::<u64>();
        tracing::info!(%tenant, %workspace, files = files.len(), "workspace copied");
        written.extend(files);
        written.extend(versions);
    }
    check(&bucket, &args.destination, &written).await?;
    Ok(copied)
}

/// The stopped deployment's database, its runs settled: a run whose outcome
/// was committed is completed, one that was not is undone, as at a start.
/// Refused when a worker may still write, or when the data dir or the
/// SQLite file is not there (a wrong setting would copy nothing).
async fn open_deployment(config: &Config) -> Result<DynStore, CopyError> {
    let workspaces = config.data_dir.join("workspaces");
    if !workspaces.is_dir() {
        let why = format!("{} holds no workspaces: is MEMORYD_DATA_DIR the deployment's?", config.data_dir.display());
        return Err(CopyError::Refused(why));
    }
    let url = config.database_url();
    if let Some(file) = sqlite_file(&url).filter(|f| !f.exists()) {
        return Err(CopyError::Refused(format!("there is no database at {}", file.display())));
    }
    let store = crate::store::connect_waiting(&url, config.database_wait).await?;
    let leased = store.leased_jobs(chrono::Utc::now()).await?;
    if leased > 0 {
        let why = format!(
            "running jobs: {leased}; stop every replica first (a killed replica's jobs count until their \
             leases expire, at most MEMORYD_JOB_LEASE_SECS after it died)"
        );
        return Err(CopyError::Refused(why));
    }
    let publisher = Publisher::new(&config.data_dir);
    finish_pending_publishes(store.as_ref(), &publisher, |_| true, PublishOwner::Worker { own_job: None }).await;
    if !publisher.pending()?.is_empty() {
        return Err(CopyError::Refused("a publish could not be finished: see the log".into()));
    }
    Ok(store)
}

/// The file a `sqlite:` URL names (none for a database in memory).
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && !path.starts_with(":memory:")).then(|| std::path::PathBuf::from(path))
}

/// Copies one workspace's files as an export takes them, and makes them what
/// memoryd reads there: the files written, then the memory files' versions.
async fn copy_workspace(
    store: &DynStore,
    volumes: &Volumes,
    url: &BucketUrl,
    bucket: &Arc<dyn ObjectStore>,
    tenant: Uuid,
    workspace: &WorkspaceName,
) -> Result<(Vec<Written>, Vec<Written>), CopyError> {
    let layouts = with_implicit_default(store.stored_layouts(tenant).await?);
    let view = store.export_view(tenant, workspace).await?;
    let root = volumes.workspace_root(tenant, workspace).map_err(std::io::Error::other)?;
    let (scratch, memory_dirs) = (
        volumes.export_scratch(),
        layouts.iter().map(|l| l.layout.memories_dir.normalized.clone()).collect::<Vec<_>>(),
    );
    let taken = tokio::task::spawn_blocking(move || snapshot(&root, &scratch, &memory_dirs))
        .await
        .map_err(std::io::Error::other)??;
    let (entries, rollouts) = entries_taken(&taken.files, &view, &layouts);
    let mut keyed = Vec::with_capacity(entries.len());
    for entry in entries {
        let key = url.object_key(tenant, workspace, &entry.relative).map_err(|e| {
            CopyError::Refused(format!("{}/{} cannot be an object key: {e}", workspace, entry.relative))
        })?;
        keyed.push((key, entry));
    }
    // Every upload runs to its end (a failed one aborted), then the first failure is the answer.
    let uploads: Vec<Result<Written, CopyError>> = futures_util::stream::iter(keyed)
        .map(|(key, entry)| upload(bucket, key, entry))
        .buffer_unordered(COPIES_AT_ONCE)
        .collect()
        .await;
    let written: Vec<Written> = uploads.into_iter().collect::<Result<_, _>>()?;
    let rollouts: HashMap<&str, &ExportedRollout> = rollouts.iter().map(|r| (r.rollout_path.as_str(), *r)).collect();
    let bucket = super::Bucket::new(url.clone(), bucket.clone());
    let versions = make_current(store.as_ref(), &bucket, tenant, workspace, &rollouts, &written).await?;
    Ok((written, versions))
}

/// The one publish a copy into `url` makes of a workspace's memory files:
/// the same on every run, so that a run again replaces its own versions and
/// a publish of anything else shows the bucket has served the workspace.
fn copy_publish_id(url: &BucketUrl, tenant: Uuid, workspace: &WorkspaceName) -> Uuid {
    let digest = Sha256::digest(format!("memoryd copy-to-bucket {url} {tenant} {workspace}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// Why the workspace must not be copied again: a publish other than the
/// copy's (a job, an edit, a layout's first append) has changed its files
/// on the bucket, which the data dir's older files would undo.
async fn served_since_copied(
    store: &dyn Store,
    url: &BucketUrl,
    tenant: Uuid,
    workspace: &WorkspaceName,
) -> Result<Option<String>, CopyError> {
    let generation = store.files_generation(tenant, workspace).await?;
    Ok(generation.filter(|g| *g != copy_publish_id(url, tenant, workspace)).map(|_| {
        format!(
            "workspace {workspace} of tenant {tenant} has changed on a bucket since it was copied: \
             copying the data dir again would undo that"
        )
    }))
}

/// Makes what was copied what memoryd reads from the bucket: each rollout's
/// object recorded as holding its committed lines, and the memory files
/// (every other file) current as one publish — a version of each, copied
/// in the bucket, recorded as a finish records them, and its chores done.
/// The versions written.
async fn make_current(
    store: &dyn Store,
    bucket: &super::Bucket,
    tenant: Uuid,
    workspace: &WorkspaceName,
    rollouts: &HashMap<&str, &ExportedRollout>,
    written: &[Written],
) -> Result<Vec<Written>, CopyError> {
    let publish_id = copy_publish_id(&bucket.url, tenant, workspace);
    let (mut changes, mut versions) = (VersionChanges { publish_id, files: Vec::new() }, Vec::new());
    for object in written {
        match rollouts.get(object.relative.as_str()) {
            Some(rollout) => record_rollout(store, tenant, workspace, rollout, object).await?,
            None => {
                let key = bucket.version_key(tenant, workspace, publish_id, &object.relative).map_err(|e| {
                    CopyError::Refused(format!("{}/{} cannot be an object key: {e}", workspace, object.relative))
                })?;
                bucket.objects.copy(&object.key, &key).await?;
                let version = FileVersion { publish_id, bytes: object.len, sha256: hex::encode(object.digest) };
                changes.files.push((object.relative.clone(), Some(version)));
                let relative = object.relative.clone();
                versions.push(Written { key, len: object.len, digest: object.digest, relative, e_tag: None });
            }
        }
    }
    // A file an earlier run copied and the data dir no longer has goes.
    for (path, _) in store.current_files(tenant, workspace).await?.files {
        if !written.iter().any(|w| w.relative == path) {
            changes.files.push((path, None));
        }
    }
    if !changes.files.is_empty() {
        store.record_versions(tenant, workspace, &changes).await?;
        bucket.do_chores(store, tenant, workspace).await.map_err(|e| CopyError::Check(crate::error_chain(&e)))?;
    }
    Ok(versions)
}

/// Records a copied rollout's object as holding its committed lines (over
/// what an earlier copy into the same prefix recorded).
async fn record_rollout(
    store: &dyn Store,
    tenant: Uuid,
    workspace: &WorkspaceName,
    rollout: &ExportedRollout,
    object: &Written,
) -> Result<(), CopyError> {
    let unreadable = || CopyError::Check(format!("{}: the database's rollout names are not ids", object.relative));
    let layout = LayoutName::parse(&rollout.layout).ok_or_else(unreadable)?;
    let rollout_id = RolloutId::parse(&rollout.rollout_id).ok_or_else(unreadable)?;
    let at = RolloutAt { tenant, workspace, layout: &layout, rollout: &rollout_id };
    let e_tag = object.e_tag.as_deref().ok_or_else(|| CopyError::Check(format!("{} has no ETag", object.key)))?;
    let recorded = store.rollout_parts(at).await?.and_then(|parts| parts.object_etag);
    if !store.rollout_rewritten(at, recorded.as_deref(), e_tag, object.len).await? {
        return Err(CopyError::Check(format!("{}: its rollout changed while it was copied", object.relative)));
    }
    Ok(())
}

/// Writes `entry`'s first `len` bytes to `key`: one PUT, or parts.
pub(crate) async fn upload(
    bucket: &Arc<dyn ObjectStore>,
    key: ObjectKey,
    entry: ArchiveEntry,
) -> Result<Written, CopyError> {
    let mut file = tokio::fs::File::open(&entry.source).await?.take(entry.len);
    let (mut digest, mut e_tag) = (Sha256::new(), None);
    let len = if entry.len <= PART_BYTES as u64 {
        let mut bytes = Vec::with_capacity(entry.len as usize);
        file.read_to_end(&mut bytes).await?;
        digest.update(&bytes);
        let len = bytes.len() as u64;
        if len == entry.len {
            e_tag = bucket.put(&key, PutPayload::from(bytes)).await?.e_tag;
        }
        len
    } else {
        let mut parts = WriteMultipart::new_with_chunk_size(bucket.put_multipart(&key).await?, PART_BYTES);
        match write_parts(&mut file, &mut parts, &mut digest).await {
            Ok(len) if len == entry.len => {
                e_tag = parts.finish().await?.e_tag;
                len
            }
            other => {
                // An upload left incomplete is kept (and billed) by the store until aborted.
                let _ = parts.abort().await;
                other?
            }
        }
    };
    if len != entry.len {
        let why =
            format!("{} is shorter than what the database committed ({len} of {} bytes)", entry.relative, entry.len);
        return Err(CopyError::Check(why));
    }
    Ok(Written { key, len, digest: digest.finalize().into(), relative: entry.relative, e_tag })
}

/// Feeds `file` to `parts`, two parts in flight at most; the bytes fed.
async fn write_parts(
    file: &mut tokio::io::Take<tokio::fs::File>,
    parts: &mut WriteMultipart,
    digest: &mut Sha256,
) -> Result<u64, CopyError> {
    let (mut buffer, mut len) = (vec![0u8; 1 << 20], 0u64);
    loop {
        let read = file.read(&mut buffer).await?;
        if read == 0 {
            return Ok(len);
        }
        digest.update(&buffer[..read]);
        len += read as u64;
        parts.wait_for_capacity(2).await?;
        parts.write(&buffer[..read]);
    }
}

/// The prefix holds exactly what was written, each object its file's bytes.
async fn check(bucket: &Arc<dyn ObjectStore>, url: &BucketUrl, written: &[Written]) -> Result<(), CopyError> {
    let prefix = url.prefix_key();
    let listed: HashMap<ObjectKey, u64> =
        bucket.list(prefix.as_ref()).map_ok(|meta| (meta.location, meta.size)).try_collect().await?;
    let expected: HashMap<&ObjectKey, &Written> = written.iter().map(|w| (&w.key, w)).collect();
    let mut extra: Vec<String> = listed.keys().filter(|k| !expected.contains_key(k)).map(|k| k.to_string()).collect();
    if !extra.is_empty() {
        extra.sort();
        extra.truncate(10);
        return Err(CopyError::Check(format!("{url} holds objects that are not the data dir's, e.g. {extra:?}")));
    }
    for w in written {
        if listed.get(&w.key) != Some(&w.len) {
            return Err(CopyError::Check(format!("{} is not {} bytes long in the bucket", w.key, w.len)));
        }
    }
    let checks: Vec<Result<(), CopyError>> = futures_util::stream::iter(written)
        .map(|w| async move {
            let mut stream = bucket.get(&w.key).await?.into_stream();
            let mut digest = Sha256::new();
            while let Some(chunk) = stream.try_next().await? {
                digest.update(&chunk);
            }
            let same = digest.finalize().as_slice() == w.digest;
            if same { Ok(()) } else { Err(CopyError::Check(format!("{} does not hold its file's bytes", w.key))) }
        })
        .buffer_unordered(COPIES_AT_ONCE)
        .collect()
        .await;
    checks.into_iter().collect()
}
