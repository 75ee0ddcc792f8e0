//! OpenAI's Responses API (`/v1/responses`) over the same engine. The
//! protocol (the request's shapes and their translation, the `response`
//! object, the event stream, the native relay) is
//! `understudy_wire::responses`; here are its front end ([`front`]: the
//! answers, events and native relay, kept before they go out) and stored
//! responses for `previous_response_id` ([`store`]). The routes are in
//! `routes/responses.rs`.

pub(crate) mod front;
pub(crate) mod store;

pub(crate) use understudy_wire::responses::new_id;
