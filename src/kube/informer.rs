//! A watched kind of cluster-scoped object (upstream's shared informer and lister): a kube-rs
//! reflector store, kept current by a watch that reconnects with backoff (or fed by the host
//! program from an informer of its own, see [`Feed`]), a "synced" flag set by the first full
//! list, and a change signal for code that waits on the objects.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ::kube::runtime::reflector::{self, store::Writer, ObjectRef, Store};
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

/// What a change to the store signals: the generation and the change channel, moved after
/// the store took it.
struct Signal {
    generation: Arc<AtomicU64>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Signal {
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Synced {
    /// Sets the flag (once); true when this call set it.
    fn set(&self) -> bool {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let first = !*done;
        *done = true;
        self.changed.notify_all();
        first
    }
}

impl<K: Watched> Informer<K> {
    /// An empty, unsynced informer with its writer and change signal.
    fn parts() -> (Informer<K>, Writer<K>, Signal) {
        let (store, writer) = reflector::store();
        let (changed, changes) = tokio::sync::watch::channel(0u64);
        let generation = Arc::new(AtomicU64::new(0));
        let informer = Informer {
            store,
            synced: Arc::new(Synced::default()),
            changes,
            generation: generation.clone(),
        };
        (
            informer,
            writer,
            Signal {
                generation,
                changed,
            },
        )
    }

    /// Starts the watch on `runtime`; the returned task runs until aborted (reconnecting with
    /// backoff while the API server is unreachable).
    pub fn start(
        client: ::kube::Client,
        runtime: &tokio::runtime::Handle,
    ) -> (Informer<K>, JoinHandle<()>) {
        let kind = K::kind(&()).to_string();
        let (informer, writer, signal) = Self::parts();
        let flag = informer.synced.clone();
        // The reflector applies an event to the store before yielding it.
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
                        if flag.set() {
                            tracing::debug!("{}", csi_log!("{kind} informer synced"));
                        }
                        signal.bump();
                    }
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => signal.bump(),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("{}", csi_log!("{kind} watch failed, retrying: {e}"))
                    }
                }
            }
        });
        (informer, task)
    }

    /// An informer the host program keeps current through the returned [`Feed`] (from the
    /// events of an informer of its own), so kcsi sends no list or watch of its own.
    pub fn fed() -> (Informer<K>, Feed<K>) {
        let (informer, writer, signal) = Self::parts();
        let feed = Feed {
            writer: Arc::new(Mutex::new(writer)),
            synced: informer.synced.clone(),
            signal: Arc::new(signal),
        };
        (informer, feed)
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

/// The host program's side of a [`Informer::fed`] informer: what its own informer's event
/// handlers saw (added or updated, deleted, synced).
pub struct Feed<K: Watched> {
    writer: Arc<Mutex<Writer<K>>>,
    synced: Arc<Synced>,
    signal: Arc<Signal>,
}

impl<K: Watched> Clone for Feed<K> {
    fn clone(&self) -> Self {
        Feed {
            writer: self.writer.clone(),
            synced: self.synced.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<K: Watched> Feed<K> {
    /// An object added or updated.
    pub fn apply(&self, object: K) {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .apply_watcher_event(&watcher::Event::Apply(object));
        self.signal.bump();
    }

    /// The object `name` deleted; false when the store did not have it (nothing changes).
    pub fn delete(&self, name: &str) -> bool {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(object) = writer.as_reader().get(&ObjectRef::new(name)) else {
            return false;
        };
        writer.apply_watcher_event(&watcher::Event::Delete((*object).clone()));
        drop(writer);
        self.signal.bump();
        true
    }

    /// Every object there was has been applied (the informer's `HasSynced`): lookups stop
    /// waiting for the first list.
    pub fn synced(&self) {
        if self.synced.set() {
            tracing::debug!(
                "{}",
                csi_log!("{} informer synced (fed by the host)", K::kind(&()))
            );
        }
        self.signal.bump();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};

    use super::*;

    fn driver(name: &str, attach_required: bool) -> CSIDriver {
        let mut d = CSIDriver {
            spec: CSIDriverSpec {
                attach_required: Some(attach_required),
                ..Default::default()
            },
            ..Default::default()
        };
        d.metadata.name = Some(name.to_string());
        d
    }

    #[test]
    fn a_fed_informer_serves_what_it_was_fed_and_moves_its_generation_each_time() {
        let (informer, feed) = Informer::<CSIDriver>::fed();
        assert!(!informer.is_synced());
        let changes = informer.changes();
        feed.apply(driver("d", false));
        assert!(changes.has_changed().unwrap());
        feed.synced();
        assert!(informer.is_synced());
        let got = informer.get("d").unwrap().unwrap();
        assert_eq!(got.spec.attach_required, Some(false));
        let before = informer.generation().load(Ordering::Acquire);
        feed.apply(driver("d", true));
        assert_eq!(
            informer.cached("d").unwrap().spec.attach_required,
            Some(true)
        );
        assert!(feed.delete("d"));
        assert!(informer.get("d").unwrap().is_none());
        assert!(
            !feed.delete("d"),
            "deleting what is not there changes nothing"
        );
        assert_eq!(informer.generation().load(Ordering::Acquire), before + 2);
    }
}
