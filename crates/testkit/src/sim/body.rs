//! The simulators' response bodies: a complete body, and a streamed one fed
//! piece by piece through a bounded channel (paced, cut, or stalled as the
//! script says), counting streams that the client abandoned.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::HeaderValue;
use tokio::sync::mpsc;

use super::{Shared, SimBody};

/// One piece of a streamed body.
pub(crate) enum Piece {
    /// Bytes to send (after the stream's interval, when `paced`).
    Data { bytes: Bytes, paced: bool },
    /// Abort the connection.
    Cut,
    /// Go silent until the client leaves.
    Stall,
}

impl Piece {
    pub(crate) fn text(s: String) -> Self {
        Self::Data {
            bytes: Bytes::from(s),
            paced: false,
        }
    }

    pub(crate) fn paced(s: String) -> Self {
        Self::Data {
            bytes: Bytes::from(s),
            paced: true,
        }
    }
}

/// A streamed response: a task feeds the pieces through a bounded channel,
/// pacing them, and notices when the client goes away.
pub(super) fn stream_response(
    shared: Option<Arc<Shared>>,
    interval: Duration,
    pieces: Vec<Piece>,
) -> Response<SimBody> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(1);
    tokio::spawn(async move {
        if let Some(s) = &shared {
            s.streams_open.fetch_add(1, Ordering::SeqCst);
        }
        let mut cancelled = false;
        for piece in pieces {
            match piece {
                Piece::Data { bytes, paced } => {
                    if paced && !interval.is_zero() {
                        tokio::select! {
                            _ = tokio::time::sleep(interval) => {}
                            _ = tx.closed() => { cancelled = true; break; }
                        }
                    }
                    let len = bytes.len();
                    if tx.send(Ok(bytes)).await.is_err() {
                        cancelled = true;
                        break;
                    }
                    if let Some(s) = &shared {
                        s.streamed_bytes.fetch_add(len, Ordering::SeqCst);
                    }
                }
                Piece::Cut => {
                    let _ = tx
                        .send(Err(io::Error::new(
                            io::ErrorKind::ConnectionReset,
                            "scripted cut",
                        )))
                        .await;
                    break;
                }
                Piece::Stall => {
                    tx.closed().await;
                    cancelled = true;
                    break;
                }
            }
        }
        if let Some(s) = &shared {
            s.streams_open.fetch_sub(1, Ordering::SeqCst);
            if cancelled {
                s.streams_cancelled.fetch_add(1, Ordering::SeqCst);
                s.closed_at(std::time::Instant::now());
            }
        }
    });
    let mut resp = Response::new(ChannelBody { rx, cut: None }.boxed());
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    resp.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}

/// A response with a complete body.
pub(super) fn response(status: u16, headers: &[(&str, &str)], body: String) -> Response<SimBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().append(k, v);
        }
    }
    resp
}

/// A body fed through a bounded channel: each item is a chunk, or an error
/// that makes hyper abort the connection mid-body.
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    /// The cut, held back for one poll so that hyper first flushes the
    /// chunks it has buffered: a real upstream's reset comes after the
    /// bytes it sent, and without the pause hyper may drop them unsent.
    cut: Option<io::Error>,
}

impl ChannelBody {
    /// A body fed by the sender (a bounded channel of `capacity` items).
    pub(crate) fn channel(capacity: usize) -> (mpsc::Sender<Result<Bytes, io::Error>>, Self) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (tx, Self { rx, cut: None })
    }

    /// A body made of these items, in order.
    pub(super) fn scripted(items: Vec<Result<Bytes, io::Error>>) -> Self {
        let (tx, rx) = mpsc::channel(items.len().max(1));
        for item in items {
            let _ = tx.try_send(item);
        }
        Self { rx, cut: None }
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if let Some(cut) = self.cut.take() {
            return Poll::Ready(Some(Err(cut)));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Err(cut))) => {
                // Pending once (woken at once): hyper flushes what it
                // holds when its body is not ready, then reads the cut.
                self.cut = Some(cut);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other.map(|item| item.map(|r| r.map(Frame::data))),
        }
    }
}
