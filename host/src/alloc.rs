//! The `blis` binary's global allocator: the system allocator, with the heap
//! and every large block advised for transparent huge pages.
//!
//! Why: a large run touches hundreds of MB at random (64 instances' KV
//! blocks and indexes, the router's prefix index, the waiting requests).
//! With 4 KiB pages nearly every one of those accesses also misses the TLB,
//! and under virtualisation a page walk costs about as much as the miss
//! itself. Backing the heap with 2 MiB pages took 64 instances × 1,000,000
//! requests from 36.9 s to 23–26 s, and 16 × 100,000 from 1.55 to 1.4 s,
//! with byte-identical output.
//!
//! glibc can do this on its own (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`),
//! but only when the variable is set before the process starts, so blis does
//! the same from the allocator:
//!
//! * blocks below 32 MiB come from the heap (`M_MMAP_THRESHOLD`), so the
//!   per-instance tables of a few hundred KB share huge pages instead of
//!   each sitting in its own small mapping;
//! * the heap is advised (`madvise(MADV_HUGEPAGE)`) from the start: every
//!   time its break moves up the new part is advised, the heap growing
//!   16 MiB at a time (`M_TOP_PAD`, address space only) so that whole 2 MiB
//!   ranges are advised before they are first touched and fault in as huge
//!   pages directly;
//! * blocks of 4 MiB or more are advised as they are allocated.
//!
//! An earlier version left the heap on small pages up to 32 MiB and then
//! moved it to huge pages at once (`MADV_COLLAPSE`): that copy took 56 ms
//! of the 0.22 s of the 16 × 10,000-request benchmark (issue 17), while
//! advising from the start costs a small run about 1 MiB of memory (a
//! partly used 2 MiB page counts whole). Nothing changes where transparent
//! huge pages are off (`never`) or already `always`; `BLIS_HUGE_PAGES=0` in
//! the environment turns all of this off.
//!
//! A sweep runs many short simulations one after another on each worker
//! thread, and [`keep_freed_memory`] tells the allocator to keep what a run
//! frees for the next run (see there).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// The system allocator plus huge-page advice (see the module documentation).
pub struct HugePageAlloc;

/// Advice is given only after [`init`] turned it on.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The heap break up to which the heap has been advised.
static ADVISED_BREAK: AtomicUsize = AtomicUsize::new(0);

/// Blocks at least this large are advised on their own (most of such a block
/// is whole 2 MiB pages).
const LARGE_BLOCK: usize = 4 << 20;
/// Blocks smaller than this come from the heap.
const HEAP_THRESHOLD: usize = 32 << 20;
/// How far the heap grows beyond each request (reserved, not touched).
const HEAP_GROWTH_PAD: usize = 16 << 20;
const PAGE: usize = 4096;

/// Turn the advice on, unless `BLIS_HUGE_PAGES=0`. Call once, early in `main`.
pub fn init() {
    if std::env::var_os("BLIS_HUGE_PAGES").is_some_and(|v| v == "0") {
        return;
    }
    platform::init();
}

/// Keep freed memory in the process for the next allocations instead of
/// giving it back to the kernel; for a process that runs many simulations
/// one after another on each thread (`blis sweep`). Call before starting
/// the threads.
///
/// Why: by default glibc gives the free top of a thread's heap back to the
/// kernel (`madvise(MADV_DONTNEED)`) once it passes 128 KiB, which every
/// run's end does, and the next run touches those pages again (a page
/// fault each). That cost a sweep of 200 runs of 100 requests about 7% of
/// its CPU time (7,750 page faults), and with two workers each `madvise`
/// also interrupts the other worker's CPU to flush its TLB (about 460
/// shootdowns per 200 runs against 5 with one worker): the workers slowed
/// each other down. Kept, the same sweep has 1,700–1,900 page faults and
/// about 115 shootdowns with two workers. With the free
/// memory kept (`M_TRIM_THRESHOLD` at its largest; blocks under 32 MiB
/// from the heaps, as [`init`] sets), a worker's heap stays at its
/// largest run's size and the next run reuses it. Which memory an
/// allocation gets never changes what a simulation computes.
pub fn keep_freed_memory() {
    platform::keep_freed_memory();
}

