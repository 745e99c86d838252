//! One test at a time that starts processes or loads the machine. A test that starts the binary as a
//! server, Prometheus, Python or chdb, or opens a thousand connections, takes the slot first
//! (`let _slot = slot();`) and holds it to its end: on a 2-core machine two of them at once starve each
//! other, while the in-process suites beside them still run. The slot holds across the test binaries
//! `cargo test` runs and across nextest's one process per test: on Linux it is an abstract Unix socket
//! named after this checkout's target directory, which the kernel frees when its holder exits however it
//! exits (no lock file left behind by a killed run, no port another program may hold). Elsewhere it is
//! a lock within the process. The helpers that start processes check that the slot is held
//! ([`assert_held`]), so a new test that forgets it fails on its first run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Slots this process holds (a test's own, or under `cargo test` another test's of the same binary).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The slot, held until dropped.
pub struct Slot(#[allow(dead_code)] Held);

#[cfg(target_os = "linux")]
type Held = std::os::unix::net::UnixListener;
#[cfg(not(target_os = "linux"))]
type Held = std::sync::MutexGuard<'static, ()>;

/// Waits for the slot (blocking the calling thread: take it first thing in the test) and holds it.
pub fn slot() -> Slot {
    let held = loop {
        if let Some(held) = try_take() {
            break held;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    HELD.fetch_add(1, Ordering::SeqCst);
    Slot(held)
}

#[cfg(target_os = "linux")]
fn try_take() -> Option<Held> {
    use std::hash::{Hash, Hasher};
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_TARGET_TMPDIR").hash(&mut hasher);
    let name = format!("tokentap-test-slot-{:016x}", hasher.finish());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("an abstract name");
    UnixListener::bind_addr(&addr).ok()
}

#[cfg(not(target_os = "linux"))]
fn try_take() -> Option<Held> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    Some(
        LOCK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
}

impl Drop for Slot {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Panics unless a slot is held in this process: called by the helpers that start processes.
pub fn assert_held(what: &str) {
    assert!(
        HELD.load(Ordering::SeqCst) > 0,
        "{what}: a test that starts a process takes `let _slot = support::slot();` first (tests/support/slot.rs)"
    );
}
