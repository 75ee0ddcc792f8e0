//! The common request read in one pass: a body of plain turns and
//! sampling settings becomes the neutral request without the typed read
//! ([`super::inbound::ChatCompletionRequest`]) and its conversion.
//!
//! [`read`] takes a body only when the typed read would take it and give
//! the same request: it is `None` for anything else, and the front end
//! reads that body the typed way (which also names what is wrong with a
//! body it refuses). What it takes:
//!
//! - members `model` (a string written without escapes, or `null`),
//!   `messages`, `temperature`, `top_p`, `presence_penalty`,
//!   `frequency_penalty`, `max_tokens`, `max_completion_tokens`, `seed`,
//!   `user`, `stream` (`true` or `false`) and `stream_options`, each at
//!   most once;
//! - each message of exactly a `role` and a string `content`: `user` and
//!   `assistant` turns, and one leading `system` message.
//!
//! Each value other than a message is read by `serde_json` as the typed
//! read reads it (the number's range, as its field's type); the body's
//! grammar is checked as strictly as `serde_json` checks it ([`Skim`]).
//! Such a body is also one the translation would send unchanged, so it
//! may be forwarded as it is (but for `stream_options`, which only a
//! stream carries on).

use std::ops::Range;

use serde::de::DeserializeOwned;
use understudy_types::{ChatRequest, Message, Part, Role, Spans};

use super::inbound::StreamOptions;
use crate::skim::Skim;

/// A body [`read`] took.
#[derive(Debug)]
pub struct Quick<'a> {
    /// The model the client named (`None`: the `default` route).
    pub model: Option<&'a str>,
    pub stream: bool,
    pub include_usage: bool,
    /// The neutral request, checked as the typed read checks it.
    pub chat: ChatRequest,
    /// Whether an OpenAI-compatible target may get the body as it is.
    pub forwardable: bool,
    /// Where the members a target edits sit in the body.
    pub spans: Spans,
    /// The body's parts as the server's limit counts them: each object and
    /// array, and each member or item after its first.
    pub parts: usize,
}

/// `body` read in one pass, or `None` when only the typed read can take
/// it (see the module docs) or it holds more than `max_parts` parts: the
/// read stops at the first turn past the limit, so that a body the limit
/// refuses is never built (the typed read then refuses it, unparsed).
pub fn read(body: &str, max_parts: usize) -> Option<Quick<'_>> {
    let mut s = Skim::new(body);
    let mut seen = 0u16;
    let mut q = Quick {
        model: None,
        stream: false,
        include_usage: false,
        chat: ChatRequest::default(),
        forwardable: true,
        spans: Spans::default(),
        parts: 0,
    };
    let (mut max_tokens, mut max_completion_tokens) = (None, None);
    s.object(|s, key, _| {
        let i = MEMBERS.iter().position(|m| Some(*m) == key)?;
        // A member given twice is left to the typed read (which refuses it).
        if seen & (1 << i) != 0 {
            return None;
        }
        seen |= 1 << i;
        let chat = &mut q.chat;
        match MEMBERS[i] {
            "model" => q.model = spanned(s, &mut q.spans.model, model)?,
            "messages" => s.nested(|s| {
                s.list(|s, i| {
                    (s.parts <= max_parts).then_some(())?;
                    turn(s, i, chat)
                })
            })?,
            "temperature" => chat.temperature = typed(s)?,
            "top_p" => chat.top_p = typed(s)?,
            "presence_penalty" => chat.presence_penalty = typed(s)?,
            "frequency_penalty" => chat.frequency_penalty = typed(s)?,
            "max_tokens" => max_tokens = spanned(s, &mut q.spans.max_tokens, typed)?,
            "max_completion_tokens" => {
                max_completion_tokens = spanned(s, &mut q.spans.max_completion_tokens, typed)?;
            }
            "seed" => chat.seed = typed(s)?,
            "user" => chat.user = typed(s)?,
            "stream" => q.stream = typed(s)?,
            "stream_options" => {
                let options: Option<StreamOptions> = typed(s)?;
                q.include_usage = options.and_then(|o| o.include_usage) == Some(true);
                q.forwardable = false;
            }
            _ => return None,
        }
        Some(())
    })?;
    if !s.end() || seen & MESSAGES == 0 || s.parts > max_parts {
        return None;
    }
    q.chat.max_tokens = max_completion_tokens.or(max_tokens);
    q.chat.validate().ok()?;
    q.parts = s.parts;
    Some(q)
}

/// The members [`read`] takes, in the order of their bits in `seen`.
const MEMBERS: [&str; 12] = [
    "model",
    "messages",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "user",
    "stream",
    "stream_options",
];

/// The bit of `messages` (which a body must hold) in `seen`.
const MESSAGES: u16 = 1 << 1;

/// The next value as `read` reads it, with where it sits put in `span`.
fn spanned<'a, T>(
    s: &mut Skim<'a>,
    span: &mut Option<Range<usize>>,
    read: impl FnOnce(&mut Skim<'a>) -> Option<T>,
) -> Option<T> {
    s.peek()?;
    let start = s.at;
    let value = read(s)?;
    *span = Some(start..s.at);
    Some(value)
}

/// `model`: a string without escapes, or `null`.
fn model<'a>(s: &mut Skim<'a>) -> Option<Option<&'a str>> {
    if s.null()? {
        return Some(None);
    }
    s.plain_string().map(Some)
}

/// The next value, read by `serde_json` as a field of type `T` is.
fn typed<T: DeserializeOwned>(s: &mut Skim<'_>) -> Option<T> {
    let at = s.value()?;
    serde_json::from_str(s.text(at)?).ok()
}

/// Message `i` into `chat`: exactly a `role` and a string `content`; a
/// `system` message only first.
fn turn(s: &mut Skim<'_>, i: usize, chat: &mut ChatRequest) -> Option<()> {
    let (mut role, mut text) = (None, None);
    s.nested(|s| {
        s.object(|s, key, _| {
            match key? {
                "role" if role.is_none() => role = Some(s.plain_string()?),
                "content" if text.is_none() => {
                    let start = s.at;
                    text = Some(match s.string()? {
                        (text, false) => text.to_owned(),
                        // Read from its JSON form, quotes included.
                        (_, true) => serde_json::from_str(s.text(start..s.at)?).ok()?,
                    });
                }
                _ => return None,
            }
            Some(())
        })
    })?;
    let (role, text) = (role?, text?);
    let role = match role {
        "system" if i == 0 => {
            chat.system = Some(text);
            return Some(());
        }
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => return None,
    };
    chat.messages.push(Message {
        role,
        content: vec![Part::Text { text }],
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    Some(())
}

#[cfg(test)]
#[path = "quick_tests.rs"]
mod tests;
