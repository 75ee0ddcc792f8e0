//! A request's spans, made from its event (off the request path): one
//! SERVER span for the request, one CLIENT span per attempt, in the
//! OpenTelemetry GenAI semantic conventions (still in development; the
//! names their client inference spans had in 2026).

use understudy_core::event::GenerationEvent;
use understudy_core::sink::genai::{operation, provider_name};
use understudy_core::trace::notes::{Content, TraceNotes, finish_reason};
use understudy_core::trace::{TraceContext, new_span_id, unix_nano};
use understudy_settings::Settings;
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};

use crate::proto::{Event, Kind, Span, Value};

const MS: u64 = 1_000_000;

/// Milliseconds (as events keep them) in nanoseconds.
fn nanos(ms: f64) -> u64 {
    (ms * MS as f64) as u64
}

/// The spans of `e`, a request of trace `ctx`.
pub fn of_event(e: &GenerationEvent, ctx: &TraceContext, settings: &Settings) -> Vec<Span> {
    let op = operation(e.api);
    let end = end_of(e, ctx);
    let request = Request {
        e,
        ctx,
        op,
        // The engine's clock started at the request's start less what the
        // front end took before it: attempts are placed from the end back.
        engine_start: end.saturating_sub(nanos(e.latency_ms)),
        end,
        flags: u32::from(ctx.sampled),
    };
    let mut spans = Vec::with_capacity(e.attempts.len() + 1);
    let mut server = server_span(e, ctx, op, end, request.flags);
    if let Some(notes) = &e.notes {
        noted(&mut server, notes, request.engine_start);
    }
    spans.push(server);
    let served = e.attempts.iter().rposition(|a| a.outcome == Outcome::Ok);
    for i in 0..e.attempts.len() {
        spans.push(attempt_span(&request, i, Some(i) == served, settings));
    }
    spans
}

/// What every span of one request is placed and named by.
struct Request<'a> {
    e: &'a GenerationEvent,
    ctx: &'a TraceContext,
    /// `gen_ai.operation.name`.
    op: &'static str,
    /// When the engine's run began, and when the request ended (Unix
    /// nanoseconds).
    engine_start: u64,
    end: u64,
    /// The W3C flags (bit 0: sampled).
    flags: u32,
}

/// The CLIENT span of attempt `i` (`served`: the attempt that answered).
fn attempt_span(r: &Request<'_>, i: usize, served: bool, settings: &Settings) -> Span {
    let (e, ctx) = (r.e, r.ctx);
    let a = &e.attempts[i];
    // Never before the request's own span (the times are in ms).
    let start = (r.engine_start + nanos(a.started_ms)).max(ctx.start_unix_nano.min(r.end));
    let finish = start + nanos(a.latency_ms);
    let content = e.notes.as_ref().and_then(|n| n.content.as_ref());
    let (mut attributes, error) = call_attributes(e, a, r.op, content, settings);
    let mut events = Vec::new();
    if let (AttemptKind::RateLimitRetry, Some(before)) = (a.kind, i.checked_sub(1)) {
        events.push(retry_wait(&e.attempts[before], r.engine_start, start));
    }
    if served {
        served_attributes(e, &mut attributes);
        if let Some(output) = content.and_then(|c| c.output.as_ref()) {
            attributes.push(("gen_ai.output.messages", Value::Str(output.clone())));
        }
        if let Some(ttft) = e.ttft_ms.filter(|_| e.streamed) {
            attributes.push((
                "gen_ai.response.time_to_first_chunk",
                Value::Double(ttft / 1000.0),
            ));
            events.push(Event {
                time_unix_nano: r.engine_start + nanos(ttft),
                name: "understudy.stream.commit",
                attributes: Vec::new(),
            });
        }
    }
    Span {
        trace_id: ctx.trace_id,
        // The id the call went out with (and a provider that receives
        // `traceparent` saw), else a new one.
        span_id: a.span_id.unwrap_or_else(new_span_id),
        trace_state: ctx.state.clone(),
        parent_span_id: Some(ctx.span_id),
        // The parent (the request's span) is local: bit 8 set, 9 not.
        flags: r.flags | 0x100,
        name: format!("{} {}", r.op, a.model),
        kind: Kind::Client,
        start_time_unix_nano: start,
        end_time_unix_nano: finish.max(start),
        attributes,
        events,
        error,
    }
}

