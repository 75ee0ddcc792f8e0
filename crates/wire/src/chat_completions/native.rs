//! A Chat Completions body forwarded as the client wrote it to an
//! OpenAI-compatible target, and that target's plain answer relayed as it
//! sent it: no typed round trip where the two ends speak the same protocol.
//!
//! The rules that keep this invisible to the client and to the target:
//!
//! - A body is forwarded as it is only where the translation would send
//!   the same request ([`forwarded`]): every member, at every depth the
//!   translation reads, is one it carries unchanged. An unknown member (a
//!   vendor extension, which the API ignores rather than forwards), a
//!   `developer` or later `system` message (the translation joins them into
//!   one leading system message), text parts outside a user turn, a member
//!   written with an escape: the body is translated, as before.
//! - The gateway's own members (`prompt_cache_key`, the caller's routing)
//!   never reach a provider: they are taken out once, by the front end.
//! - At the target ([`prepare`]), `model` becomes the target's and a
//!   `max_tokens` above its output limit is clamped; a body whose limit
//!   goes under the other name than the provider takes is translated.
//! - An answer is relayed as the provider sent it ([`relay`]) only when
//!   it is plain: one choice of text, neither refused nor filtered nor
//!   empty, no tool calls (whose ids, names and finish reason the
//!   translation mends), with an id and a model. Anything else is read in
//!   full by [`super::response::parse_response`] and written by the front
//!   end, exactly as a translated answer is.
//!
//! Both are read by a skimmer ([`Skim`]) that checks the JSON grammar as
//! strictly as `serde_json` does (a provider's answer is relayed only if it
//! is valid JSON) while it checks member names and finds byte ranges,
//! building nothing: a fraction of the instructions of a typed read.

use std::borrow::Cow;
use std::ops::Range;

use http::HeaderMap;
use understudy_types::{Completion, Failure, Spans, Usage};

use crate::skim::Skim;

use super::response::{
    CompletionTokensDetails, PromptTokensDetails, WireUsage, finish_reason_with, parse_response,
};

/// The client's body as an OpenAI-compatible target may get it: without
/// the gateway's own members (borrowed when it has none); `None` when the
/// translation would change or leave out any of it (see the module docs).
pub fn forwarded(body: &str) -> Option<Cow<'_, str>> {
    if !walk(body, None)? {
        return Some(Cow::Borrowed(body));
    }
    // The kept members, each byte for byte.
    let mut kept = Vec::new();
    walk(body, Some(&mut kept))?;
    let mut out = String::with_capacity(body.len());
    out.push('{');
    for (i, m) in kept.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(body.get(m)?);
    }
    out.push('}');
    Some(Cow::Owned(out))
}

/// Checks `body` as [`forwarded`] does: whether it holds members of the
/// gateway's own, the ranges of the others put in `kept`.
fn walk(body: &str, mut kept: Option<&mut Vec<Range<usize>>>) -> Option<bool> {
    let mut s = Skim::new(body);
    let mut stripped = false;
    s.object(|s, key, start| {
        match key? {
            "messages" => s.nested(|s| s.list(message))?,
            key if GATEWAY_MEMBERS.contains(&key) => {
                s.value()?;
                stripped = true;
                return Some(());
            }
            key => s.shaped(&TOP.iter().find(|(name, _)| *name == key)?.1)?,
        }
        if let Some(kept) = kept.as_deref_mut() {
            kept.push(start..s.at);
        }
        Some(())
    })?;
    s.end().then_some(stripped)
}

/// How a provider takes the output limit: `max_completion_tokens` (when
/// `true`) or `max_tokens`.
pub type CompletionTokens = bool;

