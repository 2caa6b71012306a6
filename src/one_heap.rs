//! kcsi's allocations in one heap of its own. glibc's malloc gives each thread that allocates an
//! arena of its own, and kcsi allocates on every host thread that calls it (Go runs calls on
//! any of its threads) as well as on its own: in the kubelet, kcsi's memory was spread over 5
//! arenas holding 0.47 MiB, each keeping its own free pages. One dlmalloc heap behind one lock
//! holds them instead; `mallopt(M_ARENA_MAX)` would have changed the host's own allocations, and
//! glibc fixes the limit before kcsi loads. Its free pages go back to the OS with the others
//! after calls ([`trim`]).
//!
//! `KCSI_MALLOC=system` in the environment keeps kcsi on the process's malloc, where valgrind and
//! the sanitizers' leak checks see each allocation (scripts/test-c.sh runs them so).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};

use dlmalloc::Dlmalloc;

/// The allocator of every Rust allocation in kcsi's library, and in a program built on it.
#[global_allocator]
static HEAP: OneHeap = OneHeap::new();

const UNDECIDED: u8 = 0;
const ONE_HEAP: u8 = 1;
const SYSTEM: u8 = 2;

struct OneHeap {
    lock: UnsafeCell<libc::pthread_mutex_t>,
    heap: UnsafeCell<Dlmalloc>,
    /// Where allocations go, decided at the first one and never changed after: a block is
    /// freed by the allocator that made it.
    mode: AtomicU8,
}

// SAFETY: `heap` is only reached with `lock` held, and a pthread mutex is shared by design.
unsafe impl Sync for OneHeap {}

impl OneHeap {
    const fn new() -> OneHeap {
        OneHeap {
            lock: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            heap: UnsafeCell::new(Dlmalloc::new()),
            mode: AtomicU8::new(UNDECIDED),
        }
    }

    fn mode(&self) -> u8 {
        match self.mode.load(Ordering::Acquire) {
            UNDECIDED => self.decide(),
            mode => mode,
        }
    }

    /// The environment's choice (read without allocating); for one heap, the lock is held
    /// across `fork`: a host that forks while another of its threads allocates in kcsi would
    /// otherwise leave its child, which has only the forking thread, a lock held forever.
    #[cold]
    fn decide(&self) -> u8 {
        // SAFETY: getenv with a NUL-terminated name; the value is read before any other call.
        let system = unsafe {
            let value = libc::getenv(c"KCSI_MALLOC".as_ptr());
            !value.is_null() && std::ffi::CStr::from_ptr(value) == c"system"
        };
        let mode = if system { SYSTEM } else { ONE_HEAP };
        // Threads racing here read the same environment; the first registers the handlers.
        if self
            .mode
            .compare_exchange(UNDECIDED, mode, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            && mode == ONE_HEAP
        {
            unsafe extern "C" fn acquire() {
                // SAFETY: see `with`.
                unsafe { libc::pthread_mutex_lock(HEAP.lock.get()) };
            }
            unsafe extern "C" fn release() {
                // SAFETY: the forking thread took the lock in `acquire`.
                unsafe { libc::pthread_mutex_unlock(HEAP.lock.get()) };
            }
            // SAFETY: the handlers only lock and unlock this static's mutex. A failure (ENOMEM)
            // leaves the fork case as it was without the handlers.
            unsafe { libc::pthread_atfork(Some(acquire), Some(release), Some(release)) };
        }
        mode
    }

    /// Runs `f` on the heap with the lock held.
    fn with<T>(&self, f: impl FnOnce(&mut Dlmalloc) -> T) -> T {
        // SAFETY: a statically initialised mutex, locked and unlocked by this thread; the heap
        // is only touched while it is held.
        unsafe {
            libc::pthread_mutex_lock(self.lock.get());
            let out = f(&mut *self.heap.get());
            libc::pthread_mutex_unlock(self.lock.get());
            out
        }
    }
}

// SAFETY: dlmalloc and the system allocator return blocks of the requested size and alignment,
// or null; every block is freed and resized by the allocator that made it (`mode` never
// changes once decided), dlmalloc's under its lock.
unsafe impl GlobalAlloc for OneHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.mode() == SYSTEM {
            return unsafe { System.alloc(layout) };
        }
        self.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.mode() == SYSTEM {
            return unsafe { System.alloc_zeroed(layout) };
        }
        self.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.mode() == SYSTEM {
            return unsafe { System.dealloc(ptr, layout) };
        }
        self.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.mode() == SYSTEM {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        self.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

/// Gives the heap's free top and unused segments back to the OS (with `KCSI_MALLOC=system`,
/// malloc_trim does).
pub fn trim() {
    if HEAP.mode() == ONE_HEAP {
        // SAFETY: trimming releases only free memory.
        HEAP.with(|h| unsafe { h.trim(0) });
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    /// Bytes glibc's malloc holds for the process, by its own account (every arena, and the
    /// blocks it mapped on its own).
    fn glibc_holds() -> usize {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let info = unsafe { libc::mallinfo2() };
        info.uordblks + info.hblkhd
    }

    #[test]
    fn allocations_on_many_threads_stay_out_of_glibcs_heaps() {
        let before = glibc_holds();
        let kept: Vec<Vec<u8>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..256).map(|i| vec![1u8; 1024 + i]).collect::<Vec<_>>()))
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let held = kept.iter().map(Vec::len).sum::<usize>();
        assert!(held > 1 << 20);
        let grew = glibc_holds().saturating_sub(before);
        assert!(
            grew < 64 * 1024,
            "glibc's heaps grew by {grew} bytes for {held} bytes allocated"
        );
    }
}
