//! The kubelet's plugin manager for CSI drivers (upstream `pkg/kubelet/pluginmanager`): watches
//! a registry directory for the registration sockets of node-driver-registrar and registers
//! the driver behind each through the same code as `kcsi_register_plugin`.
//!
//! Upstream keeps a desired and an actual state of the world and reconciles them every second.
//! Here each socket file gets one worker task (see [`worker`]) that owns its registration, and
//! the watcher only starts and stops workers as files come and go. A socket file is known by
//! its inode and change time, so the start-up walk and a create event for the same file start
//! one worker, while a re-created socket (new inode) replaces the old worker: the old
//! registration is removed before the new one starts, as upstream's reconciler unregisters
//! before it registers.

mod worker;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::node::NodeAgent;

use worker::SocketState;
pub use worker::SocketStatus;

/// What identifies one socket file: re-creating a socket at the same path gives a new inode
/// (or, should the inode number be reused at once, a new change time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl Identity {
    fn of(m: &std::fs::Metadata) -> Identity {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// One socket's worker.
struct Worker {
    identity: Identity,
    state: Arc<Mutex<SocketState>>,
    /// Dropped to tell the worker its socket is gone.
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Sockets {
    current: BTreeMap<PathBuf, Worker>,
    /// Workers whose socket went away, still deregistering; a new worker at the same path
    /// waits for its predecessor.
    retiring: HashMap<PathBuf, JoinHandle<()>>,
}

/// State shared by the event loop, the workers and status queries.
struct Shared {
    dir: PathBuf,
    node: Weak<NodeAgent>,
    sockets: Mutex<Sockets>,
    seen: AtomicU64,
    /// A failure of the watcher itself (its directory removed, inotify failing).
    last_error: Mutex<Option<String>>,
}

/// A running plugin watcher; stopped by [`PluginWatcher::stop`] or when dropped.
/// What `kcsi_host_status` reports of the plugin watcher.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginWatcherStatus {
    pub dir: PathBuf,
    pub sockets_seen: u64,
    pub last_error: Option<String>,
    pub sockets: Vec<SocketStatus>,
}

pub struct PluginWatcher {
    shared: Arc<Shared>,
    events: JoinHandle<()>,
}

/// Inotify events that can make or remove a socket file or a directory below the root.
fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::ONLYDIR
}

impl PluginWatcher {
    /// Creates `dir` if needed (0755, as upstream's `init`), watches it, registers the sockets
    /// already in it and keeps watching in the background. Must run inside the runtime.
    pub fn start(dir: PathBuf, node: Weak<NodeAgent>) -> Result<PluginWatcher> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(|e| {
                Error::io(
                    format!("plugin watcher: error (re-)creating root {}", dir.display()),
                    &e,
                )
            })?;
        let inotify = Inotify::init()
            .map_err(|e| Error::io("plugin watcher: failed to start inotify", &e))?;
        let events = inotify
            .into_event_stream([0u8; 4096])
            .map_err(|e| Error::io("plugin watcher: failed to start inotify", &e))?;
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            node,
            sockets: Mutex::default(),
            seen: AtomicU64::new(0),
            last_error: Mutex::new(None),
        });
        let mut tree = Tree {
            shared: shared.clone(),
            watches: events.watches(),
            dirs: HashMap::new(),
        };
        // The watch is added before the walk, so a socket made in between is seen by one or
        // both; its identity makes both the same socket.
        tree.add_dir(&dir).map_err(|e| {
            Error::io(
                format!("plugin watcher: failed to watch {}", dir.display()),
                &e,
            )
        })?;
        tracing::info!("plugin watcher started on {}", dir.display());
        let events = tokio::spawn(tree.run(events));
        Ok(PluginWatcher { shared, events })
    }

    /// Stops watching and every worker, without deregistering (as a kubelet that stops
    /// leaves its drivers registered). Waits for the tasks to end unless called on a runtime
    /// thread.
    pub fn stop(&self) {
        self.events.abort();
        let tasks: Vec<JoinHandle<()>> = {
            let mut sockets = self.shared.lock_sockets();
            let current = std::mem::take(&mut sockets.current);
            let retiring = std::mem::take(&mut sockets.retiring);
            current
                .into_values()
                .map(|w| w.task)
                .chain(retiring.into_values())
                .collect()
        };
        for t in &tasks {
            t.abort();
        }
        if tokio::runtime::Handle::try_current().is_err() {
            let _ = crate::runtime::block_on(|| async {
                for t in tasks {
                    let _ = t.await;
                }
            });
        }
    }

    /// The watched dir, the sockets seen and the registration of each, sorted by path.
    pub fn status(&self) -> PluginWatcherStatus {
        let sockets = self
            .shared
            .lock_sockets()
            .current
            .iter()
            .map(|(path, w)| {
                w.state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .status(path)
            })
            .collect();
        PluginWatcherStatus {
            dir: self.shared.dir.clone(),
            sockets_seen: self.shared.seen.load(Ordering::Relaxed),
            last_error: self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            sockets,
        }
    }
}

impl Drop for PluginWatcher {
    fn drop(&mut self) {
        self.events.abort();
        let sockets = self.shared.lock_sockets();
        for w in sockets.current.values() {
            w.task.abort();
        }
        for t in sockets.retiring.values() {
            t.abort();
        }
    }
}

impl Shared {
    fn lock_sockets(&self) -> std::sync::MutexGuard<'_, Sockets> {
        self.sockets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_error(&self, message: String) {
        tracing::error!("{message}");
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(message);
    }

