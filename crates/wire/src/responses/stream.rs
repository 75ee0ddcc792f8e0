//! The Responses API's semantic event stream from a provider, parsed into
//! neutral events up to `response.completed`, `response.incomplete` or
//! `response.failed`; for a native request each event is also relayed as
//! sent, its reasoning-item ids tagged.

use std::collections::{HashMap, VecDeque};

use serde::Deserialize;
use serde_json::Value;
use understudy_types::{
    Failure, FailureKind, FinishReason, NativeEvent, StreamEvent, ToolCallDelta, Usage,
};

use super::native::{reasoning_ids, tag_ids};
use super::response::{WireResponse, end_of, error_failure};
use crate::StreamParser;
use crate::sse::SseItem;

/// Parses the Responses API's semantic events up to `response.completed`,
/// `response.incomplete` or `response.failed`.
#[derive(Debug, Default)]
pub struct ResponsesStream {
    pub(crate) model: String,
    /// The `response.id` of the first event that carries the response
    /// (`response.created`).
    id: Option<String>,
    pub(crate) native: bool,
    pub(crate) tag: String,
    /// Function calls by output index: their neutral index.
    calls: HashMap<u64, u32>,
    text_seen: bool,
}

impl ResponsesStream {
    /// A parser for one streamed answer from `model`, relaying its events
    /// when `native`, with reasoning ids tagged `tag`.
    pub fn new(model: &str, native: bool, tag: String) -> Self {
        Self {
            model: model.to_owned(),
            native,
            tag,
            ..Self::default()
        }
    }
}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type", default)]
    kind: String,
    delta: Option<String>,
    output_index: Option<u64>,
    item: Option<Value>,
    item_id: Option<String>,
    response: Option<WireResponse>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

impl ResponsesStream {
    /// The data with reasoning ids tagged, for the client.
    fn relayed(&self, data: &str, event: &WireEvent) -> String {
        let mut ids = Vec::new();
        if let Some(item) = &event.item {
            ids.extend(reasoning_ids(std::slice::from_ref(item)));
        }
        if let Some(response) = &event.response {
            ids.extend(reasoning_ids(&response.output));
        }
        ids.extend(
            event
                .item_id
                .iter()
                .filter(|i| i.starts_with("rs_"))
                .cloned(),
        );
        tag_ids(data, &ids, &self.tag).unwrap_or_else(|| data.to_owned())
    }

    fn on_event(&mut self, event: WireEvent, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if let Some(model) = event.response.as_ref().and_then(|r| r.model.clone()) {
            self.model = model;
        }
        if self.id.is_none() {
            self.id = event
                .response
                .as_ref()
                .and_then(|r| r.id.clone())
                .filter(|id| !id.is_empty());
        }
        match event.kind.as_str() {
            "response.output_text.delta" => {
                if let Some(d) = event.delta.filter(|d| !d.is_empty()) {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(d)));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(d) = event.delta.filter(|d| !d.is_empty()) {
                    out.push_back(Ok(StreamEvent::Reasoning(d)));
                }
            }
            "response.output_item.added" => {
                let Some(item) = event.item else { return };
                if item.get("type").and_then(Value::as_str) != Some("function_call") {
                    return;
                }
                let index = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
                self.calls
                    .insert(event.output_index.unwrap_or_default(), index);
                let str_of = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
                out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                    index,
                    id: str_of("call_id"),
                    name: str_of("name"),
                    arguments: str_of("arguments").unwrap_or_default(),
                })));
            }
            "response.function_call_arguments.delta" => {
                let at = event.output_index.unwrap_or_default();
                if let (Some(&index), Some(d)) = (self.calls.get(&at), event.delta) {
                    out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                        index,
                        id: None,
                        name: None,
                        arguments: d,
                    })));
                }
            }
            "response.refusal.done" => out.push_back(Err(Failure::new(
                FailureKind::ContentFilter,
                "the model refused (response.refusal.done)",
            ))),
            "response.completed" | "response.incomplete" | "response.failed" => {
                let Some(r) = event.response else {
                    out.push_back(Err(Failure::new(
                        FailureKind::MalformedResponse,
                        format!("`{}` without its response", event.kind),
                    )));
                    return;
                };
                self.finish(&r, out);
            }
            "error" => {
                // The documented event carries the error's fields itself;
                // some servers nest them in an `error` object.
                let mut error = Value::Object(event.rest);
                if let Some(inner) = error.get_mut("error").filter(|e| e.is_object()) {
                    error = inner.take();
                }
                let mut f = error_failure(&error);
                f.detail = format!("error event mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            _ => {}
        }
    }

    fn finish(&self, r: &WireResponse, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let finish = end_of(
            r.status.as_deref(),
            r.error.as_ref(),
            r.incomplete_details.as_ref(),
        );
        match finish {
            Err(mut f) => {
                f.detail = format!("mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            Ok(_) if !self.text_seen && self.calls.is_empty() => {
                out.push_back(Err(Failure::new(
                    FailureKind::EmptyResponse,
                    "the stream has no output text or function call",
                )));
            }
            Ok(reason) => {
                let finish_reason = match reason {
                    FinishReason::Stop if !self.calls.is_empty() => FinishReason::ToolCalls,
                    other => other,
                };
                out.push_back(Ok(StreamEvent::Finish {
                    finish_reason,
                    usage: r.usage.map(Usage::from),
                    model: Some(self.model.clone()),
                }));
            }
        }
    }
}

impl StreamParser for ResponsesStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let SseItem::Event { event, data } = item else {
            return;
        };
        if data.trim() == "[DONE]" {
            return;
        }
        let parsed: WireEvent = match serde_json::from_str(&data) {
            Ok(e) => e,
            Err(e) => {
                out.push_back(Err(crate::malformed_event(&e)));
                return;
            }
        };
        if self.native {
            let data = self.relayed(&data, &parsed);
            out.push_back(Ok(StreamEvent::Native(NativeEvent {
                event: event.unwrap_or_default(),
                data,
            })));
        }
        self.on_event(parsed, out);
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        out.push_back(Err(Failure::new(
            FailureKind::StreamInterrupted,
            "the stream ended without response.completed",
        )));
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn response_id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}
