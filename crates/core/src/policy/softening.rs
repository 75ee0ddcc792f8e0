//! The softened retry: the same request with a gentler system prompt and a
//! cooler temperature, sent once to the provider that refused.

use std::sync::Arc;

use crate::chat::{ChatRequest, NativeRequest};

/// Appended to the system prompt of a softened retry (DESIGN §2, verbatim).
pub const SOFTENING_SUFFIX: &str = "\n\nIMPORTANT: Keep it light, playful, and safe for all audiences. Avoid anything offensive, mean-spirited, or inappropriate.";

/// The lowest temperature a softened retry uses.
pub const SOFTENED_TEMPERATURE_FLOOR: f32 = 0.3;

/// How much cooler a softened retry runs.
pub const SOFTENED_TEMPERATURE_STEP: f32 = 0.2;

/// Builds the softened form of `original`. `provider_default_temperature` is
/// the temperature the provider uses when the request sets none.
pub fn soften(original: &ChatRequest, provider_default_temperature: f32) -> ChatRequest {
    let mut softened = original.clone();
    let system = original.system.as_deref().unwrap_or_default();
    softened.system = Some(format!("{system}{SOFTENING_SUFFIX}"));
    // Anthropic with extended thinking on accepts only temperature 1: the
    // sampling is left as the client set it there.
    let thinking = original.native.as_deref().is_some_and(thinking_on);
    if !thinking {
        let t = original.temperature.unwrap_or(provider_default_temperature);
        softened.temperature = Some(softened_temperature(t));
    }
    if let Some(native) = &original.native {
        let temperature = softened.temperature.filter(|_| !thinking);
        softened.native = soften_native(native, temperature).map(Arc::new);
    }
    softened
}

/// The softened form of a natively forwarded Anthropic body: its `system`
/// keeps its structure (a string, or text blocks with their cache markers)
/// and gets the suffix as one more text block; the temperature is the
/// softened one. `None` (forward the neutral, softened request instead)
/// when the body is not a JSON object.
fn soften_native(native: &NativeRequest, temperature: Option<f32>) -> Option<NativeRequest> {
    if native.kind == crate::settings::ProviderKind::Openai {
        return soften_responses(native, temperature);
    }
    let mut body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&native.body).ok()?;
    let suffix = serde_json::json!({"type": "text", "text": SOFTENING_SUFFIX.trim_start()});
    let system = match body.remove("system") {
        None | Some(serde_json::Value::Null) => serde_json::Value::Array(vec![suffix]),
        Some(serde_json::Value::String(s)) => {
            serde_json::json!([{"type": "text", "text": s}, suffix])
        }
        Some(serde_json::Value::Array(mut blocks)) => {
            blocks.push(suffix);
            serde_json::Value::Array(blocks)
        }
        Some(_) => return None,
    };
    body.insert("system".into(), system);
    if let Some(t) = temperature {
        body.insert("temperature".into(), serde_json::json!(t));
    }
    Some(NativeRequest {
        body: serde_json::to_string(&body).ok()?,
        ..native.clone()
    })
}

/// The softened form of a natively forwarded Responses API body: the
/// suffix appended to its `instructions`; the temperature softened only
/// where the client set one (reasoning models refuse any). `None` when
/// `instructions` is not a string.
fn soften_responses(native: &NativeRequest, temperature: Option<f32>) -> Option<NativeRequest> {
    let mut body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&native.body).ok()?;
    let instructions = match body.remove("instructions") {
        None | Some(serde_json::Value::Null) => SOFTENING_SUFFIX.trim_start().to_owned(),
        Some(serde_json::Value::String(s)) => format!("{s}{SOFTENING_SUFFIX}"),
        Some(_) => return None,
    };
    body.insert("instructions".into(), instructions.into());
    if let (Some(t), true) = (temperature, body.contains_key("temperature")) {
        body.insert("temperature".into(), serde_json::json!(t));
    }
    Some(NativeRequest {
        body: serde_json::to_string(&body).ok()?,
        ..native.clone()
    })
}

