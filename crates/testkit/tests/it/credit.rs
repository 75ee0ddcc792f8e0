//! The Anthropic simulator's fallback credit over real HTTP: a refusal to
//! a request that sends the beta carries a token (in the answer, or in a
//! stream's `message_delta`), one without the beta `null`; a token sent
//! back with the beta is redeemed on the same key and simulator for the
//! same body but the fields a retry may change, else not applied with the
//! API's reason (`body_mismatch`, `wrong_workspace`, `wrong_platform`,
//! `expired`); a token sent without the beta is refused with a 400.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider};

const BETA: &str = "fallback-credit-2026-07-01";

/// The model the simulators refuse on.
const REFUSING: &str = "claude-fable-5";

/// An Anthropic simulator that refuses [`REFUSING`] and answers any other
/// model.
async fn sim() -> SimProvider {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.respond_with(|req| {
        if req.json()["model"] == REFUSING {
            Reply::Refuse(Refusal::Message("I can't help with that.".into()))
        } else {
            Reply::text("here you go")
        }
    });
    sim
}

/// A Messages body for `model` asking `text`.
fn body(model: &str, text: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 256,
        "system": "be brief",
        "messages": [{"role": "user", "content": text}]
    })
}

/// Posts `body` to `sim` on `key` (with the credit's beta when `beta`);
/// returns the status and the body as text.
async fn post(sim: &SimProvider, key: &str, body: &Value, beta: bool) -> (u16, String) {
    let mut req = understudy_testkit::http_client()
        .post(format!("{}/v1/messages", sim.base_url()))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", key)
        .body(body.to_string());
    if beta {
        req = req.header(
            "anthropic-beta",
            format!("prompt-caching-2024-07-31,{BETA}"),
        );
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// Posts `body` (answered 200, not streamed) and returns the answer.
async fn answer(sim: &SimProvider, key: &str, body: &Value, beta: bool) -> Value {
    let (status, text) = post(sim, key, body, beta).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The data of a stream's first `name` event.
fn sse_event(stream: &str, name: &str) -> Value {
    let data = stream
        .split("\n\n")
        .find(|e| e.starts_with(&format!("event: {name}\n")))
        .and_then(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("no {name} in {stream}"));
    serde_json::from_str(data).unwrap()
}

/// The credit of a refusal of the standard body on `key`.
async fn credit(sim: &SimProvider, key: &str) -> String {
    let refused = answer(sim, key, &body(REFUSING, "tell me"), true).await;
    assert_eq!(refused["stop_reason"], "refusal", "{refused}");
    let token = refused["stop_details"]["fallback_credit_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no credit: {refused}"))
        .to_owned();
    assert!(token.starts_with("fct_sim_"), "{token}");
    token
}

/// `body` with `token` sent back.
fn with_token(mut body: Value, token: &str) -> Value {
    body["fallback_credit_token"] = json!(token);
    body
}

/// `usage.fallback_credit.status` of the answer to `body` carrying
/// `token`, sent on `key` to `sim` with the beta.
async fn redemption(sim: &SimProvider, key: &str, token: &str, body: Value) -> Value {
    let answered = answer(sim, key, &with_token(body, token), true).await;
    assert_eq!(answered["stop_reason"], "end_turn", "{answered}");
    answered["usage"]["fallback_credit"]["status"].clone()
}

fn not_applied(reason: &str) -> Value {
    json!({"type": "not_applied", "reason": reason})
}

#[tokio::test]
async fn a_refusal_carries_a_credit_only_when_the_beta_asks_for_one() {
    let sim = sim().await;
    let refused = answer(&sim, "sk-credit-ask", &body(REFUSING, "tell me"), false).await;
    assert_eq!(refused["stop_reason"], "refusal");
    assert_eq!(
        refused["stop_details"]["fallback_credit_token"],
        Value::Null
    );
    let one = credit(&sim, "sk-credit-ask").await;
    let two = credit(&sim, "sk-credit-ask").await;
    assert_ne!(one, two, "each refusal has its own credit");
    // An answer that carried no credit says nothing of one.
    let plain = answer(&sim, "sk-credit-ask", &body("claude-opus-4-8", "hi"), true).await;
    assert!(plain["usage"].get("fallback_credit").is_none(), "{plain}");
}

#[tokio::test]
async fn the_same_body_on_the_same_key_is_redeemed_whatever_a_retry_may_change() {
    let sim = sim().await;
    let key = "sk-credit-redeem";
    let token = credit(&sim, key).await;
    let mut retry = body("claude-opus-4-8", "tell me");
    retry["max_tokens"] = json!(512);
    retry["temperature"] = json!(0.5);
    retry["metadata"] = json!({"user_id": "u-1"});
    assert_eq!(
        redemption(&sim, key, &token, retry).await,
        json!({"type": "redeemed"})
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
}

#[tokio::test]
async fn another_body_or_an_unknown_token_is_a_body_mismatch() {
    let sim = sim().await;
    let key = "sk-credit-mismatch";
    let token = credit(&sim, key).await;
    let other = body("claude-opus-4-8", "tell me something else");
    assert_eq!(
        redemption(&sim, key, &token, other).await,
        not_applied("body_mismatch")
    );
    let mut softened = body("claude-opus-4-8", "tell me");
    softened["system"] = json!("be brief and careful");
    assert_eq!(
        redemption(&sim, key, &token, softened).await,
        not_applied("body_mismatch")
    );
    let same = body("claude-opus-4-8", "tell me");
    assert_eq!(
        redemption(&sim, key, "fct_sim_never_issued", same).await,
        not_applied("body_mismatch")
    );
}

#[tokio::test]
async fn another_key_is_the_wrong_workspace_and_another_simulator_the_wrong_platform() {
    let sim = sim().await;
    let token = credit(&sim, "sk-credit-workspace").await;
    let same = body("claude-opus-4-8", "tell me");
    assert_eq!(
        redemption(&sim, "sk-credit-other-workspace", &token, same.clone()).await,
        not_applied("wrong_workspace")
    );
    let elsewhere = self::sim().await;
    assert_eq!(
        redemption(&elsewhere, "sk-credit-workspace", &token, same).await,
        not_applied("wrong_platform")
    );
}

#[tokio::test]
async fn a_credit_older_than_five_minutes_is_expired() {
    let sim = sim().await;
    let key = "sk-credit-expired";
    let token = credit(&sim, key).await;
    understudy_testkit::sim::age_credits(key, Duration::from_secs(5 * 60 + 1));
    assert_eq!(
        redemption(&sim, key, &token, body("claude-opus-4-8", "tell me")).await,
        not_applied("expired")
    );
}

#[tokio::test]
async fn a_token_sent_without_the_beta_is_refused_as_an_unknown_field() {
    let sim = sim().await;
    let key = "sk-credit-no-beta";
    let token = credit(&sim, key).await;
    let retry = with_token(body("claude-opus-4-8", "tell me"), &token);
    let (status, text) = post(&sim, key, &retry, false).await;
    assert_eq!(status, 400, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = "fallback_credit_token: Extra inputs are not permitted";
    assert_eq!(error["error"]["message"], message);
    let violations = sim.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains(message), "{violations:?}");
}

#[tokio::test]
async fn a_stream_carries_the_credit_in_message_delta_and_a_stream_redeems_it() {
    let sim = sim().await;
    let key = "sk-credit-stream";
    let mut refused = body(REFUSING, "tell me");
    refused["stream"] = json!(true);
    let (status, stream) = post(&sim, key, &refused, true).await;
    assert_eq!(status, 200, "{stream}");
    let delta = sse_event(&stream, "message_delta");
    assert_eq!(delta["delta"]["stop_reason"], "refusal", "{delta}");
    let token = delta["delta"]["stop_details"]["fallback_credit_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no credit: {delta}"))
        .to_owned();
    let mut retry = with_token(body("claude-opus-4-8", "tell me"), &token);
    retry["stream"] = json!(true);
    let (status, stream) = post(&sim, key, &retry, true).await;
    assert_eq!(status, 200, "{stream}");
    let redeemed = json!({"type": "redeemed"});
    let start = sse_event(&stream, "message_start");
    assert_eq!(
        start["message"]["usage"]["fallback_credit"]["status"], redeemed,
        "{start}"
    );
    let end = sse_event(&stream, "message_delta");
    assert_eq!(end["usage"]["fallback_credit"]["status"], redeemed, "{end}");
}