/// `body` (as [`forwarded`] kept it) for a target serving `model`: its
/// `model` the target's, its output limit `limit` (the client's, clamped to
/// the model's); `None` when only the translation can make it right (no
/// `model` member, both limits, or the limit under the name the provider
/// does not take). `spans`: where the body's reader found those members
/// (else the body is read for them here).
pub fn prepare(
    body: &str,
    spans: Option<&Spans>,
    model: &str,
    limit: Option<u32>,
    completion_tokens: CompletionTokens,
) -> Option<Vec<u8>> {
    let read;
    let spans = match spans {
        Some(spans) => spans,
        None => {
            read = spans_of(body)?;
            &read
        }
    };
    let limit_at = match (&spans.max_tokens, &spans.max_completion_tokens) {
        (None, None) => None,
        (Some(at), None) if !completion_tokens => Some(at.clone()),
        (None, Some(at)) if completion_tokens => Some(at.clone()),
        _ => return None,
    };
    let model_at = spans.model.clone()?;
    // The limit's edit, where the clamp changed it.
    let limit_edit = match (limit_at, limit) {
        (Some(at), Some(limit))
            if body.get(at.clone())?.parse::<u64>().ok() != Some(u64::from(limit)) =>
        {
            Some((at, limit))
        }
        _ => None,
    };
    let b = body.as_bytes();
    let mut out = Vec::with_capacity(body.len() + model.len() + 8);
    let mut from = 0;
    let mut edits = [
        Some((model_at, None)),
        limit_edit.map(|(at, n)| (at, Some(n))),
    ];
    edits.sort_by_key(|e| e.as_ref().map_or(usize::MAX, |(at, _)| at.start));
    for (at, limit) in edits.into_iter().flatten() {
        out.extend_from_slice(b.get(from..at.start)?);
        match limit {
            Some(n) => crate::json_text::push_u64(&mut out, u64::from(n)),
            None => crate::json_text::push_str(&mut out, model),
        }
        from = at.end;
    }
    out.extend_from_slice(b.get(from..)?);
    Some(out)
}

/// Where `body`'s `model` and output limits sit; `None` when one is
/// given twice (which the front end's reads refuse).
fn spans_of(body: &str) -> Option<Spans> {
    let mut s = Skim::new(body);
    let mut spans = Spans::default();
    s.object(|s, key, _| {
        let at = s.skip()?;
        let slot = match key? {
            "model" => &mut spans.model,
            "max_tokens" => &mut spans.max_tokens,
            "max_completion_tokens" => &mut spans.max_completion_tokens,
            _ => return Some(()),
        };
        slot.replace(at).is_none().then_some(())
    })?;
    Some(spans)
}

/// Reads a complete answer to a natively forwarded body: a plain one (see
/// the module docs) with its body kept to be relayed as it came, anything
/// else as [`parse_response`] reads it (then written by the front end).
pub fn relay(
    received: (u16, &HeaderMap, &[u8]),
    requested_model: &str,
) -> Result<Completion, Failure> {
    match plain(received) {
        Some(completion) => Ok(completion),
        None => parse_response(received, requested_model),
    }
}

/// A plain answer, read with only what the gateway records: its text (for
/// traces and the cache), model, id, finish reason and usage.
fn plain(received: (u16, &HeaderMap, &[u8])) -> Option<Completion> {
    let (status, _, body) = received;
    if !(200..300).contains(&status) {
        return None;
    }
    let body = std::str::from_utf8(body).ok()?;
    let mut s = Skim::new(body);
    let (mut id, mut model, mut choice, mut usage) = (None, None, None, None);
    s.object(|s, key, _| {
        // A member given twice is left to the typed read (which refuses it).
        let once = match key? {
            "id" => id.replace(s.plain_string()?).is_none(),
            "model" => model.replace(s.plain_string()?).is_none(),
            "choices" if choice.is_some() => false,
            "choices" => {
                let mut n = 0;
                s.list(|s, _| {
                    n += 1;
                    choice = Some(read_choice(s)?);
                    Some(())
                })?;
                n == 1
            }
            "usage" => usage.replace(read_usage(s)?).is_none(),
            // Some proxies answer 200 with an error object.
            "error" => s.null()?,
            _ => s.value().is_some(),
        };
        once.then_some(())
    })?;
    let (id, model, choice) = (id?, model?, choice?);
    if !s.end() || id.is_empty() || model.is_empty() || !choice.plain() {
        return None;
    }
    let text: String = match choice.text {
        (text, false) => text.to_owned(),
        // Read from its JSON form, quotes included.
        (_, true) => serde_json::from_str(body.get(choice.text_at)?).ok()?,
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(Completion {
        finish_reason: finish_reason_with(choice.finish, false),
        text,
        tool_calls: Vec::new(),
        model: model.to_owned(),
        usage: usage.flatten(),
        response_id: Some(id.to_owned()),
        native: Some(body.to_owned()),
        rate_limits: None,
        fallback_credit: None,
    })
}

/// The one choice of an answer, as far as [`plain`] reads it.
struct Choice<'a> {
    /// The message's text as written (and whether with escapes), and
    /// where, quotes included.
    text: (&'a str, bool),
    text_at: Range<usize>,
    has_text: bool,
    finish: Option<&'a str>,
    /// Refused, or calls tools, or holds what [`plain`] cannot vouch for.
    not_plain: bool,
}

impl Choice<'_> {
    fn plain(&self) -> bool {
        self.has_text && !self.not_plain && self.finish != Some("content_filter")
    }
}

