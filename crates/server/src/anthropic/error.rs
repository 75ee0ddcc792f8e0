//! Anthropic's error body, `{"type":"error","error":{"type","message"}}`:
//! what an error response carries (`crate::error`) and what the `error`
//! event that ends a broken stream carries ([`super::stream`]).

use serde::Serialize;

/// An error body: `{"type":"error","error":{"type","message"}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetailOut<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ErrorDetailOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub message: &'a str,
}

impl<'a> ErrorOut<'a> {
    pub(crate) fn new(kind: &'a str, message: &'a str) -> Self {
        Self {
            kind: "error",
            error: ErrorDetailOut { kind, message },
        }
    }
}
