//! Answers in Gemini's shapes, for the Gemini front end: a whole
//! `GenerateContentResponse`, the chunks of a streamed one
//! ([`Encoder`]), and errors as `google.rpc.Status`.
//!
//! A translated answer's first function call carries Google's documented
//! dummy thought signature, so that a history holding it can later go to a
//! Gemini 3 target as the client wrote it (Gemini refuses a call turn of
//! the current step without a signature).

use serde::Serialize;
use serde_json::Value;
use understudy_types::{
    FailureCode, FinishReason, NativeEvent, StreamItem, ToolCall, ToolCallDelta, Usage,
};

use super::request::FOREIGN_THOUGHT_SIGNATURE;
use super::response::finish_reason_name;
use crate::{Encoder, Frame};

/// A `GenerateContentResponse` (one candidate).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseOut<'a> {
    candidates: [CandidateOut<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_metadata: Option<UsageOut>,
    model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_id: Option<&'a str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CandidateOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<ContentOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'a str>,
    index: u32,
}

#[derive(Debug, Serialize)]
struct ContentOut<'a> {
    role: &'static str,
    parts: Vec<PartOut<'a>>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct PartOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<CallOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct CallOut<'a> {
    id: &'a str,
    name: &'a str,
    args: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageOut {
    prompt_token_count: u64,
    candidates_token_count: u64,
    total_token_count: u64,
}

/// A whole answer: its text, then its calls.
pub fn answer<'a>(
    text: &'a str,
    calls: &'a [ToolCall],
    finish: &FinishReason,
    usage: Option<Usage>,
    model: &'a str,
    response_id: Option<&'a str>,
) -> ResponseOut<'a> {
    let mut parts = Vec::with_capacity(1 + calls.len());
    if !text.is_empty() || calls.is_empty() {
        parts.push(PartOut {
            text: Some(text),
            ..PartOut::default()
        });
    }
    parts.extend(call_parts(calls));
    ResponseOut {
        candidates: [CandidateOut {
            content: Some(ContentOut {
                role: "model",
                parts,
            }),
            finish_reason: Some(finish_reason_name(finish)),
            index: 0,
        }],
        usage_metadata: usage.map(usage_out),
        model_version: model,
        response_id,
    }
}

/// A refusal the policy surfaces: Gemini's own form, a candidate that
/// `SAFETY` stopped, with no content.
pub fn refusal<'a>(model: &'a str, response_id: Option<&'a str>) -> ResponseOut<'a> {
    ResponseOut {
        candidates: [CandidateOut {
            content: None,
            finish_reason: Some("SAFETY"),
            index: 0,
        }],
        usage_metadata: None,
        model_version: model,
        response_id,
    }
}

/// The function-call parts of `calls`; the first carries the dummy
/// signature.
fn call_parts(calls: &[ToolCall]) -> impl Iterator<Item = PartOut<'_>> {
    calls.iter().enumerate().map(|(i, call)| PartOut {
        function_call: Some(CallOut {
            id: &call.id,
            name: &call.name,
            args: crate::arguments_object(call)
                .unwrap_or_else(|_| Value::Object(serde_json::Map::new())),
        }),
        thought_signature: (i == 0).then_some(FOREIGN_THOUGHT_SIGNATURE),
        ..PartOut::default()
    })
}

fn usage_out(u: Usage) -> UsageOut {
    UsageOut {
        prompt_token_count: u.input_tokens,
        candidates_token_count: u.output_tokens,
        total_token_count: u.input_tokens + u.output_tokens,
    }
}

/// A `google.rpc.Status` error body for HTTP `code`.
pub fn error_body(code: u16, message: &str) -> Value {
    serde_json::json!({"error": {
        "code": code,
        "message": message,
        "status": super::error::status_name(code),
    }})
}

/// The HTTP status Google's clients read a failure as (the front end's
/// status when every target failed, and the code of an error object
/// inside a stream): an outage 503, a rate limit 429, a timeout 504,
/// anything the request caused 400, anything else 500.
pub fn status_of(code: FailureCode) -> u16 {
    match code {
        FailureCode::RateLimited => 429,
        FailureCode::Timeout | FailureCode::DeadlineExceeded => 504,
        FailureCode::BadRequest
        | FailureCode::ContextLength
        | FailureCode::Unsupported
        | FailureCode::ContentFilter
        | FailureCode::InvalidRequest => 400,
        FailureCode::Unavailable | FailureCode::Connection | FailureCode::StreamInterrupted => 503,
        _ => 500,
    }
}

