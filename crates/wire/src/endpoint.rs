//! The HTTP edge of each front end, as data: the paths it serves and owns,
//! where its clients put their key, what marks them on a path shared with
//! other front ends, the shape its errors take, its model list and its
//! rate-limit headers. One [`Endpoint`] impl per front-end protocol, in its
//! own folder (`<protocol>/endpoint.rs`), which imports this file;
//! [`crate::front_ends::edge`], above them all, is the one function from a
//! [`Protocol`] to its table, read by the server's router, its auth layer,
//! its error writer, its models route and (through the request's trace
//! context) the spans.
//!
//! Static data and plain functions: no I/O, no allocation on the paths a
//! plain request takes (finding a request's front end compares its path
//! with a few constant strings).

use http::{HeaderMap, HeaderName, Method};
use understudy_types::{Error, Protocol};

/// The path every OpenAI-compatible client lists models at; Anthropic's
/// and Google's clients call it too, each marked by its own headers.
pub const MODELS_PATH: &str = "/v1/models";

/// What a front end's module supplies: its HTTP edge.
pub trait Endpoint {
    /// The protocol it speaks.
    const PROTOCOL: Protocol;

    /// Every method and path it serves, in the router's syntax (`{id}` for
    /// a path segment).
    const ROUTES: &'static [Route];

    /// The route its generating requests' spans name (`http.route`).
    const SPAN_ROUTE: &'static str;

    /// The path prefixes it owns beyond its routes: any path under one,
    /// routed or not, answers in its error shape.
    const PREFIXES: &'static [&'static str] = &[];

    /// Where its clients send their key.
    const KEYS: &'static [Key];

    /// Whether it answers the shared [`MODELS_PATH`], and for which
    /// requests: `None` when it has no list there, `Some(&[])` for the
    /// list any unmarked request gets, else the marks of its clients.
    const MODEL_MARKS: Option<&'static [Key]> = None;

    /// Which of its `POST`s a client record's rates and budget admit.
    const METERED: Metered = Metered::All;

    /// The headers a client record's remaining budget goes out in.
    const RATE_LIMIT: &'static RateLimitNames = &OPENAI_RATE_LIMIT;

    /// `fault` in its error shape.
    fn envelope(fault: &Fault<'_>) -> Envelope;

    /// Its model list for `models` (its `MODEL_MARKS` or its own list
    /// route say where it is asked for).
    fn model_list(models: &[Model<'_>]) -> serde_json::Value;
}

/// One method and path a front end serves.
#[derive(Debug)]
pub struct Route {
    pub method: Method,
    /// In the router's syntax: `{name}` stands for one path segment.
    pub path: &'static str,
}

/// Where a client sends its key, or a mark of whose client it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// A header of its own (`x-api-key`).
    Header(&'static str),
    /// A query parameter (`?key=`), never logged.
    Query(&'static str),
}

/// Which of a front end's `POST`s generate, and so count against a client
/// record's rates and budget (a token count does not).
#[derive(Debug, Clone, Copy)]
pub enum Metered {
    /// Every one.
    All,
    /// All but the paths ending in one of these.
    Except(&'static [&'static str]),
    /// Only the paths ending in one of these.
    Only(&'static [&'static str]),
}

/// The three header names of each dimension of a client record's
/// remaining budget: `[limit, remaining, reset]` for requests, then for
/// tokens.
pub type RateLimitNames = [[HeaderName; 3]; 2];

/// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, which
/// every front end writes today (resets as Go durations, see
/// [`crate::go_duration`]).
pub static OPENAI_RATE_LIMIT: RateLimitNames = [
    [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ],
    [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ],
];

/// An error on its way to a client, as every front end's shape reads it.
#[derive(Debug, Clone, Copy)]
pub struct Fault<'a> {
    /// The gateway's own status for it (the neutral API's).
    pub status: u16,
    /// Its code (`invalid_request`, `rate_limited`, …).
    pub code: &'a str,
    pub message: &'a str,
    /// The offending parameter, where there is one.
    pub param: Option<&'a str>,
    /// The engine's error, when the fault is one.
    pub engine: Option<&'a Error>,
}

/// An error as a front end writes it: its status and its JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub status: u16,
    pub body: String,
}

impl Envelope {
    /// `body` serialized, with `status`.
    pub fn json(status: u16, body: &impl serde::Serialize) -> Self {
        // Serializing the gateway's own shapes cannot fail.
        let body = serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned());
        Self { status, body }
    }
}

/// One name a client may ask for, as every model list shows it.
#[derive(Debug, Clone)]
pub struct Model<'a> {
    /// `default`, a route's name or `provider:model`.
    pub id: &'a str,
    /// What a person reads: a route's name with its targets.
    pub display: &'a str,
    /// `understudy` for a route, the provider's name for a pin.
    pub owner: &'a str,
    /// A route's targets (none for a provider's own model).
    pub targets: Option<&'a [String]>,
    /// What it can serve, as OpenAI's list shows it: one object per
    /// target of a route, one object for a provider's model.
    pub supports: serde_json::Value,
}

/// A front end's table, the same facts as its [`Endpoint`] impl.
#[derive(Debug)]
pub struct Edge {
    pub protocol: Protocol,
    pub routes: &'static [Route],
    pub span_route: &'static str,
    pub prefixes: &'static [&'static str],
    pub keys: &'static [Key],
    pub model_marks: Option<&'static [Key]>,
    pub metered: Metered,
    pub rate_limit: &'static RateLimitNames,
    pub envelope: fn(&Fault<'_>) -> Envelope,
    pub model_list: fn(&[Model<'_>]) -> serde_json::Value,
}

impl Edge {
    /// The table of `E`.
    pub const fn of<E: Endpoint>() -> Self {
        Self {
            protocol: E::PROTOCOL,
            routes: E::ROUTES,
            span_route: E::SPAN_ROUTE,
            prefixes: E::PREFIXES,
            keys: E::KEYS,
            model_marks: E::MODEL_MARKS,
            metered: E::METERED,
            rate_limit: E::RATE_LIMIT,
            envelope: E::envelope,
            model_list: E::model_list,
        }
    }

    /// Whether `path` is one of its routes without a parameter, or under
    /// one of its prefixes.
    pub fn owns(&self, path: &str) -> bool {
        self.routes.iter().any(|r| r.path == path)
            || self.prefixes.iter().any(|p| path.starts_with(p))
    }

    /// Whether a `POST` to `path` counts against a client record.
    pub fn metered(&self, path: &str) -> bool {
        match self.metered {
            Metered::All => true,
            Metered::Except(ends) => !ends.iter().any(|e| path.ends_with(e)),
            Metered::Only(ends) => ends.iter().any(|e| path.ends_with(e)),
        }
    }
}

// === impl Key ===

impl Key {
    /// The key (or mark) `headers` and `query` carry here, trimmed.
    pub fn given<'a>(self, headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
        match self {
            Key::Bearer => {
                let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            }
            Key::Header(name) => Some(headers.get(name)?.to_str().ok()?.trim()),
            Key::Query(name) => query?.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == name && !v.is_empty()).then_some(v)
            }),
        }
    }
}
