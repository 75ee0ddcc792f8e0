//! The upstream every measured process calls: a minimal OpenAI-compatible
//! server (fixed answers, no parsing beyond what is needed).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{ANSWER, Error, FAILURE};

/// A minimal OpenAI-compatible upstream. `/fast/...` answers at once,
/// `/fail/...` answers 503 at once, `/slow/...` streams a token every
/// 100 ms for 30 s; any path streams when the body asks for it.
pub(crate) async fn start() -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(upstream_handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

pub(crate) type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

pub(crate) async fn upstream_handle(
    req: Request<Incoming>,
) -> Result<Response<UpBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let streamed = memchr_stream(&body);
    let full = |status: u16, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
        r.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    if path.starts_with("/fail/") {
        return Ok(full(503, FAILURE));
    }
    if !streamed {
        return Ok(full(200, ANSWER));
    }
    let (tokens, every) = if path.starts_with("/slow/") {
        (300, Duration::from_millis(100))
    } else {
        (8, Duration::ZERO)
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        let chunk = |delta: &str, finish: &str| {
            Bytes::from(format!(
                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
            ))
        };
        if tx
            .send(Ok(Frame::data(chunk(
                r#"{"role":"assistant","content":""}"#,
                "null",
            ))))
            .await
            .is_err()
        {
            return;
        }
        for i in 0..tokens {
            if !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            if tx
                .send(Ok(Frame::data(chunk(
                    &format!(r#"{{"content":" t{i}"}}"#),
                    "null",
                ))))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = tx.send(Ok(Frame::data(chunk("{}", "\"stop\"")))).await;
        let _ = tx
            .send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
            .await;
    });
    let stream = ReceiverStream(rx);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    Ok(r)
}

/// Whether the request body asks for a stream (no JSON parse: the fast
/// upstream must cost as little as possible).
pub(crate) fn memchr_stream(body: &[u8]) -> bool {
    body.windows(13).any(|w| w == b"\"stream\":true")
        || body.windows(14).any(|w| w == b"\"stream\": true")
}

pub(crate) struct ReceiverStream<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
