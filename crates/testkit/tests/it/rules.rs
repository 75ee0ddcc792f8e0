//! The simulators' request rules over real HTTP: each broken rule gets the
//! provider's own 400 (status, error shape, message) and is counted in
//! `violations()`; a valid request is answered; a lenient simulator takes
//! anything; a signature the Anthropic simulator minted (streamed or not)
//! is accepted back, any other refused; the Gemini simulator refuses
//! unanswered function calls, a declaration with both parameter forms and
//! foreign signatures, in either field spelling, and mints signatures the
//! google-genai SDK can decode; the gateway's routing fields (`models`,
//! `provider`, `fallbacks`) are refused as unknown.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall};

/// Posts `body` to the simulator's endpoint with `headers`; returns the
/// status and the body (as JSON when it is JSON, else as a string).
async fn post(sim: &SimProvider, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let url = match sim.protocol() {
        understudy_testkit::Protocol::Messages => format!("{}/v1/messages", sim.base_url()),
        _ => format!("{}/chat/completions", sim.base_url()),
    };
    let mut req = understudy_testkit::http_client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A request to `sim` answers 400 with `message` (Anthropic's or OpenAI's
/// shape), and the simulator counts it.
async fn refused(sim: &SimProvider, body: Value, headers: &[(&str, &str)], message: &str) {
    let before = sim.violations().len();
    let (status, answer) = post(sim, &body, headers).await;
    assert_eq!(status, 400, "{body}: {answer}");
    match sim.protocol() {
        understudy_testkit::Protocol::Messages => {
            assert_eq!(answer["type"], "error", "{answer}");
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
            assert_eq!(answer["error"]["message"], message, "{body}");
        }
        _ => {
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
            assert_eq!(answer["error"]["message"], message, "{body}");
        }
    }
    let violations = sim.violations();
    assert_eq!(violations.len(), before + 1, "{violations:?}");
    assert!(violations[before].contains(message), "{violations:?}");
}

/// A request to `sim` is answered (200) and counts no violation.
async fn accepted(sim: &SimProvider, body: Value, headers: &[(&str, &str)]) -> Value {
    let before = sim.violations();
    let (status, answer) = post(sim, &body, headers).await;
    assert_eq!(status, 200, "{body}: {answer}");
    assert_eq!(sim.violations(), before);
    answer
}

fn anthropic(messages: Value) -> Value {
    json!({"model": "claude-sim", "max_tokens": 1024, "messages": messages})
}

fn call(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "Write", "input": {"file_path": "a"}})
}

fn result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
}

const THINKING_DOCS: &str = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

