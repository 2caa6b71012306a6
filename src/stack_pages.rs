//! The calling thread's stack pages that a call used below the point it returns to, given
//! back. A host's threads outlive kcsi's calls (Go's never exit), and a page of stack a
//! call touched stays resident for the thread's life: on the kubelet's threads, kcsi's calls
//! kept 0.3 MiB so. Unmapped, the pages read as zeros when next used, as fresh stack does.

use std::cell::Cell;
use std::ffi::c_void;

use crate::code_pages::page_size;

/// Stack below the caller's frame left alone: this function's own frames and the syscall's
/// lie there while it runs, and most calls use no more, so a thread calling back to back
/// faults in again only what a deep call used beyond it.
const KEEP_BELOW: usize = 64 * 1024;

thread_local! {
    /// The lowest usable address of this thread's stack (above its guard), once known; 0
    /// when the thread's stack cannot be told.
    static STACK_LOW: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Unmaps this thread's stack pages from its lowest address to [`KEEP_BELOW`] under the
/// caller's frame. Must be called where no live frame lies below the caller's.
#[inline(never)]
pub fn release_below_caller() {
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    let low = STACK_LOW.with(|known| {
        known.get().unwrap_or_else(|| {
            let low = stack_low();
            known.set(Some(low));
            low
        })
    });
    let page = page_size();
    let end = sp.saturating_sub(KEEP_BELOW) / page * page;
    let start = low.next_multiple_of(page);
    if low == 0 || end <= start {
        return;
    }
    // SAFETY: [start, end) lies in this thread's stack below every live frame of this thread
    // (the caller promises none lies below its own, and this function's are above `end`);
    // unmapped stack pages read as zeros when next touched, as never-used ones do.
    unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) };
}

/// This thread's lowest stack address above its guard, or 0 when unknown.
fn stack_low() -> usize {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread, which is destroyed after
    // reading the stack's bounds.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return 0;
        }
        let (mut addr, mut size, mut guard) = (std::ptr::null_mut(), 0, 0);
        let known = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0
            && libc::pthread_attr_getguardsize(&attr, &mut guard) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if known {
            addr as usize + guard
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of [start, end) by the kernel's page map.
    fn resident(start: usize, end: usize) -> usize {
        use std::os::unix::fs::FileExt;
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let page = page_size();
        let mut entries = vec![0u8; (end - start) / page * 8];
        pagemap
            .read_exact_at(&mut entries, (start / page * 8) as u64)
            .unwrap();
        entries
            .chunks_exact(8)
            .filter(|e| u64::from_ne_bytes((*e).try_into().unwrap()) >> 63 == 1)
            .count()
    }

    #[inline(never)]
    fn touch_deep(bytes: usize) -> u8 {
        let mut frame = [1u8; 64 * 1024];
        std::hint::black_box(&mut frame);
        let deeper = if bytes > frame.len() {
            touch_deep(bytes - frame.len())
        } else {
            0
        };
        frame[7] + deeper
    }

    #[test]
    fn the_stack_a_call_used_below_its_caller_is_unmapped_and_usable_again() {
        std::thread::spawn(|| {
            let sum = touch_deep(512 * 1024);
            let here = 0u8;
            let sp = std::ptr::addr_of!(here) as usize / page_size() * page_size();
            let low = stack_low();
            assert!(low > 0 && low < sp);
            let below = sp - 2 * KEEP_BELOW;
            assert!(
                resident(below - 256 * 1024, below) >= 32,
                "the deep call left no pages"
            );
            release_below_caller();
            assert_eq!(resident(below - 256 * 1024, below), 0);
            assert_eq!(touch_deep(512 * 1024), sum);
        })
        .join()
        .unwrap();
    }
}
