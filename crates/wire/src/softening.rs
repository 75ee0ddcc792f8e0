//! The softened retry applied to a body a client wrote natively: core marks
//! the request ([`NativeRequest::softened`]), and the adapter that forwards
//! it calls [`apply`], which puts the suffix where the body's protocol keeps
//! its system prompt and the temperature where it keeps its sampling.
//!
//! - Messages: `system` keeps its structure (a string, or text blocks with
//!   their cache markers) and gets the suffix as one more text block;
//!   `temperature` at the top.
//! - Responses: the suffix appended to `instructions`; the temperature only
//!   where the client set one (reasoning models refuse any).
//! - generateContent: the suffix as one more part of `systemInstruction`
//!   (its role, if any, kept); the temperature in `generationConfig`.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use understudy_types::chat::SOFTENING_SUFFIX;
use understudy_types::{ChatRequest, NativeRequest, Protocol, Softened};

/// `request` as its adapter forwards it: unchanged unless it is a softened
/// retry of a native body, whose body then carries the softening. A body
/// that cannot take it (not a JSON object, a system prompt of an unknown
/// shape) is dropped, so that the neutral, softened request goes instead.
pub fn apply(request: &ChatRequest) -> Cow<'_, ChatRequest> {
    let Some(native) = request.native.as_deref() else {
        return Cow::Borrowed(request);
    };
    let Some(softened) = native.softened else {
        return Cow::Borrowed(request);
    };
    let mut edited = request.clone();
    edited.native = soften_body(native, softened).map(|body| {
        let mut n = native.with_body(body);
        n.softened = None;
        Arc::new(n)
    });
    Cow::Owned(edited)
}

/// A temperature as the decimal it is meant to be (`0.7`, not the
/// `0.699999988` an `f32` widens to).
fn decimal(t: f32) -> Value {
    json!((f64::from(t) * 100.0).round() / 100.0)
}

/// The softened body, in `native`'s protocol.
fn soften_body(native: &NativeRequest, softened: Softened) -> Option<String> {
    let mut body: Map<String, Value> = serde_json::from_str(&native.body).ok()?;
    let t = softened.temperature;
    match native.kind {
        Protocol::Messages => messages(&mut body, t)?,
        Protocol::Responses => responses(&mut body, t)?,
        Protocol::GenerateContent => generate_content(&mut body, t)?,
        // A Chat Completions body goes as it is only where the translation
        // would send the same (`chat_completions::native`), so its softened
        // retry is the translated, softened request; no front end speaks
        // Converse, and a protocol no provider speaks has no native body to
        // soften (a test walks `Protocol::KINDS`).
        _ => return None,
    }
    serde_json::to_string(&body).ok()
}

/// A Messages body: `system` gets one more text block.
fn messages(body: &mut Map<String, Value>, temperature: Option<f32>) -> Option<()> {
    let suffix = json!({"type": "text", "text": SOFTENING_SUFFIX.trim_start()});
    let system = match body.remove("system") {
        None | Some(Value::Null) => Value::Array(vec![suffix]),
        Some(Value::String(s)) => json!([{"type": "text", "text": s}, suffix]),
        Some(Value::Array(mut blocks)) => {
            blocks.push(suffix);
            Value::Array(blocks)
        }
        Some(_) => return None,
    };
    body.insert("system".into(), system);
    if let Some(t) = temperature {
        body.insert("temperature".into(), decimal(t));
    }
    Some(())
}

/// A Responses body: the suffix appended to `instructions`.
fn responses(body: &mut Map<String, Value>, temperature: Option<f32>) -> Option<()> {
    let instructions = match body.remove("instructions") {
        None | Some(Value::Null) => SOFTENING_SUFFIX.trim_start().to_owned(),
        Some(Value::String(s)) => format!("{s}{SOFTENING_SUFFIX}"),
        Some(_) => return None,
    };
    body.insert("instructions".into(), instructions.into());
    if let (Some(t), true) = (temperature, body.contains_key("temperature")) {
        body.insert("temperature".into(), decimal(t));
    }
    Some(())
}

