//! kcsi's allocations in one heap of its own. glibc's malloc gives each thread that allocates an
//! arena of its own, and kcsi allocates on every host thread that calls it (Go runs calls on
//! any of its threads) as well as on its own: in the kubelet, kcsi's memory was spread over 5
//! arenas holding 0.47 MiB, each keeping its own free pages. One dlmalloc heap behind one lock
//! holds them instead; `mallopt(M_ARENA_MAX)` would have changed the host's own allocations, and
//! glibc fixes the limit before kcsi loads. Its free pages go back to the OS with the others
//! after calls ([`trim`]).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use dlmalloc::Dlmalloc;

/// The allocator of every Rust allocation in kcsi's library, and in a program built on it.
#[global_allocator]
static HEAP: OneHeap = OneHeap::new();

struct OneHeap {
    lock: UnsafeCell<libc::pthread_mutex_t>,
    heap: UnsafeCell<Dlmalloc>,
    fork_safe: AtomicBool,
}

// SAFETY: `heap` is only reached with `lock` held, and a pthread mutex is shared by design.
unsafe impl Sync for OneHeap {}

impl OneHeap {
    const fn new() -> OneHeap {
        OneHeap {
            lock: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            heap: UnsafeCell::new(Dlmalloc::new()),
            fork_safe: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the heap with the lock held.
    fn with<T>(&self, f: impl FnOnce(&mut Dlmalloc) -> T) -> T {
        if !self.fork_safe.load(Ordering::Acquire) {
            self.hold_across_fork();
        }
        // SAFETY: a statically initialised mutex, locked and unlocked by this thread; the heap
        // is only touched while it is held.
        unsafe {
            let rc = libc::pthread_mutex_lock(self.lock.get());
            debug_assert_eq!(rc, 0);
            let out = f(&mut *self.heap.get());
            libc::pthread_mutex_unlock(self.lock.get());
            out
        }
    }

    /// A host that forks while another of its threads allocates in kcsi: the child, which has
    /// only the forking thread, would find the lock held forever. Held across `fork` instead,
    /// so the heap is whole and unlocked on both sides.
    #[cold]
    fn hold_across_fork(&self) {
        if self.fork_safe.swap(true, Ordering::AcqRel) {
            return;
        }
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
}

// SAFETY: dlmalloc returns blocks of the requested size and alignment, or null; every block
// is freed and resized by the same heap, under the same lock.
unsafe impl GlobalAlloc for OneHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

/// Gives the heap's free top and unused segments back to the OS.
pub fn trim() {
    // SAFETY: trimming releases only free memory.
    HEAP.with(|h| unsafe { h.trim(0) });
}
