//! The softened retry: the same request with a gentler system prompt and a
//! cooler temperature, sent once to the provider that refused.

use std::sync::Arc;

use understudy_types::chat::{ChatRequest, NativeRequest, SOFTENING_SUFFIX, Softened};

/// The lowest temperature a softened retry uses.
pub const SOFTENED_TEMPERATURE_FLOOR: f32 = 0.3;

/// How much cooler a softened retry runs.
pub const SOFTENED_TEMPERATURE_STEP: f32 = 0.2;

/// Builds the softened form of `original`. `provider_default_temperature` is
/// the temperature the provider uses when the request sets none. A
/// natively written body is only marked softened (with the temperature,
/// unless its protocol fixes the sampling): the adapter that forwards it
/// edits it, in its protocol.
pub fn soften(original: &ChatRequest, provider_default_temperature: f32) -> ChatRequest {
    let mut softened = original.clone();
    let system = original.system.as_deref().unwrap_or_default();
    softened.system = Some(format!("{system}{SOFTENING_SUFFIX}"));
    let fixed = original.native.as_deref().is_some_and(|n| n.fixed_sampling);
    if !fixed {
        let t = original.temperature.unwrap_or(provider_default_temperature);
        softened.temperature = Some(softened_temperature(t));
    }
    if let Some(native) = &original.native {
        // The same body: where its members sit holds for it too.
        let mut marked = NativeRequest::clone(native);
        marked.softened = Some(Softened {
            temperature: softened.temperature.filter(|_| !fixed),
        });
        softened.native = Some(Arc::new(marked));
    }
    softened
}

/// `max(t - 0.2, 0.3)`, rounded to two decimals so that 0.7 becomes 0.5 on
/// the wire rather than 0.49999997.
pub fn softened_temperature(t: f32) -> f32 {
    let cooled = (t - SOFTENED_TEMPERATURE_STEP).max(SOFTENED_TEMPERATURE_FLOOR);
    (cooled * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperature() {
        for (t, want) in [
            (1.0, 0.8),
            (0.7, 0.5),
            (0.5, 0.3),
            (0.4, 0.3),
            (0.0, 0.3),
            (2.0, 1.8),
        ] {
            assert_eq!(softened_temperature(t), want, "t = {t}");
        }
    }

    #[test]
    fn prompt_and_default_temperature() {
        let req = ChatRequest::user("roast me").with_system("You are a comedian.");
        let s = soften(&req, 1.0);
        assert_eq!(
            s.system.as_deref(),
            Some(format!("You are a comedian.{SOFTENING_SUFFIX}").as_str())
        );
        assert_eq!(s.temperature, Some(0.8));
        assert_eq!(s.messages, req.messages);

        let bare = soften(&ChatRequest::user("x"), 1.0);
        assert_eq!(bare.system.as_deref(), Some(SOFTENING_SUFFIX));
    }

    #[test]
    fn a_native_body_is_marked_for_its_adapter_to_soften() {
        // (the protocol fixes the sampling, the neutral temperature after,
        // the temperature the adapter is given)
        for (fixed, neutral, given) in [(false, Some(0.5), Some(0.5)), (true, Some(0.7), None)] {
            let req = ChatRequest {
                native: Some(Arc::new({
                    let mut n =
                        NativeRequest::new(understudy_types::protocol::Protocol::Messages, "{}");
                    n.headers = vec![("anthropic-beta".into(), "x".into())];
                    n.fixed_sampling = fixed;
                    n
                })),
                temperature: Some(0.7),
                ..ChatRequest::user("hi")
            };
            let softened = soften(&req, 1.0);
            assert_eq!(softened.temperature, neutral, "fixed: {fixed}");
            let native = softened.native.unwrap();
            assert_eq!(native.softened, Some(Softened { temperature: given }));
            assert_eq!(native.body, "{}", "core never edits the body");
            assert_eq!(
                native.headers,
                [("anthropic-beta".to_owned(), "x".to_owned())]
            );
        }
    }
}
