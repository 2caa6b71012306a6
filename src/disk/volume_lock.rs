//! One lock per volume on disk, so concurrent operations on the same volume (two MountDevice
//! calls, a SetUp racing its TearDown) run one after the other instead of interleaving their
//! directory, `vol_data.json` and driver steps. Keyed by the directory that holds the
//! volume's `vol_data.json`; an entry lives only while someone holds or waits for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

#[derive(Default)]
pub struct VolumeLocks {
    locks: Arc<Mutex<HashMap<PathBuf, Weak<AsyncMutex<()>>>>>,
}

/// Held for the length of one operation; dropping it lets the next one in.
pub struct VolumeGuard {
    guard: Option<OwnedMutexGuard<()>>,
    key: PathBuf,
    locks: Arc<Mutex<HashMap<PathBuf, Weak<AsyncMutex<()>>>>>,
}

impl VolumeLocks {
    /// Waits until no other operation holds the volume at `key`.
    pub async fn lock(&self, key: &Path) -> VolumeGuard {
        let lock = {
            let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(key).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(AsyncMutex::new(()));
                    map.insert(key.to_path_buf(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        VolumeGuard {
            guard: Some(lock.lock_owned().await),
            key: key.to_path_buf(),
            locks: self.locks.clone(),
        }
    }

    /// How many volumes have a lock entry (held or waited for).
    pub fn len(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for VolumeGuard {
    fn drop(&mut self) {
        // Release first, so the entry is unused when nobody else waits.
        drop(self.guard.take());
        let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lock_serialises_one_key_and_is_dropped_when_unused() {
        let locks = Arc::new(VolumeLocks::default());
        let counter = Arc::new(Mutex::new((0, 0)));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (locks, counter) = (locks.clone(), counter.clone());
                tokio::spawn(async move {
                    let _g = locks.lock(Path::new("/r/v")).await;
                    {
                        let mut c = counter.lock().unwrap();
                        c.0 += 1;
                        c.1 = c.1.max(c.0);
                    }
                    tokio::task::yield_now().await;
                    counter.lock().unwrap().0 -= 1;
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(counter.lock().unwrap().1, 1, "two holders at once");
        assert!(locks.is_empty());
        let a = locks.lock(Path::new("/r/a")).await;
        let _b = locks.lock(Path::new("/r/b")).await;
        assert_eq!(locks.len(), 2);
        drop(a);
        assert_eq!(locks.len(), 1);
    }
}
