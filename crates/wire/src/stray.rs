//! Raw JSON that arrives inside an event stream without SSE framing.
//!
//! Gemini (and some proxies) end a failing stream with a pretty-printed
//! `{"error": …}` object written line by line without `data:` prefixes
//! mid-stream. The SSE decoder hands those lines over as strays;
//! this buffer reassembles them and, once they parse, lets the protocol
//! classify the error.

use std::collections::VecDeque;

use understudy_types::{Failure, FailureKind, StreamEvent};

use crate::sse::SseItem;

/// The most stray text kept; beyond it the stray lines are garbage.
const STRAY_LIMIT: usize = 64 * 1024;

/// Accumulated stray lines.
#[derive(Debug, Default)]
pub struct StrayJson {
    buf: String,
    overflowed: bool,
}

impl StrayJson {
    /// An SSE item as `(event name, data)`; a stray line is kept here
    /// instead, and the error it completes (if any) goes to `out`.
    pub fn event(
        &mut self,
        item: SseItem,
        classify: impl Fn(&serde_json::Value) -> Option<Failure>,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) -> Option<(Option<String>, String)> {
        match item {
            SseItem::Event { event, data } => Some((event, data)),
            SseItem::Stray(line) => {
                if let Some(failure) = self.push(&line, classify) {
                    out.push_back(Err(failure));
                }
                None
            }
        }
    }

    /// Adds a line; returns the failure once the lines so far form a JSON
    /// value that `classify` recognises as an error.
    pub fn push(
        &mut self,
        line: &str,
        classify: impl Fn(&serde_json::Value) -> Option<Failure>,
    ) -> Option<Failure> {
        if self.overflowed || self.buf.len() + line.len() > STRAY_LIMIT {
            self.overflowed = true;
            return None;
        }
        self.buf.push_str(line);
        self.buf.push('\n');
        let value: serde_json::Value = serde_json::from_str(&self.buf).ok()?;
        // A one-element array wraps the error in some Gemini answers.
        let value = match value {
            serde_json::Value::Array(mut items) if items.len() == 1 => items.remove(0),
            other => other,
        };
        let failure = classify(&value);
        if failure.is_some() {
            self.buf.clear();
        }
        failure
    }

    /// At the end of the stream: the error the strays spelled, if any.
    pub fn take_failure(
        &mut self,
        classify: impl Fn(&serde_json::Value) -> Option<Failure>,
    ) -> Option<Failure> {
        let text = std::mem::take(&mut self.buf);
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        classify(&value)
    }

    /// The stream ended before its terminal marker (`missing`): the error
    /// the strays spelled, or an interruption.
    pub fn failure_at_eof(
        &mut self,
        classify: impl Fn(&serde_json::Value) -> Option<Failure>,
        missing: &str,
    ) -> Failure {
        self.take_failure(classify).unwrap_or_else(|| {
            Failure::new(
                FailureKind::StreamInterrupted,
                format!("the stream ended without {missing}"),
            )
        })
    }
}
