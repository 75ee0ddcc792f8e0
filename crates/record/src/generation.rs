//! One generation as the engine sees it: what a front end asks for
//! ([`GenerateRequest`]), what comes back ([`Generation`]), and the record of
//! each attempt along the way ([`Attempt`]).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use understudy_types::RouteSelector;
use understudy_types::attempt::Attempt;
use understudy_types::chat::{ChatRequest, Completion, FinishReason, ToolCall, Usage};
use understudy_types::error::Error;
use understudy_types::refusal::RefusalPolicy;

/// Which client key sent a request: a keyed hash of the key, never the key
/// itself, so that stored state (the response cache) can belong to the
/// client that made it. Its `Debug` shows a short prefix of the hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientTag([u8; 32]);

/// What a front end hands the engine.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub chat: Arc<ChatRequest>,
    pub route: RouteSelector,
    /// Overrides the configured refusal policy for this request.
    pub refusal_policy: Option<RefusalPolicy>,
    /// A caller-chosen id; the engine makes one when absent.
    pub request_id: Option<Arc<str>>,
    /// Whether the response cache may answer (non-streamed only).
    pub cache: bool,
    /// Only the primary may serve (no fallbacks).
    pub no_fallback: bool,
    /// Overrides the request timeout (the whole plan's deadline).
    pub timeout: Option<std::time::Duration>,
    /// The API it came through (`None`: the neutral API, the CLI, the
    /// demo).
    pub api: Option<understudy_types::protocol::Protocol>,
    /// The client key it came with (none on an open gateway): the response
    /// cache answers it only from its own entries unless `[cache] shared`.
    pub client: Option<ClientTag>,
    /// The client key's record (budget, rates, models), when it has one.
    pub tenant: Option<Arc<understudy_settings::ClientRecord>>,
    /// The request's trace, when traces are on.
    pub trace: Option<Arc<crate::trace::TraceContext>>,
    /// Overrides the route's `stream_commit` (streamed requests only).
    pub stream_commit: Option<understudy_settings::StreamCommit>,
    /// Overrides the route's `continue_after_cut` (streamed requests only).
    pub continue_after_cut: Option<bool>,
    /// Hosted tools the front end left out because no target can run them
    /// (the Responses API's `web_search` and the like): in the event.
    pub omitted_tools: Vec<String>,
    /// The session a client named (a header, `prompt_cache_key`…), for
    /// affinity; without one a route with a choice hashes the prefix.
    pub session: Option<SessionHint>,
}

/// A successful generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub request_id: Arc<str>,
    pub text: String,
    /// The tools the model called, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The provider that served.
    pub provider: String,
    /// The model that answered (the provider's own name for it). Moved
    /// into the event, like the attempts, when a front end's answer is the
    /// provider's body as it came (`native`), which names it itself.
    pub model: String,
    pub finish_reason: FinishReason,
    /// The serving attempt's usage, never the failed attempts'.
    pub usage: Option<Usage>,
    /// A provider other than the primary served.
    pub fell_back: bool,
    /// Some attempt was refused by a content filter, whoever served.
    pub content_filtered: bool,
    /// Every attempt, in order: kept for the neutral API and the engine's
    /// own callers (a request through a front end, whose answers never show
    /// them, has them moved into its event instead).
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    /// Served from the response cache, without calling a provider.
    #[serde(default)]
    pub cached: bool,
    /// The answer's body exactly as the provider sent it, when the request
    /// was forwarded natively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<String>,
}

/// A session a client named, as a front end read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHint {
    pub source: SessionSource,
    /// The client's value (client data: events show a hash of the key it
    /// makes, never this).
    pub value: String,
}

/// Where a request's session came from, in the order they are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    /// `x-understudy-session`.
    Gateway,
    /// A header a client sends of its own accord: Claude Code's
    /// `x-claude-code-session-id`, Codex's `session_id` / `session-id`,
    /// `x-session-affinity`, `x-session-id`.
    ClientHeader,
    /// The body's `prompt_cache_key` (Chat Completions, Responses).
    PromptCacheKey,
    /// The session of the stored response `previous_response_id` names.
    PreviousResponse,
    /// The body's `user` or `metadata.user_id` (only where
    /// `[affinity] session_from_user` allows).
    User,
    /// The hash of the stable prefix: system, tools, first message.
    Prefix,
}

