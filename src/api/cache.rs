//! A small time-bounded cache for lookups every request makes (API keys,
//! layouts), so that a busy client costs no database round trip for them.
//! Another replica's change is seen here within the cache's time to live.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_ENTRIES: usize = 10_000;

pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, entries: Mutex::new(HashMap::new()) }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(key).filter(|(_, at)| at.elapsed() < self.ttl).map(|(v, _)| v.clone())
    }

    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    pub fn remove(&self, key: &K) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_can_be_dropped() {
        let cache = TtlCache::new(Duration::from_millis(30));
        cache.put("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.get(&"a"), None);
        cache.put("b", 2);
        cache.remove(&"b");
        assert_eq!(cache.get(&"b"), None);
        cache.put("c", 3);
        cache.clear();
        assert_eq!(cache.get(&"c"), None);
    }
}