/// Stop giving huge-page advice for the rest of the process: for a command
/// that simulates nothing (`blis observe` waits on sockets; its memory is a
/// growing list of records, where huge pages save no TLB misses but each
/// costs a slow first touch, see [`with_small_pages`]).
pub fn small_pages_from_now_on() {
    ENABLED.store(false, Relaxed);
}

std::thread_local! {
    /// Set inside [`with_small_pages`].
    static SMALL_PAGES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is inside [`with_small_pages`] (asked only where
/// advice would be given: a large block, or the heap's growth).
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn small_pages() -> bool {
    SMALL_PAGES.with(std::cell::Cell::get)
}

/// Run `f` with no huge-page advice for what it allocates on this thread.
///
/// For a large table written once, in order, and read in order (a replayed
/// trace's rows): it gains nothing from huge pages, whose first touch costs
/// far more than small pages' where the host backs a VM's memory lazily
/// (measured here: 100 MB/s against 1.5 GB/s, so a million-row trace spent
/// more than a second faulting its table in). The heap's growth inside `f`
/// is advised by the next allocation outside it.
pub fn with_small_pages<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SMALL_PAGES.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(SMALL_PAGES.with(|c| c.replace(true)));
    f()
}

unsafe impl GlobalAlloc for HugePageAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        after_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        after_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        after_alloc(p, new_size);
        p
    }
}

#[inline]
fn after_alloc(p: *mut u8, size: usize) {
    if !p.is_null() && ENABLED.load(Relaxed) {
        platform::advise_block(p as usize, size);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod platform {
    use super::*;

    pub fn init() {
        // SAFETY: mallopt only changes glibc's allocation parameters;
        // sbrk(0) reads the current break without moving it.
        let start = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_THRESHOLD as libc::c_int);
            // The heap grows in large steps, so that whole 2 MiB ranges are
            // advised before anything touches them.
            libc::mallopt(libc::M_TOP_PAD, HEAP_GROWTH_PAD as libc::c_int);
            libc::sbrk(0) as usize
        };
        ADVISED_BREAK.store(start, Relaxed);
        ENABLED.store(true, Relaxed);
    }

    pub fn keep_freed_memory() {
        // SAFETY: mallopt only changes glibc's allocation parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_THRESHOLD as libc::c_int);
            libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        }
    }

    /// Give `advice` for `[from, to)`, shrunk to whole pages.
    fn advise(from: usize, to: usize, advice: libc::c_int) {
        let from = from.next_multiple_of(PAGE);
        let to = to & !(PAGE - 1);
        if to > from {
            // SAFETY: advice only; the kernel ignores unmapped parts.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, advice);
            }
        }
    }

    #[inline]
    pub fn advise_block(p: usize, size: usize) {
        if size >= LARGE_BLOCK {
            if !small_pages() {
                advise(p, p + size, libc::MADV_HUGEPAGE);
            }
            return;
        }
        // SAFETY: sbrk(0) reads the current break without moving it.
        let brk = unsafe { libc::sbrk(0) } as usize;
        let advised = ADVISED_BREAK.load(Relaxed);
        if brk == advised || p >= brk {
            return; // the heap has not moved, or the block is not in it
        }
        if brk > advised {
            if small_pages() {
                // Left for the next allocation outside `with_small_pages`.
                return;
            }
            // The heap grew: advise its new part.
            advise(advised, brk, libc::MADV_HUGEPAGE);
        }
        // (A trimmed heap just lowers the mark; its regrowth is advised.)
        ADVISED_BREAK.store(brk, Relaxed);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod platform {
    pub fn init() {}
    pub fn keep_freed_memory() {}
    #[inline]
    pub fn advise_block(_p: usize, _size: usize) {}
}
