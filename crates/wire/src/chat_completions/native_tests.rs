//! Which bodies go as they are, what a target gets, and which answers are
//! relayed as they came.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use http::HeaderMap;
use serde_json::{Value, json};
use understudy_types::FinishReason;

use super::*;

/// (body, forwarded as it is)
const BODIES: &[(&str, bool)] = &[
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        true,
    ),
    (
        r#" { "model" : "m" , "messages" : [ { "role" : "system", "content" : "Be brief." }, {"role":"user","content":[{"type":"text","text":"a \"b\""},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]} ], "temperature": 0.7, "max_tokens": 10, "stop": ["x"], "n": 1, "stream": false } "#,
        true,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"nested":[1,{"a":"]"}]}}},"strict":true}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}"#,
        true,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}},"tool_choice":"auto"}"#,
        true,
    ),
    // A vendor extension: ignored by the API, so never forwarded.
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"top_k":5}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi","name":"bob"}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"},"x":1}]}"#,
        false,
    ),
    // What the translation rewrites.
    (
        r#"{"model":"m","messages":[{"role":"developer","content":"x"},{"role":"user","content":"hi"}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"system","content":"x"}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"x"}]}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"x"}]}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"x","tool_call_id":"c"}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"functions":null}"#,
        false,
    ),
    // A name written with an escape.
    (
        r#"{"mod\u0065l":"m","messages":[{"role":"user","content":"hi"}]}"#,
        false,
    ),
    (
        r#"{"model":"m","messages":[{"r\u006fle":"user","content":"hi"}]}"#,
        false,
    ),
    // Not one object.
    (r#"[1]"#, false),
    (r#"{"model":"m"} {}"#, false),
    (r#"{"model":"m""#, false),
];

#[test]
fn only_bodies_the_translation_would_send_unchanged_go_as_they_are() {
    for (body, as_is) in BODIES {
        let got = forwarded(body);
        assert_eq!(got.is_some(), *as_is, "{body}");
        if let Some(got) = got {
            assert_eq!(got, *body, "nothing of it changes");
        }
    }
}

/// The cache hints of a natively written Chat Completions body are read
/// as empty without searching it: this holds only while no member that
/// sets a cache's lifetime is forwarded as it is.
#[test]
fn no_body_that_sets_a_caches_lifetime_goes_as_it_is() {
    for body in [
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_retention":"24h"}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_options":{"ttl":"1h"}}"#,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}"#,
        r#"{"model":"m","messages":[{"role":"system","content":"x","cache_control":{"type":"ephemeral","ttl":"1h"}},{"role":"user","content":"hi"}]}"#,
    ] {
        assert!(forwarded(body).is_none(), "{body}");
    }
}

#[test]
fn the_gateways_own_members_are_taken_out() {
    let body = r#"{"prompt_cache_key":"s","model":"m", "models":["a"],"messages":[{"role":"user","content":"hi"}],"provider":{"order":["x"]},"fallbacks":["b"]}"#;
    let got = forwarded(body).unwrap();
    assert_eq!(
        got,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#
    );
    let only = forwarded(r#"{"prompt_cache_key":"s"}"#).unwrap();
    assert_eq!(only, "{}");
}

#[test]
fn a_target_gets_its_model_and_a_clamped_limit() {
    let body =
        r#"{"model": "default", "messages": [{"role":"user","content":"hi"}], "max_tokens": 5000}"#;
    // (limit, completion_tokens, the body sent)
    let cases: &[(Option<u32>, bool, Option<&str>)] = &[
        (
            Some(5000),
            false,
            Some(
                r#"{"model": "gpt-\"x\"", "messages": [{"role":"user","content":"hi"}], "max_tokens": 5000}"#,
            ),
        ),
        (
            Some(100),
            false,
            Some(
                r#"{"model": "gpt-\"x\"", "messages": [{"role":"user","content":"hi"}], "max_tokens": 100}"#,
            ),
        ),
        // The provider takes the other name: translated.
        (Some(5000), true, None),
    ];
    for (limit, completion_tokens, want) in cases {
        let got = prepare(body, None, "gpt-\"x\"", *limit, *completion_tokens);
        let got = got.map(|b| String::from_utf8(b).unwrap());
        assert_eq!(got.as_deref(), *want, "{limit:?} {completion_tokens}");
    }
    let plain = r#"{"messages":[],"model":"a"}"#;
    assert_eq!(
        prepare(plain, None, "b", None, true).unwrap(),
        br#"{"messages":[],"model":"b"}"#
    );
    let both = r#"{"model":"a","max_tokens":1,"max_completion_tokens":1}"#;
    assert_eq!(prepare(both, None, "b", Some(1), false), None);
    assert_eq!(prepare(r#"{"messages":[]}"#, None, "b", None, false), None);
}

fn answer(choice: Value) -> Value {
    json!({
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1,
        "model": "gpt-x-2025", "system_fingerprint": "fp",
        "choices": [choice],
        "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21,
                  "prompt_tokens_details": {"cached_tokens": 4},
                  "completion_tokens_details": {"reasoning_tokens": 2}}
    })
}

fn read(body: &Value) -> Result<Completion, Failure> {
    relay(
        (200, &HeaderMap::new(), body.to_string().as_bytes()),
        "asked",
    )
}

#[test]
fn a_plain_answer_is_relayed_as_it_came_with_what_the_gateway_records() {
    let body = answer(
        json!({"index": 0, "message": {"role": "assistant", "content": "Hi \"there\"", "refusal": null, "tool_calls": []}, "logprobs": null, "finish_reason": "length"}),
    );
    let c = read(&body).unwrap();
    assert_eq!(c.native.as_deref(), Some(body.to_string().as_str()));
    assert_eq!(c.text, "Hi \"there\"");
    assert_eq!(c.model, "gpt-x-2025");
    assert_eq!(c.response_id.as_deref(), Some("chatcmpl-abc"));
    assert_eq!(c.finish_reason, FinishReason::Length);
    let usage = c.usage.unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.reasoning_output_tokens
        ),
        (12, 9, 4, 2)
    );
}

#[test]
fn any_other_answer_is_read_in_full_and_written_by_the_front_end() {
    let typed = |body: &Value| {
        parse_response(
            (200, &HeaderMap::new(), body.to_string().as_bytes()),
            "asked",
        )
    };
    let cases = [
        // Tool calls: their finish reason and ids are mended.
        answer(
            json!({"message": {"content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "stop"}),
        ),
        // Refused, filtered, empty.
        answer(json!({"message": {"content": null, "refusal": "No."}, "finish_reason": "stop"})),
        answer(json!({"message": {"content": "x"}, "finish_reason": "content_filter"})),
        answer(json!({"message": {"content": "  "}, "finish_reason": "stop"})),
        // No model or id of its own, two choices, none.
        json!({"id": "i", "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}),
        json!({"model": "m", "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}),
        json!({"id": "i", "model": "m", "choices": [{"message": {"content": "x"}}, {"message": {"content": "y"}}]}),
        json!({"id": "i", "model": "m", "choices": []}),
        json!({"error": {"message": "overloaded", "type": "server_error"}}),
    ];
    for body in cases {
        let (got, want) = (read(&body), typed(&body));
        assert_eq!(got, want, "{body}");
        if let Ok(c) = got {
            assert_eq!(c.native, None, "{body}");
        }
    }
    let failed = relay((503, &HeaderMap::new(), b"{}"), "asked").unwrap_err();
    assert_eq!(Some(503), failed.status);
}

#[test]
fn an_answer_that_is_not_valid_json_is_never_relayed() {
    let good = r#"{"id":"i","model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"x":[1,-2.5e3,true,false,null,{"a":"\u00e9\n"}]}"#;
    assert!(plain((200, &HeaderMap::new(), good.as_bytes())).is_some());
    let bad = [
        good.replace("[1,", "[1,,"),
        good.replace("\"}]}", "\",}]}"),
        good.replace("-2.5e3", "01"),
        good.replace("-2.5e3", "1."),
        good.replace("-2.5e3", "+1"),
        good.replace("true", "tru"),
        good.replace("\\u00e9", "\\x"),
        good.replace("\\u00e9", "\\u00g9"),
        good.replace("\\n", "\n"),
        good.replace("\"hi\"", "\"hi"),
        format!("{good} x"),
        format!(
            r#"{{"id":"i","model":"m","choices":[{{"message":{{"content":"hi"}}}}],"x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        ),
        good.replace(r#""model":"m","#, r#""model":"m","choices":[],"#),
        good.replace(r#""model":"m","#, r#""model":"m","model":"n","#),
    ];
    for body in bad {
        assert!(
            plain((200, &HeaderMap::new(), body.as_bytes())).is_none(),
            "{body}"
        );
        // What the typed read makes of it, the relay makes of it.
        assert_eq!(
            relay((200, &HeaderMap::new(), body.as_bytes()), "m"),
            parse_response((200, &HeaderMap::new(), body.as_bytes()), "m"),
            "{body}"
        );
    }
}