/// A generateContent body: one more part in `systemInstruction` (written
/// `system_instruction` too, as Google accepts), the temperature in
/// `generationConfig`.
fn generate_content(body: &mut Map<String, Value>, temperature: Option<f32>) -> Option<()> {
    let suffix = json!({"text": SOFTENING_SUFFIX.trim_start()});
    let key = if body.contains_key("system_instruction") && !body.contains_key("systemInstruction")
    {
        "system_instruction"
    } else {
        "systemInstruction"
    };
    let system = match body.remove(key) {
        None | Some(Value::Null) => json!({"parts": [suffix]}),
        Some(Value::Object(mut content)) => {
            match content.get_mut("parts") {
                Some(Value::Array(parts)) => parts.push(suffix),
                None | Some(Value::Null) => {
                    content.insert("parts".into(), json!([suffix]));
                }
                Some(_) => return None,
            }
            Value::Object(content)
        }
        Some(_) => return None,
    };
    body.insert(key.into(), system);
    if let Some(t) = temperature {
        let key =
            if body.contains_key("generation_config") && !body.contains_key("generationConfig") {
                "generation_config"
            } else {
                "generationConfig"
            };
        match body.entry(key).or_insert_with(|| Value::Object(Map::new())) {
            Value::Object(config) => {
                config.insert("temperature".into(), decimal(t));
            }
            _ => return None,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body `apply` forwards for `body` in `kind`, softened with `t`.
    fn softened(kind: Protocol, body: &str, t: Option<f32>) -> Option<Value> {
        let req = ChatRequest {
            native: Some(Arc::new({
                let mut n = NativeRequest::new(kind, body);
                n.headers = vec![("anthropic-beta".into(), "x".into())];
                n.softened = Some(Softened { temperature: t });
                n
            })),
            ..ChatRequest::user("hi")
        };
        let applied = apply(&req);
        let native = applied.native.as_deref()?;
        assert_eq!(native.softened, None);
        assert_eq!(
            native.headers,
            [("anthropic-beta".to_owned(), "x".to_owned())]
        );
        Some(serde_json::from_str(&native.body).expect("the softened body is JSON"))
    }

    /// A new provider kind whose bodies a front end forwards natively gets
    /// its case in `soften_body`, or this fails (the compiler no longer
    /// asks): every kind but Chat Completions is softened.
    #[test]
    fn every_provider_kind_forwarded_natively_is_softened() {
        for kind in Protocol::KINDS {
            let native = NativeRequest::new(kind, r#"{"model":"m"}"#);
            let body = soften_body(&native, Softened { temperature: None });
            assert_eq!(body.is_some(), kind != Protocol::ChatCompletions, "{kind}");
        }
    }

    #[test]
    fn a_messages_body_keeps_its_system_blocks_and_gets_one_more() {
        let blocks = r#"{"model":"m","system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}],"max_tokens":10}"#;
        // (body, expected system after softening)
        let cases = [
            (
                blocks,
                json!([
                    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": SOFTENING_SUFFIX.trim_start()}
                ]),
            ),
            (
                r#"{"model":"m","system":"Be kind.","messages":[],"max_tokens":10}"#,
                json!([
                    {"type": "text", "text": "Be kind."},
                    {"type": "text", "text": SOFTENING_SUFFIX.trim_start()}
                ]),
            ),
            (
                r#"{"model":"m","messages":[],"max_tokens":10}"#,
                json!([{"type": "text", "text": SOFTENING_SUFFIX.trim_start()}]),
            ),
        ];
        for (body, want) in cases {
            let v = softened(Protocol::Messages, body, Some(0.5)).expect(body);
            assert_eq!(v["system"], want, "{body}");
            assert_eq!(v["temperature"], json!(0.5));
        }
    }

    #[test]
    fn sampling_is_left_alone_where_the_protocol_fixes_it() {
        let body = r#"{"model":"m","thinking":{"type":"enabled","budget_tokens":2048},"messages":[],"max_tokens":4096}"#;
        let v = softened(Protocol::Messages, body, None).expect("softened");
        assert_eq!(v.get("temperature"), None);
        assert!(v["system"].to_string().contains("Keep it light"));
    }

    #[test]
    fn a_responses_body_gets_the_suffix_in_its_instructions() {
        // (body, instructions after, temperature after)
        for (body, instructions, temperature) in [
            (
                r#"{"model":"m","input":"hi","instructions":"Be kind.","temperature":0.7}"#,
                format!("Be kind.{SOFTENING_SUFFIX}"),
                Some(json!(0.5)),
            ),
            (
                r#"{"model":"m","input":"hi","reasoning":{"effort":"low"}}"#,
                SOFTENING_SUFFIX.trim_start().to_owned(),
                None,
            ),
        ] {
            let v = softened(Protocol::Responses, body, Some(0.5)).expect(body);
            assert_eq!(v["instructions"], instructions.as_str(), "{body}");
            assert_eq!(v.get("temperature").cloned(), temperature, "{body}");
            assert_eq!(v.get("system"), None, "{body}");
        }
    }

    #[test]
    fn a_generate_content_body_gets_a_system_part_and_its_temperature() {
        let suffix = json!({"text": SOFTENING_SUFFIX.trim_start()});
        // (body, system instruction after, generation config after)
        for (body, system, config) in [
            (
                r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"systemInstruction":{"role":"user","parts":[{"text":"Be kind."}]},"generationConfig":{"topK":40,"temperature":1}}"#,
                json!({"role": "user", "parts": [{"text": "Be kind."}, suffix]}),
                json!({"topK": 40, "temperature": 0.5}),
            ),
            (
                r#"{"contents":[]}"#,
                json!({"parts": [suffix]}),
                json!({"temperature": 0.5}),
            ),
        ] {
            let v = softened(Protocol::GenerateContent, body, Some(0.5)).expect(body);
            assert_eq!(v["systemInstruction"], system, "{body}");
            assert_eq!(v["generationConfig"], config, "{body}");
            assert_eq!(v.get("system"), None, "never Anthropic's field: {body}");
        }
        // Google's snake_case spelling is kept, not doubled.
        let v = softened(
            Protocol::GenerateContent,
            r#"{"contents":[],"system_instruction":{"parts":[{"text":"x"}]}}"#,
            None,
        )
        .expect("softened");
        assert_eq!(v["system_instruction"]["parts"][1], suffix);
        assert_eq!(v.get("systemInstruction"), None);
        assert_eq!(v.get("generationConfig"), None);
    }

    #[test]
    fn a_body_that_cannot_take_it_goes_neutral() {
        for (kind, body) in [
            (Protocol::Messages, r#"{"system":3}"#),
            (Protocol::Responses, r#"{"instructions":[1]}"#),
            (Protocol::ChatCompletions, r#"{"messages":[]}"#),
            (Protocol::GenerateContent, r#"{"systemInstruction":"x"}"#),
            (Protocol::GenerateContent, "not json"),
        ] {
            assert_eq!(softened(kind, body, Some(0.5)), None, "{body}");
        }
    }
}
