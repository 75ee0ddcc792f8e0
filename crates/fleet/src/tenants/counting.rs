//! The arithmetic of a record's counts, the same as `fleet.rs`'s script
//! decides it: what a request reserves and costs, the verdict its counts
//! give, a settlement's changes, and the refusal a verdict stands for.

use std::time::Duration;

use understudy_settings::{ClientRecord, NANOS_PER_USD};
use understudy_types::chat::Usage;

use super::{ClientRefusal, Counts, Price, Reservation};

/// What one request reserves: its estimated tokens (0 without `tpm`) and
/// its worst cost (nano-USD; 0 without a budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    pub estimate: u64,
    pub worst: u64,
}

/// The cost of `usage` at `price`, in nano-USD.
pub fn cost_nanos(usage: Usage, price: Price) -> u64 {
    let (input, output) = price;
    let usd = (usage.input_tokens as f64 * input + usage.output_tokens as f64 * output) / 1e6;
    (usd.max(0.0) * NANOS_PER_USD).round() as u64
}

/// A request's worst cost: its estimated `usage` at the dearest of the
/// `prices` of the targets that may serve it (nothing when none has a
/// price, as such a target spends nothing).
pub fn worst_cost_nanos(usage: Usage, prices: &[Price]) -> u64 {
    prices
        .iter()
        .map(|p| cost_nanos(usage, *p))
        .max()
        .unwrap_or(0)
}

/// What `record`'s counts `c` say of one more request reserving `want`:
/// 0 admit, 1 requests spent, 2 tokens spent, 3 budget spent or too little
/// of it left for the request's worst case (the codes of `fleet.rs`'s
/// script, which decides the same way).
pub(super) fn verdict_of(record: &ClientRecord, c: &Counts, want: Reserve) -> u8 {
    let over_budget = record
        .budget_nanos
        .is_some_and(|b| c.spent_nanos >= b || c.spent_nanos.saturating_add(want.worst) > b);
    if over_budget {
        3
    } else if record.rpm.is_some_and(|l| c.requests >= l) {
        1
    } else if record.tpm.is_some_and(|l| c.tokens + want.estimate > l) {
        2
    } else {
        0
    }
}

/// Adds an admitted request's reservation to the counts.
pub(super) fn reserve(c: &mut Counts, want: Reserve) {
    c.requests += 1;
    c.tokens += want.estimate;
    c.spent_nanos = c.spent_nanos.saturating_add(want.worst);
}

/// A settlement's changes to the counts: the tokens (the usage for the
/// estimate, with `tpm`) and the spend (the cost for the reservation).
pub(super) fn settlement(ticket: &Reservation, tokens: u64, cost_nanos: u64) -> (i64, i64) {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let tokens = if ticket.record.tpm.is_some() {
        signed(tokens) - signed(ticket.estimate)
    } else {
        0
    };
    (tokens, signed(cost_nanos) - signed(ticket.reserved_nanos))
}

/// The budget's refusal, with what is left of it (`spent` nano-USD
/// counted) and the request's worst case.
pub(super) fn budget_refusal(
    record: &ClientRecord,
    now_ms: u64,
    spent: u64,
    worst: u64,
) -> ClientRefusal {
    let budget = record.budget_nanos.unwrap_or_default();
    let ends = record.window.at(now_ms / 1000).1;
    ClientRefusal::Budget {
        budget_usd: record.budget_usd().unwrap_or_default(),
        resets_in: Duration::from_secs(ends.saturating_sub(now_ms / 1000)),
        left_usd: budget.saturating_sub(spent) as f64 / NANOS_PER_USD,
        worst_usd: worst as f64 / NANOS_PER_USD,
    }
}

/// The refusal a verdict code stands for (`c`: the counts it was decided
/// on, `worst`: the request's worst cost).
pub(super) fn refusal(
    code: u8,
    record: &ClientRecord,
    now_ms: u64,
    c: &Counts,
    worst: u64,
) -> Result<(), ClientRefusal> {
    let retry_after = minute_left(now_ms);
    match code {
        1 => Err(ClientRefusal::Requests {
            limit: record.rpm.unwrap_or_default(),
            retry_after,
        }),
        2 => Err(ClientRefusal::Tokens {
            limit: record.tpm.unwrap_or_default(),
            retry_after,
        }),
        3 => Err(budget_refusal(record, now_ms, c.spent_nanos, worst)),
        _ => Ok(()),
    }
}

/// How long until the UTC minute of `now_ms` ends.
pub(super) fn minute_left(now_ms: u64) -> Duration {
    Duration::from_millis(60_000 - now_ms % 60_000)
}