/// A committed stream as `streamGenerateContent` chunks: each piece of text
/// (and, when the client asked for thoughts, of reasoning) a chunk as it
/// arrives; the function calls, whole, in the last chunk with the finish
/// reason and usage (Gemini sends calls whole, never in pieces). A failure
/// past the commit is an error object, never a clean end. For a natively
/// forwarded request, Gemini's own chunks are relayed as they came.
#[derive(Debug)]
pub struct ChunkEncoder {
    include_thoughts: bool,
    native: bool,
    /// The calls so far, by their neutral index.
    calls: Vec<(u32, ToolCall)>,
}

impl ChunkEncoder {
    /// The encoder for a stream; `native`: the provider's own chunks
    /// arrive as native events.
    pub fn new(include_thoughts: bool, native: bool) -> Self {
        Self {
            include_thoughts,
            native,
            calls: Vec::new(),
        }
    }

    fn text(text: &str, thought: bool, model: &str) -> Frame {
        let chunk = ResponseOut {
            candidates: [CandidateOut {
                content: Some(ContentOut {
                    role: "model",
                    parts: vec![PartOut {
                        text: Some(text),
                        thought: thought.then_some(true),
                        ..PartOut::default()
                    }],
                }),
                finish_reason: None,
                index: 0,
            }],
            usage_metadata: None,
            model_version: model,
            response_id: None,
        };
        Frame::json(&chunk)
    }

    fn call(&mut self, delta: ToolCallDelta) {
        let at = match self.calls.iter().position(|(i, _)| *i == delta.index) {
            Some(at) => at,
            None => {
                self.calls.push((
                    delta.index,
                    ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    },
                ));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at].1;
        if let Some(id) = delta.id {
            call.id = id;
        }
        if let Some(name) = delta.name {
            call.name = name;
        }
        call.arguments.push_str(&delta.arguments);
    }

    fn last(&self, finish: &FinishReason, usage: Option<Usage>, model: &str) -> Frame {
        let calls: Vec<ToolCall> = self.calls.iter().map(|(_, c)| c.clone()).collect();
        let parts: Vec<PartOut<'_>> = call_parts(&calls).collect();
        let chunk = ResponseOut {
            candidates: [CandidateOut {
                content: Some(ContentOut {
                    role: "model",
                    parts,
                }),
                finish_reason: Some(finish_reason_name(finish)),
                index: 0,
            }],
            usage_metadata: usage.map(usage_out),
            model_version: model,
            response_id: None,
        };
        Frame::json(&chunk)
    }
}

impl Encoder for ChunkEncoder {
    fn item(&mut self, item: StreamItem, model: &str, out: &mut Vec<Frame>) {
        match item {
            StreamItem::Native(event) if self.native => {
                let NativeEvent { data, .. } = *event;
                out.push(Frame::data(data));
            }
            StreamItem::Error(e) => {
                let code = status_of(e.code);
                out.push(Frame::json(&error_body(code, &e.message)));
            }
            _ if self.native => {}
            StreamItem::Delta(text) => out.push(Self::text(&text, false, model)),
            StreamItem::Reasoning(text) if self.include_thoughts => {
                out.push(Self::text(&text, true, model))
            }
            StreamItem::Reasoning(_) | StreamItem::Native(_) => {}
            StreamItem::ToolCall(delta) => self.call(*delta),
            StreamItem::Done(done) => {
                out.push(self.last(&done.finish_reason, done.usage, &done.model));
            }
        }
    }

    fn refusal(&mut self, model: &str, _: &str, out: &mut Vec<Frame>) {
        out.push(Frame::json(&refusal(model, None)));
    }
}

#[cfg(test)]
mod tests {
    use understudy_types::{StreamDone, StreamError};

    use super::*;
    use serde_json::json;

    fn frames(encoder: &mut ChunkEncoder, items: Vec<StreamItem>) -> Vec<Value> {
        let mut out = Vec::new();
        for item in items {
            encoder.item(item, "m", &mut out);
        }
        out.iter()
            .map(|f| serde_json::from_str(&f.data).expect("a frame is JSON"))
            .collect()
    }