/// The headers that name a session, in the order they are taken: the
/// gateway's own, then what clients already send.
pub const SESSION_HEADERS: [(&str, SessionSource); 6] = [
    ("x-understudy-session", SessionSource::Gateway),
    ("x-claude-code-session-id", SessionSource::ClientHeader),
    ("session_id", SessionSource::ClientHeader),
    ("session-id", SessionSource::ClientHeader),
    ("x-session-affinity", SessionSource::ClientHeader),
    ("x-session-id", SessionSource::ClientHeader),
];

/// The longest session value taken (longer ones are cut: they still name
/// one session).
const MAX_VALUE: usize = 256;

/// The result of the engine's `generate`.
pub type GenerateResult = Result<Generation, Error>;

/// A request id: 16 hex digits, unique enough for logs and correlation.
/// Written in place and copied once, into the `Arc` the request's parts
/// share (`format!`, or collecting the digits as characters, costs
/// several times more, once per request).
#[inline]
pub fn new_request_id() -> Arc<str> {
    Arc::from(&*crate::short_hash::ShortHash::hex_of(
        &fastrand::u64(..).to_be_bytes(),
    ))
}

// === impl GenerateRequest ===

impl GenerateRequest {
    pub fn new(chat: ChatRequest) -> Self {
        Self {
            chat: Arc::new(chat),
            route: RouteSelector::Default,
            refusal_policy: None,
            request_id: None,
            cache: true,
            no_fallback: false,
            timeout: None,
            api: None,
            client: None,
            tenant: None,
            trace: None,
            stream_commit: None,
            continue_after_cut: None,
            omitted_tools: Vec::new(),
            session: None,
        }
    }

    pub fn route(mut self, route: RouteSelector) -> Self {
        self.route = route;
        self
    }

    pub fn refusal_policy(mut self, policy: RefusalPolicy) -> Self {
        self.refusal_policy = Some(policy);
        self
    }
}

// === impl SessionSource ===

impl SessionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "x-understudy-session",
            Self::ClientHeader => "client_header",
            Self::PromptCacheKey => "prompt_cache_key",
            Self::PreviousResponse => "previous_response",
            Self::User => "user",
            Self::Prefix => "prefix",
        }
    }
}

// === impl SessionHint ===

impl SessionHint {
    /// A hint from `value`, unless it is empty (cut to `MAX_VALUE` bytes).
    pub fn new(source: SessionSource, value: &str) -> Option<Self> {
        let value = value.trim();
        if value.is_empty() {
            return None;
        }
        let mut end = value.len().min(MAX_VALUE);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        Some(Self {
            source,
            value: value[..end].to_owned(),
        })
    }

    /// The first header of [`SESSION_HEADERS`] `get` finds (by name).
    pub fn of_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        SESSION_HEADERS
            .iter()
            .find_map(|(name, source)| Self::new(*source, get(name)?))
    }
}

// === impl ClientTag ===

impl ClientTag {
    /// The tag of a client key.
    pub fn of_key(key: &str) -> Self {
        Self(blake3::derive_key(
            "understudy 2026-12 client key tag",
            key.as_bytes(),
        ))
    }

    /// The tag of a client record's key, known by its SHA-256.
    pub fn of_key_sha256(sha256: &[u8; 32]) -> Self {
        Self(blake3::derive_key(
            "understudy 2026-12 client record tag",
            sha256,
        ))
    }

    /// The hash itself, for a front end that keys state of its own by it
    /// (the server's stored Responses API conversations).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for ClientTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClientTag({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

// === impl Generation ===

impl Generation {
    #[inline]
    pub fn from_completion(
        request_id: Arc<str>,
        provider: String,
        completion: Completion,
        fell_back: bool,
        content_filtered: bool,
        attempts: Vec<Attempt>,
        latency_ms: f64,
    ) -> Self {
        Self {
            request_id,
            text: completion.text,
            tool_calls: completion.tool_calls,
            native: completion.native,
            provider,
            model: completion.model,
            finish_reason: completion.finish_reason,
            usage: completion.usage,
            fell_back,
            content_filtered,
            attempts,
            latency_ms,
            cached: false,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_16_lowercase_hex_digits() {
        for _ in 0..100 {
            let id = super::new_request_id();
            assert_eq!(id.len(), 16, "{id}");
            assert!(
                id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        // The digits are the number's, most significant first.
        fastrand::seed(7);
        let n = fastrand::u64(..);
        fastrand::seed(7);
        assert_eq!(*super::new_request_id(), *format!("{n:016x}"));
    }
}