/// What attempt `a` called and how the call went: its attributes, and its
/// error (the failure's code) when it failed.
fn call_attributes(
    e: &GenerationEvent,
    a: &Attempt,
    op: &'static str,
    content: Option<&Content>,
    settings: &Settings,
) -> (Vec<(&'static str, Value)>, Option<String>) {
    let mut attributes = vec![
        ("gen_ai.operation.name", Value::Str(op.into())),
        (
            "gen_ai.provider.name",
            Value::Str(provider_name(&a.provider, settings)),
        ),
        ("gen_ai.request.model", Value::Str(String::from(&*a.model))),
        (
            "understudy.provider",
            Value::Str(String::from(&*a.provider)),
        ),
        (
            "understudy.attempt.kind",
            Value::Str(a.kind.as_str().into()),
        ),
    ];
    if e.streamed {
        attributes.push(("gen_ai.request.stream", Value::Bool(true)));
    }
    if let Some((host, port)) = server_address(&a.provider, settings) {
        attributes.push(("server.address", Value::Str(host)));
        if let Some(port) = port {
            attributes.push(("server.port", Value::Int(i64::from(port))));
        }
    }
    if let Some(key) = &a.key {
        attributes.push(("understudy.key", Value::Str(key.clone())));
    }
    if let Some(credit) = &a.fallback_credit {
        attributes.push(("understudy.fallback_credit", Value::Str(credit.clone())));
    }
    if a.outcome == Outcome::Cancelled {
        attributes.push(("understudy.cancelled", Value::Bool(true)));
    }
    if let (AttemptKind::Softened, Some(system)) =
        (a.kind, content.and_then(|c| c.softened_system.as_ref()))
    {
        attributes.push(("gen_ai.system_instructions", Value::Str(system.clone())));
    }
    if let Some(status) = a.status {
        attributes.push(("http.response.status_code", Value::Int(i64::from(status))));
    }
    let mut error = None;
    if let Outcome::Failed(code) = a.outcome {
        attributes.push(("error.type", Value::Str(code.as_str().into())));
        // The code, not the provider's words: an error body can echo
        // the prompt.
        error = Some(code.as_str().to_owned());
    }
    (attributes, error)
}

/// The wait for the provider's Retry-After, from the 429 of `prev` to the
/// retry's `start`.
fn retry_wait(prev: &Attempt, engine_start: u64, start: u64) -> Event {
    let waited_from = engine_start + nanos(prev.started_ms + prev.latency_ms);
    Event {
        time_unix_nano: waited_from.min(start),
        name: "understudy.retry_after.wait",
        attributes: vec![(
            "understudy.wait_s",
            Value::Double(start.saturating_sub(waited_from) as f64 / 1e9),
        )],
    }
}

/// The request's span: the HTTP route and status, what the client asked,
/// who served, whether it fell back or was refused.
fn server_span(e: &GenerationEvent, ctx: &TraceContext, op: &str, end: u64, flags: u32) -> Span {
    let route = ctx.http_route();
    let mut attributes = vec![
        ("http.request.method", Value::Str("POST".into())),
        ("http.route", Value::Str(route.into())),
        ("gen_ai.operation.name", Value::Str(op.into())),
        ("gen_ai.request.model", Value::Str(e.route.clone())),
        ("understudy.route", Value::Str(e.route.clone())),
        ("understudy.primary", Value::Str(String::from(&*e.primary))),
        ("understudy.fell_back", Value::Bool(e.fell_back)),
        (
            "understudy.content_filtered",
            Value::Bool(e.content_filtered),
        ),
        (
            "understudy.request_id",
            Value::Str(e.request_id.to_string()),
        ),
        ("understudy.streamed", Value::Bool(e.streamed)),
    ];
    if let Some(status) = ctx.status() {
        attributes.push(("http.response.status_code", Value::Int(i64::from(status))));
    }
    if let Some(p) = &e.provider {
        attributes.push(("understudy.served_by", Value::Str(String::from(&**p))));
    }
    if let Some(c) = &e.client {
        attributes.push(("understudy.client", Value::Str(c.clone())));
    }
    if e.cached {
        attributes.push(("understudy.cached", Value::Bool(true)));
    }
    if let Some(a) = &e.affinity {
        affinity_attributes(a, &mut attributes);
    }
    if let Some(c) = &e.caller_routing {
        // Briefly: whether the caller's routing was honoured, and its list.
        let asked = if c.honoured { "honoured" } else { "ignored" };
        attributes.push(("understudy.caller_routing", Value::Str(asked.into())));
        if !c.targets.is_empty() {
            let targets = c.targets.join(",");
            attributes.push(("understudy.caller_routing.targets", Value::Str(targets)));
        }
    }
    if let Some(h) = &e.hedge {
        attributes.extend([
            ("understudy.hedge", Value::Str(h.outcome.to_string())),
            ("understudy.hedge.after_ms", Value::Double(h.after_ms)),
            ("understudy.hedge.backup", Value::Str(h.backup.clone())),
        ]);
    }
    let mut error = None;
    if let Some(code) = e.error_code.filter(|_| !e.success) {
        attributes.push(("error.type", Value::Str(code.as_str().into())));
        // The code, not the error's words: they carry the providers'
        // messages, which can echo the prompt.
        error = Some(code.as_str().to_owned());
    }
    if e.success {
        served_attributes(e, &mut attributes);
    }
    Span {
        trace_id: ctx.trace_id,
        span_id: ctx.span_id,
        trace_state: ctx.state.clone(),
        parent_span_id: ctx.parent,
        // The parent is remote: bits 8 and 9 (OTLP's `flags`).
        flags: flags | if ctx.parent.is_some() { 0x300 } else { 0x100 },
        name: format!("POST {route}"),
        kind: Kind::Server,
        start_time_unix_nano: ctx.start_unix_nano.min(end),
        end_time_unix_nano: end,
        attributes,
        events: Vec::new(),
        error,
    }
}

/// A session's affinity on the request's span: its short hash, source
/// and outcome, the prefix cached, and the wait-or-switch choice with the
/// switch cost it weighed.
fn affinity_attributes(
    a: &understudy_core::event::AffinityNote,
    attributes: &mut Vec<(&'static str, Value)>,
) {
    attributes.extend([
        ("understudy.session", Value::Str(a.session.to_string())),
        (
            "understudy.session.source",
            Value::Str(a.source.to_string()),
        ),
        ("understudy.affinity", Value::Str(a.outcome.to_string())),
        (
            "understudy.affinity.cached_tokens",
            Value::Int(i64::try_from(a.cached_tokens).unwrap_or(i64::MAX)),
        ),
    ]);
    if let Some(choice) = &a.wait_or_switch {
        attributes.push(("understudy.wait_or_switch", Value::Str(choice.to_string())));
    }
    if let Some(usd) = a.switch_cost_usd {
        attributes.push(("understudy.switch_cost_usd", Value::Double(usd)));
    }
}

/// What the notes add to the request's span: the refusal policy, what the
/// client sent (content opted in; the answer is on the serving attempt's
/// span), and an event for each target passed over.
fn noted(server: &mut Span, notes: &TraceNotes, engine_start: u64) {
    server.attributes.push((
        "understudy.refusal_policy",
        Value::Str(notes.refusal_policy.into()),
    ));
    if let Some(c) = &notes.content {
        server
            .attributes
            .push(("gen_ai.input.messages", Value::Str(c.input.clone())));
        if c.omitted > 0 {
            server.attributes.push((
                "understudy.input.messages_omitted",
                Value::Int(c.omitted as i64),
            ));
        }
        if let Some(system) = &c.system {
            server
                .attributes
                .push(("gen_ai.system_instructions", Value::Str(system.clone())));
        }
    }
    for skip in &notes.skips {
        server.events.push(Event {
            time_unix_nano: (engine_start + nanos(skip.at_ms)).max(server.start_time_unix_nano),
            name: "understudy.target.skipped",
            attributes: vec![
                ("understudy.provider", Value::Str(skip.provider.clone())),
                ("gen_ai.request.model", Value::Str(skip.model.clone())),
                (
                    "understudy.skip.reason",
                    Value::Str(skip.reason.code().into()),
                ),
            ],
        });
    }
}

/// The serving attempt's answer: its model, id, finish reason and tokens.
fn served_attributes(e: &GenerationEvent, attributes: &mut Vec<(&'static str, Value)>) {
    if let Some(m) = &e.model {
        attributes.push(("gen_ai.response.model", Value::Str(m.clone())));
    }
    if let Some(notes) = &e.notes {
        if let Some(id) = &notes.response_id {
            attributes.push(("gen_ai.response.id", Value::Str(id.clone())));
        }
        if let Some(f) = &notes.finish_reason {
            attributes.push((
                "gen_ai.response.finish_reasons",
                Value::StrArray(vec![finish_reason(f).to_owned()]),
            ));
        }
    }
    if let Some(u) = e.usage {
        attributes.push((
            "gen_ai.usage.input_tokens",
            Value::Int(u.input_tokens as i64),
        ));
        attributes.push((
            "gen_ai.usage.output_tokens",
            Value::Int(u.output_tokens as i64),
        ));
        // The parts of those the provider reported (zero: not reported).
        for (name, n) in [
            (
                "gen_ai.usage.cache_read.input_tokens",
                u.cache_read_input_tokens,
            ),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                u.cache_write_input_tokens,
            ),
            (
                "gen_ai.usage.reasoning.output_tokens",
                u.reasoning_output_tokens,
            ),
        ] {
            if n > 0 {
                attributes.push((name, Value::Int(n as i64)));
            }
        }
    }
}

/// When the request ended: when its run published the event (else the
/// event's time, in milliseconds), never before it began.
fn end_of(e: &GenerationEvent, ctx: &TraceContext) -> u64 {
    let end = ctx
        .ended()
        .unwrap_or_else(|| understudy_types::clock::rfc3339(&e.timestamp).map_or(0, unix_nano));
    end.max(ctx.start_unix_nano)
}

/// The host and port a provider is called at (`server.address`,
/// `server.port`), never its userinfo.
fn server_address(provider: &str, settings: &Settings) -> Option<(String, Option<u16>)> {
    let url = &settings.providers.get(provider)?.base_url;
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || host_port.starts_with('[') => match p.parse() {
            Ok(port) => (h, Some(port)),
            Err(_) => (host_port, None),
        },
        _ => (host_port, None),
    };
    Some((host.to_owned(), port)).filter(|(h, _)| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_end_when_the_run_ended_to_the_nanosecond() {
        let mut e: GenerationEvent = serde_json::from_value(serde_json::json!({
            "request_id": "r", "timestamp": "2026-12-01T00:00:00.000Z", "route": "default",
            "api": "openai", "provider": "a", "model": "m", "primary": "a",
            "success": true, "fell_back": false, "content_filtered": false,
            "streamed": false, "cached": false, "error_code": null, "error_detail": null,
            "attempts": [{"provider": "a", "model": "m", "kind": "primary", "outcome": "ok",
                          "latency_ms": 100.0, "started_ms": 150.0}],
            "latency_ms": 250.0, "ttft_ms": null, "usage": null, "cost_usd": null,
        }))
        .expect("a valid event");
        let mut ctx = TraceContext::new(None, None, understudy_settings::Sampler::AlwaysOn);
        // The request came 300 ms ago; its run took the last 250.
        ctx.start_unix_nano -= 300 * MS;
        ctx.end_now();
        let ended = ctx.ended().expect("ended");
        e.trace = None;
        let settings = Settings::load(None, |_| None).expect("default settings");
        let spans = of_event(&e, &ctx, &settings);
        assert_eq!(spans[0].end_time_unix_nano, ended);
        // The attempt: 150 ms into a 250 ms run, for 100 ms.
        let start = ended - 250 * MS + 150 * MS;
        assert_eq!(
            (spans[1].start_time_unix_nano, spans[1].end_time_unix_nano),
            (start, start + 100 * MS)
        );
        assert_eq!(spans[0].start_time_unix_nano, ctx.start_unix_nano);
        // The routing the caller asked for, briefly.
        e.caller_routing = serde_json::from_value(serde_json::json!({
            "honoured": false, "source": "body", "targets": ["a", "b:m"],
            "allow_fallbacks": true,
        }))
        .expect("a valid note");
        let spans = of_event(&e, &ctx, &settings);
        let attribute = |name: &str| {
            spans[0]
                .attributes
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            attribute("understudy.caller_routing"),
            Some(Value::Str("ignored".into()))
        );
        assert_eq!(
            attribute("understudy.caller_routing.targets"),
            Some(Value::Str("a,b:m".into()))
        );
    }

    #[test]
    fn a_hedge_is_on_the_request_span_and_its_loser_on_its_attempt() {
        let e: GenerationEvent = serde_json::from_value(serde_json::json!({
            "request_id": "r", "timestamp": "2026-12-01T00:00:00.000Z", "route": "chat",
            "api": "openai", "provider": "b", "model": "m", "primary": "a",
            "success": true, "fell_back": true, "content_filtered": false,
            "streamed": true, "cached": false, "error_code": null, "error_detail": null,
            "attempts": [
                {"provider": "a", "model": "m", "kind": "primary", "outcome": "cancelled",
                 "latency_ms": 400.0, "started_ms": 0.0},
                {"provider": "b", "model": "m", "kind": "fallback", "outcome": "ok",
                 "latency_ms": 100.0, "started_ms": 300.0}],
            "latency_ms": 400.0, "ttft_ms": 400.0, "usage": null, "cost_usd": null,
            "hedge": {"outcome": "won_backup", "after_ms": 300.0, "backup": "b:m"},
        }))
        .expect("a valid event");
        let ctx = TraceContext::new(None, None, understudy_settings::Sampler::AlwaysOn);
        ctx.end_now();
        let settings = Settings::load(None, |_| None).expect("default settings");
        let spans = of_event(&e, &ctx, &settings);
        let has = |span: &Span, name: &str| span.attributes.iter().any(|(n, _)| *n == name);
        for name in [
            "understudy.hedge",
            "understudy.hedge.after_ms",
            "understudy.hedge.backup",
        ] {
            assert!(has(&spans[0], name), "{name}");
        }
        assert!(has(&spans[1], "understudy.cancelled"));
        assert!(spans[1].error.is_none(), "a cancelled call is not an error");
        assert!(!has(&spans[2], "understudy.cancelled"));
    }
}
