//! libkcsi.so's read-only pages (code, constants, symbol tables) that its calls left mapped in
//! the host process, given back. The kernel maps a library's code 64 KiB around each page a
//! process runs and keeps it mapped for the process's life, so code that ran once (at start,
//! for one volume) would stay in the host's RSS. `MADV_DONTNEED` only unmaps these pages: they
//! stay in the page cache, and the next call maps back what it runs, a minor fault per 64 KiB.
//! A page the process wrote (a debugger's breakpoint, a uprobe, relocations) is not the file's
//! and is kept.

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;

/// `/proc/<pid>/pagemap` entry bits (Documentation/admin-guide/mm/pagemap.rst).
const PRESENT: u64 = 1 << 63;
const FILE_PAGE: u64 = 1 << 61;

/// Unmaps this library's read-only file pages from the process; returns the bytes unmapped.
/// Nothing when kcsi is linked into the program itself (the rlib, the static library): the
/// program's code is not kcsi's to release.
pub fn release() -> io::Result<usize> {
    let page = page_size();
    let Some(segments) = own_read_only_segments(page) else {
        return Ok(0);
    };
    let pagemap = File::open("/proc/self/pagemap")?;
    let mut released = 0;
    for segment in segments {
        for run in file_page_runs(&pagemap, segment, page)? {
            // SAFETY: `run` lies in a read-only segment of this library whose pages are all
            // still the file's (checked just above), so unmapping them changes no byte the
            // process reads: the next access maps the same file page back.
            if unsafe { libc::madvise(run.start as *mut c_void, run.len(), libc::MADV_DONTNEED) }
                != 0
            {
                return Err(io::Error::last_os_error());
            }
            released += run.len();
        }
    }
    Ok(released)
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// The page-aligned address ranges of the read-only `PT_LOAD` segments of the shared object
/// this code is in, or None when it is in the main program.
fn own_read_only_segments(page: usize) -> Option<Vec<Range<usize>>> {
    struct Search {
        inside: usize,
        page: usize,
        found: Option<Vec<Range<usize>>>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr hands a valid info for this call and `data` is the Search
        // below, borrowed for the iteration only.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers while the callback runs.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let (base, page) = (info.dlpi_addr as usize, search.page);
        let load = || headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let span = |h: &libc::Elf64_Phdr| {
            base + h.p_vaddr as usize..base + (h.p_vaddr + h.p_memsz) as usize
        };
        if !load().any(|h| span(h).contains(&search.inside)) {
            return 0;
        }
        // SAFETY: dlpi_name is a NUL-terminated string; the main program's is empty.
        let main_program = info.dlpi_name.is_null() || unsafe { *info.dlpi_name } == 0;
        if !main_program {
            let segments = load()
                .filter(|h| h.p_flags & libc::PF_W == 0)
                .map(span)
                .map(|s| s.start.next_multiple_of(page)..s.end / page * page)
                .filter(|s| !s.is_empty())
                .collect();
            search.found = Some(segments);
        }
        1
    }
    let mut search = Search {
        inside: release as *const () as usize,
        page,
        found: None,
    };
    // SAFETY: `visit` only reads the headers it is given and writes `search`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
    search.found
}

/// The runs of `range`'s pages that are mapped and still the file's own.
fn file_page_runs(
    pagemap: &File,
    range: Range<usize>,
    page: usize,
) -> io::Result<Vec<Range<usize>>> {
    let pages = range.len() / page;
    let mut entries = vec![0u8; pages * 8];
    pagemap.read_exact_at(&mut entries, (range.start / page * 8) as u64)?;
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (i, entry) in entries.chunks_exact(8).enumerate() {
        let entry = u64::from_ne_bytes(entry.try_into().expect("chunks of 8 bytes"));
        if entry & (PRESENT | FILE_PAGE) != PRESENT | FILE_PAGE {
            continue;
        }
        let at = range.start + i * page;
        match runs.last_mut() {
            Some(last) if last.end == at => last.end += page,
            _ => runs.push(at..at + page),
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_released_from_the_program_kcsi_is_linked_into() {
        // Unit tests link kcsi into the test program itself.
        assert_eq!(own_read_only_segments(page_size()), None);
        assert_eq!(release().unwrap(), 0);
    }

    #[test]
    fn runs_hold_only_mapped_file_pages() {
        let page = page_size();
        let path = std::env::temp_dir().join(format!("kcsi-code-pages-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 4 * page]).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // SAFETY: a fresh private mapping of the file, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        } as usize;
        assert_ne!(at as *mut c_void, libc::MAP_FAILED);
        // SAFETY: all four pages are mapped: read pages 0 and 1, write page 3 (copied on write).
        unsafe {
            std::ptr::read_volatile(at as *const u8);
            std::ptr::read_volatile((at + page) as *const u8);
            std::ptr::write_volatile((at + 3 * page) as *mut u8, 1);
        }
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let runs = file_page_runs(&pagemap, at..at + 4 * page, page).unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(at as *mut c_void, 4 * page) };
        // Page 2 was never touched (fault-around may have mapped it: then it joins the run);
        // page 3 is the process's own copy.
        assert!(
            runs.len() == 1 && runs[0].start == at && [2 * page, 3 * page].contains(&runs[0].len()),
            "{runs:x?}"
        );
    }
}
