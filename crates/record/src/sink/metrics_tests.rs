//! The metrics recorder's tests: events in, the text exposition out.

use std::sync::Arc;

use super::*;
use crate::event::GenerationEvent;

/// An event from its JSON record (the fields every event has, then
/// `extra`).
fn event(extra: serde_json::Value) -> GenerationEvent {
    let mut e = serde_json::json!({
        "request_id": "r", "timestamp": "2026-12-01T00:00:00.000Z", "route": "default",
        "api": "openai", "provider": null, "model": null, "primary": "a",
        "success": true, "fell_back": false, "content_filtered": false,
        "streamed": false, "cached": false, "error_code": null, "error_detail": null,
        "attempts": [], "latency_ms": 250.0, "ttft_ms": null, "usage": null, "cost_usd": null,
    });
    if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(extra.clone());
    }
    serde_json::from_value(e).expect("a valid event")
}

fn attempt(provider: &str, kind: &str, outcome: &str) -> serde_json::Value {
    serde_json::json!({"provider": provider, "model": "m", "kind": kind, "outcome": outcome, "latency_ms": 1.0})
}

/// The sample lines of `text` (no comments), sorted.
fn samples(text: &str, prefix: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn cached_handles_count_each_series_apart() {
    let metrics = Arc::new(Metrics::new());
    let mut recorder = Recorder::new(Arc::clone(&metrics));
    let served_by_a = event(serde_json::json!({
        "provider": "a", "model": "m", "streamed": true, "ttft_ms": 100.0,
        "usage": {"input_tokens": 12, "output_tokens": 9}, "cost_usd": 0.5,
        "attempts": [attempt("a", "primary", "ok")],
    }));
    let refused_then_b = event(serde_json::json!({
        "provider": "b", "model": "m", "fell_back": true, "content_filtered": true,
        "api": "anthropic", "usage": {"input_tokens": 1, "output_tokens": 2},
        "attempts": [attempt("a", "primary", "content_filter"), attempt("a", "softened", "content_filter"), attempt("b", "fallback", "ok")],
    }));
    let nobody = event(serde_json::json!({
        "success": false, "error_code": "unavailable",
        "attempts": [attempt("a", "primary", "unavailable")],
    }));
    let fell_back_only = event(serde_json::json!({
        "provider": "b", "model": "m", "fell_back": true,
        "attempts": [attempt("a", "primary", "unavailable"), attempt("b", "fallback", "ok")],
    }));
    let refused_then_served = event(serde_json::json!({
        "provider": "a", "model": "m", "content_filtered": true,
        "attempts": [attempt("a", "primary", "content_filter"), attempt("a", "softened", "ok")],
    }));
    for e in [
        &served_by_a,
        &refused_then_b,
        &nobody,
        &served_by_a,
        &nobody,
        &fell_back_only,
        &refused_then_served,
    ] {
        recorder.record(e);
    }
    let text = metrics.openmetrics();
    assert_eq!(
        samples(&text, "understudy_generations_total"),
        [
            r#"understudy_generations_total{provider="a",success="false",fell_back="false",content_filtered="false"} 2"#,
            r#"understudy_generations_total{provider="a",success="true",fell_back="false",content_filtered="false"} 2"#,
            r#"understudy_generations_total{provider="a",success="true",fell_back="false",content_filtered="true"} 1"#,
            r#"understudy_generations_total{provider="b",success="true",fell_back="true",content_filtered="false"} 1"#,
            r#"understudy_generations_total{provider="b",success="true",fell_back="true",content_filtered="true"} 1"#,
        ]
    );
    assert_eq!(
        samples(&text, "understudy_attempts_total"),
        [
            r#"understudy_attempts_total{provider="a",kind="primary",outcome="content_filter"} 2"#,
            r#"understudy_attempts_total{provider="a",kind="primary",outcome="ok"} 2"#,
            r#"understudy_attempts_total{provider="a",kind="primary",outcome="unavailable"} 3"#,
            r#"understudy_attempts_total{provider="a",kind="softened",outcome="content_filter"} 1"#,
            r#"understudy_attempts_total{provider="a",kind="softened",outcome="ok"} 1"#,
            r#"understudy_attempts_total{provider="b",kind="fallback",outcome="ok"} 2"#,
        ]
    );
    assert_eq!(
        samples(&text, "understudy_tokens_total"),
        [
            r#"understudy_tokens_total{provider="a",direction="input"} 24"#,
            r#"understudy_tokens_total{provider="a",direction="output"} 18"#,
            r#"understudy_tokens_total{provider="b",direction="input"} 1"#,
            r#"understudy_tokens_total{provider="b",direction="output"} 2"#,
        ]
    );
    assert_eq!(
        samples(&text, "understudy_cost_usd_total"),
        [r#"understudy_cost_usd_total{provider="a"} 1.0"#]
    );
    assert_eq!(
        samples(&text, "understudy_request_duration_seconds_count"),
        [
            r#"understudy_request_duration_seconds_count{provider="a",streamed="false",api="openai"} 3"#,
            r#"understudy_request_duration_seconds_count{provider="a",streamed="true",api="openai"} 2"#,
            r#"understudy_request_duration_seconds_count{provider="b",streamed="false",api="anthropic"} 1"#,
            r#"understudy_request_duration_seconds_count{provider="b",streamed="false",api="openai"} 1"#,
        ]
    );
    assert_eq!(
        samples(&text, "understudy_time_to_first_token_seconds_count"),
        [r#"understudy_time_to_first_token_seconds_count{provider="a"} 2"#]
    );
}

/// The metrics and the status page's history hold an event as soon as
/// its publish returns: they record it on the publishing task, with no
/// writer to wait for, while a queued sink gets it on its channel.
#[test]
fn an_event_is_recorded_in_memory_when_its_publish_returns() {
    use crate::sink::fanout::EventBus;
    use crate::sink::recent::Recent;
    let metrics = Arc::new(Metrics::new());
    let recent = Arc::new(Recent::default());
    let mut bus = EventBus::default();
    bus.add_inline(Arc::new(MetricsSink::new(
        Arc::clone(&metrics),
        std::collections::HashMap::new(),
    )));
    bus.add_inline(Arc::clone(&recent) as Arc<dyn crate::sink::fanout::Inline>);
    let mut queued = bus.add("redis", metrics.dropped("redis"));
    bus.publish(event(serde_json::json!({
        "request_id": "first", "provider": "a", "model": "m",
        "attempts": [attempt("a", "primary", "ok")],
    })));
    assert_eq!(
        samples(&metrics.openmetrics(), "understudy_generations_total"),
        [
            r#"understudy_generations_total{provider="a",success="true",fell_back="false",content_filtered="false"} 1"#
        ]
    );
    let shown: Vec<String> = recent
        .events()
        .into_iter()
        .map(|e| e.request_id.to_string())
        .collect();
    assert_eq!(shown, ["first"]);
    assert_eq!(recent.seconds().iter().map(|s| s.total).sum::<u32>(), 1);
    let sent = queued.try_recv().expect("the queued sink's copy");
    assert_eq!(&*sent.request_id, "first");
}
