//! Which wire protocol: the one enum for what a provider speaks upstream,
//! what a front end speaks to its clients, the shape a route's errors take
//! and what a native body is written in. `None` where an
//! `Option<Protocol>` stands for an API is the neutral API (the CLI, the
//! demo, `/v1/generate`).

use serde::{Deserialize, Serialize};

/// A wire protocol. Its name ([`Protocol::as_str`]) is the provider's
/// `kind` in the settings file and the `api` label of events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum Protocol {
    /// OpenAI's Chat Completions and every compatible server (Groq,
    /// Ollama, vLLM, OpenRouter…): `kind = "openai"`.
    #[serde(rename = "openai")]
    ChatCompletions,
    /// OpenAI's Responses API: `kind = "responses"` (or `kind = "openai"`
    /// with `responses_api = true`).
    #[serde(rename = "responses")]
    Responses,
    /// Anthropic's Messages API: `kind = "anthropic"`.
    #[serde(rename = "anthropic")]
    Messages,
    /// Google's Gemini API (`generateContent`): `kind = "gemini"`.
    #[serde(rename = "gemini")]
    GenerateContent,
    /// AWS Bedrock's Converse API, for every model on Bedrock that is not
    /// Anthropic's. Only a `kind = "bedrock"` provider speaks it (by
    /// model), so it is not a `kind` of its own (not in [`Self::KINDS`]),
    /// not in [`Self::FRONT_ENDS`], and never a front end's or a native
    /// body's protocol.
    #[serde(rename = "converse")]
    Converse,
}

impl Protocol {
    /// The protocols a client may speak to the gateway (each a front
    /// end), in a fixed order.
    pub const FRONT_ENDS: [Protocol; 4] = [
        Self::ChatCompletions,
        Self::Responses,
        Self::Messages,
        Self::GenerateContent,
    ];

    /// The protocols a provider's `kind` names in the settings file (the
    /// same four as the front ends today, but a front end no provider
    /// speaks is not one).
    pub const KINDS: [Protocol; 4] = [
        Self::ChatCompletions,
        Self::Responses,
        Self::Messages,
        Self::GenerateContent,
    ];

    /// Its name in settings, events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChatCompletions => "openai",
            Self::Responses => "responses",
            Self::Messages => "anthropic",
            Self::GenerateContent => "gemini",
            Self::Converse => "converse",
        }
    }

    /// Whether it is one of OpenAI's two APIs, which share a key header,
    /// an error shape and their servers.
    pub fn is_openai(self) -> bool {
        matches!(self, Self::ChatCompletions | Self::Responses)
    }

    /// Whether the protocol takes images by `https:` URL (Gemini and
    /// Converse take them only inline, and the gateway never fetches a URL
    /// itself).
    pub fn takes_remote_images(self) -> bool {
        !matches!(self, Self::GenerateContent | Self::Converse)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The label of the API a request came through: its protocol's name, or
/// `neutral`.
pub fn api_label(api: Option<Protocol>) -> &'static str {
    api.map_or("neutral", Protocol::as_str)
}

/// Serde for an `Option<Protocol>` naming an API: `neutral` for `None`,
/// as events have always carried it.
pub mod api_serde {
    use crate::protocol::Protocol;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(api: &Option<Protocol>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(crate::protocol::api_label(*api))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Protocol>, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum Neutral {
            Neutral,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Api {
            Neutral(Neutral),
            Protocol(Protocol),
        }
        Ok(match Api::deserialize(d)? {
            Api::Neutral(Neutral::Neutral) => None,
            Api::Protocol(p) => Some(p),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Event {
        #[serde(with = "api_serde")]
        api: Option<Protocol>,
    }

    #[test]
    fn the_names_are_the_settings_and_event_names() {
        for p in Protocol::FRONT_ENDS {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Protocol>(&json).unwrap(), p);
        }
        let names: Vec<_> = Protocol::FRONT_ENDS.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, ["openai", "responses", "anthropic", "gemini"]);
    }

    #[test]
    fn an_api_round_trips_with_neutral_for_none() {
        for api in [None]
            .into_iter()
            .chain(Protocol::FRONT_ENDS.into_iter().map(Some))
        {
            let json = serde_json::to_string(&Event { api }).unwrap();
            assert_eq!(json, format!("{{\"api\":\"{}\"}}", api_label(api)));
            assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), Event { api });
        }
        assert!(serde_json::from_str::<Event>("{\"api\":\"soap\"}").is_err());
    }
}
