//! OpenAI's Responses API (`/v1/responses`) over the same engine: the
//! request's shapes and their translation onto the neutral types
//! ([`request`]), the `response` object and its output items ([`answer`]),
//! the semantic event stream ([`stream`]), a Responses target's own
//! answers relayed as sent ([`native`]), and stored responses for
//! `previous_response_id` ([`store`]). The routes are in
//! `routes/responses.rs`.

pub(crate) mod answer;
pub(crate) mod native;
pub(crate) mod request;
pub(crate) mod store;
pub(crate) mod stream;

#[cfg(test)]
mod tests;

/// A fresh id with the API's prefix for its kind (`resp`, `msg`, `fc`,
/// `call`, `rs`): 32 random hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    format!(
        "{prefix}_{}{}",
        understudy_core::new_request_id(),
        understudy_core::new_request_id()
    )
}
