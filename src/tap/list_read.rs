//! A request's message list, read off its held body beside the forwarding (`decode::messages`), for
//! the conversation it continues. What a client sends is never the proxy's cost:
//! - a body up to [`READ_INLINE_BYTES`] is read at once, on the runtime (50 µs at most);
//! - a larger one on one of a few [`Readers`] (blocking threads); when all are busy it waits for one,
//!   if fewer than [`Readers::WAITING`] bodies wait already, else it is not read (`pool_busy`): a
//!   burst of agents' long histories is read a few milliseconds later, a flood is turned away;
//! - a body still waiting for a reader when its request ends goes at once, and its request counts as
//!   not read (`late`); one a reader is reading is read to its end (a few milliseconds at most: the body
//!   is bounded by the hold size, the reader by its caps), and the request is finished with its list
//!   then, on the reader's thread ([`ListRead::finish_then`]): a server that refuses a long history at
//!   once (a prompt over its context) answers before the list is read, and the turn must still count.
//!   A read nobody waits for (its exchange dropped unfinished) stops within 64 KiB of the body;
//! - its bytes are the held body's own, which the reader holds (and with it its lease on the
//!   `held_bodies` budget) only while it reads or waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::decode::messages;
use crate::govern::Lease;
use crate::record::api::Api;
use crate::record::conversations::{MessageList, Unread};

/// A request body held whole before it was sent, shared with the forwarding (and its budget with it).
pub type HeldBody = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A held body up to this size is read on the runtime, which it holds no longer than a handoff to a
/// reader would cost (docs/lab/benchmark.md: about 2 ns a byte for an agent's history, 6 at worst for a
/// body made to be slow, so at most about 50 µs).
pub const READ_INLINE_BYTES: usize = 8 << 10;

/// The blocking threads larger bodies are read on (as many as the machine has cores, at most
/// [`Readers::MAX`]), and the bodies that may wait for one.
#[derive(Clone)]
pub struct Readers {
    readers: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
}

impl Readers {
    pub const MAX: usize = 4;
    /// Bodies that may wait for a reader (each a held body, already counted in
    /// the `held_bodies` budget).
    pub const WAITING: usize = 16;

    pub fn new(count: usize) -> Self {
        Readers {
            readers: Arc::new(Semaphore::new(count)),
            waiting: Arc::new(Semaphore::new(Readers::WAITING)),
        }
    }
}

impl Default for Readers {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Readers::new(cores.min(Readers::MAX))
    }
}

/// One request's list being read; dropping it stops the read.
pub struct ListRead {
    shared: Arc<Shared>,
    /// Dropping this handle stops the read: false once the request asked for the list when read.
    stop_on_drop: bool,
}

/// What is done with a list read after its request ended.
type Then = Box<dyn for<'a> FnOnce(Result<Option<&'a MessageList>, Unread>) + Send>;

struct Shared {
    stop: AtomicBool,
    /// Told when the request ends, for a body still waiting for a reader.
    ended: Notify,
    list: OnceLock<Result<Option<MessageList>, Unread>>,
    /// A reader has the body.
    running: AtomicBool,
    /// What to do with the list once read, when the request ended while it was being read.
    then: Mutex<Option<Then>>,
    /// What the list's digests hold of the governor's `message_lists`, taken by the read and kept with
    /// the list until the request is done with it.
    lease: Mutex<Option<Lease>>,
}

impl Shared {
    /// Reads `body` on a blocking thread, holding `reader` meanwhile.
    fn read_on(self: Arc<Self>, api: Api, body: HeldBody, reader: OwnedSemaphorePermit) {
        self.running.store(true, Ordering::Release);
        drop(tokio::task::spawn_blocking(move || {
            let list = self.read(api, &body);
            // The held body and the reader go back before the result is handed over.
            drop((body, reader));
            let then = {
                let mut then = self.then.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = self.list.set(list);
                then.take()
            };
            if let Some(then) = then {
                then(self.result());
            }
        }));
    }

    /// Reads `body`'s list, its digests leased from the lease the read was started with.
    fn read(&self, api: Api, body: &HeldBody) -> Result<Option<MessageList>, Unread> {
        let mut lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        match lease.as_mut() {
            Some(lease) => messages::read(api, (**body).as_ref(), &self.stop, lease),
            None => Err(Unread::Late),
        }
    }

    /// The list as read, `Late` while it is not.
    fn result(&self) -> Result<Option<&MessageList>, Unread> {
        match self.list.get() {
            Some(Ok(list)) => Ok(list.as_ref()),
            Some(Err(reason)) => Err(*reason),
            None => Err(Unread::Late),
        }
    }

    fn end(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ended.notify_one();
    }
}

