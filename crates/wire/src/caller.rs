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

/// `models`: a list of model names; anything else (a value of another
/// shape, or a list holding something other than names) is not routing,
/// and is ignored as any unknown field is — a body is never refused for it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ModelsIn {
    List(Vec<String>),
    Other(serde::de::IgnoredAny),
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
/// the `provider` preferences; `None` when it asked for none. Nothing is
/// refused here: the lists are bounded and the names checked
/// ([`CallerRouting::validate`]) only where the operator lets the request
/// route itself; elsewhere the fields are ignored.
pub fn routing(
    models: Option<Box<ModelsIn>>,
    provider: Option<Box<ProviderField>>,
    fallbacks: Option<Box<FallbacksIn>>,
) -> Option<Box<CallerRouting>> {
    if models.is_none() && provider.is_none() && fallbacks.is_none() {
        return None;
    }
    let mut wish = CallerRouting::new();
    if let Some(ModelsIn::List(list)) = models.map(|m| *m) {
        wish.models = list;
    }
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
    (!wish.is_empty()).then(|| Box::new(wish))
}

/// `body` (a client's JSON as sent) without the routing members `fields`
/// (the gateway's, never a provider's): the body as it was when it has
/// none of them. `None` when it cannot be edited so that none is left (a
/// key written with escapes, a member given twice, not an object): such a
/// body must not be forwarded as it is, and the request is translated
/// from its parse instead, which never carries them.
pub fn strip(body: &str, fields: &[&str]) -> Option<String> {
    let out = crate::messages::native::without_members(body, fields)?;
    // The edit finds members by their plain spelling; the parse below
    // decodes every key, so a member spelled otherwise (or twice) shows.
    let top: std::collections::HashMap<std::borrow::Cow<'_, str>, serde::de::IgnoredAny> =
        serde_json::from_str(&out).ok()?;
    (!fields.iter().any(|f| top.contains_key(*f))).then_some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use super::*;

    #[derive(Deserialize)]
    struct Body {
        models: Option<Box<ModelsIn>>,
        provider: Option<Box<ProviderField>>,
        fallbacks: Option<Box<FallbacksIn>>,
    }

    fn read(json: &str) -> Option<Box<CallerRouting>> {
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
        .unwrap();
        assert_eq!(got.models, ["a", "b", "c", "d"]);
        assert_eq!(got.order, ["x"]);
        assert_eq!(got.only, ["x", "y"]);
        assert_eq!(got.ignore, ["z"]);
        assert!(!got.allow_fallbacks);
        assert_eq!(read("{}"), None);
        // Anthropic's own `"default"` is not a list of models.
        assert_eq!(read(r#"{"fallbacks":"default"}"#), None);
        // An empty preference asks for nothing, nor does a `provider` of
        // another shape.
        assert_eq!(read(r#"{"provider":{"sort":"price"}}"#), None);
        assert_eq!(read(r#"{"provider":"openai"}"#), None);
        // Names are checked where the request may route itself, not here.
        assert_eq!(read(r#"{"models":[""]}"#).unwrap().models, [""]);
    }

    /// A `models` of another shape than a list of names is not routing:
    /// the body still parses.
    #[test]
    fn a_models_of_another_shape_is_not_routing() {
        for json in [
            r#"{"models":"gpt-4o"}"#,
            r#"{"models":[1,2]}"#,
            r#"{"models":{"a":1}}"#,
            r#"{"models":null}"#,
            r#"{"models":[{"model":"a"}]}"#,
        ] {
            assert_eq!(read(json), None, "{json}");
        }
    }

    #[test]
    fn routing_members_leave_the_body_and_nothing_else_does() {
        let body =
            r#"{"model": "m", "models": ["a"], "messages": [], "provider": {"order": ["x"]}}"#;
        assert_eq!(
            strip(body, &ROUTING_FIELDS).unwrap(),
            r#"{"model": "m",  "messages": []}"#
        );
        let last = r#"{"model":"m","fallbacks":[{"model":"b"}]}"#;
        assert_eq!(strip(last, &ROUTING_FIELDS).unwrap(), r#"{"model":"m"}"#);
        let none = r#"{"model":"m"}"#;
        assert_eq!(strip(none, &ROUTING_FIELDS).unwrap(), none);
    }

    /// A member the edit cannot take out is never left in: no body.
    #[test]
    fn a_member_that_cannot_be_taken_out_leaves_no_body() {
        for body in [
            r#"{"model":"m","mod\u0065ls":["a"]}"#,
            r#"{"model":"m","models":["a"],"models":["b"]}"#,
            r#"[{"models":["a"]}]"#,
        ] {
            assert_eq!(strip(body, &ROUTING_FIELDS), None, "{body}");
        }
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
