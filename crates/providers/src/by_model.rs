//! One provider, two APIs by model: a cloud that serves Claude through one
//! and its other models through another (Bedrock's InvokeModel and
//! Converse, Vertex's rawPredict and generateContent). Each call goes to
//! the adapter its model speaks; both share the provider's credentials,
//! which the actor refreshes once for the two.

use std::sync::Arc;
use std::time::Duration;

use understudy_core::{Adapter, BoxEventStream, BoxFuture, CallOptions, Credentials, ProbeFailure};
use understudy_types::{ChatRequest, Completion, Failure};

/// `first` for the models `takes` picks, `second` for the rest.
#[derive(Debug)]
pub(crate) struct ByModel<A, B> {
    pub(crate) first: A,
    pub(crate) second: B,
    /// Whether a model goes to `first`.
    pub(crate) takes: fn(&str) -> bool,
}

impl<A: Adapter, B: Adapter> ByModel<A, B> {
    /// The adapter that speaks `model`'s API.
    fn of(&self, model: &str) -> &dyn Adapter {
        if (self.takes)(model) {
            &self.first
        } else {
            &self.second
        }
    }
}

impl<A: Adapter, B: Adapter> Adapter for ByModel<A, B> {
    fn complete<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>> {
        self.of(model).complete(model, request, call)
    }

    fn stream<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>> {
        self.of(model).stream(model, request, call)
    }

    fn count_tokens<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        connect: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, Failure>> {
        self.of(model).count_tokens(model, request, connect)
    }

    fn probe<'a>(
        &'a self,
        model: &'a str,
        connect: Duration,
    ) -> BoxFuture<'a, Result<bool, ProbeFailure>> {
        self.of(model).probe(model, connect)
    }

    /// The two share one set of credentials: the first's (or, if it
    /// keeps none, the second's).
    fn credentials(&self) -> Option<Arc<dyn Credentials>> {
        self.first
            .credentials()
            .or_else(|| self.second.credentials())
    }
}