#[tokio::test]
async fn anthropic_refuses_what_the_messages_api_refuses() {
    let sim = SimProvider::anthropic().await.unwrap();
    let hi = json!([{"role": "user", "content": "hi"}]);
    accepted(&sim, anthropic(hi.clone()), &[]).await;

    refused(
        &sim,
        json!({"model": "claude-sim", "messages": hi}),
        &[],
        "max_tokens: Field required",
    )
    .await;
    let mut big = anthropic(hi.clone());
    big["max_tokens"] = json!(128_000);
    refused(
        &sim,
        big.clone(),
        &[],
        "max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens for claude-sim",
    )
    .await;
    sim.with_max_output_tokens(128_000);
    accepted(&sim, big, &[]).await;

    let system = anthropic(json!([
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Agents: none."}
    ]));
    refused(
        &sim,
        system.clone(),
        &[("anthropic-beta", "claude-code-20250219")],
        "messages.1.role: Input should be 'user' or 'assistant'",
    )
    .await;
    for beta in [
        "claude-code-20250219, mid-conversation-system-2026-04-07",
        "claude-code-20250219,mid-conversation-tool-changes-2026-07-01",
    ] {
        accepted(&sim, system.clone(), &[("anthropic-beta", beta)]).await;
    }

    let loop_with = |assistant: Value, user: Value| {
        anthropic(json!([
            {"role": "user", "content": "write it"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": user}
        ]))
    };
    accepted(
        &sim,
        loop_with(json!([call("toolu_01")]), json!([result("toolu_01")])),
        &[],
    )
    .await;
    refused(
        &sim,
        loop_with(json!([call("call.1")]), json!([result("call.1")])),
        &[],
        "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
    )
    .await;
    refused(
        &sim,
        loop_with(
            json!([call("toolu_01"), call("toolu_02")]),
            json!([result("toolu_01")]),
        ),
        &[],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_02. \
         Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    )
    .await;
    refused(
        &sim,
        loop_with(
            json!([call("toolu_01")]),
            json!([{"type": "text", "text": "here"}, result("toolu_01")]),
        ),
        &[],
        "messages.2.content.1: `tool_result` blocks must come first in the user message that answers \
         a `tool_use`, before any other content",
    )
    .await;
    refused(
        &sim,
        loop_with(
            json!([call("toolu_01")]),
            json!([result("toolu_01"), result("toolu_09")]),
        ),
        &[],
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_09. \
         Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
    )
    .await;
    refused(
        &sim,
        loop_with(
            json!([{"type": "tool_use", "id": "toolu_01", "name": "Write", "input": "{}"}]),
            json!([result("toolu_01")]),
        ),
        &[],
        "messages.1.content.0.tool_use.input: Input should be a valid dictionary",
    )
    .await;

    // Thinking on: temperature 1 only, and the final tool loop's assistant
    // turn starts with a thinking block.
    let mut thinking = loop_with(json!([call("toolu_01")]), json!([result("toolu_01")]));
    thinking["thinking"] = json!({"type": "adaptive"});
    refused(
        &sim,
        thinking.clone(),
        &[],
        &format!(
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. \
             When `thinking` is enabled, a final `assistant` message must start with a thinking block \
             (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you \
             include thinking blocks from your previous turn. To avoid this requirement, disable \
             `thinking`. Please consult our documentation at {THINKING_DOCS}"
        ),
    )
    .await;
    let mut hot = anthropic(hi.clone());
    hot["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    hot["temperature"] = json!(0.5);
    refused(
        &sim,
        hot.clone(),
        &[],
        &format!(
            "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. Please \
             consult our documentation at {THINKING_DOCS}#important-considerations-when-using-extended-thinking"
        ),
    )
    .await;
    hot["temperature"] = json!(1);
    accepted(&sim, hot, &[]).await;
    // A thinking block whose signature nobody here minted.
    thinking["messages"][1]["content"] = json!([
        {"type": "thinking", "thinking": "hm", "signature": "forged"},
        call("toolu_01")
    ]);
    refused(
        &sim,
        thinking.clone(),
        &[],
        "messages.1.content.0: Invalid `signature` in `thinking` block",
    )
    .await;
    sim.accept_signature("forged");
    accepted(&sim, thinking, &[]).await;

    assert_eq!(sim.violations().len(), 11, "{:?}", sim.violations());
}

#[tokio::test]
async fn anthropic_takes_back_the_thinking_it_signed() {
    let sim = SimProvider::anthropic().await.unwrap();
    let other = SimProvider::anthropic().await.unwrap();
    let tool_call = Reply::ToolCalls(vec![
        SimToolCall::new("Write", json!({"file_path": "a"})).with_id("toolu_01"),
    ]);
    sim.push(tool_call.clone().thinking_first("Write it."))
        .push(tool_call.thinking_first("Write it."));
    let ask = |stream: bool| {
        let mut body = anthropic(json!([{"role": "user", "content": "write it"}]));
        body["thinking"] = json!({"type": "adaptive"});
        body["stream"] = json!(stream);
        body
    };

    // Not streamed: a thinking block with its signature, then the call.
    let answer = accepted(&sim, ask(false), &[]).await;
    assert_eq!(answer["content"][0]["type"], "thinking", "{answer}");
    assert_eq!(answer["content"][0]["thinking"], "Write it.");
    assert_eq!(answer["content"][1]["type"], "tool_use", "{answer}");
    let plain = answer["content"][0]["signature"]
        .as_str()
        .unwrap()
        .to_owned();

    // Streamed: thinking_delta, then signature_delta, then the call at index 1.
    let Value::String(sse) = accepted(&sim, ask(true), &[]).await else {
        panic!("a streamed answer");
    };
    let events: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| e["delta"]["type"].as_str())
        .collect();
    assert_eq!(
        deltas.iter().filter(|d| **d == "signature_delta").count(),
        1,
        "{deltas:?}"
    );
    assert_eq!(deltas[0], "thinking_delta", "{deltas:?}");
    let streamed = events
        .iter()
        .find_map(|e| e["delta"]["signature"].as_str())
        .unwrap()
        .to_owned();
    let thought: String = events
        .iter()
        .filter_map(|e| e["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(thought, "Write it.");
    assert!(
        events
            .iter()
            .any(|e| e["index"] == 1 && e["content_block"]["type"] == "tool_use")
    );
    assert_ne!(plain, streamed);

    for signature in [plain, streamed] {
        let mut next = ask(false);
        next["messages"] = json!([
            {"role": "user", "content": "write it"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Write it.", "signature": signature},
                call("toolu_01")
            ]},
            {"role": "user", "content": [result("toolu_01")]}
        ]);
        accepted(&sim, next.clone(), &[]).await;
        // Another Anthropic simulator did not sign it.
        refused(
            &other,
            next,
            &[],
            "messages.1.content.0: Invalid `signature` in `thinking` block",
        )
        .await;
    }
}

#[tokio::test]
async fn openai_refuses_what_chat_completions_refuses() {
    let sim = SimProvider::openai().await.unwrap();
    let chat = |messages: Value| json!({"model": "gpt-4o-mini", "messages": messages});
    let hi = json!([{"role": "user", "content": "hi"}]);
    accepted(&sim, chat(hi.clone()), &[]).await;

    let mut big = chat(hi.clone());
    big["max_tokens"] = json!(32_000);
    let (status, answer) = post(&sim, &big, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        answer,
        json!({"error": {
            "message": "max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you provided 32000.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_value"
        }})
    );
    let mut big = chat(hi.clone());
    big["max_completion_tokens"] = json!(16_385);
    refused(
        &sim,
        big,
        &[],
        "max_completion_tokens is too large: 16385. This model supports at most 16384 completion \
         tokens, whereas you provided 16385.",
    )
    .await;
    let mut user = chat(hi.clone());
    user["user"] = json!("u".repeat(65));
    let (status, answer) = post(&sim, &user, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        answer,
        json!({"error": {
            "message": "Invalid 'user': string too long. Expected a string with maximum length 64, but got a string with length 65 instead.",
            "type": "invalid_request_error",
            "param": "user",
            "code": "string_above_max_length"
        }})
    );
    user["user"] = json!("u".repeat(64));
    accepted(&sim, user, &[]).await;

    refused(
        &sim,
        chat(json!([{"role": "model", "content": "hi"}])),
        &[],
        "Invalid value: 'model'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.",
    )
    .await;

    let calls = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "Write", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
    ]});
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
    accepted(
        &sim,
        chat(json!([{"role": "user", "content": "go"}, calls, tool("call_1"), tool("call_2")])),
        &[],
    )
    .await;
    refused(
        &sim,
        chat(json!([{"role": "user", "content": "go"}, calls, tool("call_1")])),
        &[],
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id'. The following tool_call_ids did not have response messages: call_2",
    )
    .await;
    refused(
        &sim,
        chat(json!([{"role": "user", "content": "go"}, tool("call_1")])),
        &[],
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with \
         'tool_calls'.",
    )
    .await;
    assert_eq!(sim.violations().len(), 6, "{:?}", sim.violations());
}

