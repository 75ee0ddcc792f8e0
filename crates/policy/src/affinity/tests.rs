//! Affinity's rules as data: the pin's lifetime per cache and request, the
//! cached prefix per usage, the switch cost, and the wait-or-switch choice.

use super::*;

const MIN: u64 = 60;

#[test]
fn a_pin_lives_as_long_as_its_cache() {
    let none = CacheHints::default();
    let hour = CacheHints {
        one_hour: true,
        ..none
    };
    let day = CacheHints {
        retention_24h: true,
        ..none
    };
    let explicit = CacheHints {
        options_ttl: Some(secs(30 * MIN)),
        retention_24h: true,
        ..none
    };
    let ten = Some(secs(10 * MIN));
    // (cache, what the request asked, the operator's setting, the class, the lifetime)
    let cases = [
        (
            CacheKind::Anthropic,
            none,
            None,
            TtlClass::FiveMinutes,
            5 * MIN,
        ),
        (
            CacheKind::Anthropic,
            hour,
            None,
            TtlClass::OneHour,
            60 * MIN,
        ),
        (CacheKind::OpenAi, none, None, TtlClass::InMemory, 5 * MIN),
        (
            CacheKind::OpenAi,
            day,
            None,
            TtlClass::Extended,
            24 * 60 * MIN,
        ),
        (
            CacheKind::OpenAi,
            explicit,
            None,
            TtlClass::Explicit,
            30 * MIN,
        ),
        (CacheKind::Gemini, none, None, TtlClass::Implicit, 5 * MIN),
        (
            CacheKind::Anthropic,
            hour,
            ten,
            TtlClass::Configured,
            10 * MIN,
        ),
        (CacheKind::Gemini, none, ten, TtlClass::Configured, 10 * MIN),
    ];
    for (kind, hints, configured, class, ttl) in cases {
        assert_eq!(
            cache_ttl(kind, hints, configured),
            (class, secs(ttl)),
            "{kind:?} {hints:?} {configured:?}"
        );
    }
}

#[test]
fn a_body_says_what_lifetime_it_asked_for() {
    let cases = [
        (
            r#"{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl": "1h"}}]}"#,
            true,
            false,
            None,
        ),
        (
            r#"{"system":[{"cache_control":{"type":"ephemeral","ttl":"5m"}}]}"#,
            false,
            false,
            None,
        ),
        (
            r#"{"model":"gpt-5","prompt_cache_retention":"24h"}"#,
            false,
            true,
            None,
        ),
        (
            r#"{"prompt_cache_retention":"in_memory"}"#,
            false,
            false,
            None,
        ),
        (
            r#"{"prompt_cache_options":{"mode":"implicit","ttl":"30m"}}"#,
            false,
            false,
            Some(30 * MIN),
        ),
        (r#"{"messages":[{"content":"ttl"}]}"#, false, false, None),
        // The options' ttl is the first string `ttl` after them; one
        // before them is not theirs.
        (
            r#"{"prompt_cache_options":{"ttl":30,"x":{"ttl":"1h"}}}"#,
            true,
            false,
            Some(60 * MIN),
        ),
        (
            r#"{"ttl":"5m","prompt_cache_options":{"mode":"implicit"}}"#,
            false,
            false,
            None,
        ),
        // A key after text of several bytes a character, and one cut off
        // at the body's end.
        (
            r#"{"system":"héllo ☃","cache_control":{"ttl" : "1h"},"ttl""#,
            true,
            false,
            None,
        ),
    ];
    for (body, one_hour, retention_24h, options) in cases {
        assert_eq!(
            CacheHints::of_body(body),
            CacheHints {
                one_hour,
                retention_24h,
                options_ttl: options.map(secs),
            },
            "{body}"
        );
    }
}

#[test]
fn only_a_body_that_may_set_a_lifetime_is_searched() {
    let body = r#"{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}]}"#;
    let of = |kind| CacheHints::of_native(&NativeRequest::new(kind, body));
    assert!(of(Protocol::Messages).one_hour);
    assert!(of(Protocol::Responses).one_hour);
    // A natively written Chat Completions body holds no such member (the
    // front end translates one that does): it is not searched.
    assert_eq!(of(Protocol::ChatCompletions), CacheHints::default());
}

#[test]
fn the_cached_prefix_is_what_the_last_answer_left_in_the_cache() {
    let usage = |input, read, write| Usage {
        input_tokens: input,
        cache_read_input_tokens: read,
        cache_write_input_tokens: write,
        ..Usage::default()
    };
    // (cache, usage, the prefix held)
    let cases = [
        (CacheKind::Anthropic, usage(12_000, 10_000, 1_500), 11_500),
        (CacheKind::Anthropic, usage(300, 0, 0), 0),
        (CacheKind::OpenAi, usage(5_000, 4_096, 0), 5_000),
        (CacheKind::OpenAi, usage(5_000, 0, 0), 5_000),
        (CacheKind::OpenAi, usage(900, 0, 0), 0),
        (CacheKind::Gemini, usage(1_500, 0, 0), 0),
        (CacheKind::Gemini, usage(3_000, 0, 0), 3_000),
    ];
    for (kind, usage, prefix) in cases {
        assert_eq!(kind.cached_prefix(&usage), prefix, "{kind:?} {usage:?}");
    }
}

#[test]
fn leaving_a_cache_costs_the_read_discount_and_the_next_write_premium() {
    let anthropic = Rates {
        input_per_mtok: 3.0,
        read: 0.1,
        write: 1.25,
    };
    let openai = Rates {
        input_per_mtok: 1.25,
        read: 0.1,
        write: 1.0,
    };
    // (prefix, from, to, USD)
    let cases = [
        // 100k tokens on Sonnet to Sonnet elsewhere: 0.27 + 0.075.
        (100_000, anthropic, anthropic, 0.345),
        // To a target without a write fee: the discount alone.
        (100_000, anthropic, openai, 0.27),
        (1_000_000, openai, anthropic, 1.125 + 0.75),
        (0, anthropic, anthropic, 0.0),
    ];
    for (prefix, from, to, usd) in cases {
        let got = switch_cost_usd(prefix, from, to);
        assert!((got - usd).abs() < 1e-9, "{prefix} {from:?} {to:?}: {got}");
    }
}

#[test]
fn a_wait_is_sat_out_while_it_costs_less_than_the_switch() {
    // (switch cost, wait cost per second, the wait, the choice)
    let cases = [
        (0.345, 0.01, 2, Choice::Wait),
        (0.001, 0.01, 2, Choice::Switch),
        (0.02, 0.01, 2, Choice::Wait),
        (0.0, 0.0, 2, Choice::Wait),
        (0.0, 0.01, 0, Choice::Wait),
        (0.05, 0.01, 10, Choice::Switch),
    ];
    for (switch_cost_usd, wait_cost_per_second, wait, choice) in cases {
        let weigh = Weigh {
            switch_cost_usd,
            wait_cost_per_second,
        };
        assert_eq!(weigh.choose(secs(wait)), choice, "{weigh:?} {wait}");
    }
}

#[test]
fn the_cache_kind_follows_the_protocol() {
    assert_eq!(CacheKind::of(Protocol::Messages), CacheKind::Anthropic);
    assert_eq!(CacheKind::of(Protocol::Converse), CacheKind::Anthropic);
    assert_eq!(CacheKind::of(Protocol::ChatCompletions), CacheKind::OpenAi);
    assert_eq!(CacheKind::of(Protocol::Responses), CacheKind::OpenAi);
    assert_eq!(CacheKind::of(Protocol::GenerateContent), CacheKind::Gemini);
}
