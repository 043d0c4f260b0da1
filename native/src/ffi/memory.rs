//! Handing memory back to the system after a large call.
//!
//! A 50 MB request allocates gigabytes transiently (texts, ids, offsets, encoder scratch). Both
//! allocators in the process keep freed memory for reuse: mimalloc (this library's allocator) keeps
//! freed pages committed for a while, and glibc's malloc (Python's, protobuf's) keeps the top of its
//! heap. The server calls `sc_release_memory` on the worker thread after a large call, so the
//! process returns to its size before the request.

extern "C" {
    /// mimalloc: collect this thread's heap and purge free memory (`force` = also what is cached).
    fn mi_collect(force: bool);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    /// glibc: return free memory at the top of the heap and whole free pages inside it.
    fn malloc_trim(pad: usize) -> i32;
}

/// Returns freed memory of both allocators to the system: mimalloc's for the calling thread (and
/// abandoned pages), glibc malloc's for the whole process. Cheap when there is nothing to return;
/// call it after large calls, not after every call.
#[no_mangle]
pub extern "C" fn sc_release_memory() {
    // SAFETY: mimalloc's collect has no preconditions; it only touches the allocator's own state.
    unsafe { mi_collect(true) };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        malloc_trim(0);
    }
}
