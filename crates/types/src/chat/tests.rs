//! The neutral types' own rules: which inline images are accepted, what a
//! request must hold before any provider sees it, and how usage and an
//! answer's id read and write as JSON (usage rides in events and cached
//! answers, which must read the same with or without the newer counts).

use super::*;
use crate::error::Error;

fn check(req: ChatRequest, field: Option<&str>) {
    match (req.validate(), field) {
        (Ok(()), None) => {}
        (Err(Error::InvalidRequest { field: got, .. }), Some(want)) => assert_eq!(got, want),
        (other, want) => panic!("validate() = {other:?}, wanted an error on {want:?}"),
    }
}

#[test]
fn inline_images() {
    // (url, accepted)
    let cases = [
        ("data:image/png;base64,iVBORw0KGgo=", true),
        ("data:image/jpeg;base64,/9j/4AAQ", true),
        ("data:;base64,iVBORw==", true),
        ("data:image/png;base64,", false),
        ("data:image/png;base64,not base64!", false),
        ("data:image/png;charset=x;base64,iVBOR", false),
        ("data:image/png,iVBOR", false),
        ("data:png;base64,iVBOR", false),
        // Case-insensitive scheme and parameters; an image type only;
        // base64 of a possible length.
        ("DATA:image/png;BASE64,iVBORw0KGgo=", true),
        ("Data:Image/PNG;base64,iVBORw0K", true),
        ("data:text/html;base64,PGI+aGk8L2I+", false),
        ("data:application/pdf;base64,JVBERi0x", false),
        ("data:image/png;base64,iVBORw0KG", false),
        ("data:image/png;base64,iVBORw0KGgo", true),
        ("data:image/png;base64,iVBORw0KGg=", false),
        ("data:image/png;base64,iVBORw0KGgo===", false),
        ("data:image/png;base64,iVB=ORw0", false),
        ("data:image/png;base64,=", false),
        ("https://example.com/a.png", false),
    ];
    for (url, ok) in cases {
        assert_eq!(Part::inline_image(url).is_some(), ok, "{url}");
    }
}

#[test]
fn validation() {
    check(ChatRequest::user("hi"), None);
    check(ChatRequest::user("hi").with_temperature(2.0), None);
    check(ChatRequest::default(), Some("messages"));
    check(ChatRequest::user("  "), Some("messages"));
    check(
        ChatRequest::user("hi").with_temperature(2.5),
        Some("temperature"),
    );
    check(
        ChatRequest::user("hi").with_temperature(f32::NAN),
        Some("temperature"),
    );
    check(
        ChatRequest {
            max_tokens: Some(0),
            ..ChatRequest::user("hi")
        },
        Some("max_tokens"),
    );
}

#[test]
fn usage_details_are_written_only_when_reported() {
    let plain = Usage {
        input_tokens: 3,
        output_tokens: 4,
        ..Usage::default()
    };
    // Zero details stay out, so that serialised usage reads as it did
    // before they existed, and JSON without them reads as zeros.
    let json = serde_json::to_value(plain).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"input_tokens": 3, "output_tokens": 4})
    );
    assert_eq!(serde_json::from_value::<Usage>(json).unwrap(), plain);
    let detailed = Usage {
        cache_read_input_tokens: 1,
        cache_write_input_tokens: 2,
        reasoning_output_tokens: 3,
        ..plain
    };
    let json = serde_json::to_value(detailed).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 1,
            "cache_write_input_tokens": 2, "reasoning_output_tokens": 3})
    );
    assert_eq!(serde_json::from_value::<Usage>(json).unwrap(), detailed);
}

#[test]
fn an_answer_without_an_id_reads_and_writes_as_before() {
    let old =
        serde_json::json!({"text": "hi", "model": "m", "finish_reason": "stop", "usage": null});
    let c: Completion = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(c.response_id, None);
    assert_eq!(serde_json::to_value(&c).unwrap(), old);
    let c = Completion {
        response_id: Some("msg_01".into()),
        ..c
    };
    assert_eq!(serde_json::to_value(&c).unwrap()["response_id"], "msg_01");
}

#[test]
fn the_estimate_counts_the_system_prompt_tool_calls_and_tools() {
    let text = |s: &str| Part::Text { text: s.into() };
    let mut req = ChatRequest::user("a".repeat(400));
    assert_eq!(estimate_tokens(&req), 100);
    req.system = Some("s".repeat(40));
    assert_eq!(estimate_tokens(&req), 110);
    // An assistant's tool call and the tool's answer count their text.
    req.messages.push(Message {
        role: Role::Assistant,
        content: Vec::new(),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "x".repeat(388),
        }],
        tool_call_id: None,
    });
    req.messages.push(Message {
        role: Role::Tool,
        content: vec![text(&"r".repeat(394))],
        tool_calls: Vec::new(),
        tool_call_id: Some("call_1".into()),
    });
    assert_eq!(estimate_tokens(&req), 310);
    // The tools offered: their names, descriptions and schemas.
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"q": {"type": "string", "description": "w".repeat(200)}},
    });
    // The schema counts about as long as it is written.
    let written = serde_json::to_string(&schema).unwrap().len() as u64;
    req.tools.push(Tool {
        name: "lookup".into(),
        description: Some("d".repeat(100)),
        parameters: Some(schema),
        strict: None,
    });
    let want = (1240 + 6 + 100 + written) / 4;
    let got = estimate_tokens(&req);
    assert!(got.abs_diff(want) <= 3, "{got} for about {want}");
}

#[test]
fn a_schema_of_short_values_stays_within_the_bodys_bound() {
    // Numbers, booleans and nulls are counted no longer than written, so
    // the bound from the body's length holds for a schema made of them.
    let values: Vec<serde_json::Value> = (0..5000)
        .map(|i| match i % 4 {
            0 => serde_json::json!(1),
            1 => serde_json::json!(true),
            2 => serde_json::Value::Null,
            _ => serde_json::json!([0, false]),
        })
        .collect();
    let schema = serde_json::json!({"type": "object", "enum": values});
    let mut req = ChatRequest::user("hi");
    req.tools.push(Tool {
        name: "t".into(),
        description: None,
        parameters: Some(schema.clone()),
        strict: None,
    });
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": schema}}],
    });
    let len = u32::try_from(serde_json::to_string(&body).unwrap().len()).unwrap();
    assert!(estimate_tokens(&req) <= estimate_bound(len));
}