    fn done(finish: FinishReason) -> StreamItem {
        StreamItem::Done(Box::new(StreamDone {
            request_id: "r".into(),
            provider: "p".into(),
            model: "served-model".into(),
            finish_reason: finish,
            fell_back: false,
            content_filtered: false,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            }),
            attempts: Vec::new(),
            latency_ms: 1.0,
            ttft_ms: 1.0,
            continued_by: None,
        }))
    }

    #[test]
    fn a_whole_answer_has_text_then_calls() {
        let calls = [ToolCall {
            id: "call_1".into(),
            name: "write_file".into(),
            arguments: r#"{"path":"a"}"#.into(),
        }];
        let v = serde_json::to_value(answer(
            "ok",
            &calls,
            &FinishReason::ToolCalls,
            Some(Usage {
                input_tokens: 1,
                output_tokens: 2,
                ..Usage::default()
            }),
            "gpt-4.1",
            Some("id1"),
        ))
        .expect("serializes");
        assert_eq!(
            v,
            json!({
                "candidates": [{
                    "content": {"role": "model", "parts": [
                        {"text": "ok"},
                        {"functionCall": {"id": "call_1", "name": "write_file", "args": {"path": "a"}},
                         "thoughtSignature": "skip_thought_signature_validator"}
                    ]},
                    "finishReason": "STOP",
                    "index": 0
                }],
                "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2, "totalTokenCount": 3},
                "modelVersion": "gpt-4.1",
                "responseId": "id1"
            })
        );
    }

    #[test]
    fn stop_reasons_map_to_geminis() {
        for (finish, want) in [
            (FinishReason::Stop, "STOP"),
            (FinishReason::Length, "MAX_TOKENS"),
            (FinishReason::ToolCalls, "STOP"),
            (FinishReason::Other("content_filter".into()), "SAFETY"),
            (FinishReason::Other("refusal".into()), "SAFETY"),
            (
                FinishReason::Other("malformed_function_call".into()),
                "MALFORMED_FUNCTION_CALL",
            ),
            (FinishReason::Other("pause_turn".into()), "OTHER"),
        ] {
            assert_eq!(finish_reason_name(&finish), want, "{finish:?}");
        }
    }

    #[test]
    fn a_stream_sends_text_as_it_comes_and_calls_whole_at_the_end() {
        let mut e = ChunkEncoder::new(false, false);
        let delta = |index, id: Option<&str>, name: Option<&str>, args: &str| {
            StreamItem::ToolCall(Box::new(ToolCallDelta {
                index,
                id: id.map(str::to_owned),
                name: name.map(str::to_owned),
                arguments: args.into(),
            }))
        };
        let out = frames(
            &mut e,
            vec![
                StreamItem::Delta("Hel".into()),
                StreamItem::Reasoning("hidden".into()),
                StreamItem::Delta("lo".into()),
                delta(0, Some("c0"), Some("f"), "{\"a\":"),
                delta(0, None, None, "1}"),
                done(FinishReason::ToolCalls),
            ],
        );
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[0]["candidates"][0]["content"]["parts"][0]["text"],
            "Hel"
        );
        assert_eq!(out[1]["candidates"][0]["content"]["parts"][0]["text"], "lo");
        let last = &out[2]["candidates"][0];
        assert_eq!(last["finishReason"], "STOP");
        assert_eq!(
            last["content"]["parts"][0]["functionCall"],
            json!({"id": "c0", "name": "f", "args": {"a": 1}})
        );
        assert_eq!(out[2]["usageMetadata"]["totalTokenCount"], 7);
        assert_eq!(out[2]["modelVersion"], "served-model");
    }

    #[test]
    fn thoughts_go_out_only_when_asked_for() {
        let mut e = ChunkEncoder::new(true, false);
        let out = frames(&mut e, vec![StreamItem::Reasoning("hmm".into())]);
        assert_eq!(
            out[0]["candidates"][0]["content"]["parts"][0],
            json!({"text": "hmm", "thought": true})
        );
    }

    #[test]
    fn a_native_stream_relays_geminis_chunks_and_a_cut_is_an_error() {
        let mut e = ChunkEncoder::new(false, true);
        let native =
            r#"{"candidates":[{"content":{"parts":[{"text":"hi","thoughtSignature":"sig"}]}}]}"#;
        let out = frames(
            &mut e,
            vec![
                StreamItem::Native(Box::new(NativeEvent {
                    event: String::new(),
                    data: native.into(),
                })),
                StreamItem::Delta("hi".into()),
                StreamItem::Error(Box::new(StreamError {
                    request_id: "r".into(),
                    code: FailureCode::Unavailable,
                    message: "the upstream went away".into(),
                    provider: "p".into(),
                    model: "m".into(),
                    fell_back: false,
                    content_filtered: false,
                    attempts: Vec::new(),
                    latency_ms: 1.0,
                    ttft_ms: 1.0,
                })),
            ],
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], serde_json::from_str::<Value>(native).expect("json"));
        assert_eq!(
            out[1],
            json!({"error": {"code": 503, "message": "the upstream went away", "status": "UNAVAILABLE"}})
        );
    }
}
