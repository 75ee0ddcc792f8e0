//! A body a client wrote in Gemini's protocol, made ready for the Gemini
//! target that gets it. A `generateContent` body goes as it is (the model
//! is in the URL), but for one repair: a model turn whose first
//! `functionCall` carries no thought signature (another provider served
//! it, and a client such as google-genai sent it back as it got it) gets
//! Google's documented dummy, since Gemini 3 refuses such a turn. A
//! `countTokens` body that wraps a whole request names the target's model
//! in it, as Google requires.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::request::FOREIGN_THOUGHT_SIGNATURE;

/// `body` as the Gemini target gets it: as sent, unless a model turn's
/// first function call lacks its signature (then re-encoded with the
/// dummy there, everything else kept).
pub fn prepare(body: &str) -> Cow<'_, str> {
    // Most bodies hold no call at all: no parse.
    if !body.contains("unctionCall") && !body.contains("unction_call") {
        return Cow::Borrowed(body);
    }
    let Ok(mut value) = serde_json::from_str::<Map<String, Value>>(body) else {
        return Cow::Borrowed(body);
    };
    let Some(Value::Array(contents)) = value.get_mut("contents") else {
        return Cow::Borrowed(body);
    };
    let mut repaired = false;
    for content in contents.iter_mut() {
        if content.get("role").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let Some(Value::Array(parts)) = content.get_mut("parts") else {
            continue;
        };
        let first_call = parts
            .iter_mut()
            .find(|p| p.get("functionCall").is_some() || p.get("function_call").is_some());
        if let Some(Value::Object(part)) = first_call {
            if !part.contains_key("thoughtSignature") && !part.contains_key("thought_signature") {
                part.insert(
                    "thoughtSignature".into(),
                    Value::String(FOREIGN_THOUGHT_SIGNATURE.into()),
                );
                repaired = true;
            }
        }
    }
    match repaired.then(|| serde_json::to_string(&value)) {
        Some(Ok(text)) => Cow::Owned(text),
        _ => Cow::Borrowed(body),
    }
}

/// The `countTokens` body for `model`: `contents` alone as sent; a
/// `generateContentRequest` with its `model` set to `models/{model}`.
/// `None` when the body is not a JSON object.
pub fn count_body(body: &str, model: &str) -> Option<String> {
    let mut body: Map<String, Value> = serde_json::from_str(body).ok()?;
    let key = ["generateContentRequest", "generate_content_request"]
        .into_iter()
        .find(|k| body.contains_key(*k));
    if let Some(key) = key {
        match body.get_mut(key) {
            Some(Value::Object(inner)) => {
                inner.insert("model".into(), Value::String(format!("models/{model}")));
            }
            _ => return None,
        }
    }
    serde_json::to_string(&body).ok()
}

/// Vertex AI's `countTokens` body: its `CountTokensRequest` takes
/// `contents`, `systemInstruction`, `tools` and `generationConfig` at the
/// top level and no `generateContentRequest` (the model is in the URL), so
/// one is unwrapped and its `model` dropped; `contents` alone goes as
/// sent. `None` when the body is not a JSON object.
pub fn vertex_count_body(body: &str, _model: &str) -> Option<String> {
    let mut body: Map<String, Value> = serde_json::from_str(body).ok()?;
    let key = ["generateContentRequest", "generate_content_request"]
        .into_iter()
        .find(|k| body.contains_key(*k));
    if let Some(key) = key {
        let Some(Value::Object(mut inner)) = body.remove(key) else {
            return None;
        };
        inner.remove("model");
        body = inner;
    }
    body.remove("model");
    serde_json::to_string(&body).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn vertex_counts_take_the_request_unwrapped_and_without_a_model() {
        let wrapped = json!({"generateContentRequest": {
            "model": "models/gemini-2.5-flash",
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "generationConfig": {"temperature": 0.2}
        }});
        let out: serde_json::Value =
            serde_json::from_str(&vertex_count_body(&wrapped.to_string(), "m").unwrap()).unwrap();
        assert_eq!(
            out,
            json!({
                "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "generationConfig": {"temperature": 0.2}
            })
        );
        let plain = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        assert_eq!(
            vertex_count_body(&plain.to_string(), "m").unwrap(),
            plain.to_string()
        );
        assert_eq!(vertex_count_body("[1]", "m"), None);
        assert_eq!(
            vertex_count_body(r#"{"generateContentRequest": 3}"#, "m"),
            None
        );
    }

    use super::*;

    #[test]
    fn an_unsigned_call_turn_gets_the_dummy_and_nothing_else_changes() {
        let plain = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        assert!(matches!(prepare(plain), Cow::Borrowed(_)));
        let signed = r#"{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"c2ln"}]}]}"#;
        assert_eq!(prepare(signed), signed);
        let unsigned = json!({"contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [
                {"text": "calling"},
                {"functionCall": {"name": "f", "args": {}}},
                {"functionCall": {"name": "g", "args": {}}}
            ]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
        ]});
        let v: Value = serde_json::from_str(&prepare(&unsigned.to_string())).expect("json");
        let parts = &v["contents"][1]["parts"];
        assert_eq!(parts[1]["thoughtSignature"], FOREIGN_THOUGHT_SIGNATURE);
        assert_eq!(
            parts[2].get("thoughtSignature"),
            None,
            "only the first call"
        );
        assert_eq!(parts[0].get("thoughtSignature"), None);
        assert_eq!(v["contents"][2], unsigned["contents"][2]);
    }

    #[test]
    fn a_count_body_names_the_target_model_where_it_wraps_a_request() {
        let plain = r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;
        assert_eq!(count_body(plain, "gemini-2.5-pro").as_deref(), Some(plain));
        let wrapped = r#"{"generateContentRequest":{"model":"models/route","contents":[]}}"#;
        let v: Value =
            serde_json::from_str(&count_body(wrapped, "gemini-2.5-pro").expect("object"))
                .expect("json");
        assert_eq!(
            v,
            json!({"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": []}})
        );
        assert_eq!(count_body("[]", "m"), None);
    }
}
