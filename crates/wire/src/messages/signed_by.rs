//! Thinking signatures between platforms. A signed `thinking` block (or a
//! `redacted_thinking` block's `data`) is verified by the platform whose
//! model wrote it; the same Claude on another platform (the Anthropic
//! API, Bedrock, Vertex AI) refuses it. So a block a cloud signed reaches
//! the client with the cloud's name in front of its signature
//! (`bedrock:EqMB…`), and on the way back each target gets only its own
//! blocks, their signatures as it wrote them: another platform's are
//! dropped (with thinking on, a tool turn left without its thinking block
//! then goes with thinking off, as `native::prepare` does for a turn
//! another provider served). The Anthropic API's own signatures go as
//! they came, untouched. A block whose signature is empty (a stream cut
//! before its `signature_delta`) goes to no one.

use std::collections::VecDeque;

use serde_json::Value;
use understudy_types::{Failure, StreamEvent};

use crate::StreamParser;
use crate::messages::stream::AnthropicStream;
use crate::sse::SseItem;

/// Between a platform's name and the signature it wrote. Base64 never
/// holds it.
const SEP: char = ':';

/// The platform that wrote `signature` (`None`: the Anthropic API) and the
/// signature as that platform wrote it.
pub fn signer(signature: &str) -> (Option<&str>, &str) {
    match signature.split_once(SEP) {
        Some((platform, raw))
            if !platform.is_empty() && platform.bytes().all(|b| b.is_ascii_lowercase()) =>
        {
            (Some(platform), raw)
        }
        _ => (None, signature),
    }
}

/// The field of a block that carries its signature.
fn signed_field(block: &Value) -> Option<&'static str> {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking") => Some("signature"),
        Some("redacted_thinking") => Some("data"),
        _ => None,
    }
}

fn tag(value: &mut Value, platform: &str) {
    if let Some(s) = value.as_str().filter(|s| !s.is_empty()) {
        *value = Value::String(format!("{platform}{SEP}{s}"));
    }
}

/// A whole Messages answer from `platform` with its blocks' signatures
/// named as that platform's; `None` when it has no signed block.
pub fn tag_answer(body: &str, platform: &str) -> Option<String> {
    if !body.contains("thinking") {
        return None;
    }
    let mut v: Value = serde_json::from_str(body).ok()?;
    let mut changed = false;
    for block in v.get_mut("content")?.as_array_mut()? {
        if let Some(field) = signed_field(block) {
            if let Some(s) = block.get_mut(field) {
                tag(s, platform);
                changed = true;
            }
        }
    }
    changed.then(|| v.to_string())
}

/// One stream event's JSON from `platform`, its signature named as that
/// platform's (`content_block_start` of a signed block, `signature_delta`);
/// `None` when it carries none.
pub fn tag_event(data: &str, platform: &str) -> Option<String> {
    if !data.contains("signature") && !data.contains("redacted_thinking") {
        return None;
    }
    let mut v: Value = serde_json::from_str(data).ok()?;
    let target = match v.get("type").and_then(Value::as_str) {
        Some("content_block_start") => {
            let block = v.get_mut("content_block")?;
            let field = signed_field(block)?;
            block.get_mut(field)?
        }
        Some("content_block_delta") => {
            let delta = v.get_mut("delta")?;
            if delta.get("type").and_then(Value::as_str) != Some("signature_delta") {
                return None;
            }
            delta.get_mut("signature")?
        }
        _ => return None,
    };
    tag(target, platform);
    Some(v.to_string())
}

/// Whether a history's signed blocks need changing for a target on
/// `platform` (`None`: the Anthropic API): one is another platform's, or
/// its name must come off, or it has no signature.
pub(crate) fn needs_change(signature: Option<&str>, platform: Option<&str>) -> bool {
    match signature {
        None | Some("") => true,
        Some(s) => {
            let (by, _) = signer(s);
            by != platform || by.is_some()
        }
    }
}

/// `blocks` (one message's content) for a target on `platform`: its own
/// signed blocks with their signatures as it wrote them, no other
/// platform's, none unsigned. Whether anything changed.
pub(crate) fn keep_own(blocks: &mut Vec<Value>, platform: Option<&str>) -> bool {
    let before = blocks.len();
    let mut renamed = false;
    blocks.retain_mut(|block| {
        let Some(field) = signed_field(block) else {
            return true;
        };
        let Some(s) = block.get(field).and_then(Value::as_str) else {
            return false;
        };
        let (by, raw) = signer(s);
        if raw.is_empty() || by != platform {
            return false;
        }
        if by.is_some() {
            block[field] = Value::String(raw.to_owned());
            renamed = true;
        }
        true
    });
    if blocks.is_empty() && before > 0 {
        // An assistant turn of nothing but another platform's thinking:
        // the API refuses empty content.
        blocks.push(serde_json::json!({"type": "text", "text": "…"}));
    }
    renamed || blocks.len() != before
}

