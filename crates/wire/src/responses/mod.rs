//! OpenAI's Responses API, both directions: to a provider configured with
//! `responses_api = true`, and from a client of the gateway's
//! `/v1/responses`.
//!
//! Reasoning items are signed by the target that produced them: their
//! `encrypted_content` (and, with `store`, their id) means nothing to
//! another. The gateway tags the id of every reasoning item a native target
//! returns (`rs_X` becomes `rs_us<tag>_X`, `<tag>` a hash of the provider
//! and model) and, when the client sends it back, restores the id for that
//! same target and drops the item for every other. An untagged reasoning
//! item with `encrypted_content` (its producer is unknown) is dropped too.
//!
//! Layout: to a provider, `request.rs` builds a translated body,
//! `native.rs` fits a client's own body to its target (and tags reasoning
//! items), `response.rs` reads an answer (with the one table of statuses
//! and `incomplete_details` reasons), `stream.rs` parses the event stream.
//! From a client, `inbound.rs` reads the request into the neutral one,
//! `answer.rs` holds the `response` object and its output items,
//! `events.rs` writes the semantic event stream, and `relay.rs` relays a
//! native target's own; `endpoint.rs` is the front end's HTTP edge (its
//! paths, key and error shape).

pub mod answer;
pub mod endpoint;
pub mod events;
pub mod inbound;
pub mod native;
pub mod relay;
pub mod request;
pub mod response;
pub mod stream;

#[cfg(test)]
mod tests_inbound;
#[cfg(test)]
mod tests_upstream;

/// A fresh id with the API's prefix for its kind (`resp`, `msg`, `fc`,
/// `call`, `rs`): 32 random hex digits.
pub fn new_id(prefix: &str) -> String {
    format!(
        "{prefix}_{:016x}{:016x}",
        fastrand::u64(..),
        fastrand::u64(..)
    )
}
