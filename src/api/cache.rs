//! A small time-bounded cache for lookups every request makes (API keys,
//! layouts, limits), so that a busy client costs no database round trip for
//! them. Another replica's change is seen here within the cache's time to
//! live. Bounded in size by `moka`'s TinyLFU policy: a client spraying bogus
//! keys fills it with entries used once, which are the first to go, and
//! never flushes the entries every tenant uses.

use std::hash::Hash;
use std::time::Duration;

const MAX_ENTRIES: u64 = 10_000;

pub struct TtlCache<K, V> {
    entries: moka::sync::Cache<K, V>,
}

impl<K: Eq + Hash + Send + Sync + 'static, V: Clone + Send + Sync + 'static> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self { entries: moka::sync::Cache::builder().max_capacity(MAX_ENTRIES).time_to_live(ttl).build() }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.entries.get(key)
    }

    pub fn put(&self, key: K, value: V) {
        self.entries.insert(key, value);
    }

    pub fn remove(&self, key: &K) {
        self.entries.invalidate(key);
    }

    pub fn clear(&self) {
        self.entries.invalidate_all();
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

    #[test]
    fn a_spray_of_keys_used_once_does_not_flush_the_ones_in_use() {
        let cache = TtlCache::new(Duration::from_secs(60));
        cache.put("hot".to_owned(), 1);
        for _ in 0..50 {
            assert_eq!(cache.get(&"hot".to_owned()), Some(1));
        }
        for n in 0..3 * MAX_ENTRIES {
            cache.put(format!("bogus-{n}"), 0);
        }
        cache.entries.run_pending_tasks();
        assert!(cache.entries.entry_count() <= MAX_ENTRIES, "bounded");
        assert_eq!(cache.get(&"hot".to_owned()), Some(1), "the key in use survived");
    }
}