/// The Messages stream parser for a target on `platform`, naming the
/// signatures in the events it passes on as that platform's.
#[derive(Debug)]
pub struct SignedStream {
    inner: AnthropicStream,
    platform: &'static str,
}

impl SignedStream {
    pub fn new(inner: AnthropicStream, platform: &'static str) -> Self {
        Self { inner, platform }
    }

    fn rename(&self, out: &mut VecDeque<Result<StreamEvent, Failure>>, from: usize) {
        for event in out.iter_mut().skip(from) {
            if let Ok(StreamEvent::Native(native)) = event {
                if let Some(tagged) = tag_event(&native.data, self.platform) {
                    native.data = tagged;
                }
            }
        }
    }
}

impl StreamParser for SignedStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let from = out.len();
        self.inner.on_item(item, out);
        self.rename(out, from);
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let from = out.len();
        self.inner.on_eof(out);
        self.rename(out, from);
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn response_id(&self) -> Option<&str> {
        self.inner.response_id()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_clouds_signatures_are_named_and_the_apis_are_not() {
        assert_eq!(signer("bedrock:EqMB+/="), (Some("bedrock"), "EqMB+/="));
        assert_eq!(signer("EqMB+/="), (None, "EqMB+/="));
        let answer = json!({"content": [
            {"type": "thinking", "thinking": "t", "signature": "Sig1"},
            {"type": "redacted_thinking", "data": "Enc1"},
            {"type": "text", "text": "hi"}]})
        .to_string();
        let tagged: Value = serde_json::from_str(&tag_answer(&answer, "bedrock").unwrap()).unwrap();
        assert_eq!(tagged["content"][0]["signature"], "bedrock:Sig1");
        assert_eq!(tagged["content"][1]["data"], "bedrock:Enc1");
        assert_eq!(tagged["content"][2]["text"], "hi");
        assert!(tag_answer(r#"{"content":[{"type":"text","text":"x"}]}"#, "bedrock").is_none());
        let delta = r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Sig2"}}"#;
        let tagged: Value = serde_json::from_str(&tag_event(delta, "vertex").unwrap()).unwrap();
        assert_eq!(tagged["delta"]["signature"], "vertex:Sig2");
        // An empty signature at the block's start stays empty.
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#;
        let tagged: Value = serde_json::from_str(&tag_event(start, "vertex").unwrap()).unwrap();
        assert_eq!(tagged["content_block"]["signature"], "");
    }

    #[test]
    fn each_target_keeps_only_its_own_blocks() {
        let history = || {
            vec![
                json!({"type": "thinking", "thinking": "a", "signature": "ApiSig"}),
                json!({"type": "thinking", "thinking": "b", "signature": "bedrock:BedSig"}),
                json!({"type": "thinking", "thinking": "c", "signature": ""}),
                json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}),
            ]
        };
        let mut api = history();
        assert!(keep_own(&mut api, None));
        assert_eq!(api.len(), 2);
        assert_eq!(api[0]["signature"], "ApiSig");
        let mut bedrock = history();
        assert!(keep_own(&mut bedrock, Some("bedrock")));
        assert_eq!(bedrock.len(), 2);
        assert_eq!(bedrock[0]["signature"], "BedSig");
        let mut vertex = history();
        keep_own(&mut vertex, Some("vertex"));
        assert_eq!(
            vertex,
            [json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})]
        );
        let mut only = vec![json!({"type": "thinking", "thinking": "b", "signature": "bedrock:S"})];
        keep_own(&mut only, None);
        assert_eq!(only, [json!({"type": "text", "text": "…"})]);
    }
}

#[cfg(test)]
mod prepare_tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use crate::messages::native::prepare_for;

    /// A tool loop with thinking on whose tool turn the Anthropic API
    /// signed, as the anthropic SDK sends it back.
    const BODY: &str = r#"{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"What is the weather in Oslo?"},{"role":"assistant","content":[{"signature":"QXBpU2lnbmVk","thinking":"Oslo, so a weather call.","type":"thinking"},{"id":"toolu_01","input":{"city":"Oslo"},"name":"get_weather","type":"tool_use"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"-3 degrees"}]}]}"#;

    #[test]
    fn another_platforms_tool_turn_goes_with_thinking_off_and_without_its_block() {
        let p = prepare_for(BODY, "m", None, Some("bedrock")).unwrap();
        assert!(p.thinking_off, "{}", p.body);
        assert!(!p.body.contains("QXBpU2lnbmVk"), "{}", p.body);
        // The platform that signed it keeps it, thinking on.
        let p = prepare_for(BODY, "m", None, None).unwrap();
        assert!(!p.thinking_off);
        assert!(p.body.contains("QXBpU2lnbmVk"));
        let own = BODY.replace("QXBpU2lnbmVk", "bedrock:QmVkcm9jaw==");
        let p = prepare_for(&own, "m", None, Some("bedrock")).unwrap();
        assert!(!p.thinking_off, "{}", p.body);
        assert!(p.body.contains("\"QmVkcm9jaw==\""), "{}", p.body);
    }
}
