//! Tool-call ids across protocols: for arbitrary ids a
//! client sends in a history, the ids each target protocol receives are
//! pairwise distinct (no two of the client's ids meet), each call's id is
//! its result's, and Anthropic's are in its alphabet. Through real HTTP to
//! the strict simulators, which refuse what the providers refuse.

use std::collections::HashSet;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;
use understudy_testkit::SimProvider;
use understudy_types::{ChatRequest, Message, Part, Role, Tool, ToolCall};

use crate::common::adapter_for;

/// A history in which the assistant called one tool per id, and each call
/// got its result.
fn history(ids: &[String]) -> ChatRequest {
    let mut messages = vec![
        Message::user("Weather?"),
        Message {
            role: Role::Assistant,
            content: vec![Part::Text {
                text: "Checking.".into(),
            }],
            tool_calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: id.clone(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Oslo\"}".into(),
                })
                .collect(),
            tool_call_id: None,
        },
    ];
    messages.extend(
        ids.iter()
            .map(|id| Message::tool_result(id.clone(), "sunny")),
    );
    ChatRequest {
        messages,
        tools: vec![Tool {
            name: "get_weather".into(),
            description: None,
            parameters: Some(serde_json::json!({"type": "object"})),
            strict: None,
        }],
        ..ChatRequest::default()
    }
}

/// `(call ids, result ids)` as the target received them, in order.
fn wire_ids(body: &Value, anthropic: bool) -> (Vec<String>, Vec<String>) {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    for m in body["messages"].as_array().into_iter().flatten() {
        if anthropic {
            for block in m["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("tool_use") => calls.push(text(&block["id"])),
                    Some("tool_result") => results.push(text(&block["tool_use_id"])),
                    _ => {}
                }
            }
        } else {
            for call in m["tool_calls"].as_array().into_iter().flatten() {
                calls.push(text(&call["id"]));
            }
            if m["role"] == "tool" {
                results.push(text(&m["tool_call_id"]));
            }
        }
    }
    (calls, results)
}

/// Client ids: anything non-empty, with the shapes that collided before
/// (`a.b`, `a:b`, `a_b`), escapes, and ids longer than OpenAI's 40 bytes.
fn ids() -> impl Strategy<Value = Vec<String>> {
    let id = prop_oneof![
        "[ab._:-]{1,4}",
        "\\PC{1,12}",
        "call_[a-f0-9]{30,40}",
        "toolu_[A-Za-z0-9]{4}",
    ];
    proptest::collection::hash_set(id, 2..5).prop_map(|set| set.into_iter().collect())
}

async fn check(ids: &[String], anthropic: bool) -> Result<(), TestCaseError> {
    let sim = if anthropic {
        SimProvider::anthropic().await.unwrap()
    } else {
        SimProvider::openai().await.unwrap()
    };
    let adapter = adapter_for(&sim).await;
    let request = history(ids);
    let answered = adapter
        .complete(
            "m",
            &request,
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await;
    prop_assert!(answered.is_ok(), "{ids:?}: {answered:?}");
    let body = sim.received()[0].json();
    let (calls, results) = wire_ids(&body, anthropic);
    prop_assert_eq!(calls.len(), ids.len());
    prop_assert_eq!(&calls, &results, "each call's id is its result's");
    let distinct: HashSet<&String> = calls.iter().collect();
    prop_assert_eq!(distinct.len(), ids.len(), "{:?} → {:?}", ids, calls);
    if anthropic {
        for wire in &calls {
            prop_assert!(
                !wire.is_empty()
                    && wire
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{wire}"
            );
        }
    } else {
        prop_assert!(calls.iter().all(|w| w.len() <= 40), "{calls:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn distinct_client_ids_reach_every_protocol_distinct_and_paired(ids in ids()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for anthropic in [true, false] {
            rt.block_on(check(&ids, anthropic))?;
        }
    }
}