/// A choice: its message's text, refusal and tool calls, its finish
/// reason; the rest read past.
fn read_choice<'a>(s: &mut Skim<'a>) -> Option<Choice<'a>> {
    let mut c = Choice {
        text: ("", false),
        text_at: 0..0,
        has_text: false,
        finish: None,
        not_plain: false,
    };
    let mut message = false;
    s.object(|s, key, _| {
        match key? {
            "message" if !message => {
                message = true;
                s.object(|s, key, _| read_message(s, key?, &mut c))?;
            }
            "finish_reason" if c.finish.is_none() && s.peek()? == b'"' => {
                c.finish = Some(s.plain_string()?);
            }
            "finish_reason" => c.not_plain |= !s.null()?,
            "message" => return None,
            _ => {
                s.value()?;
            }
        }
        Some(())
    })?;
    Some(c)
}

/// One member of a choice's message into `c`.
fn read_message<'a>(s: &mut Skim<'a>, key: &str, c: &mut Choice<'a>) -> Option<()> {
    match key {
        "content" if c.has_text => return None,
        "content" if s.peek()? == b'"' => {
            let start = s.at;
            c.text = s.string()?;
            c.text_at = start..s.at;
            c.has_text = true;
        }
        "content" => c.not_plain |= !s.null()?,
        // A refusal, any but an empty one; tool calls, any but none.
        "refusal" if s.peek()? == b'"' => {
            let (refusal, escaped) = s.string()?;
            c.not_plain |= escaped || !refusal.trim().is_empty();
        }
        "refusal" => c.not_plain |= !s.null()?,
        "tool_calls" => c.not_plain |= !s.null_or_empty()?,
        _ => {
            s.value()?;
        }
    }
    Some(())
}

/// `usage` (or `null`): the counts the gateway records, each a whole
/// number as the typed read takes it (`None` otherwise, for that read to
/// judge).
fn read_usage(s: &mut Skim<'_>) -> Option<Option<Usage>> {
    if s.null()? {
        return Some(None);
    }
    let mut u = WireUsage {
        prompt_tokens: 0,
        completion_tokens: 0,
        total_tokens: 0,
        prompt_tokens_details: None,
        completion_tokens_details: None,
    };
    s.object(|s, key, _| {
        match key? {
            "prompt_tokens" => u.prompt_tokens = s.count()?,
            "completion_tokens" => u.completion_tokens = s.count()?,
            "total_tokens" => u.total_tokens = s.count()?,
            "prompt_tokens_details" => {
                u.prompt_tokens_details = s
                    .detail("cached_tokens")?
                    .map(|cached_tokens| PromptTokensDetails { cached_tokens });
            }
            "completion_tokens_details" => {
                u.completion_tokens_details = s
                    .detail("reasoning_tokens")?
                    .map(|reasoning_tokens| CompletionTokensDetails { reasoning_tokens });
            }
            _ => {
                s.value()?;
            }
        }
        Some(())
    })?;
    Some(Some(u.into()))
}

/// The gateway's own members: read by the front end, never forwarded.
const GATEWAY_MEMBERS: [&str; 4] = ["prompt_cache_key", "models", "provider", "fallbacks"];

