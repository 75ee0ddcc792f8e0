//! Google's Generative Language API (Gemini): `generateContent` and
//! `streamGenerateContent`, both directions.
//!
//! Refusals all arrive as HTTP 200: a prompt blocked
//! (`promptFeedback.blockReason`, no candidates), a candidate stopped by a
//! filter (`finishReason` SAFETY, RECITATION, …), or an answer with no usable
//! text at all — which this project counts as a refusal too, with a detail
//! that says which case it was. Gemini reports an invalid key as a 400
//! (`API_KEY_INVALID`), which is `auth`, not `bad_request`.
//!
//! Tools: declarations go out as `functionDeclarations` whose `parameters`
//! are reduced to the OpenAPI subset Gemini's `Schema` accepts (see
//! [`schema`]); calls and results travel as `functionCall` /
//! `functionResponse` parts. Gemini matches a result to its call by name, so
//! the name of each result is recovered from the call with the same id in
//! the history. Answers carry no usable ids, so each call gets a fresh
//! `call_…` id; the finish reason is `STOP` even for calls, so an answer with
//! calls finishes as `tool_calls`. A call's `thoughtSignature` rides in that
//! id and goes back only to this provider and model ([`crate::signature`]).
//!
//! Layout, for requests to Gemini: `request.rs` builds the `generateContent` body, `response.rs`
//! reads an answer (refusals, calls, usage), `stream.rs` parses the
//! `alt=sse` stream, `error.rs` classifies `google.rpc.Status` errors, and
//! `schema.rs` reduces JSON Schema to what Gemini accepts (and reads
//! Google's schemas back). For the Gemini front end: `body.rs` reads a
//! client's body as strictly as Google does (`invalid.rs`: Google's
//! messages for what it refuses), `inbound.rs` translates it
//! into the neutral request, `answer.rs` writes answers,
//! stream chunks and errors, `endpoint.rs` is its HTTP edge (paths, keys,
//! Google's error shape and model list).

pub mod answer;
pub mod body;
pub mod endpoint;
pub mod error;
pub mod inbound;
mod invalid;
pub mod native;
pub mod request;
pub mod response;
pub mod schema;
pub mod stream;
