//! The request a log line belongs to, without a tracing span: the request
//! id is a task-local for the request's future (and its stream's task), and
//! the log formatter (the CLI's) writes it on every line it prints. A span
//! per request cost about 10 500 instructions at `info`, every request;
//! this costs a task-local's swap per poll, and only a line that is
//! printed reads it.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static REQUEST_ID: Arc<str>;
}

/// Runs `fut` as the request `id`'s: every log line it prints names it.
pub fn scope<F: Future>(id: Arc<str>, fut: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, fut)
}

/// The id of the request whose task is running, if any.
pub fn request_id() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}