/// The members the translation carries unchanged, each with the members
/// it may hold in turn (`messages` has rules of its own: [`message`]).
const TOP: &[(&str, Shape)] = &[
    ("model", Shape::Any),
    ("temperature", Shape::Any),
    ("max_tokens", Shape::Any),
    ("max_completion_tokens", Shape::Any),
    ("stop", Shape::Any),
    ("stream", Shape::Any),
    ("n", Shape::Any),
    ("top_p", Shape::Any),
    ("seed", Shape::Any),
    ("presence_penalty", Shape::Any),
    ("frequency_penalty", Shape::Any),
    ("user", Shape::Any),
    ("parallel_tool_calls", Shape::Any),
    ("tools", Shape::List(&TOOL)),
    (
        "tool_choice",
        Shape::Object(&[("type", Shape::Any), ("function", NAME)]),
    ),
    (
        "response_format",
        Shape::Object(&[
            ("type", Shape::Any),
            (
                "json_schema",
                Shape::Object(&[
                    ("name", Shape::Any),
                    ("schema", Shape::Any),
                    ("strict", Shape::Any),
                ]),
            ),
        ]),
    ),
];

const NAME: Shape = Shape::Object(&[("name", Shape::Any)]);

const TOOL: Shape = Shape::Object(&[
    ("type", Shape::Any),
    (
        "function",
        Shape::Object(&[
            ("name", Shape::Any),
            ("description", Shape::Any),
            ("parameters", Shape::Any),
            ("strict", Shape::Any),
        ]),
    ),
]);

const PARTS: Shape = Shape::List(&Shape::Object(&[
    ("type", Shape::Any),
    ("text", Shape::Any),
    (
        "image_url",
        Shape::Object(&[("url", Shape::Any), ("detail", Shape::Any)]),
    ),
]));

const TOOL_CALLS: Shape = Shape::List(&Shape::Object(&[
    ("id", Shape::Any),
    ("type", Shape::Any),
    (
        "function",
        Shape::Object(&[("name", Shape::Any), ("arguments", Shape::Any)]),
    ),
]));

/// Which members a value may hold. The front end has already read the
/// body in full, so the types are right: only names are checked.
enum Shape {
    /// Any value, not looked into.
    Any,
    /// An object holds only these members (each of its shape); any other
    /// value is taken as it is.
    Object(&'static [(&'static str, Shape)]),
    /// An array's items are each of this shape; any other value is taken
    /// as it is.
    List(&'static Shape),
}

/// Message `i`: a turn the translation sends as it is written. A system
/// message only first (the translation joins them all into one leading
/// message); `developer` never (it becomes `system`); text parts only in
/// user turns (others get their text joined); tool calls only on
/// assistant turns and a call's id only on tool turns (dropped elsewhere).
fn message(s: &mut Skim<'_>, i: usize) -> Option<()> {
    let (mut role, mut parts, mut calls, mut answers) = (None, false, false, false);
    s.object(|s, key, _| {
        match key? {
            "role" => role = Some(s.plain_string()?),
            "content" => {
                parts = s.peek()? == b'[';
                s.shaped(&PARTS)?;
            }
            "tool_calls" => {
                calls = s.peek()? != b'n';
                s.shaped(&TOOL_CALLS)?;
            }
            "tool_call_id" => {
                answers = s.peek()? != b'n';
                s.value()?;
            }
            _ => return None,
        }
        Some(())
    })?;
    let role = role?;
    let ok = match role {
        "system" => i == 0 && !parts,
        "user" => true,
        "assistant" | "tool" => !parts,
        _ => false,
    };
    (ok && (!calls || role == "assistant") && (!answers || role == "tool")).then_some(())
}

impl Skim<'_> {
    /// Reads a value of `shape`; `None` when it holds a member the shape
    /// does not name.
    fn shaped(&mut self, shape: &Shape) -> Option<()> {
        match (shape, self.peek()?) {
            (Shape::Object(members), b'{') => self.nested(|s| {
                s.object(|s, key, _| {
                    let key = key?;
                    s.shaped(&members.iter().find(|(name, _)| *name == key)?.1)
                })
            }),
            (Shape::List(item), b'[') => self.nested(|s| s.list(|s, _| s.shaped(item))),
            _ => self.value().map(drop),
        }
    }
}

#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;
