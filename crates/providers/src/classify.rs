//! What transport errors mean; the HTTP statuses and rate-limit hints every
//! protocol shares are `understudy_wire::classify`, re-exported here.

use understudy_types::{Failure, FailureKind};

pub use understudy_wire::classify::*;

/// A transport-level error: no (complete) HTTP response. The URL is
/// stripped so that nothing configured in it can reach a log.
pub fn transport(e: reqwest::Error) -> Failure {
    let kind = if e.is_timeout() {
        FailureKind::Timeout
    } else {
        FailureKind::Connection
    };
    let e = e.without_url();
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    Failure::new(kind, detail)
}
