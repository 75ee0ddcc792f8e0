//! A prepared Messages body as a cloud takes it (Bedrock, Vertex): the
//! model named in the URL rather than the body, the API version and betas
//! in the body, and mid-conversation `system` messages folded into the
//! system prompt where the cloud takes none.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::value::RawValue;

use super::{Edit, apply};

/// How a cloud takes a Messages body: Bedrock and Vertex name the model in
/// the URL and the API version in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudBody<'a> {
    /// `anthropic_version`, set unless the body has one
    /// (`bedrock-2023-05-31`, `vertex-2023-10-16`).
    pub version: &'a str,
    /// Drop `stream` too (Bedrock streams by its path and refuses the
    /// field; Vertex takes it).
    pub drop_stream: bool,
    /// Betas to send in the body as `anthropic_beta` (Bedrock takes them
    /// there, not in a header); empty: none added.
    pub betas: &'a [&'a str],
    /// The cloud takes no `system` messages inside `messages` (Claude
    /// Code's mid-conversation reminders, behind a beta it lacks): their
    /// text joins the system prompt, in order.
    pub fold_system: bool,
}

/// `body` (a Messages body, already [`super::prepare`]d) as a cloud takes it:
/// without `model` (and `stream`, where the cloud says), with
/// `anthropic_version` and the betas; every other byte as it was. `None`
/// when the body is not a JSON object.
pub fn for_cloud(body: &str, cloud: CloudBody<'_>) -> Option<String> {
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let top: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_str(body).ok()?;
    let mut edits = Vec::with_capacity(4);
    if let Some(raw) = top.get("model") {
        edits.push(Edit::remove(body, "model", raw)?);
    }
    if let (true, Some(raw)) = (cloud.drop_stream, top.get("stream")) {
        edits.push(Edit::remove(body, "stream", raw)?);
    }
    if cloud.fold_system {
        if let Some(raw) = top.get("messages") {
            edits.extend(fold_system_messages(body, raw, top.get("system").copied())?);
        }
    }
    let mut added = String::new();
    if !top.contains_key("anthropic_version") {
        added.push_str(&format!(
            "\"anthropic_version\":{},",
            serde_json::to_string(cloud.version).ok()?
        ));
    }
    if !cloud.betas.is_empty() {
        let betas = serde_json::to_string(cloud.betas).ok()?;
        match top.get("anthropic_beta") {
            Some(raw) => edits.push(Edit::set(body, raw, betas)?),
            None => added.push_str(&format!("\"anthropic_beta\":{betas},")),
        }
    }
    let open = body.len() - body.trim_start().len() + 1;
    // After the opening brace; a body left with no other member (no
    // messages: the cloud answers it as its 400) takes no trailing comma.
    let rest_empty = {
        let mut probe = edits.iter().collect::<Vec<_>>();
        probe.sort_by_key(|e| (e.start, e.end));
        let mut kept = String::new();
        let mut at = open;
        for e in probe {
            kept.push_str(body.get(at..e.start)?);
            at = e.end;
        }
        kept.push_str(body.get(at..)?);
        kept.trim_start().starts_with('}')
    };
    if rest_empty {
        added.pop();
    }
    edits.push(Edit {
        start: open,
        end: open,
        with: added,
    });
    apply(body, edits)
}

