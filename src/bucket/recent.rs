//! Objects this replica wrote or read lately, kept in memory by key and
//! version. A memory file's version never changes once written, nor does a
//! rollout's object at one ETag, so a kept copy is as good as a GET: the
//! phase one that writes a conversation's files and the phase two that
//! reads them back (and the conversation) mostly run on one replica, and on
//! a bucket those reads were a third of a close's requests. Bounded in
//! bytes and in time: a copy is served for `KEPT_FOR` only and dropped by
//! the next sweep after, on every replica, so what another replica forgets
//! leaves no copy here for longer than that; removing an object through
//! this replica drops its copy, and a forget drops every copy under what it
//! forgets.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes kept at most, all objects together.
const KEPT_BYTES: usize = 32 << 20;
/// A larger object is not kept: it would push out many small ones.
const LARGEST_KEPT: usize = 1 << 20;
/// How long a copy is served (a close's phase two follows its phase ones within seconds).
pub const KEPT_FOR: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct RecentObjects {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// Key → (when kept, version, bytes): the last version kept of each key.
    by_key: HashMap<String, (u64, String, Bytes)>,
    /// Keys by when they were kept (number, instant), oldest first (a key
    /// kept again is listed again; its older listing no longer matches).
    order: VecDeque<(u64, Instant, String)>,
    bytes: usize,
    kept_so_far: u64,
}

impl Kept {
    /// Drops the oldest listing and its copy if it is still that one's;
    /// whether there was a listing.
    fn drop_oldest(&mut self) -> bool {
        let Some((when, _, key)) = self.order.pop_front() else { return false };
        if self.by_key.get(&key).is_some_and(|(kept_when, _, _)| *kept_when == when) {
            let (_, _, gone) = self.by_key.remove(&key).expect("just looked up");
            self.bytes -= gone.len();
        }
        true
    }

    /// Drops every copy kept before `before`.
    fn drop_older_than(&mut self, before: Instant) {
        while self.order.front().is_some_and(|(_, at, _)| *at < before) {
            self.drop_oldest();
        }
    }
}

impl RecentObjects {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().expect("the kept objects are never poisoned")
    }

    /// Keeps version `version` of the object at `key`.
    pub fn keep(&self, key: &str, version: &str, bytes: Bytes) {
        if bytes.len() > LARGEST_KEPT {
            return;
        }
        let mut kept = self.kept();
        kept.kept_so_far += 1;
        let when = kept.kept_so_far;
        kept.bytes += bytes.len();
        if let Some((_, _, old)) = kept.by_key.insert(key.to_owned(), (when, version.to_owned(), bytes)) {
            kept.bytes -= old.len();
        }
        kept.order.push_back((when, Instant::now(), key.to_owned()));
        if kept.order.len() > 2 * kept.by_key.len() + 64 {
            // Listings of keys kept again or dropped: never more than the copies.
            let Kept { by_key, order, .. } = &mut *kept;
            order.retain(|(when, _, key)| by_key.get(key).is_some_and(|(kept_when, _, _)| kept_when == when));
        }
        while kept.bytes > KEPT_BYTES && kept.drop_oldest() {}
    }

    /// The kept bytes of version `version` of the object at `key`, if kept
    /// within `KEPT_FOR`.
    pub fn get(&self, key: &str, version: &str) -> Option<Bytes> {
        let mut kept = self.kept();
        kept.drop_older_than(Instant::now() - KEPT_FOR);
        kept.by_key.get(key).filter(|(_, kept_version, _)| kept_version == version).map(|(_, _, b)| b.clone())
    }

    /// Drops the copies kept longer than `KEPT_FOR` (the sweep, on every replica).
    pub fn drop_expired(&self) {
        self.kept().drop_older_than(Instant::now() - KEPT_FOR);
    }

    /// Drops the copies of the objects at `keys`.
    pub fn drop_keys<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let mut kept = self.kept();
        for key in keys {
            if let Some((_, _, gone)) = kept.by_key.remove(key) {
                kept.bytes -= gone.len();
            }
        }
    }

    /// Drops the copies of every object under `prefix` (a key prefix, no trailing slash).
    pub fn drop_under(&self, prefix: &str) {
        let mut kept = self.kept();
        let under = |key: &str| key.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'));
        let mut freed = 0;
        kept.by_key.retain(|key, (_, _, bytes)| {
            let drop = under(key);
            if drop {
                freed += bytes.len();
            }
            !drop
        });
        kept.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn a_copy_is_of_one_version_and_goes_with_its_object() {
        let recent = RecentObjects::default();
        recent.keep("p/t/ws/sessions/a.jsonl", "etag-1", Bytes::from_static(b"one\n"));
        assert_eq!(recent.get("p/t/ws/sessions/a.jsonl", "etag-1").as_deref(), Some(&b"one\n"[..]));
        assert_eq!(recent.get("p/t/ws/sessions/a.jsonl", "etag-2"), None, "another version is not this copy");
        recent.keep("p/t/ws/sessions/a.jsonl", "etag-2", Bytes::from_static(b"one\ntwo\n"));
        assert_eq!(recent.get("p/t/ws/sessions/a.jsonl", "etag-1"), None, "one version a key");
        recent.keep("p/t/ws2/x", "", bytes(3));
        recent.keep("p/t/ws/y", "", bytes(3));
        recent.drop_under("p/t/ws");
        assert_eq!(recent.get("p/t/ws/sessions/a.jsonl", "etag-2"), None);
        assert_eq!(recent.get("p/t/ws/y", ""), None);
        assert!(recent.get("p/t/ws2/x", "").is_some(), "a workspace whose name begins alike stays");
        recent.drop_keys(["p/t/ws2/x"]);
        assert_eq!(recent.get("p/t/ws2/x", ""), None);
        assert_eq!(recent.kept().bytes, 0);
    }

    #[test]
    fn the_oldest_copies_go_past_the_bound_and_large_objects_are_never_kept() {
        let recent = RecentObjects::default();
        recent.keep("big", "", bytes(LARGEST_KEPT + 1));
        assert_eq!(recent.get("big", ""), None);
        let each = LARGEST_KEPT;
        let fit = KEPT_BYTES / each;
        for n in 0..fit {
            recent.keep(&format!("k{n}"), "", bytes(each));
        }
        // Kept again: now the newest, so k1 is the oldest.
        recent.keep("k0", "v", bytes(each));
        recent.keep("one-more", "", bytes(each));
        assert!(recent.get("k0", "v").is_some());
        assert_eq!(recent.get("k1", ""), None);
        assert!(recent.get("k2", "").is_some());
        assert!(recent.kept().bytes <= KEPT_BYTES);
        // One key kept over and over is listed no more than a bounded number of times.
        for n in 0..1000 {
            recent.keep("k2", &n.to_string(), bytes(1));
        }
        let kept = recent.kept();
        assert!(kept.order.len() <= 2 * kept.by_key.len() + 64);
    }

    #[test]
    fn a_copy_is_served_for_a_while_only() {
        let recent = RecentObjects::default();
        recent.keep("old", "", bytes(2));
        recent.keep("new", "", bytes(3));
        let mut kept = recent.kept();
        kept.order[0].1 = Instant::now() - KEPT_FOR - Duration::from_secs(1);
        drop(kept);
        assert_eq!(recent.get("old", ""), None);
        assert!(recent.get("new", "").is_some());
        recent.kept().order[0].1 = Instant::now() - KEPT_FOR - Duration::from_secs(1);
        recent.drop_expired();
        let kept = recent.kept();
        assert_eq!((kept.by_key.len(), kept.bytes), (0, 0));
    }
}
