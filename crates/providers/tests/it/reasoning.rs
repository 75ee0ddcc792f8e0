//! Reasoning in every protocol's stream becomes the neutral
//! `StreamEvent::Reasoning` (progress for the first-token deadline, held
//! until the commit, never an answer by itself): Anthropic's
//! `thinking_delta`, OpenAI-compatible `reasoning_content` and `reasoning`
//! deltas, Gemini's thought parts.

use understudy_providers::decode_stream;
use understudy_types::{Protocol, StreamEvent};

/// Each event as a short string: `r:…` reasoning, `t:…` text, `finish`,
/// or the failure's code.
fn shorts(kind: Protocol, body: &str) -> Vec<String> {
    decode_stream(kind, "m", &[body.as_bytes()])
        .into_iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Reasoning(t)) => Some(format!("r:{t}")),
            Ok(StreamEvent::Delta(t)) => Some(format!("t:{t}")),
            Ok(StreamEvent::Finish { .. }) => Some("finish".into()),
            Ok(StreamEvent::ToolCall(_) | StreamEvent::Native(_)) => None,
            Err(f) => Some(f.code().as_str().to_owned()),
        })
        .collect()
}

#[test]
fn anthropic_thinking_deltas() {
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me think.\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi.\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    assert_eq!(
        shorts(Protocol::Messages, body),
        ["r:Let me think.", "t:Hi.", "finish"]
    );
}

#[test]
fn anthropic_thinking_alone_is_no_answer() {
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Hmm.\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    assert_eq!(
        shorts(Protocol::Messages, body),
        ["r:Hmm.", "empty_response"]
    );
}

#[test]
fn openai_compatible_reasoning_deltas() {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let body = [
        chunk(r#"{"role":"assistant","content":""}"#, "null"),
        chunk(r#"{"reasoning_content":"Step one."}"#, "null"),
        chunk(r#"{"reasoning":" Step two."}"#, "null"),
        chunk(r#"{"content":"Done."}"#, "null"),
        chunk("{}", r#""stop""#),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    assert_eq!(
        shorts(Protocol::ChatCompletions, &body),
        ["r:Step one.", "r: Step two.", "t:Done.", "finish"]
    );
    // Reasoning, then the finish: no answer.
    let body = [
        chunk(r#"{"reasoning_content":"Only thinking."}"#, "null"),
        chunk("{}", r#""length""#),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    assert_eq!(
        shorts(Protocol::ChatCompletions, &body),
        ["r:Only thinking.", "empty_response"]
    );
}

#[test]
fn gemini_thought_parts() {
    let body = concat!(
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"**Planning**\",\"thought\":true}]}}],\"modelVersion\":\"m\"}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hello.\"}]},\"finishReason\":\"STOP\"}],\"modelVersion\":\"m\"}\r\n\r\n",
    );
    assert_eq!(
        shorts(Protocol::GenerateContent, body),
        ["r:**Planning**", "t:Hello.", "finish"]
    );
}