/// The edits that move `messages`' `system` messages into the top-level
/// `system` (a string or blocks, or none yet), in order; none when there
/// are none.
fn fold_system_messages(
    body: &str,
    messages: &RawValue,
    system: Option<&RawValue>,
) -> Option<Vec<Edit>> {
    if !messages.get().contains("\"system\"") {
        return Some(Vec::new());
    }
    let mut list: Vec<serde_json::Value> = serde_json::from_str(messages.get()).ok()?;
    let (mut texts, before) = (Vec::new(), list.len());
    list.retain(|m| {
        if m.get("role").and_then(serde_json::Value::as_str) != Some("system") {
            return true;
        }
        match m.get("content") {
            Some(serde_json::Value::String(t)) => texts.push(t.clone()),
            Some(serde_json::Value::Array(blocks)) => texts.extend(
                blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(serde_json::Value::as_str))
                    .map(str::to_owned),
            ),
            _ => {}
        }
        false
    });
    if list.len() == before {
        return Some(Vec::new());
    }
    let mut edits = vec![Edit::set(
        body,
        messages,
        serde_json::to_string(&list).ok()?,
    )?];
    let extra: Vec<serde_json::Value> = texts
        .into_iter()
        .filter(|t| !t.is_empty())
        .map(|text| serde_json::json!({"type": "text", "text": text}))
        .collect();
    if extra.is_empty() {
        return Some(edits);
    }
    let mut blocks = match system.map(|s| serde_json::from_str::<serde_json::Value>(s.get())) {
        None => Vec::new(),
        Some(Ok(serde_json::Value::String(t))) if t.is_empty() => Vec::new(),
        Some(Ok(serde_json::Value::String(t))) => {
            vec![serde_json::json!({"type": "text", "text": t})]
        }
        Some(Ok(serde_json::Value::Array(blocks))) => blocks,
        Some(_) => return None,
    };
    blocks.extend(extra);
    let blocks = serde_json::to_string(&blocks).ok()?;
    match system {
        Some(raw) => edits.push(Edit::set(body, raw, blocks)?),
        None => {
            let open = body.len() - body.trim_start().len() + 1;
            edits.push(Edit {
                start: open,
                end: open,
                with: format!("\"system\":{blocks},"),
            });
        }
    }
    Some(edits)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use super::*;

    #[test]
    fn a_cloud_body_loses_model_and_stream_and_gains_version_and_betas() {
        let bedrock = CloudBody {
            version: "bedrock-2023-05-31",
            drop_stream: true,
            betas: &["interleaved-thinking-2025-05-14"],
            fold_system: true,
        };
        let body = r#"{"model": "claude-x", "max_tokens": 5, "stream": true, "messages": [{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            for_cloud(body, bedrock).unwrap(),
            r#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["interleaved-thinking-2025-05-14"], "max_tokens": 5,  "messages": [{"role":"user","content":"hi"}]}"#
        );
        let vertex = CloudBody {
            version: "vertex-2023-10-16",
            drop_stream: false,
            betas: &[],
            fold_system: false,
        };
        let body = r#"{"messages":[],"stream":true,"model":"m"}"#;
        assert_eq!(
            for_cloud(body, vertex).unwrap(),
            r#"{"anthropic_version":"vertex-2023-10-16","messages":[],"stream":true}"#
        );
        // A version the client set stays; a body of nothing but a model
        // keeps valid JSON.
        let body = r#"{"anthropic_version":"bedrock-2023-05-31","model":"m"}"#;
        let out = for_cloud(body, bedrock).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&out).unwrap(),
            serde_json::json!({"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["interleaved-thinking-2025-05-14"]})
        );
        let out = for_cloud(r#"{"model":"m"}"#, vertex).unwrap();
        assert_eq!(out, r#"{"anthropic_version":"vertex-2023-10-16"}"#);
        assert!(for_cloud("[1]", vertex).is_none());
        // Mid-conversation system messages join the system prompt.
        let body = r#"{"model":"m","system":[{"type":"text","text":"Base."}],"messages":[{"role":"user","content":"hi"},{"role":"system","content":"Reminder."},{"role":"assistant","content":"ok"}]}"#;
        let out: serde_json::Value =
            serde_json::from_str(&for_cloud(body, bedrock).unwrap()).unwrap();
        assert_eq!(
            out["system"],
            serde_json::json!([{"type":"text","text":"Base."},{"type":"text","text":"Reminder."}])
        );
        assert_eq!(
            out["messages"],
            serde_json::json!([{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}])
        );
        let body = r#"{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"R"}]},{"role":"user","content":"hi"}]}"#;
        let out: serde_json::Value =
            serde_json::from_str(&for_cloud(body, bedrock).unwrap()).unwrap();
        assert_eq!(
            out["system"],
            serde_json::json!([{"type":"text","text":"R"}])
        );
        assert_eq!(
            out["messages"],
            serde_json::json!([{"role":"user","content":"hi"}])
        );
    }
}
