//! The simulator's HTTP server: connections, one request's way through
//! the cloud in front (if any), the protocol's rules, the counted limits
//! and the scripted reply, and the reply rendered in the protocol's shape.

use super::*;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide its own
    // failure behind a poison error here.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(super) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = stopped.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            shared.open_connections.fetch_add(1, Ordering::SeqCst);
            let service = service_fn({
                let shared = Arc::clone(&shared);
                move |req| serve(Arc::clone(&shared), req)
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stopped.changed() => {}
            }
            shared.open_connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// The connection is dropped without an answer when this is returned.
#[derive(Debug)]
pub(super) struct ResetConnection;

impl fmt::Display for ResetConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("scripted connection reset")
    }
}

impl std::error::Error for ResetConnection {}

pub(super) async fn serve(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, ResetConnection> {
    let method = req.method().to_string();
    let version = req.version();
    let path = req
        .uri()
        .path_and_query()
        .map(ToString::to_string)
        .unwrap_or_default();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(ResetConnection),
    };
    let received = Received {
        method,
        path,
        headers,
        body,
        at: std::time::Instant::now(),
        version,
        shared: Some(Arc::clone(&shared)),
        cached: Default::default(),
    };
    // A model lookup (a readiness probe) is answered here, counted apart
    // from the generation calls.
    if let Some(answer) = super::models::lookup(&shared, &received) {
        return Ok(answer);
    }
    let Some(cloud) = &shared.cloud else {
        if let Some(refused) = refused_generation(&shared, &received) {
            return Ok(refused);
        }
        let wire = received.clone();
        return serve_protocol(&shared, received, wire).await;
    };
    // The cloud checks its own rules (auth, path, its edits to the body)
    // and hands the protocol the request as the protocol's own service
    // would have received it; the wire sees the request as sent.
    if let Some(served) = cloud.serve(&received) {
        return Ok(served.unwrap_or_else(|refused| {
            let line = format!("{} {}: {}", received.method, received.path, refused.message);
            tracing::warn!(violation = %line, "simulated cloud refused a request");
            lock(&shared.cloud_violations).push(line);
            refused.response
        }));
    }
    if let Some(refused) = refused_generation(&shared, &received) {
        return Ok(refused);
    }
    let original = received.clone();
    let admitted = match cloud.admit(&received) {
        Ok(admitted) => admitted,
        Err(refused) => {
            let line = format!("{} {}: {}", received.method, received.path, refused.message);
            tracing::warn!(violation = %line, "simulated cloud refused a request");
            lock(&shared.cloud_violations).push(line);
            let mut recorded = received;
            recorded.shared = None;
            lock(&shared.received).push(recorded);
            return Ok(refused.response);
        }
    };
    let answer = serve_protocol(&shared, admitted, original.clone()).await?;
    Ok(cloud.wrap(&original, answer))
}

/// A generation call refused for a revoked key or a retired model
/// (`models.rs`), recorded as the call it was.
fn refused_generation(shared: &Shared, received: &Received) -> Option<Response<SimBody>> {
    let refused = super::models::refusal(shared, received)?;
    let mut recorded = received.clone();
    recorded.shared = None;
    lock(&shared.received).push(recorded);
    Some(refused)
}

