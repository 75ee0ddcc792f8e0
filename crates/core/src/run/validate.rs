//! Checking an answer against what the request asked for. Validation
//! against a client's JSON Schema runs off the serving threads (a blocking
//! task), on at most half the cores at once, within [`BUDGET`]: a schema
//! that costs more than that fails the attempt (`invalid_output`) instead
//! of stalling the gateway. The schema's limits (`policy/output.rs`) keep
//! every accepted schema far below the budget; this is the backstop.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Semaphore;
use understudy_policy::output::Expected;
use understudy_types::chat::Completion;
use understudy_types::failure::{Failure, FailureKind};

/// How long checking one answer against a schema may take, waiting for a
/// turn included.
pub(crate) const BUDGET: Duration = Duration::from_millis(250);

/// Schema validations running at once, process-wide: half the cores (at
/// least one), so that the other half always serves; more wait their turn
/// (within their budget). A validation past its budget keeps its permit
/// until its thread is done, so runaway work never holds more threads.
fn permits() -> &'static Semaphore {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Semaphore::new((cores / 2).max(1))
    })
}

/// `completion` if it is what `expected` asks for, else this target's
/// `invalid_output`.
pub(crate) async fn check(
    expected: &Arc<Expected>,
    completion: Completion,
) -> Result<Completion, Failure> {
    if !expected.has_schema() {
        return expected.check(&completion).map(|()| completion);
    }
    let expected = Arc::clone(expected);
    let work = async move {
        let permit = permits()
            .acquire()
            .await
            .map_err(|_| Failure::new(FailureKind::InvalidOutput, "validation is shut down"))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            expected.check(&completion).map(|()| completion)
        })
        .await
        .map_err(|_| Failure::new(FailureKind::InvalidOutput, "the validation task failed"))?
    };
    match tokio::time::timeout(BUDGET, Box::pin(work)).await {
        Ok(result) => result,
        Err(_) => Err(Failure::new(
            FailureKind::InvalidOutput,
            format!(
                "checking the answer against the request's schema took longer than {} ms",
                BUDGET.as_millis()
            ),
        )),
    }
}
