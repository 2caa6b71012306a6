//! The one process-wide piece of state: a lazily started tokio runtime that every host shares,
//! driven by one thread of its own. Blocking entry points run their futures on it from the
//! caller's thread, and what their calls leave mapped is given back once they are done.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::code_pages;
use crate::error::{Error, ErrorKind, Result};
use crate::one_heap;
use crate::stack_pages;

/// How long after a call kcsi gives back the library pages and the free heap pages the calls
/// since the last time left mapped: calls come in bursts (a pod's volumes mounted), and the
/// next burst maps back only the code it runs.
const RELEASE_AFTER_CALLS: Duration = Duration::from_secs(10);

struct Global {
    /// The runtime's handle; the runtime itself lives on its driver thread.
    runtime: Handle,
    /// The process that started the runtime; a forked child cannot use it (its threads are gone).
    pid: u32,
    /// A [`release_memory_soon`] is pending.
    trim_pending: AtomicBool,
    /// A release after calls is pending.
    calls_release_pending: AtomicBool,
}

static GLOBAL: OnceLock<std::result::Result<Global, String>> = OnceLock::new();

fn global() -> Result<&'static Global> {
    let g = GLOBAL.get_or_init(|| {
        start().map(|runtime| Global {
            runtime,
            pid: std::process::id(),
            trim_pending: AtomicBool::new(false),
            calls_release_pending: AtomicBool::new(false),
        })
    });
    let g = g.as_ref().map_err(|e| Error::internal(e.clone()))?;
    if g.pid != std::process::id() {
        return Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "kcsi was started in process {} and cannot be used in forked child {}: \
                 its runtime threads do not exist here",
                g.pid,
                std::process::id()
            ),
        ));
    }
    Ok(g)
}

/// A current-thread runtime driven forever by one thread, `kcsi-rt`: it runs the spawned tasks
/// (driver connections, watchers, informers) and the I/O and timer drivers, while blocking
/// calls poll their own futures on their callers' threads. kcsi's background work is waiting
/// on sockets, files and the API server; a multi-thread scheduler's workers (two to four) cost a
/// host each a thread's stack and the scheduler's code for no gain (issue #41: the kubelet's
/// footprint).
fn start() -> std::result::Result<Handle, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        // The blocking pool's threads (files, mount table walks), started and ended on demand.
        .thread_name("kcsi-blocking")
        .on_thread_start(block_sigpipe)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the kcsi runtime: {e}"))?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("kcsi-rt".into())
        .spawn(move || {
            block_sigpipe();
            runtime.block_on(std::future::pending::<()>())
        })
        .map_err(|e| format!("cannot start the kcsi runtime's thread: {e}"))?;
    Ok(handle)
}