/// Serves a request in the protocol's own shape: its rules, then the
/// scripted reply; `wire` (the request as it came, before a cloud's
/// rewriting) is what `received()` records.
async fn serve_protocol(
    shared: &Arc<Shared>,
    received: Received,
    wire: Received,
) -> Result<Response<SimBody>, ResetConnection> {
    #[cfg(feature = "test-support")]
    if let Some(violation) = rules::check(&shared.rules, &received) {
        // The provider refuses the request before any model sees it: the
        // scripted replies stay queued for the next one.
        shared.rules.record(&received, &violation);
        let mut recorded = wire;
        recorded.shared = None;
        lock(&shared.received).push(recorded);
        return Ok(violation.response());
    }
    if let Some(too_long) = shared.window.refuse(shared.dialect, &received, &wire) {
        let mut recorded = wire;
        recorded.shared = None;
        lock(&shared.received).push(recorded);
        return Ok(too_long);
    }
    let limited = shared.limits.count(shared.protocol, &received);
    let reply = match limited.as_ref().and_then(|v| v.refuse.clone()) {
        Some(refused) => refused,
        None => match shared.faults.failure() {
            Some(failed) => failed,
            None => scripted(shared, &received),
        },
    };
    let mut recorded = wire;
    recorded.shared = None;
    lock(&shared.received).push(recorded);
    // An answer (not an error) reads and writes the prompt cache, and
    // waits for a slow first token.
    let mut received = received;
    let reply = if answers(&reply) {
        if let Some(cached) = shared.cache.serve(shared.dialect, &received) {
            received.cached = cached;
        }
        shared.faults.slowed(reply)
    } else {
        reply
    };
    // A client that closes its connection while the answer waits (a slow
    // first token) drops this future: the guard records when.
    let waiting = Waiting(Some(shared));
    let answered = respond(shared.dialect, reply, &received).await;
    waiting.answered();
    let mut answer = answered?;
    for (name, value) in limited.map(|v| v.headers).unwrap_or_default() {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            answer.headers_mut().insert(name, value);
        }
    }
    Ok(answer)
}

/// An answer being prepared; dropped unanswered, it records that the
/// client closed its connection.
struct Waiting<'a>(Option<&'a Arc<Shared>>);

impl Waiting<'_> {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.closed_at(std::time::Instant::now());
        }
    }
}

impl Shared {
    /// Records that a client closed its connection mid-answer at `at`.
    pub(super) fn closed_at(&self, at: std::time::Instant) {
        lock(&self.closed_mid_answer).push(at);
    }
}

/// The next scripted reply: the queue's, else the responder's, else text.
fn scripted(shared: &Shared, received: &Received) -> Reply {
    let queued = lock(&shared.queue).pop_front();
    match queued {
        Some(r) => r,
        None => match lock(&shared.responder).clone() {
            Some(f) => f(received),
            None => Reply::Text("Hello from the simulator.".into()),
        },
    }
}

/// Whether `reply` answers (the model saw the prompt) rather than fails.
fn answers(reply: &Reply) -> bool {
    match reply {
        Reply::Delay(_, inner) => answers(inner),
        Reply::Text(_) | Reply::Stream(_) | Reply::ToolCalls(_) | Reply::Thinking { .. } => true,
        Reply::Refuse(refusal) => !matches!(refusal, Refusal::Status400),
        Reply::Status { .. }
        | Reply::Reset
        | Reply::Hang
        | Reply::Garbage(_)
        | Reply::Truncated => false,
    }
}

async fn respond(
    dialect: Dialect,
    reply: Reply,
    req: &Received,
) -> Result<Response<SimBody>, ResetConnection> {
    match settle(dialect, reply).await {
        Reply::Reset => Err(ResetConnection),
        Reply::Hang => std::future::pending().await,
        Reply::Garbage(body) => Ok(response(200, &[("content-type", "application/json")], body)),
        Reply::Truncated => Ok(truncated()),
        Reply::Stream(spec) if !is_streamed(dialect, req) => {
            let text = spec.chunks.concat();
            Ok(render(dialect, Reply::Text(text), req))
        }
        other if is_streamed(dialect, req) => Ok(streamed(dialect, other, req)),
        other => Ok(render(dialect, other, req)),
    }
}

/// The reply once its delays are waited out (and, where the protocol has
/// no thinking, what follows the thinking).
async fn settle(dialect: Dialect, mut reply: Reply) -> Reply {
    loop {
        match reply {
            Reply::Delay(d, inner) => {
                tokio::time::sleep(d).await;
                reply = *inner;
            }
            Reply::Thinking { then, .. }
                if !matches!(dialect, Dialect::Messages | Dialect::Responses) =>
            {
                reply = *then
            }
            _ => return reply,
        }
    }
}

