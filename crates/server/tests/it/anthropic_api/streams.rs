//! Streamed answers on `POST /v1/messages`: Anthropic's event order for
//! text, one block for each tool call whose JSON reassembles, and a
//! stream broken after the commit ending with an error event.

use understudy_testkit::{StreamEnd, StreamSpec};

use super::*;

#[tokio::test]
async fn a_streamed_text_answer_in_anthropic_s_event_order() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::Refuse(Refusal::FinishReason));
    claude.push(Reply::stream(&["Nice", " try."]));
    let a = post(&s, ask("default", true)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    let events = a.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{}",
        a.body
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-model");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert!(start["usage"]["input_tokens"].is_u64());
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events[2..4]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Nice try.");
    assert_eq!(events[5].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[5].1["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn streamed_tool_calls_are_one_block_each_whose_json_reassembles() {
    let (groq, _claude, s) = setup().await;
    groq.push(Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo", "days": [1, 2]})),
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
    ]));
    let mut body = ask("default", true);
    body["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let a = post(&s, body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    let mut names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{}",
        a.body
    );
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut open = None;
    for (name, data) in &events {
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(data["index"], calls.len(), "a new index per call");
                let b = &data["content_block"];
                assert_eq!(b["type"], "tool_use");
                assert_eq!(b["input"], json!({}));
                calls.push((
                    b["id"].as_str().unwrap().to_owned(),
                    b["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
                open = Some(data["index"].clone());
            }
            "content_block_delta" => {
                assert_eq!(Some(&data["index"]), open.as_ref());
                assert_eq!(data["delta"]["type"], "input_json_delta");
                let part = data["delta"]["partial_json"].as_str().unwrap();
                calls.last_mut().unwrap().2.push_str(part);
            }
            "content_block_stop" => {
                assert_eq!(Some(&data["index"]), open.as_ref());
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(calls.len(), 2, "{}", a.body);
    let inputs: Vec<Value> = calls
        .iter()
        .map(|(id, name, json)| {
            assert!(!id.is_empty());
            assert_eq!(name, "get_weather");
            serde_json::from_str(json).unwrap()
        })
        .collect();
    assert_eq!(
        inputs,
        [
            json!({"city": "Oslo", "days": [1, 2]}),
            json!({"city": "Paris"})
        ]
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn a_stream_broken_after_the_commit_ends_with_an_error_event_and_no_message_stop() {
    let (groq, claude, s) = setup().await;
    groq.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Cut)
            .reply(),
    );
    let a = post(&s, ask("default", true)).await;
    assert_eq!(a.status, 200);
    let events = a.events();
    assert!(
        !events.iter().any(|(n, _)| n == "message_stop"),
        "{}",
        a.body
    );
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(
        data["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_interrupted")
    );
    assert_eq!(
        claude.request_count(),
        0,
        "a committed stream never switches"
    );

    // Anthropic's own mid-stream overload, relayed as it came: its own
    // `error` event ends the stream, and no second one follows.
    claude.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::ErrorEvent)
            .reply(),
    );
    let a = post(&s, ask("claude", true)).await;
    let events = a.events();
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error", "{}", a.body);
    assert_eq!(
        events.iter().filter(|(n, _)| n == "error").count(),
        1,
        "{}",
        a.body
    );
    assert!(
        !events.iter().any(|(n, _)| n == "message_stop"),
        "{}",
        a.body
    );
    assert_eq!(data["error"]["type"], "overloaded_error", "{}", a.body);

    // A refusal after some text ends as Anthropic ends one.
    claude.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Refusal)
            .reply(),
    );
    let a = post(&s, ask("claude", true)).await;
    let events = a.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{}",
        a.body
    );
    assert_eq!(
        events[events.len() - 2].1["delta"]["stop_reason"],
        "refusal"
    );
}
