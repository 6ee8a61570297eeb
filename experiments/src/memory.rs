//! Keep freed tensor buffers in the process instead of handing them back to
//! the operating system after every operation.
//!
//! Burn's CPU backend allocates a fresh buffer for nearly every op output.
//! glibc serves allocations above its mmap threshold (128 KiB, adapting up
//! to 32 MiB) with a new `mmap` and returns them with `munmap` on free, so
//! every step of a training loop page-faults its activations in again, and
//! the kernel zeroes each page: 11 % of a `bench-cpu` step in `perf`
//! (`FlexTensor::empty`, page faults, `clear_page`), docs/benchmarks.md.
//! Raising the mmap threshold to its maximum and the trim threshold far
//! above it makes freed buffers reusable from the heap, which is what
//! PyTorch's CPU caching and jemalloc-style allocators achieve.

/// Largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 * 1024 * 1024;
/// Free heap memory kept before glibc trims it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 1 << 30;

/// Tune the allocator for tensor workloads (glibc only; elsewhere a no-op).
/// Call once, early; later calls are harmless.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; both values are
    // within the ranges glibc documents for these options.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
