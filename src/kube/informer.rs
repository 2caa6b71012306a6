//! A watched kind of cluster-scoped object (upstream's shared informer and lister): a kube-rs
//! reflector store, kept current by a watch that reconnects with backoff, a "synced" flag set
//! by the first full list, and a change signal for code that waits on the objects.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Api, Resource};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind, Result};

/// What a watched kind needs: a cluster-scoped API object kube-rs can list and watch.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}
impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}

pub struct Informer<K: Watched> {
    store: Store<K>,
    synced: Arc<Synced>,
    /// Bumped after every change the store saw (the informer's event handlers) and on sync.
    changes: tokio::sync::watch::Receiver<u64>,
    /// The same count, readable without a lock (and from C, see `generation`).
    generation: Arc<AtomicU64>,
}

impl<K: Watched> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            synced: self.synced.clone(),
            changes: self.changes.clone(),
            generation: self.generation.clone(),
        }
    }
}

/// Set once the first full list arrived (the informer's `HasSynced`). Stays set across
/// re-lists: the store keeps serving the last known objects while the watch reconnects.
#[derive(Default)]
struct Synced {
    done: Mutex<bool>,
    changed: Condvar,
}

/// How long a caller's own thread waits for the first list. Upstream's `WaitForCacheSync`
/// waits forever; a C caller's thread must not hang while the API server is down.
const SYNC_WAIT: Duration = Duration::from_secs(5);

/// What [`Informer::wait_until`] ends with.
pub enum Waited<T> {
    Done(T),
    TimedOut,
}

impl<K: Watched> Informer<K> {
    /// Starts the watch on `runtime`; the returned task runs until aborted (reconnecting with
    /// backoff while the API server is unreachable).
    pub fn start(
        client: ::kube::Client,
        runtime: &tokio::runtime::Handle,
    ) -> (Informer<K>, JoinHandle<()>) {
        let kind = K::kind(&()).to_string();
        let (store, writer) = reflector::store();
        let synced = Arc::new(Synced::default());
        let flag = synced.clone();
        let (changed, changes) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(AtomicU64::new(0));
        let count = generation.clone();
        // After the store took the change (the reflector applies an event before yielding it).
        let bump = move || {
            count.fetch_add(1, Ordering::Release);
            changed.send_modify(|n| *n = n.wrapping_add(1));
        };
        let stream = reflector::reflector(
            writer,
            watcher(Api::<K>::all(client), watcher::Config::default()),
        )
        .default_backoff();
        let task = runtime.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let mut done = flag.done.lock().unwrap_or_else(|p| p.into_inner());
                        if !*done {
                            *done = true;
                            flag.changed.notify_all();
                            tracing::debug!("{}", csi_log!("{kind} informer synced"));
                        }
                        drop(done);
                        bump();
                    }
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => bump(),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("{}", csi_log!("{kind} watch failed, retrying: {e}"))
                    }
                }
            }
        });
        (
            Informer {
                store,
                synced,
                changes,
                generation,
            },
            task,
        )
    }

    /// Wakes up after the objects changed (then read them with [`Self::get`]).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.clone()
    }

    /// How many changes the store has seen; grows after each (release order), never resets.
    pub fn generation(&self) -> &AtomicU64 {
        &self.generation
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `SYNC_WAIT` for the first list, but only on a caller's own thread: a
    /// runtime thread must never block (the watch itself may need it).
    fn wait_for_sync(&self) -> bool {
        let done = self.synced.done.lock().unwrap_or_else(|p| p.into_inner());
        if *done || tokio::runtime::Handle::try_current().is_ok() {
            return *done;
        }
        let (done, _) = self
            .synced
            .changed
            .wait_timeout_while(done, SYNC_WAIT, |done| !*done)
            .unwrap_or_else(|p| p.into_inner());
        *done
    }

    fn not_synced(name: &str) -> Error {
        let kind = K::kind(&());
        Error::new(
            ErrorKind::Unavailable,
            format!("cannot look up {kind} {name}: the {kind} objects have not been listed from the API server yet"),
        )
        .transient()
    }

    /// The object `name` (`None` when it does not exist). Until the first list arrived (see
    /// `wait_for_sync`) this is a transient error: the caller retries later.
    pub fn get(&self, name: &str) -> Result<Option<Arc<K>>> {
        if !self.wait_for_sync() {
            return Err(Self::not_synced(name));
        }
        Ok(self.store.get(&ObjectRef::new(name)))
    }

    /// The object `name` as the store has it now, synced or not.
    pub fn cached(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// Calls `decide` with the object `name` (or `None`) now and after every change the
    /// watch delivers, until it returns `Some` or `timeout` passes. Waits for the first list
    /// within the same deadline. Never polls: it sleeps until the watch signals a change.
    pub async fn wait_until<T>(
        &self,
        name: &str,
        timeout: Duration,
        mut decide: impl FnMut(Option<&K>) -> Option<T>,
    ) -> Waited<T> {
        let mut changes = self.changes();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Mark the current version seen before reading, so a change after the read wakes us.
            changes.borrow_and_update();
            if self.is_synced() {
                if let Some(v) = decide(self.cached(name).as_deref()) {
                    return Waited::Done(v);
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                // The watch task ended (host going away) or the deadline passed.
                Ok(Err(_)) | Err(_) => return Waited::TimedOut,
            }
        }
    }
}