/// Whether a native Anthropic body turns extended thinking on (`thinking`
/// of any type but `disabled`): the API then refuses any temperature but 1.
fn thinking_on(native: &NativeRequest) -> bool {
    #[derive(serde::Deserialize)]
    struct Body {
        thinking: Option<Thinking>,
    }
    #[derive(serde::Deserialize)]
    struct Thinking {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    native.kind == crate::settings::ProviderKind::Anthropic
        && serde_json::from_str::<Body>(&native.body)
            .ok()
            .and_then(|b| b.thinking)
            .is_some_and(|t| t.kind.as_deref() != Some("disabled"))
}

/// `max(t - 0.2, 0.3)`, rounded to two decimals so that 0.7 becomes 0.5 on
/// the wire rather than 0.49999997.
pub fn softened_temperature(t: f32) -> f32 {
    let cooled = (t - SOFTENED_TEMPERATURE_STEP).max(SOFTENED_TEMPERATURE_FLOOR);
    (cooled * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature() {
        for (t, want) in [
            (1.0, 0.8),
            (0.7, 0.5),
            (0.5, 0.3),
            (0.4, 0.3),
            (0.0, 0.3),
            (2.0, 1.8),
        ] {
            assert_eq!(softened_temperature(t), want, "t = {t}");
        }
    }

    #[test]
    fn prompt_and_default_temperature() {
        let req = ChatRequest::user("roast me").with_system("You are a comedian.");
        let s = soften(&req, 1.0);
        assert_eq!(
            s.system.as_deref(),
            Some(format!("You are a comedian.{SOFTENING_SUFFIX}").as_str())
        );
        assert_eq!(s.temperature, Some(0.8));
        assert_eq!(s.messages, req.messages);

        let bare = soften(&ChatRequest::user("x"), 1.0);
        assert_eq!(bare.system.as_deref(), Some(SOFTENING_SUFFIX));
    }

    #[test]
    fn a_native_body_keeps_its_system_blocks_and_gets_one_more() {
        let blocks = r#"{"model":"m","system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}],"max_tokens":10}"#;
        // (body, expected system after softening)
        let cases = [
            (
                blocks,
                serde_json::json!([
                    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": SOFTENING_SUFFIX.trim_start()}
                ]),
            ),
            (
                r#"{"model":"m","system":"Be kind.","messages":[],"max_tokens":10}"#,
                serde_json::json!([
                    {"type": "text", "text": "Be kind."},
                    {"type": "text", "text": SOFTENING_SUFFIX.trim_start()}
                ]),
            ),
            (
                r#"{"model":"m","messages":[],"max_tokens":10}"#,
                serde_json::json!([{"type": "text", "text": SOFTENING_SUFFIX.trim_start()}]),
            ),
        ];
        for (body, want) in cases {
            let req = ChatRequest {
                native: Some(Arc::new(NativeRequest {
                    kind: crate::settings::ProviderKind::Anthropic,
                    body: body.into(),
                    headers: vec![("anthropic-beta".into(), "x".into())],
                    query: None,
                })),
                temperature: Some(0.7),
                ..ChatRequest::user("hi")
            };
            let softened = soften(&req, 1.0);
            let native = softened.native.unwrap();
            let v: serde_json::Value = serde_json::from_str(&native.body).unwrap();
            assert_eq!(v["system"], want, "{body}");
            assert_eq!(v["temperature"], serde_json::json!(0.5));
            assert_eq!(
                native.headers,
                [("anthropic-beta".to_owned(), "x".to_owned())]
            );
        }
    }

    #[test]
    fn sampling_is_left_alone_where_thinking_forbids_changing_it() {
        // (body, thinking on)
        for (body, thinking) in [
            (
                r#"{"model":"m","thinking":{"type":"enabled","budget_tokens":2048},"messages":[],"max_tokens":4096}"#,
                true,
            ),
            (
                r#"{"model":"m","thinking":{"type":"adaptive"},"messages":[],"max_tokens":4096}"#,
                true,
            ),
            (
                r#"{"model":"m","thinking":{"type":"disabled"},"messages":[],"max_tokens":10}"#,
                false,
            ),
            (r#"{"model":"m","messages":[],"max_tokens":10}"#, false),
        ] {
            let req = ChatRequest {
                native: Some(Arc::new(NativeRequest {
                    kind: crate::settings::ProviderKind::Anthropic,
                    body: body.into(),
                    headers: Vec::new(),
                    query: None,
                })),
                temperature: Some(0.7),
                ..ChatRequest::user("hi")
            };
            let softened = soften(&req, 1.0);
            let v: serde_json::Value =
                serde_json::from_str(&softened.native.unwrap().body).unwrap();
            if thinking {
                assert_eq!(softened.temperature, Some(0.7), "{body}: as it was");
                assert_eq!(v.get("temperature"), None, "{body}");
            } else {
                assert_eq!(softened.temperature, Some(0.5), "{body}");
                assert_eq!(v["temperature"], serde_json::json!(0.5), "{body}");
            }
            assert!(v["system"].to_string().contains("Keep it light"), "{body}");
        }
    }
    #[test]
    fn a_responses_body_gets_the_suffix_in_its_instructions() {
        // (body, instructions after, temperature after)
        for (body, instructions, temperature) in [
            (
                r#"{"model":"m","input":"hi","instructions":"Be kind.","temperature":0.7}"#,
                format!("Be kind.{SOFTENING_SUFFIX}"),
                Some(serde_json::json!(0.5)),
            ),
            (
                r#"{"model":"m","input":"hi","reasoning":{"effort":"low"}}"#,
                SOFTENING_SUFFIX.trim_start().to_owned(),
                None,
            ),
        ] {
            let req = ChatRequest {
                native: Some(Arc::new(NativeRequest {
                    kind: crate::settings::ProviderKind::Openai,
                    body: body.into(),
                    headers: Vec::new(),
                    query: None,
                })),
                temperature: Some(0.7),
                ..ChatRequest::user("hi")
            };
            let softened = soften(&req, 1.0);
            let v: serde_json::Value =
                serde_json::from_str(&softened.native.unwrap().body).unwrap();
            assert_eq!(v["instructions"], instructions.as_str(), "{body}");
            assert_eq!(v.get("temperature").cloned(), temperature, "{body}");
            assert_eq!(v.get("system"), None, "{body}");
        }
    }
}
