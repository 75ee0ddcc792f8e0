//! The routing fields a client may put in a body, as the gateways that
//! defined them write them: OpenRouter's `models` (models to try after
//! `model`, in order) and `provider` object (`order`, `only`, `ignore`,
//! `allow_fallbacks`; its other preferences — `sort`, `max_price`,
//! `data_collection`, `quantizations`… — are not Understudy's to honour
//! and are ignored), LiteLLM's `fallbacks` (model names; its SDK's objects
//! with a `model`), and the Messages API's `fallbacks: [{"model": …}]`.
//! Each front end reads them in its own typed parse (fields that are
//! usually absent) and hands them here; they never reach a provider: a
//! natively forwarded body loses them ([`ROUTING_FIELDS`]).

use serde::Deserialize;
use understudy_types::caller::CallerRouting;

use crate::Invalid;

/// The body fields the gateway reads for routing and never forwards.
pub const ROUTING_FIELDS: [&str; 3] = ["models", "provider", "fallbacks"];

/// OpenRouter's `provider` object: the preferences Understudy honours
/// (provider names are the gateway's `[providers.NAME]`). Its other fields
/// are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct ProviderIn {
    pub order: Option<Vec<String>>,
    pub only: Option<Vec<String>>,
    pub ignore: Option<Vec<String>>,
    pub allow_fallbacks: Option<bool>,
}

/// `provider`: OpenRouter's object; anything else (a client's own
/// `provider` of another shape) is not routing, and is ignored as any
/// unknown field is.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ProviderField {
    Prefs(ProviderIn),
    Other(serde::de::IgnoredAny),
}

/// `fallbacks`: a list of models; anything else (Anthropic's own
/// `"default"`) is kept out of routing.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum FallbacksIn {
    List(Vec<FallbackIn>),
    Other(serde::de::IgnoredAny),
}

/// One fallback: a model name (LiteLLM's proxy) or an object with a
/// `model` (LiteLLM's SDK, the Messages API's shape; its other keys are
/// not read).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum FallbackIn {
    Name(String),
    Entry { model: String },
}

/// The routing a body asked for: `models`, then `fallbacks` appended, and
/// the `provider` preferences; `None` when it asked for none. Lists are
/// bounded and names checked ([`CallerRouting::validate`]).
pub fn routing(
    models: Option<Box<Vec<String>>>,
    provider: Option<Box<ProviderField>>,
    fallbacks: Option<Box<FallbacksIn>>,
) -> Result<Option<Box<CallerRouting>>, Invalid> {
    if models.is_none() && provider.is_none() && fallbacks.is_none() {
        return Ok(None);
    }
    let mut wish = CallerRouting::new();
    wish.models = models.map(|m| *m).unwrap_or_default();
    if let Some(FallbacksIn::List(list)) = fallbacks.map(|f| *f) {
        wish.models.extend(list.into_iter().map(|f| match f {
            FallbackIn::Name(name) | FallbackIn::Entry { model: name } => name,
        }));
    }
    if let Some(ProviderField::Prefs(p)) = provider.map(|p| *p) {
        wish.order = p.order.unwrap_or_default();
        wish.only = p.only.unwrap_or_default();
        wish.ignore = p.ignore.unwrap_or_default();
        wish.allow_fallbacks = p.allow_fallbacks.unwrap_or(true);
    }
    wish.validate("models")?;
    Ok((!wish.is_empty()).then(|| Box::new(wish)))
}

/// `body` (a client's JSON as sent) without the routing members `fields`
/// (the gateway's, never a provider's); the body as it was when it has
/// none of them or cannot be edited.
pub fn strip(body: String, fields: &[&str]) -> String {
    crate::messages::native::without_members(&body, fields).unwrap_or(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use super::*;

    #[derive(Deserialize)]
    #[expect(
        clippy::box_collection,
        reason = "the front ends' shape: boxed to keep their bodies small"
    )]
    struct Body {
        models: Option<Box<Vec<String>>>,
        provider: Option<Box<ProviderField>>,
        fallbacks: Option<Box<FallbacksIn>>,
    }

    fn read(json: &str) -> Result<Option<Box<CallerRouting>>, Invalid> {
        let b: Body = serde_json::from_str(json).unwrap();
        routing(b.models, b.provider, b.fallbacks)
    }

    #[test]
    fn every_shape_clients_send_is_read() {
        let got = read(
            r#"{"models":["a","b"],"fallbacks":["c",{"model":"d","messages":[]}],
                "provider":{"order":["x"],"only":["x","y"],"ignore":["z"],
                "allow_fallbacks":false,"sort":"price","max_price":{"prompt":1}}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.models, ["a", "b", "c", "d"]);
        assert_eq!(got.order, ["x"]);
        assert_eq!(got.only, ["x", "y"]);
        assert_eq!(got.ignore, ["z"]);
        assert!(!got.allow_fallbacks);
        assert_eq!(read("{}").unwrap(), None);
        // Anthropic's own `"default"` is not a list of models.
        assert_eq!(read(r#"{"fallbacks":"default"}"#).unwrap(), None);
        // An empty preference asks for nothing, nor does a `provider` of
        // another shape.
        assert_eq!(read(r#"{"provider":{"sort":"price"}}"#).unwrap(), None);
        assert_eq!(read(r#"{"provider":"openai"}"#).unwrap(), None);
        let e = read(r#"{"models":[""]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("models"));
    }

    #[test]
    fn routing_members_leave_the_body_and_nothing_else_does() {
        let body =
            r#"{"model": "m", "models": ["a"], "messages": [], "provider": {"order": ["x"]}}"#;
        assert_eq!(
            strip(body.to_owned(), &ROUTING_FIELDS),
            r#"{"model": "m",  "messages": []}"#
        );
        let last = r#"{"model":"m","fallbacks":[{"model":"b"}]}"#;
        assert_eq!(strip(last.to_owned(), &ROUTING_FIELDS), r#"{"model":"m"}"#);
        let none = r#"{"model":"m"}"#;
        assert_eq!(strip(none.to_owned(), &ROUTING_FIELDS), none);
    }

    /// The fields are boxed (and rarely sent fields beside them too), so
    /// that no front end's parsed body — held across its request's awaits —
    /// grew for them.
    #[test]
    fn the_parsed_bodies_did_not_grow() {
        use std::mem::size_of;
        assert!(size_of::<crate::chat_completions::inbound::ChatCompletionRequest>() <= 384);
        assert!(size_of::<crate::responses::inbound::CreateRequest>() <= 400);
        assert!(size_of::<crate::messages::client::MessagesRequest>() <= 456);
    }
}