    /// Starts a worker for the socket at `path` unless one runs for this very file.
    fn ensure_worker(self: &Arc<Self>, path: &Path, identity: Identity) {
        let mut sockets = self.lock_sockets();
        if sockets
            .current
            .get(path)
            .is_some_and(|w| w.identity == identity)
        {
            return;
        }
        let previous = match sockets.current.remove(path) {
            Some(old) => {
                tracing::info!(
                    "plugin watcher: socket {} was re-created; re-registering",
                    path.display()
                );
                drop(old.stop);
                Some(old.task)
            }
            None => sockets.retiring.remove(path),
        };
        sockets.retiring.retain(|_, t| !t.is_finished());
        self.seen.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "plugin watcher: found registration socket {}",
            path.display()
        );
        let state = Arc::new(Mutex::new(SocketState::default()));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(worker::run(
            self.node.clone(),
            path.to_path_buf(),
            state.clone(),
            stopped,
            previous,
        ));
        sockets.current.insert(
            path.to_path_buf(),
            Worker {
                identity,
                state,
                stop,
                task,
            },
        );
    }

    /// Stops the worker of `path` and, with `below`, of every socket below it.
    fn stop_workers(&self, path: &Path, below: bool) {
        let mut sockets = self.lock_sockets();
        let gone: Vec<PathBuf> = sockets
            .current
            .keys()
            .filter(|p| *p == path || (below && p.starts_with(path)))
            .cloned()
            .collect();
        for p in gone {
            if let Some(w) = sockets.current.remove(&p) {
                tracing::info!("plugin watcher: socket {} was removed", p.display());
                drop(w.stop);
                sockets.retiring.insert(p, w.task);
            }
        }
    }
}

/// The watched directories and what happens in them.
struct Tree {
    shared: Arc<Shared>,
    watches: Watches,
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

/// Upstream ignores files whose names start with a dot.
fn hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
}

impl Tree {
    /// Watches `dir` and looks at everything already in it (upstream `traversePluginDir`).
    fn add_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        let wd = self.watches.add(dir, watch_mask())?;
        self.dirs.insert(wd, dir.to_path_buf());
        for entry in std::fs::read_dir(dir)? {
            match entry {
                Ok(entry) => self.sync_path(&entry.path()),
                Err(e) => tracing::warn!(
                    "plugin watcher: error reading directory {}: {e}",
                    dir.display()
                ),
            }
        }
        Ok(())
    }

    /// Brings the workers in line with what is at `path` now.
    fn sync_path(&mut self, path: &Path) {
        if hidden(path) {
            tracing::debug!(
                "plugin watcher: ignoring {} (starts with '.')",
                path.display()
            );
            return;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                self.shared.ensure_worker(path, Identity::of(&m));
            }
            // Upstream's IsUnixDomainSocket stats through a symlink: a link to a socket is
            // registered at the link's path (known by the link's own identity, so a re-created
            // link is a new socket).
            Ok(m) if m.file_type().is_symlink() => match std::fs::metadata(path) {
                Ok(target) if target.file_type().is_socket() => {
                    self.shared.ensure_worker(path, Identity::of(&m));
                }
                _ => {
                    self.shared.stop_workers(path, false);
                    tracing::debug!(
                        "plugin watcher: ignoring {} (not a link to a socket)",
                        path.display()
                    );
                }
            },
            Ok(m) if m.is_dir() => {
                self.shared.stop_workers(path, false);
                if !self.dirs.values().any(|d| d == path) {
                    if let Err(e) = self.add_dir(path) {
                        tracing::warn!("plugin watcher: failed to watch {}: {e}", path.display());
                    }
                }
            }
            Ok(m) => {
                self.shared.stop_workers(path, false);
                tracing::debug!(
                    "plugin watcher: ignoring non-socket file {} ({:?})",
                    path.display(),
                    m.file_type()
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.shared.stop_workers(path, true);
                self.forget_dirs(path);
            }
            Err(e) => tracing::warn!("plugin watcher: stat {} failed: {e}", path.display()),
        }
    }

    /// Drops the watches at and below a directory that left the tree (a moved directory keeps
    /// its watch in the kernel, under a name that no longer leads to it).
    fn forget_dirs(&mut self, path: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.starts_with(path))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }

    /// After lost events: re-check every known socket, then walk everything again.
    fn rescan(&mut self) {
        tracing::warn!(
            "plugin watcher: inotify queue overflowed; rescanning {}",
            self.shared.dir.display()
        );
        let known: Vec<PathBuf> = self.shared.lock_sockets().current.keys().cloned().collect();
        for p in known {
            self.sync_path(&p);
        }
        let dirs: Vec<PathBuf> = self.dirs.values().cloned().collect();
        for d in dirs {
            if let Err(e) = self.add_dir(&d) {
                tracing::warn!("plugin watcher: failed to rescan {}: {e}", d.display());
            }
        }
    }

    async fn run(mut self, mut events: EventStream<[u8; 4096]>) {
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    self.shared.set_error(format!(
                        "plugin watcher: reading inotify events for {} failed, no longer watching: {e}",
                        self.shared.dir.display()
                    ));
                    return;
                }
            };
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                self.rescan();
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd).cloned() else {
                continue;
            };
            if event.mask.contains(EventMask::IGNORED) {
                // The directory itself is gone (or its watch was removed).
                self.dirs.remove(&event.wd);
                self.shared.stop_workers(&dir, true);
                if dir == self.shared.dir {
                    self.shared.set_error(format!(
                        "plugin watcher: the watched directory {} was removed; no longer watching",
                        dir.display()
                    ));
                    return;
                }
                continue;
            }
            if let Some(name) = event.name {
                self.sync_path(&dir.join(name));
            }
        }
    }
}
