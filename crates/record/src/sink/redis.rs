//! The Redis writer: one `XADD` per event to a stream, trimmed with
//! `MAXLEN ~`, written in pipelined batches (`MULTI`/`EXEC`, so a batch is
//! all-or-nothing and order is kept). After a batch whose reply was lost,
//! the stream's recent entries tell whether it landed, so it is not written
//! twice.
//!
//! Redis down or slow never touches a request: events wait in a bounded
//! buffer (drop-oldest on overflow, counted and logged once per outage), the
//! writer reconnects with backoff capped at [`MAX_BACKOFF`], and writes what
//! waited, in order, once Redis is back.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use redis::aio::MultiplexedConnection;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use understudy_settings::EventSettings;

use crate::event::GenerationEvent;
use crate::sink::metrics::Metrics;

/// The longest wait between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Every Redis call is bounded by this.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Events written per pipeline.
const BATCH: usize = 256;

/// The writer's state across the loop.
struct Writer {
    settings: EventSettings,
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    buffer: VecDeque<Arc<GenerationEvent>>,
    dropped: Counter,
    metrics: Arc<Metrics>,
    backoff: Duration,
    next_try: Instant,
    /// Set while Redis is unreachable, so the outage is logged once.
    degraded: bool,
    overflowed: bool,
    /// A batch whose `EXEC` reply was lost: `(its length, the JSON of its
    /// last request id)`. It may or may not be in the stream.
    uncertain: Option<(usize, String)>,
}

