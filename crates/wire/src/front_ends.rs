//! Which front end each protocol is: [`edge`], the one table from a
//! [`Protocol`] to its front end's [`Edge`] (each built from the
//! [`Endpoint`](crate::endpoint::Endpoint) impl in its protocol's
//! `endpoint.rs`), and what is read off all of them at once (whose path a
//! request is on, where clients put their keys). A new front end is one
//! arm here.
//!
//! It sits above the protocols' folders and the trait they implement: they
//! never import it.

use http::HeaderMap;
use understudy_types::Protocol;

use crate::chat_completions::endpoint::ChatCompletionsEdge;
use crate::endpoint::{Edge, Key, MODELS_PATH};
use crate::generate_content::endpoint::GenerateContentEdge;
use crate::messages::endpoint::MessagesEdge;
use crate::responses::endpoint::ResponsesEdge;

/// The one function from a protocol to its front end's table (`None` for
/// a protocol no front end speaks).
pub fn edge(p: Protocol) -> Option<&'static Edge> {
    match p {
        Protocol::ChatCompletions => Some(const { &Edge::of::<ChatCompletionsEdge>() }),
        Protocol::Responses => Some(const { &Edge::of::<ResponsesEdge>() }),
        Protocol::Messages => Some(const { &Edge::of::<MessagesEdge>() }),
        Protocol::GenerateContent => Some(const { &Edge::of::<GenerateContentEdge>() }),
        Protocol::Converse => None,
    }
}

/// The front ends' tables, in [`Protocol::FRONT_ENDS`] order.
pub fn front_ends() -> impl DoubleEndedIterator<Item = &'static Edge> + Clone {
    Protocol::FRONT_ENDS.into_iter().filter_map(edge)
}

/// The front end whose path `path` is (`None`: the neutral API's, or no
/// one's); on the shared [`MODELS_PATH`], the one whose clients' marks
/// the request carries.
pub fn owner(path: &str, headers: &HeaderMap, query: Option<&str>) -> Option<Protocol> {
    if path == MODELS_PATH {
        return models_owner(headers, query);
    }
    front_ends().find(|e| e.owns(path)).map(|e| e.protocol)
}

/// Whose model list a request for [`MODELS_PATH`] asks for: the last
/// front end whose marks it carries (Google's clients before Anthropic's),
/// else the unmarked list's.
pub fn models_owner(headers: &HeaderMap, query: Option<&str>) -> Option<Protocol> {
    let marked = front_ends().rev().find(|e| {
        e.model_marks
            .is_some_and(|marks| marks.iter().any(|k| k.given(headers, query).is_some()))
    });
    marked
        .or_else(|| front_ends().find(|e| e.model_marks.is_some_and(<[Key]>::is_empty)))
        .map(|e| e.protocol)
}

/// Every place a front end's client sends its key, each once, in
/// [`Protocol::FRONT_ENDS`] order (the first one given that matches wins).
pub fn keys() -> impl Iterator<Item = Key> + Clone {
    static KEYS: std::sync::LazyLock<Vec<Key>> = std::sync::LazyLock::new(|| {
        let mut keys: Vec<Key> = Vec::new();
        for key in front_ends().flat_map(|e| e.keys.iter().copied()) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys
    });
    KEYS.iter().copied()
}

/// How a client sends its key, for the 401 that asks for one:
/// `Authorization: Bearer <key>, x-api-key: <key> or x-goog-api-key: <key>`
/// (a query parameter is not advertised).
pub fn keys_named() -> String {
    let named: Vec<String> = keys()
        .filter_map(|k| match k {
            Key::Bearer => Some("Authorization: Bearer <key>".to_owned()),
            Key::Header(name) => Some(format!("{name}: <key>")),
            Key::Query(_) => None,
        })
        .collect();
    match named.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_front_end_has_a_table_and_owns_its_routes() {
        for p in Protocol::FRONT_ENDS {
            let e = edge(p).expect("a front end has a table");
            assert_eq!(e.protocol, p);
            assert!(!e.routes.is_empty(), "{p}");
            for r in e.routes {
                let path = r.path.replace("{target}", "m:generateContent");
                let path = path.replace("{id}", "resp_1");
                let headers = HeaderMap::new();
                if path == MODELS_PATH {
                    continue;
                }
                assert_eq!(owner(&path, &headers, None), Some(p), "{path}");
            }
        }
        assert!(edge(Protocol::Converse).is_none());
    }

    #[test]
    fn the_keys_are_the_union_in_order_and_named_as_before() {
        let keys: Vec<Key> = keys().collect();
        assert_eq!(
            keys,
            [
                Key::Bearer,
                Key::Header("x-api-key"),
                Key::Header("x-goog-api-key"),
                Key::Query("key"),
            ]
        );
        assert_eq!(
            keys_named(),
            "Authorization: Bearer <key>, x-api-key: <key> or x-goog-api-key: <key>"
        );
    }

    #[test]
    fn the_shared_model_list_goes_by_the_clients_marks() {
        let with = |name: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, http::HeaderValue::from_static("x"));
            h
        };
        let none = HeaderMap::new();
        let owner = |h: &HeaderMap, q| models_owner(h, q);
        assert_eq!(owner(&none, None), Some(Protocol::ChatCompletions));
        assert_eq!(
            owner(&with("anthropic-version"), None),
            Some(Protocol::Messages)
        );
        for mark in ["x-goog-api-key", "x-goog-api-client"] {
            assert_eq!(owner(&with(mark), None), Some(Protocol::GenerateContent));
        }
        assert_eq!(owner(&none, Some("key=k")), Some(Protocol::GenerateContent));
        // Google's marks outrank Anthropic's.
        let mut both = with("anthropic-version");
        both.insert("x-goog-api-client", http::HeaderValue::from_static("x"));
        assert_eq!(owner(&both, None), Some(Protocol::GenerateContent));
    }

    #[test]
    fn paths_go_to_their_front_end() {
        let none = HeaderMap::new();
        for (path, want) in [
            ("/v1/chat/completions", Some(Protocol::ChatCompletions)),
            ("/v1/responses", Some(Protocol::Responses)),
            (
                "/v1/responses/resp_1/input_items",
                Some(Protocol::Responses),
            ),
            ("/v1/messages", Some(Protocol::Messages)),
            ("/v1/messages/count_tokens", Some(Protocol::Messages)),
            ("/v1/messages/nowhere", Some(Protocol::Messages)),
            ("/v1beta/models", Some(Protocol::GenerateContent)),
            ("/v1beta/anything", Some(Protocol::GenerateContent)),
            ("/v1/models/m:countTokens", Some(Protocol::GenerateContent)),
            ("/v1/generate", None),
            ("/v1/chat/completions/x", None),
            ("/healthz", None),
        ] {
            assert_eq!(owner(path, &none, None), want, "{path}");
        }
    }
}
