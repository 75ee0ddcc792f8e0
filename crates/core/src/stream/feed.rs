//! The channel between a stream's run and its reader: bounded to
//! [`STREAM_BUFFER`] items, one sending task, one reader.
//!
//! Every open stream holds one, so it is sized by what it holds: a queue
//! that grows to the items waiting (a few while the reader keeps up, at
//! most the bound), behind one lock. Tokio's bounded `mpsc` channel holds
//! blocks of 32 slots (each the size of an item), and a stream that has
//! passed a block's end keeps two: about 2.6 KB a stream, against a few
//! hundred bytes here.
//!
//! Full policy: the sender waits for room ([`Sender::send`]), so a slow
//! reader stops the run from reading upstream. Closing: the reader's drop
//! closes the channel (items still queued are dropped, the sender's next
//! `send` fails and [`Sender::closed`] resolves); the sender's drop ends
//! the reader's items once the queue is empty.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::{Feed, STREAM_BUFFER};

/// A new channel of [`STREAM_BUFFER`] items.
pub(crate) fn channel() -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            room: None,
            closed: None,
            reader: None,
            sender_gone: false,
            reader_gone: false,
        }),
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared },
    )
}

/// The run's end. One task sends: [`Sender::send`] and
/// [`Sender::closed`] each keep one waiting task's waker.
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

/// The reader's end (inside a [`super::GenerationStream`]).
pub(crate) struct Receiver {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
}

struct State {
    items: VecDeque<Feed>,
    /// The sender, waiting for room.
    room: Option<Waker>,
    /// The sender, waiting for the reader to leave.
    closed: Option<Waker>,
    /// The reader, waiting for an item.
    reader: Option<Waker>,
    sender_gone: bool,
    reader_gone: bool,
}

// === impl Shared ===

impl Shared {
    /// The state; a panic while it was held (none of the code holding it
    /// can) leaves it consistent, so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps `cx`'s waker in `slot`, unless the one there wakes the same task.
fn keep(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

// === impl Sender ===

impl Sender {
    /// Sends `feed` once there is room; gives it back when the reader has
    /// gone.
    pub(crate) fn send(&self, feed: Feed) -> Send<'_> {
        Send {
            tx: self,
            feed: Some(feed),
        }
    }

    /// Resolves when the reader has gone.
    pub(crate) async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut state = self.shared.lock();
            if state.reader_gone {
                return Poll::Ready(());
            }
            keep(&mut state.closed, cx);
            Poll::Pending
        })
        .await;
    }

    /// Whether the reader has gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().reader_gone
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let reader = {
            let mut state = self.shared.lock();
            state.sender_gone = true;
            state.reader.take()
        };
        if let Some(w) = reader {
            w.wake();
        }
    }
}

/// [`Sender::send`]'s future.
pub(crate) struct Send<'a> {
    tx: &'a Sender,
    /// The item, until it is queued (or given back).
    feed: Option<Feed>,
}

impl Future for Send<'_> {
    type Output = Result<(), Feed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(feed) = this.feed.take() else {
            return Poll::Ready(Ok(()));
        };
        let mut state = this.tx.shared.lock();
        if state.reader_gone {
            return Poll::Ready(Err(feed));
        }
        if state.items.len() >= STREAM_BUFFER {
            keep(&mut state.room, cx);
            this.feed = Some(feed);
            return Poll::Pending;
        }
        state.items.push_back(feed);
        let reader = state.reader.take();
        drop(state);
        if let Some(w) = reader {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

// === impl Receiver ===

impl Receiver {
    /// The next item; `None` once the sender has gone and every item was
    /// read.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Feed>> {
        let mut state = self.shared.lock();
        match state.items.pop_front() {
            Some(feed) => {
                let room = state.room.take();
                drop(state);
                if let Some(w) = room {
                    w.wake();
                }
                Poll::Ready(Some(feed))
            }
            None if state.sender_gone => Poll::Ready(None),
            None => {
                keep(&mut state.reader, cx);
                Poll::Pending
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let (items, room, closed) = {
            let mut state = self.shared.lock();
            state.reader_gone = true;
            (
                std::mem::take(&mut state.items),
                state.room.take(),
                state.closed.take(),
            )
        };
        // Dropped outside the lock (an item may be large).
        drop(items);
        for w in [room, closed].into_iter().flatten() {
            w.wake();
        }
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Receiver")
            .field("queued", &state.items.len())
            .field("sender_gone", &state.sender_gone)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use understudy_types::StreamItem;

    use super::*;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn woken(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn item(text: &str) -> Feed {
        Feed::Item(StreamItem::Delta(text.into()))
    }

    fn text(polled: Poll<Option<Feed>>) -> Option<String> {
        match polled {
            Poll::Ready(Some(Feed::Item(StreamItem::Delta(t)))) => Some(t),
            _ => None,
        }
    }

    #[test]
    fn items_arrive_in_order_then_the_end() {
        let (tx, mut rx) = channel();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        assert!(rx.poll_recv(&mut cx).is_pending());
        for t in ["a", "b"] {
            let mut send = std::pin::pin!(tx.send(item(t)));
            assert!(matches!(send.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        }
        // The waiting reader was woken by the first item only.
        assert_eq!(count.woken(), 1);
        assert_eq!(text(rx.poll_recv(&mut cx)).as_deref(), Some("a"));
        drop(tx);
        assert_eq!(text(rx.poll_recv(&mut cx)).as_deref(), Some("b"));
        assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(None)));
    }

    #[test]
    fn a_full_channel_makes_the_sender_wait_until_an_item_is_read() {
        let (tx, mut rx) = channel();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        for i in 0..STREAM_BUFFER {
            let mut send = std::pin::pin!(tx.send(item(&i.to_string())));
            assert!(send.as_mut().poll(&mut cx).is_ready());
        }
        let mut blocked = std::pin::pin!(tx.send(item("last")));
        assert!(blocked.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.woken(), 0);
        assert_eq!(text(rx.poll_recv(&mut cx)).as_deref(), Some("0"));
        assert_eq!(count.woken(), 1);
        assert!(matches!(
            blocked.as_mut().poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
        // Reads that free room nobody waits for wake nobody.
        assert_eq!(text(rx.poll_recv(&mut cx)).as_deref(), Some("1"));
        assert_eq!(count.woken(), 1);
    }

    #[test]
    fn the_readers_drop_closes_the_channel_and_wakes_the_sender() {
        let (tx, rx) = channel();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mut closed = std::pin::pin!(tx.closed());
        assert!(closed.as_mut().poll(&mut cx).is_pending());
        assert!(!tx.is_closed());
        drop(rx);
        assert_eq!(count.woken(), 1);
        assert!(tx.is_closed());
        assert!(closed.as_mut().poll(&mut cx).is_ready());
        let mut send = std::pin::pin!(tx.send(item("late")));
        assert!(matches!(send.as_mut().poll(&mut cx), Poll::Ready(Err(_))));
    }

    #[test]
    fn a_sender_waiting_for_room_is_woken_when_the_reader_leaves() {
        let (tx, rx) = channel();
        let count = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..STREAM_BUFFER {
            let mut send = std::pin::pin!(tx.send(item("x")));
            assert!(send.as_mut().poll(&mut cx).is_ready());
        }
        let mut blocked = std::pin::pin!(tx.send(item("y")));
        assert!(blocked.as_mut().poll(&mut cx).is_pending());
        drop(rx);
        assert_eq!(count.woken(), 1);
        assert!(matches!(
            blocked.as_mut().poll(&mut cx),
            Poll::Ready(Err(_))
        ));
    }
}
