//! The binary's allocator (the library never chooses one): jemalloc, unless built without the `jemalloc`
//! feature. Its per-thread caches serve the many small allocations of a request without the locks and bin
//! searches of glibc's malloc, which were a tenth of tokentap's CPU per short request.

#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// For a process that serves: starts jemalloc's background thread, which hands the pages freed memory
/// leaves behind back to the kernel over the next seconds (`dirty_decay_ms`, 10 s). Without it jemalloc
/// does that only while the process allocates, and glibc's malloc mostly never: after a burst of 2,000
/// streams RSS stayed at 57 MiB through the lull with either; with it, it is back at 18 MiB within 20 s.
/// An operator's own `_RJEM_MALLOC_CONF` that names `background_thread` is left to decide.
pub fn return_freed_memory() {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    {
        let chosen =
            std::env::var("_RJEM_MALLOC_CONF").is_ok_and(|conf| conf.contains("background_thread"));
        if !chosen {
            if let Err(error) = tikv_jemalloc_ctl::background_thread::write(true) {
                tracing::warn!(%error, "jemalloc's background thread did not start: memory freed after a burst goes back to the kernel only as tokentap allocates again");
            }
        }
    }
}