impl ListRead {
    /// Starts reading the list of `body`, a request to `api` (`None`: the body streamed, not held),
    /// its digests leased on `lease`.
    pub fn start(api: Api, body: Option<HeldBody>, readers: &Readers, lease: Lease) -> Self {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            ended: Notify::new(),
            list: OnceLock::new(),
            running: AtomicBool::new(false),
            then: Mutex::new(None),
            lease: Mutex::new(Some(lease)),
        });
        let read = ListRead {
            shared: shared.clone(),
            stop_on_drop: true,
        };
        let Some(body) = body else {
            let _ = shared.list.set(Err(Unread::Streamed));
            return read;
        };
        if (*body).as_ref().len() <= READ_INLINE_BYTES {
            let _ = shared.list.set(shared.read(api, &body));
            return read;
        }
        if let Ok(reader) = readers.readers.clone().try_acquire_owned() {
            shared.read_on(api, body, reader);
            return read;
        }
        let Ok(waiting) = readers.waiting.clone().try_acquire_owned() else {
            let _ = shared.list.set(Err(Unread::PoolBusy));
            return read;
        };
        let readers = readers.readers.clone();
        drop(tokio::spawn(async move {
            tokio::select! {
                biased;
                () = shared.ended.notified() => {}
                reader = readers.acquire_owned() => {
                    drop(waiting);
                    if let Ok(reader) = reader {
                        shared.read_on(api, body, reader);
                    }
                }
            }
        }));
        read
    }

    /// The list, if read by now (`Ok(None)`: the body has none); the read is stopped otherwise, and the
    /// request counts as not read (`Late`).
    pub fn finish(&self) -> Result<Option<&MessageList>, Unread> {
        self.shared.end();
        self.shared.result()
    }

    /// The request ended: `then` gets the list now if it was read, or, if a reader is reading it, when
    /// the reader is done, on the reader's thread; a body still waiting for a reader goes, `Late`.
    pub fn finish_then(
        self, then: impl for<'a> FnOnce(Result<Option<&'a MessageList>, Unread>) + Send + 'static,
    ) {
        let shared = self.shared.clone();
        let mut waiting = shared.then.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.list.get().is_none() && shared.running.load(Ordering::Acquire) {
            // Read to its end: the reader hands the list over.
            *waiting = Some(Box::new(then));
            let mut this = self;
            this.stop_on_drop = false;
            return;
        }
        drop(waiting);
        then(self.finish());
    }
}

impl Drop for ListRead {
    fn drop(&mut self) {
        if self.stop_on_drop {
            self.shared.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    fn lease() -> crate::govern::Lease {
        let governor = crate::govern::Governor::with_defaults();
        governor.lease(crate::govern::Budget::MessageLists, &Default::default())
    }

    use super::*;

    /// A chat body of `n` short messages.
    fn body(n: usize) -> Arc<Vec<u8>> {
        let message = r#"{"role":"user","content":"Read the next file and say what it does."}"#;
        let list = vec![message; n].join(",");
        Arc::new(format!(r#"{{"model":"m","messages":[{list}]}}"#).into_bytes())
    }

    /// Waits (at most 10 s) until only the test holds `body`.
    async fn let_go(body: &Arc<Vec<u8>>) {
        for _ in 0..1_000 {
            if Arc::strong_count(body) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the held body is still held by its read");
    }

    #[tokio::test]
    async fn a_small_body_is_read_at_once_and_a_streamed_one_not_at_all() {
        let readers = Readers::new(0);
        let small = body(3);
        assert!(small.len() <= READ_INLINE_BYTES);
        let read = ListRead::start(Api::Chat, Some(small.clone()), &readers, lease());
        assert_eq!(
            read.finish().map(|l| l.map(|l| l.prefixes.len())),
            Ok(Some(3))
        );
        assert_eq!(Arc::strong_count(&small), 1, "the body is let go once read");
        let streamed = ListRead::start(Api::Chat, None, &readers, lease());
        assert_eq!(streamed.finish(), Err(Unread::Streamed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_waiting_for_a_reader_goes_when_its_request_ends_and_the_waiting_are_bounded() {
        // No reader free: every large body waits, up to `WAITING` of them.
        let readers = Readers::new(0);
        let large = body(2_000);
        let waiting: Vec<ListRead> = (0..Readers::WAITING)
            .map(|_| ListRead::start(Api::Chat, Some(large.clone()), &readers, lease()))
            .collect();
        let one_more = ListRead::start(Api::Chat, Some(large.clone()), &readers, lease());
        assert_eq!(one_more.finish(), Err(Unread::PoolBusy));
        for read in &waiting {
            assert_eq!(read.finish(), Err(Unread::Late));
        }
        let_go(&large).await;
        drop(waiting);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_stops_when_its_request_ends_and_lets_go_of_the_body() {
        let readers = Readers::new(1);
        let large = body(100_000);
        let read = ListRead::start(Api::Chat, Some(large.clone()), &readers, lease());
        // Ended before it could be read (or, had the reader run first, past the 10,000 messages it
        // reads): not read, and the reader lets go within 64 KiB of the body.
        assert!(matches!(
            read.finish(),
            Err(Unread::Late) | Err(Unread::TooMany)
        ));
        let_go(&large).await;
        // The reader is free again: the next body is read.
        let next = body(2_000);
        let read = ListRead::start(Api::Chat, Some(next.clone()), &readers, lease());
        let_go(&next).await;
        assert_eq!(
            read.finish().map(|l| l.map(|l| l.prefixes.len())),
            Ok(Some(2_000))
        );
    }
}