/// Writing to a socket a driver already closed raises SIGPIPE on the writing thread. Hosts that
/// did not ignore it (a C program's default, and Go, which treats SIGPIPE on a thread it did not
/// create as fatal) would die with the driver. Blocked on kcsi's own threads only, the write just
/// fails with EPIPE; the host's process-wide signal handling is left alone.
fn block_sigpipe() {
    // SAFETY: plain libc calls on a local, zero-initialised signal set for this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Gives memory freed by closed connections back to the OS a moment later. glibc keeps freed
/// chunks in its arenas, so a node agent whose thousand idle driver connections were closed
/// would keep their RSS; `malloc_trim` releases the free pages. Requests within a second
/// coalesce into one trim.
pub fn release_memory_soon() {
    if let Ok(g) = global() {
        release_later(g, &g.trim_pending, Duration::from_secs(1), trim_heap);
    }
}

/// Runs `release` `after` from now, unless one is pending on `pending`. It runs on a runtime
/// thread: a few quick syscalls, where a thread of its own would map its code and stack anew
/// each time.
fn release_later(g: &'static Global, pending: &'static AtomicBool, after: Duration, release: fn()) {
    // A load first: calls back to back on many threads then only read the shared flag.
    if !pending.load(Ordering::Acquire) && !pending.swap(true, Ordering::AcqRel) {
        g.runtime.spawn(async move {
            tokio::time::sleep(after).await;
            pending.store(false, Ordering::Release);
            release();
        });
    }
}

/// The free pages of kcsi's heap and of glibc's (what libc allocated for kcsi's threads) back to
/// the OS.
fn trim_heap() {
    one_heap::trim();
    // SAFETY: malloc_trim only walks and releases the allocator's free memory.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A host's call into kcsi ended: the stack it used on the host's thread is unmapped now (but
/// for the 64 KiB below this frame), and the library and heap pages its calls left mapped are
/// given back [`RELEASE_AFTER_CALLS`] later. That release only once the runtime runs: a process
/// whose calls never needed it does not start it for this.
pub fn after_call() {
    // Every frame of the call lies below this one and is done.
    stack_pages::release_below_caller();
    let Some(Ok(g)) = GLOBAL.get() else { return };
    // The pending flag before the pid: getpid is a syscall, and while a release is pending
    // there is nothing to schedule (a child forked then never schedules one, as it must not).
    if !g.calls_release_pending.load(Ordering::Acquire) && g.pid == std::process::id() {
        release_later(
            g,
            &g.calls_release_pending,
            RELEASE_AFTER_CALLS,
            release_after_calls,
        );
    }
}

/// What calls left mapped: libkcsi.so's pages and the heaps' free pages.
fn release_after_calls() {
    match code_pages::release() {
        Ok(bytes) => tracing::debug!("Released {} KiB of kcsi's library pages", bytes / 1024),
        Err(e) => tracing::debug!("Cannot release kcsi's library pages: {e}"),
    }
    trim_heap();
}

/// A handle to the runtime, for spawning background work.
pub fn handle() -> Result<Handle> {
    Ok(global()?.runtime.clone())
}

/// Runs the future `make` returns to completion from a host thread, which waits. Refused on a
/// runtime thread (e.g. inside a log callback), where blocking would deadlock or panic.
///
/// The future is polled on the caller's thread, so each call still has a thread of its own: a
/// syscall that hangs (a dead NFS server) holds only its own call, never the runtime's
/// thread. A thread started for each call instead cost a volume's lifecycle about 0.8 ms, a
/// third of kcsi's overhead over the bare CSI calls (docs/performance.md); the stack the call
/// used is unmapped before the export returns instead ([`after_call`]), so that a Go host's
/// never-exiting threads keep none of it.
pub fn block_on<M, F>(make: M) -> Result<F::Output>
where
    M: FnOnce() -> F,
    F: Future,
{
    if Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "a blocking kcsi call was made from inside kcsi's runtime (for example from a log \
             callback); call it from another thread",
        ));
    }
    let g = global()?;
    // Boxed: the future's state lies on the heap, not on the host thread's stack. The export
    // that called this gives back the stack it was polled on (`after_call`, run_guarded).
    Ok(g.runtime.block_on(Box::pin(make())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_call_runs_on_the_callers_thread_and_borrows_its_values() {
        let caller = std::thread::current().id();
        let words = ["kept".to_string()];
        let (thread, first) =
            block_on(|| async { (std::thread::current().id(), words[0].clone()) }).unwrap();
        assert_eq!(thread, caller);
        assert_eq!(first, "kept");
    }

    #[test]
    fn a_panic_in_a_blocking_call_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            block_on(|| async { panic!("driver answer broke an invariant") })
        })
        .unwrap_err();
        assert_eq!(
            caught.downcast_ref::<&str>().copied(),
            Some("driver answer broke an invariant")
        );
    }

    /// The kernel's names of this process' threads.
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim_end().to_string())
            .collect()
    }

    #[test]
    fn background_work_runs_on_the_one_runtime_thread() {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                handle().unwrap().spawn(async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    std::thread::current().name().map(str::to_string)
                })
            })
            .collect();
        let ran_on = block_on(|| async {
            let mut names = Vec::new();
            for task in tasks {
                names.push(task.await.unwrap());
            }
            names
        })
        .unwrap();
        assert!(
            ran_on.iter().all(|n| n.as_deref() == Some("kcsi-rt")),
            "{ran_on:?}"
        );
        let runtime_threads = thread_names().iter().filter(|n| *n == "kcsi-rt").count();
        assert_eq!(runtime_threads, 1, "threads: {:?}", thread_names());
    }

    #[test]
    fn a_blocking_call_from_a_runtime_thread_is_refused() {
        let nested = block_on(|| async { block_on(|| async {}).map_err(|e| e.kind()) }).unwrap();
        assert_eq!(nested, Err(ErrorKind::InvalidArgument));
    }
}
