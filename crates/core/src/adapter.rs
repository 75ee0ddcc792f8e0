//! The seam between the engine and the wire: an [`Adapter`] speaks one
//! provider's protocol, an [`AdapterFactory`] builds adapters from settings.
//!
//! The traits live here, and the implementations in `understudy-providers`,
//! so that the engine depends on no HTTP client and tests can see exactly
//! what crosses the seam.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use understudy_settings::ProviderSettings;
use understudy_types::chat::{ChatRequest, Completion, StreamEvent};
use understudy_types::error::Failure;
use understudy_types::protocol::Protocol;

pub use crate::credentials::{CredentialStatus, Credentials};

pub use understudy_record::sink::BoxFuture;

/// One provider's wire protocol, bound to its settings and its pooled
/// HTTP client. Cheap to share: the provider actor holds it in an `Arc` and
/// hands clones to the tasks that do the I/O.
pub trait Adapter: Send + Sync + fmt::Debug + 'static {
    /// Sends one non-streamed request for `model` and classifies the result.
    /// `call.connect` bounds the connection set-up (the target's timeout: a
    /// route may set its own); every other timeout is applied by the caller.
    /// Connection, HTTP and body errors come back as a classified
    /// [`Failure`], never as a panic.
    fn complete<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>>;

    /// Opens a streamed request for `model`. An error status or a refused
    /// connection fails here; everything after the response headers comes
    /// through the returned stream.
    fn stream<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>>;

    /// Asks the provider to count the input tokens of `request` for
    /// `model`; `Ok(None)` when the protocol cannot (only a natively
    /// written Anthropic request can be counted by Anthropic today).
    fn count_tokens<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        connect: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, Failure>> {
        let _ = (model, request, connect);
        Box::pin(async { Ok(None) })
    }

    /// Checks, with a call that generates nothing (a model lookup, a free
    /// token count), that the provider is reachable, takes the key and
    /// serves `model`. `Ok(true)`: it does; `Ok(false)`: the protocol has
    /// no such call (the target stays unchecked); `Err`: the classified
    /// answer with the error codes it named, from which the prober tells
    /// a refused key or a missing model from an answer that proves nothing.
    fn probe<'a>(
        &'a self,
        model: &'a str,
        connect: Duration,
    ) -> BoxFuture<'a, Result<bool, ProbeFailure>> {
        let _ = (model, connect);
        Box::pin(async { Ok(false) })
    }

    /// The credentials the adapter signs with, when they expire or change
    /// (a Vertex access token, AWS keys in a file): the provider's actor
    /// holds them and refreshes them ahead of time, so that no request
    /// waits on a refresh it did not need.
    fn credentials(&self) -> Option<Arc<dyn Credentials>> {
        None
    }
}

/// A probe's answer that did not prove the target ready.
#[derive(Debug, Clone)]
pub struct ProbeFailure {
    /// The answer classified as a call's would be (its status, its words).
    pub failure: Failure,
    /// The error codes the answer named, as the provider spells them:
    /// `error.code`, `error.type`, AWS's `__type` or `x-amzn-ErrorType`
    /// (without a namespace), a Google rpc `status` or a detail's
    /// `reason`. Empty for an answer with none (a transport failure).
    pub said: Vec<String>,
}

impl From<Failure> for ProbeFailure {
    fn from(failure: Failure) -> Self {
        Self {
            failure,
            said: Vec::new(),
        }
    }
}

/// What one attempt sends besides its request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// How long connecting may take (the target's timeout: a route may set
    /// its own).
    pub connect: Duration,
    /// The W3C trace context the provider receives, when its settings say
    /// `forward_traceparent` and the request is traced: `traceparent`
    /// naming the attempt's own span, and the caller's `tracestate`.
    pub trace: Option<TraceHeaders>,
    /// Anthropic's fallback credit on this attempt, where the plan may use
    /// one (a later target on the same account); `None` on every other
    /// call. Only an Anthropic API provider reads it.
    pub credit: Option<Box<CreditUse>>,
}

/// Anthropic's fallback credit on one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreditUse {
    /// Ask for one: a refusal of this attempt should carry a credit (the
    /// request goes with the credit's beta).
    Ask,
    /// Send this refusal's credit back (with the beta).
    Redeem(understudy_types::credit::CreditToken),
}

/// W3C trace context headers, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl CallOptions {
    /// A call with only a connect timeout.
    pub fn connect(connect: Duration) -> Self {
        Self {
            connect,
            trace: None,
            credit: None,
        }
    }
}

/// A provider's streamed answer, as neutral events.
///
/// It yields [`StreamEvent::Delta`]s, then exactly one of
/// [`StreamEvent::Finish`] (the provider signalled a complete answer) or an
/// `Err` (an error event, a refusal, a malformed event, or a stream that
/// ended without its terminal marker), then `None`. Dropping it closes the
/// upstream connection.
pub trait EventStream: Send + 'static {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StreamEvent, Failure>>>;

    /// The model the provider says is answering, once the stream named it.
    fn model(&self) -> Option<String> {
        None
    }

    /// The provider's own id for the answer being streamed, once the
    /// stream named it (see [`understudy_types::Completion::response_id`]).
    fn response_id(&self) -> Option<String> {
        None
    }

    /// The rate-limit budget the stream's response headers reported (read
    /// only for a pool's key).
    fn rate_limits(&self) -> Option<understudy_types::ratelimit::RateLimits> {
        None
    }

    /// What the provider says became of the fallback credit the request
    /// carried (Anthropic), once the stream said it.
    fn fallback_credit(&self) -> Option<understudy_types::credit::CreditStatus> {
        None
    }
}

/// A boxed [`EventStream`].
pub type BoxEventStream = Box<dyn EventStream>;

/// Builds adapters. The engine asks it once per provider actor start.
pub trait AdapterFactory: Send + Sync + fmt::Debug + 'static {
    /// Whether an adapter for `kind` is compiled in.
    fn supports(&self, kind: Protocol) -> bool;

    /// Builds the adapter for one provider.
    fn build(&self, settings: &ProviderSettings) -> Result<Arc<dyn Adapter>, String>;
}
