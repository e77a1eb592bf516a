//! moat's global allocator: dlmalloc (the Rust port of Doug Lea's allocator that std uses
//! on wasm) behind a spin lock.
//!
//! musl's own allocator (mallocng) trades speed for hardening of a long-lived heap; a
//! create, which parses and writes JSON, took ~300 µs longer with it than with glibc's;
//! dlmalloc is as fast as glibc's here (docs/performance.md). The crate's own global
//! wrapper takes a pthread mutex around every call, two calls into libc per allocation:
//! 4 % of a `moat run`'s CPU. moat is single-threaded, so the lock is never contended; an
//! atomic flag, taken with one compare-exchange, keeps the allocator sound all the same
//! should a thread ever allocate.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

pub struct Alloc {
    busy: AtomicBool,
    heap: UnsafeCell<dlmalloc::Dlmalloc>,
}

// SAFETY: the heap is reached only by the thread that holds `busy` (see `with`).
unsafe impl Sync for Alloc {}

impl Alloc {
    pub const fn new() -> Alloc {
        Alloc {
            busy: AtomicBool::new(false),
            heap: UnsafeCell::new(dlmalloc::Dlmalloc::new()),
        }
    }

    #[inline]
    fn with<T>(&self, f: impl FnOnce(&mut dlmalloc::Dlmalloc) -> T) -> T {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: `busy` is ours until the store below, so this is the only reference to
        // the heap.
        let r = f(unsafe { &mut *self.heap.get() });
        self.busy.store(false, Ordering::Release);
        r
    }
}

// SAFETY: each method hands its arguments to the dlmalloc call of the same contract
// (GlobalAlloc's guarantees on `ptr` and `layout` are dlmalloc's requirements), under the
// lock.
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        self.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: see the impl.
        self.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        self.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: see the impl.
        self.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}
