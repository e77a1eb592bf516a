//! The musl functions moat replaces, for what every moat call pays: `memcpy` (and the
//! `__memcpy_fwd` entry musl's `memmove` takes into its file) and `open`. Defining a
//! symbol in the binary keeps libc's member out of the link (a static archive member is
//! only pulled for an undefined symbol; each of these members defines nothing else).
//!
//! **`memcpy`.** A moat call makes tens of thousands of copies, nearly all of a few
//! bytes: serde_json writes every token and string piece through `Vec::extend_from_slice`,
//! and at `opt-level = "z"` even fixed-size copies stay calls. musl's x86_64 `memcpy`
//! starts every copy with `rep movsq` and finishes with a byte loop, ~40 cycles for a
//! 5-byte copy; it was 7 % of all the CPU time of a `moat run` (perf,
//! docs/performance.md). Here a copy of up to 32 bytes is two overlapping loads and
//! stores of one width, and a larger one is one `rep movsb`, which the CPU's fast string
//! moves (ERMSB, FSRM) make the fastest large copy. libc's own callers get this one too.
//! `memmove` and `memset` stay musl's.
//!
//! Built for x86_64 only (the target moat ships for); anywhere else libc's is used.
#![allow(unsafe_code)]

/// Copies `n` bytes from `src` to `dst`, which must not overlap; returns `dst`.
///
/// # Safety
/// As C's `memcpy`: `src` readable and `dst` writable for `n` bytes, not overlapping.
#[cfg(all(target_arch = "x86_64", target_env = "musl", not(test)))]
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract covers every byte in [0, n) of both buffers.
    unsafe { copy(dst, src, n) };
    dst
}

/// C's `open(path, flags, ...)`. The optional mode travels in the third integer argument
/// register on x86_64 (variadic or not), which is where this reads it; the kernel looks at
/// it only with `O_CREAT` or `O_TMPFILE`, when the caller passed it.
///
/// # Safety
/// As C's `open`: `path` NUL-terminated.
#[cfg(all(target_arch = "x86_64", target_env = "musl", not(test)))]
#[no_mangle]
pub unsafe extern "C" fn open(
    path: *const libc::c_char,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> libc::c_int {
    // SAFETY: the caller's path; openat with AT_FDCWD is open, minus musl's fcntl.
    unsafe { libc::openat(libc::AT_FDCWD, path, flags, mode) }
}

/// musl's `memmove` copies forward through this entry of its `memcpy`'s file (when the
/// destination lies below the source, or apart from it): defined here too, so that file
/// is not linked at all. [`copy`] is correct for that overlap: each small arm reads all
/// before it writes, and `rep movsb` copies byte after byte upwards, by definition.
///
/// # Safety
/// As `memmove` with `dst` not above `src`, or the buffers apart.
#[cfg(all(target_arch = "x86_64", target_env = "musl", not(test)))]
#[no_mangle]
pub unsafe extern "C" fn __memcpy_fwd(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: as memmove, forward: the caller checked the direction.
    unsafe { copy(dst, src, n) };
    dst
}

/// The body of [`memcpy`] (also what the tests call, so that they do not replace the test
/// harness's own memcpy).
///
/// # Safety
/// As [`memcpy`].
#[cfg_attr(not(test), inline(always))]
unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
    // Each arm reads everything before it writes: the two halves may overlap each other
    // (never the other buffer). The loads and stores are of fixed sizes, which the
    // compiler emits as moves, never as a call back into memcpy.
    // SAFETY: every offset read or written stays within [0, n) of its buffer, as the
    // arm's bounds on n show; the caller guarantees both buffers for n bytes.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                let (a, b, c) = (*src, *src.add(n / 2), *src.add(n - 1));
                *dst = a;
                *dst.add(n / 2) = b;
                *dst.add(n - 1) = c;
            }
            4..=7 => {
                let a = src.cast::<u32>().read_unaligned();
                let b = src.add(n - 4).cast::<u32>().read_unaligned();
                dst.cast::<u32>().write_unaligned(a);
                dst.add(n - 4).cast::<u32>().write_unaligned(b);
            }
            8..=16 => {
                let a = src.cast::<u64>().read_unaligned();
                let b = src.add(n - 8).cast::<u64>().read_unaligned();
                dst.cast::<u64>().write_unaligned(a);
                dst.add(n - 8).cast::<u64>().write_unaligned(b);
            }
            17..=32 => {
                let a = src.cast::<u128>().read_unaligned();
                let b = src.add(n - 16).cast::<u128>().read_unaligned();
                dst.cast::<u128>().write_unaligned(a);
                dst.add(n - 16).cast::<u128>().write_unaligned(b);
            }
            _ => {
                core::arch::asm!(
                    "rep movsb",
                    inout("rcx") n => _,
                    inout("rdi") dst => _,
                    inout("rsi") src => _,
                    options(nostack, preserves_flags)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy;

    /// Every size to 300 at every source and destination alignment to 16: the bytes
    /// copied exactly, nothing around them touched.
    #[test]
    fn copies_exactly_what_it_is_given() {
        let src: Vec<u8> = (0..400u32)
            .map(|i| u8::try_from((i * 7 + 3) % 256).unwrap())
            .collect();
        for n in 0..300 {
            for so in 0..16 {
                for d_off in 0..16 {
                    let mut dst = vec![0xAAu8; 340];
                    // SAFETY: both ranges lie inside their vectors and do not overlap.
                    unsafe { copy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), n) };
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "n {n}: before");
                    assert_eq!(
                        &dst[d_off..d_off + n],
                        &src[so..so + n],
                        "n {n} at {so}/{d_off}"
                    );
                    assert!(dst[d_off + n..].iter().all(|&b| b == 0xAA), "n {n}: after");
                }
            }
        }
    }
}