/// Runs until `stop` turns true, then drains the channel, flushes what it
/// can within `settings.flush_timeout`, and returns.
pub async fn run(
    settings: EventSettings,
    client: redis::Client,
    metrics: Arc<Metrics>,
    dropped: Counter,
    mut rx: mpsc::Receiver<Arc<GenerationEvent>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut w = Writer {
        buffer: VecDeque::with_capacity(settings.redis_buffer.min(4096)),
        settings,
        client,
        conn: None,
        dropped,
        metrics,
        backoff: Duration::from_millis(100),
        next_try: Instant::now(),
        degraded: false,
        overflowed: false,
        uncertain: None,
    };
    loop {
        if !w.buffer.is_empty() {
            w.flush_once().await;
        }
        let wait = if w.buffer.is_empty() {
            Duration::from_secs(3600)
        } else if w.conn.is_some() {
            Duration::ZERO
        } else {
            w.next_try.saturating_duration_since(Instant::now())
        };
        tokio::select! {
            biased;
            event = rx.recv() => match event {
                Some(e) => w.push(e),
                None => break,
            },
            _ = stop.wait_for(|s| *s) => break,
            () = tokio::time::sleep(wait) => {}
        }
        // Take whatever else is queued without waiting.
        while let Ok(e) = rx.try_recv() {
            w.push(e);
        }
    }
    while let Ok(e) = rx.try_recv() {
        w.push(e);
    }
    let deadline = Instant::now() + w.settings.flush_timeout;
    while !w.buffer.is_empty() && Instant::now() < deadline {
        w.next_try = Instant::now();
        w.flush_once().await;
        if !w.buffer.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    if !w.buffer.is_empty() {
        tracing::warn!(
            events = w.buffer.len(),
            "shutting down with events Redis never received"
        );
    }
}

impl Writer {
    fn push(&mut self, event: Arc<GenerationEvent>) {
        if self.buffer.len() >= self.settings.redis_buffer {
            self.buffer.pop_front();
            self.dropped.inc();
            if !self.overflowed {
                self.overflowed = true;
                tracing::warn!(
                    buffer = self.settings.redis_buffer,
                    "Redis event buffer full: dropping the oldest events"
                );
            }
        }
        self.buffer.push_back(event);
    }

    /// Connects if needed and due, then writes one batch.
    async fn flush_once(&mut self) {
        if self.conn.is_none() {
            if Instant::now() < self.next_try {
                return;
            }
            let connect = self.client.get_multiplexed_async_connection();
            match tokio::time::timeout(CALL_TIMEOUT, connect).await {
                Ok(Ok(conn)) => {
                    self.conn = Some(conn);
                    self.backoff = Duration::from_millis(100);
                }
                Ok(Err(e)) => return self.down(&e.to_string()),
                Err(_) => return self.down("connect timed out"),
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Some((n, last_id)) = self.uncertain.take() {
            // MULTI/EXEC is all-or-nothing: if the batch's last event is in
            // the stream's recent entries, the whole batch is, so it is not
            // sent again (which keeps the stream free of duplicates).
            let mut cmd = redis::cmd("XREVRANGE");
            cmd.arg(&self.settings.stream_key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(2000);
            let tail = cmd.query_async::<Vec<(String, Vec<(String, String)>)>>(conn);
            match tokio::time::timeout(CALL_TIMEOUT, tail).await {
                Ok(Ok(entries)) => {
                    let written = entries.iter().any(|(_, fields)| {
                        fields
                            .iter()
                            .any(|(k, v)| k == "request_id" && *v == last_id)
                    });
                    if written {
                        self.buffer.drain(..n.min(self.buffer.len()));
                    }
                }
                Ok(Err(e)) => {
                    self.uncertain = Some((n, last_id));
                    return self.down(&e.to_string());
                }
                Err(_) => {
                    self.uncertain = Some((n, last_id));
                    return self.down("read timed out");
                }
            }
            if self.buffer.is_empty() {
                return;
            }
        }
        let n = self.buffer.len().min(BATCH);
        let mut pipe = redis::pipe();
        pipe.atomic();
        for event in self.buffer.iter().take(n) {
            let cmd = pipe
                .cmd("XADD")
                .arg(&self.settings.stream_key)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.settings.stream_maxlen)
                .arg("*");
            for (field, value) in fields(event) {
                cmd.arg(field).arg(value);
            }
            cmd.ignore();
        }
        match tokio::time::timeout(CALL_TIMEOUT, pipe.query_async::<()>(conn)).await {
            Ok(Ok(())) => {
                self.buffer.drain(..n);
                if self.degraded {
                    self.degraded = false;
                    self.overflowed = false;
                    self.metrics.redis_degraded.set(0);
                    tracing::info!("Redis is back: writing events again");
                }
            }
            Ok(Err(e)) => {
                // Whatever failed, the batch may have landed: check first.
                self.uncertain = self.batch_marker(n);
                self.down(&e.to_string());
            }
            Err(_) => {
                self.uncertain = self.batch_marker(n);
                self.down("write timed out");
            }
        }
    }

    /// The marker of the first `n` buffered events (a batch in flight).
    fn batch_marker(&self, n: usize) -> Option<(usize, String)> {
        let last = self.buffer.get(n.checked_sub(1)?)?;
        Some((
            n,
            serde_json::Value::String(last.request_id.to_string()).to_string(),
        ))
    }

    fn down(&mut self, why: &str) {
        self.conn = None;
        self.next_try = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        if !self.degraded {
            self.degraded = true;
            self.metrics.redis_degraded.set(1);
            tracing::warn!(error = %why, buffered = self.buffer.len(), "Redis unreachable: events wait in the buffer");
        }
    }
}

/// The stream entry of an event: one field per event field, each value the
/// JSON encoding of that field.
pub fn fields(event: &GenerationEvent) -> Vec<(String, String)> {
    match serde_json::to_value(event) {
        Ok(serde_json::Value::Object(map)) => {
            map.into_iter().map(|(k, v)| (k, v.to_string())).collect()
        }
        _ => Vec::new(),
    }
}

/// Rebuilds an event from its stream entry fields.
pub fn from_fields(fields: &[(String, String)]) -> Result<GenerationEvent, serde_json::Error> {
    let mut map = serde_json::Map::new();
    for (k, v) in fields {
        map.insert(k.clone(), serde_json::from_str(v)?);
    }
    serde_json::from_value(serde_json::Value::Object(map))
}