/// A body cut off mid-JSON, its `content-length` promising more.
fn truncated() -> Response<SimBody> {
    let body = ChannelBody::scripted(vec![
        Ok(Bytes::from_static(
            b"{\"id\":\"chatcmpl-1\",\"choices\":[{\"mess",
        )),
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "scripted cut",
        )),
    ]);
    let mut resp = Response::new(body.boxed());
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp.headers_mut()
        .insert("content-length", HeaderValue::from_static("4096"));
    resp
}

/// A reply to a streamed request, as its protocol's stream (a reply with
/// no streamed form is rendered whole).
fn streamed(dialect: Dialect, reply: Reply, req: &Received) -> Response<SimBody> {
    match reply {
        Reply::Stream(spec) => stream_response(
            shared_for_stream(req),
            spec.interval,
            pieces(dialect, &spec, req),
        ),
        Reply::Text(text) => {
            let words: Vec<String> = split_words(&text);
            let spec = StreamSpec {
                chunks: words,
                interval: Duration::ZERO,
                end: StreamEnd::Complete,
            };
            stream_response(
                shared_for_stream(req),
                Duration::ZERO,
                pieces(dialect, &spec, req),
            )
        }
        Reply::ToolCalls(calls) => {
            let pieces = match dialect {
                Dialect::ChatCompletions => openai::tool_calls_stream(&calls, req),
                Dialect::GenerateContent => gemini::tool_calls_stream(&calls, req),
                Dialect::Messages | Dialect::Converse => anthropic::tool_calls_stream(&calls, req),
                Dialect::Responses => responses::tool_calls_stream(&calls, req),
            };
            stream_response(shared_for_stream(req), Duration::ZERO, pieces)
        }
        // Paced like the answer it thinks before (a model that thinks at
        // the pace it then writes).
        Reply::Thinking { thinking, then } => stream_response(
            shared_for_stream(req),
            match then.as_ref() {
                Reply::Stream(spec) => spec.interval,
                _ => Duration::ZERO,
            },
            match dialect {
                Dialect::Responses => responses::thinking_stream(&thinking, *then, req),
                _ => anthropic::thinking_stream(&thinking, *then, req),
            },
        ),
        Reply::Refuse(refusal) if !matches!(refusal, Refusal::Status400) => {
            let pieces = match dialect {
                Dialect::ChatCompletions => openai::refusal_stream(&refusal, req),
                Dialect::GenerateContent => gemini::refusal_stream(&refusal, req),
                Dialect::Messages | Dialect::Converse => anthropic::refusal_stream(&refusal, req),
                Dialect::Responses => responses::refusal_stream(&refusal, req),
            };
            stream_response(shared_for_stream(req), Duration::ZERO, pieces)
        }
        other => render(dialect, other, req),
    }
}

fn render(dialect: Dialect, reply: Reply, req: &Received) -> Response<SimBody> {
    match dialect {
        Dialect::ChatCompletions => openai::render(reply, req),
        Dialect::GenerateContent => gemini::render(reply, req),
        Dialect::Messages | Dialect::Converse => anthropic::render(reply, req),
        Dialect::Responses => responses::render(reply, req),
    }
}

fn pieces(dialect: Dialect, spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    match dialect {
        Dialect::ChatCompletions => openai::stream(spec, req),
        Dialect::GenerateContent => gemini::stream(spec, req),
        Dialect::Messages | Dialect::Converse => anthropic::stream(spec, req),
        Dialect::Responses => responses::stream(spec, req),
    }
}

/// Whether the request asked for a streamed answer.
fn is_streamed(dialect: Dialect, req: &Received) -> bool {
    match dialect {
        Dialect::GenerateContent => req.path.contains(":streamGenerateContent"),
        Dialect::ChatCompletions | Dialect::Messages | Dialect::Converse | Dialect::Responses => {
            req.json()["stream"] == serde_json::Value::Bool(true)
        }
    }
}

/// Splits text into word chunks, keeping the spaces.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c == ' ' && !current.is_empty() && !current.ends_with(' ') {
            out.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The shared counters of the simulator that received `req`.
fn shared_for_stream(req: &Received) -> Option<Arc<Shared>> {
    req.shared.clone()
}
