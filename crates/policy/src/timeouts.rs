//! Which timeouts bound one attempt: one lookup for both modes (answer and
//! stream), so that every route setting is honoured the same way.
//!
//! Precedence, most specific first: the request (only its overall
//! deadline), the route (each timeout it sets), the provider (each timeout
//! its table sets), the global `[timeouts]`. A provider's timeouts already
//! fall back to the global ones when settings are loaded.

use std::time::Duration;

use understudy_settings::{TimeoutOverrides, Timeouts};

/// The timeouts for one target of one request.
///
/// `provider` is the target's provider's timeouts (global ones where it
/// sets none), `route` what the request's route sets, and `request` the
/// caller's own overall deadline, if any.
pub fn timeouts_for(
    provider: Timeouts,
    route: &TimeoutOverrides,
    request: Option<Duration>,
) -> Timeouts {
    Timeouts {
        connect: route.connect.unwrap_or(provider.connect),
        first_token: route.first_token.unwrap_or(provider.first_token),
        stream_idle: route.stream_idle.unwrap_or(provider.stream_idle),
        attempt: route.attempt.unwrap_or(provider.attempt),
        request: request.or(route.request).unwrap_or(provider.request),
    }
}

/// The whole request's budget: the caller's, else the route's, else the
/// global one (a provider's own `request` timeout cannot bound a request
/// that may walk several providers).
pub fn request_timeout(
    global: Duration,
    route: &TimeoutOverrides,
    request: Option<Duration>,
) -> Duration {
    request.or(route.request).unwrap_or(global)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_most_specific_setting_wins_field_by_field() {
        let provider = Timeouts {
            connect: secs(5),
            first_token: secs(10),
            stream_idle: secs(15),
            attempt: secs(60),
            request: secs(120),
        };
        // (route overrides, request override, expected)
        let cases = [
            (TimeoutOverrides::default(), None, provider),
            (
                TimeoutOverrides {
                    first_token: Some(secs(1)),
                    ..Default::default()
                },
                None,
                Timeouts {
                    first_token: secs(1),
                    ..provider
                },
            ),
            (
                TimeoutOverrides {
                    connect: Some(secs(2)),
                    stream_idle: Some(secs(3)),
                    attempt: Some(secs(90)),
                    request: Some(secs(30)),
                    ..Default::default()
                },
                None,
                Timeouts {
                    connect: secs(2),
                    first_token: secs(10),
                    stream_idle: secs(3),
                    attempt: secs(90),
                    request: secs(30),
                },
            ),
            (
                TimeoutOverrides {
                    request: Some(secs(30)),
                    ..Default::default()
                },
                Some(secs(7)),
                Timeouts {
                    request: secs(7),
                    ..provider
                },
            ),
        ];
        for (route, request, want) in cases {
            assert_eq!(timeouts_for(provider, &route, request), want, "{route:?}");
        }
        assert_eq!(
            request_timeout(secs(120), &TimeoutOverrides::default(), None),
            secs(120)
        );
        assert_eq!(
            request_timeout(
                secs(120),
                &TimeoutOverrides {
                    request: Some(secs(9)),
                    ..Default::default()
                },
                None
            ),
            secs(9)
        );
    }
}