#[tokio::test]
async fn a_lenient_simulator_takes_anything() {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    claude.lenient();
    openai.lenient();
    accepted(
        &claude,
        json!({"model": "claude-sim", "messages": [{"role": "tool", "content": "?"}]}),
        &[],
    )
    .await;
    accepted(
        &openai,
        json!({"model": "gpt-4o-mini", "max_tokens": 999_999, "messages": [{"role": "tool", "content": "?"}]}),
        &[],
    )
    .await;
    assert!(claude.violations().is_empty() && openai.violations().is_empty());
}

// === Gemini ===

/// Posts a `generateContent` body to a Gemini simulator; returns the status
/// and the JSON answer.
async fn gemini_post(sim: &SimProvider, body: &Value) -> (u16, Value) {
    let resp = understudy_testkit::http_client()
        .post(format!(
            "{}/models/gemini-sim:generateContent",
            sim.base_url()
        ))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(&resp.text().await.unwrap()).unwrap(),
    )
}

fn weather_call(city: &str) -> Value {
    json!({"functionCall": {"name": "get_weather", "args": {"city": city}}})
}

fn weather_response(name: &str) -> Value {
    json!({"functionResponse": {"name": name, "response": {"celsius": 21}}})
}

#[tokio::test]
async fn gemini_refuses_what_generate_content_refuses() {
    let sim = SimProvider::gemini().await.unwrap();
    let user = json!({"role": "user", "parts": [{"text": "Weather in Oslo and Paris?"}]});
    let model = |parts: Value| json!({"role": "model", "parts": parts});
    let answers = |parts: Value| json!({"role": "user", "parts": parts});
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let count =
        "the number of function response parts is equal to the number of function call parts";
    let cases = [
        // Two calls, one response.
        (
            json!({"contents": [user, model(json!([weather_call("Oslo"), weather_call("Paris")])),
                answers(json!([weather_response("get_weather")]))]}),
            count,
        ),
        // A call answered by text.
        (
            json!({"contents": [user, model(json!([weather_call("Oslo")])),
                answers(json!([{"text": "never mind"}]))]}),
            count,
        ),
        // A call followed by another model turn.
        (
            json!({"contents": [user, model(json!([weather_call("Oslo")])),
                model(json!([{"text": "It is sunny."}]))]}),
            count,
        ),
        // As many responses as calls, but one answers another function.
        (
            json!({"contents": [user,
                {"role": "model", "parts": [weather_call("Oslo"),
                    {"functionCall": {"name": "get_time", "args": {}}}]},
                answers(json!([weather_response("get_weather"), weather_response("get_weather")]))]}),
            "no response to `get_time`",
        ),
        // The same in snake_case, as Google's parser also reads it.
        (
            json!({"contents": [user,
                model(json!([{"function_call": {"name": "get_weather", "args": {}}}])),
                answers(json!([{"function_response": {"name": "get_time", "response": {}}}]))]}),
            "no call of `get_time`",
        ),
        (
            json!({"contents": [user, {"role": "system", "parts": [{"text": "hi"}]}]}),
            "Please use a valid role: user, model.",
        ),
        (
            json!({"contents": [user, {"role": "model", "parts": [
                {"function_call": {"name": "get_weather", "args": {}}, "thought_signature": "bm90LW1pbnRlZA=="}]},
                answers(json!([weather_response("get_weather")]))]}),
            "Corrupted thought signature.",
        ),
        (
            json!({"contents": [user], "tools": [{"functionDeclarations": [
                {"name": "get_weather", "parameters": schema, "parametersJsonSchema": schema}]}]}),
            "parameters_json_schema is mutually exclusive with parameters",
        ),
        (
            json!({"contents": [user], "tools": [{"function_declarations": [
                {"name": "ok", "parameters": schema},
                {"name": "get_weather", "parameters": schema, "parameters_json_schema": schema}]}]}),
            "function_declarations[1]: parameters_json_schema is mutually exclusive",
        ),
    ];
    for (i, (body, message)) in cases.iter().enumerate() {
        let (status, answer) = gemini_post(&sim, body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], 400, "{answer}");
        assert_eq!(answer["error"]["status"], "INVALID_ARGUMENT", "{answer}");
        let got = answer["error"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{body}: {got}");
        let violations = sim.violations();
        assert_eq!(violations.len(), i + 1, "{violations:?}");
    }
    // Accepted: either parameter form alone (either spelling), every call
    // answered in any order, a role left unset, the dummy signature, and a
    // call turn that ends the contents.
    let ok = [
        json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": [
            {"name": "a", "parameters": schema},
            {"name": "b", "parametersJsonSchema": schema},
            {"name": "c", "parameters_json_schema": schema}]}]}),
        json!({"contents": [user,
            {"role": "model", "parts": [weather_call("Oslo"),
                {"functionCall": {"name": "get_time", "args": {}}, "thoughtSignature": "skip_thought_signature_validator"}]},
            answers(json!([weather_response("get_time"), weather_response("get_weather")]))]}),
        json!({"contents": [user, model(json!([weather_call("Oslo")]))]}),
    ];
    for body in ok {
        sim.push(Reply::text("fine"));
        let (status, answer) = gemini_post(&sim, &body).await;
        assert_eq!(status, 200, "{body}: {answer}");
    }
    assert_eq!(sim.violations().len(), cases.len());
}

