//! The CSIDriver objects, kept current by a watch (upstream's CSIDriver informer and lister).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::Api;
use futures::StreamExt;
use k8s_openapi::api::storage::v1::CSIDriver;
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind, Result};

#[derive(Clone)]
pub struct CsiDriverInformer {
    store: Store<CSIDriver>,
    synced: Arc<Synced>,
    /// Bumped after every change the store saw (the informer's event handlers).
    changes: tokio::sync::watch::Receiver<u64>,
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

impl CsiDriverInformer {
    /// Starts the watch on `runtime`; the returned task runs until aborted (reconnecting with
    /// backoff while the API server is unreachable).
    pub fn start(
        client: ::kube::Client,
        runtime: &tokio::runtime::Handle,
    ) -> (CsiDriverInformer, JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let synced = Arc::new(Synced::default());
        let flag = synced.clone();
        let (changed, changes) = tokio::sync::watch::channel(0u64);
        let stream = reflector::reflector(
            writer,
            watcher(Api::<CSIDriver>::all(client), watcher::Config::default()),
        )
        .default_backoff();
        let task = runtime.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) = &event
                {
                    changed.send_modify(|n| *n = n.wrapping_add(1));
                }
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let mut done = flag.done.lock().unwrap_or_else(|p| p.into_inner());
                        if !*done {
                            *done = true;
                            flag.changed.notify_all();
                            tracing::debug!("{}", csi_log!("CSIDriver informer synced"));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("{}", csi_log!("CSIDriver watch failed, retrying: {e}"))
                    }
                }
            }
        });
        (
            CsiDriverInformer {
                store,
                synced,
                changes,
            },
            task,
        )
    }

    /// Wakes up after the CSIDriver objects changed (then read them with [`Self::get`]).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.clone()
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

    /// The CSIDriver `name` (`None` when it does not exist). Until the first list arrived
    /// (see `wait_for_sync`) this is a transient error: the caller retries later.
    pub fn get(&self, name: &str) -> Result<Option<Arc<CSIDriver>>> {
        if !self.wait_for_sync() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("cannot look up CSIDriver {name}: the CSIDriver objects have not been listed from the API server yet"),
            )
            .transient());
        }
        Ok(self.store.get(&ObjectRef::new(name)))
    }
}
