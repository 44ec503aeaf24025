//! Decoded immutable files kept between reads: a storage and its clones (a catalog's tables)
//! share one memo, so a long-lived writer does not decode the same manifests on every
//! commit. Iceberg's metadata files are written once under unique names; a path this
//! storage overwrites or deletes is forgotten. Bounded by the encoded size of what it holds,
//! least recently used first out.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// At most this many encoded bytes are held (Iceberg Java's
/// `io.manifest.cache.max-total-bytes` default is 100 MB; decoded entries are a few times
/// larger than their Avro encoding).
const MAX_TOTAL_BYTES: u64 = 64 << 20;
/// A file larger than this is not held (Java's `io.manifest.cache.max-content-length`).
const MAX_CONTENT_LENGTH: u64 = 8 << 20;

struct Entry {
    value: Arc<dyn Any + Send + Sync>,
    weight: u64,
    last_used: u64,
}

#[derive(Default)]
struct Held {
    entries: HashMap<String, Entry>,
    total: u64,
    clock: u64,
}

/// Decoded files by key (a path, then a newline and whatever else decoding depended on).
#[derive(Default)]
pub(crate) struct Memo {
    held: Mutex<Held>,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.held.lock().map(|h| h.entries.len()).unwrap_or(0);
        write!(f, "Memo({n} entries)")
    }
}

/// `path` without a `file://` scheme (local paths are given in both forms).
fn canon(path: &str) -> &str {
    path.strip_prefix("file://").unwrap_or(path)
}

impl Memo {
    /// The value held under `key`, if it is a `T`.
    pub(crate) fn get<T: Any + Send + Sync>(&self, key: &str) -> Option<Arc<T>> {
        let key = canon(key);
        let mut held = self.held.lock().ok()?;
        held.clock += 1;
        let now = held.clock;
        let e = held.entries.get_mut(key)?;
        e.last_used = now;
        e.value.clone().downcast::<T>().ok()
    }

    /// Holds `value` under `key`, weighing `encoded_bytes`; evicts the least recently used
    /// entries beyond the budget.
    pub(crate) fn put<T: Any + Send + Sync>(&self, key: &str, encoded_bytes: u64, value: Arc<T>) {
        let key = canon(key);
        let weight = encoded_bytes.max(1);
        if weight > MAX_CONTENT_LENGTH {
            return;
        }
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        held.clock += 1;
        let last_used = held.clock;
        if let Some(old) = held.entries.insert(
            key.to_string(),
            Entry {
                value,
                weight,
                last_used,
            },
        ) {
            held.total -= old.weight;
        }
        held.total += weight;
        while held.total > MAX_TOTAL_BYTES {
            let Some(oldest) = held
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = held.entries.remove(&oldest) {
                held.total -= e.weight;
            }
        }
    }

    /// Drops every entry of file `path` (it was overwritten or deleted).
    pub(crate) fn forget(&self, path: &str) {
        let path = canon(path);
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if held.entries.is_empty() {
            return;
        }
        let mut freed = 0;
        held.entries.retain(|k, e| {
            let same = k.split_once('\n').map_or(k.as_str(), |(p, _)| p) == path;
            if same {
                freed += e.weight;
            }
            !same
        });
        held.total -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_typed_values_until_forgotten() {
        let m = Memo::default();
        m.put("a.avro\n1", 10, Arc::new(7u32));
        assert_eq!(m.get::<u32>("a.avro\n1").as_deref(), Some(&7));
        assert!(
            m.get::<u64>("a.avro\n1").is_none(),
            "another type is a miss"
        );
        assert!(m.get::<u32>("a.avro\n2").is_none());
        m.forget("a.avro");
        assert!(m.get::<u32>("a.avro\n1").is_none());
    }

    #[test]
    fn evicts_the_least_recently_used_beyond_the_budget() {
        let m = Memo::default();
        let big = MAX_CONTENT_LENGTH;
        let n = (MAX_TOTAL_BYTES / big) as usize;
        for i in 0..n {
            m.put(&format!("f{i}"), big, Arc::new(i));
        }
        assert!(m.get::<usize>("f0").is_some(), "f0 is now the most recent");
        m.put("new", big, Arc::new(99usize));
        assert!(m.get::<usize>("f0").is_some());
        assert!(
            m.get::<usize>("f1").is_none(),
            "f1 was the least recently used"
        );
        assert!(m.get::<usize>("new").is_some());
        m.put("huge", big + 1, Arc::new(1usize));
        assert!(
            m.get::<usize>("huge").is_none(),
            "larger than one entry may be"
        );
    }
}