#[tokio::test]
async fn gemini_signatures_are_canonical_base64_and_come_back() {
    let sim = SimProvider::gemini().await.unwrap();
    sim.thinking();
    let user = json!({"role": "user", "parts": [{"text": "Weather in Oslo?"}]});
    for _ in 0..20 {
        sim.push(Reply::ToolCalls(vec![SimToolCall::new(
            "get_weather",
            json!({"city": "Oslo"}),
        )]));
        let (status, answer) = gemini_post(&sim, &json!({"contents": [user]})).await;
        assert_eq!(status, 200, "{answer}");
        let part = &answer["candidates"][0]["content"]["parts"][0];
        let signature = part["thoughtSignature"].as_str().unwrap();
        // 64 bytes: 86 characters, two of padding, and the last character
        // before the padding with its 4 low bits zero (A, Q, g or w).
        assert_eq!(signature.len(), 88, "{signature}");
        let (body, padding) = signature.split_at(86);
        assert_eq!(padding, "==");
        assert!(
            body.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        );
        assert!(body.ends_with(['A', 'Q', 'g', 'w']), "{signature}");
        // Replayed exactly, it is taken; altered, it is refused.
        sim.push(Reply::text("fine"));
        let replay = |signature: &str| {
            json!({"contents": [user,
                {"role": "model", "parts": [{"functionCall": part["functionCall"], "thoughtSignature": signature}]},
                {"role": "user", "parts": [weather_response("get_weather")]}]})
        };
        let (status, answer) = gemini_post(&sim, &replay(signature)).await;
        assert_eq!(status, 200, "{answer}");
        let altered = format!("{}B==", &signature[..85]);
        let (status, answer) = gemini_post(&sim, &replay(&altered)).await;
        assert_eq!(status, 400, "{answer}");
    }
    assert_eq!(sim.violations().len(), 20);
}

/// The gateway's routing fields are unknown to every provider: OpenAI's
/// and Anthropic's simulators refuse them in the APIs' words, but for
/// Anthropic's own `fallbacks` behind its beta.
#[tokio::test]
async fn the_gateways_routing_fields_are_refused_as_unknown() {
    let openai = SimProvider::openai().await.unwrap();
    openai.always(Reply::text("ok"));
    let chat = |field: &str| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        body[field] = json!(["x"]);
        body
    };
    for field in ["models", "provider", "fallbacks"] {
        let message = format!("Unrecognized request argument supplied: {field}");
        refused(&openai, chat(field), &[], &message).await;
    }
    let claude = SimProvider::anthropic().await.unwrap();
    claude.always(Reply::text("ok"));
    let with = |field: &str| {
        let mut body = anthropic(json!([{"role": "user", "content": "hi"}]));
        body[field] = json!([{"model": "claude-other"}]);
        body
    };
    for field in ["models", "provider", "fallbacks"] {
        let message = format!("{field}: Extra inputs are not permitted");
        refused(&claude, with(field), &[], &message).await;
    }
    let beta = [("anthropic-beta", "server-side-fallback-2026-07-01")];
    accepted(&claude, with("fallbacks"), &beta).await;
}
