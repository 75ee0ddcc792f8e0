//! The caller's routing as data: names resolved, preferences applied,
//! a record's scope held.

use understudy_settings::{RawClient, Settings};
use understudy_types::caller::CallerRouting;
use understudy_types::error::{ClientRefusal, Error};
use understudy_types::{RouteSelector, Target};

use super::targets;

const TOML: &str = r#"
[routing]
default = "groq"
order = ["groq", "openai", "anthropic"]
[providers.groq]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-groq-0123456789"
model = "llama"
[providers.openai]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-openai-0123456789"
model = "gpt"
[providers.anthropic]
kind = "anthropic"
base_url = "http://127.0.0.1:9"
api_key = "k-anthropic-0123456789"
model = "claude"
[routes]
fast = ["groq", "openai:gpt-mini"]
smart = ["anthropic", "openai"]
"#;

/// `provider:model` of each target.
fn names(targets: &[Target]) -> Vec<String> {
    targets.iter().map(ToString::to_string).collect()
}

fn list(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Resolves `asked` with `wish` (and `models` as a record's scope when
/// given) against [`TOML`].
fn check(asked: &str, wish: CallerRouting, scope: Option<&[&str]>) -> Result<Vec<String>, Error> {
    let settings = Settings::from_toml_str(TOML, |_| None).unwrap();
    let default_route = settings.default_route();
    let record = scope.map(|models| {
        RawClient {
            name: Some("scoped".into()),
            key: Some("sk-scoped-0123456789".into()),
            models: Some(list(models)),
            ..RawClient::default()
        }
        .read("", &|_| None)
        .unwrap()
    });
    let asked = RouteSelector::Model(asked.to_owned());
    let primary = crate::plan::resolve(&asked, &settings, &default_route, &settings.routes)?;
    targets(
        &asked,
        primary,
        &wish,
        record.as_ref(),
        (&settings, &default_route, &settings.routes),
    )
    .map(|t| names(&t))
}

#[test]
fn models_are_tried_in_order_after_the_model() {
    let wish = |models: &[&str]| CallerRouting {
        models: list(models),
        ..CallerRouting::new()
    };
    // (model, models, the plan)
    let cases: [(&str, &[&str], &[&str]); 4] = [
        // A pin stands for its one target, a route for all of its own.
        (
            "openai:gpt-4o",
            &["anthropic:claude-x", "fast"],
            &[
                "openai:gpt-4o",
                "anthropic:claude-x",
                "groq:llama",
                "openai:gpt-mini",
            ],
        ),
        // Repeats are tried once, where first named.
        (
            "fast",
            &["groq", "smart"],
            &[
                "groq:llama",
                "openai:gpt-mini",
                "anthropic:claude",
                "openai:gpt",
            ],
        ),
        // A provider alone is its default model.
        (
            "openai",
            &["anthropic"],
            &["openai:gpt", "anthropic:claude"],
        ),
        // `default` is the default route.
        (
            "default",
            &["anthropic:claude-y"],
            &[
                "groq:llama",
                "openai:gpt",
                "anthropic:claude",
                "anthropic:claude-y",
            ],
        ),
    ];
    for (model, models, want) in cases {
        assert_eq!(
            check(model, wish(models), None).unwrap(),
            list(want),
            "{model} {models:?}"
        );
    }
}

#[test]
fn the_header_list_replaces_model_and_models() {
    let wish = CallerRouting {
        targets: Some(list(&["anthropic:claude-x", "groq"])),
        models: list(&["smart"]),
        ..CallerRouting::new()
    };
    assert_eq!(
        check("openai", wish, None).unwrap(),
        list(&["anthropic:claude-x", "groq:llama"])
    );
}

#[test]
fn provider_preferences_order_and_filter_within_each_model() {
    let prefs = |order: &[&str], only: &[&str], ignore: &[&str], allow: bool| CallerRouting {
        order: list(order),
        only: list(only),
        ignore: list(ignore),
        allow_fallbacks: allow,
        ..CallerRouting::new()
    };
    // (model, preferences, the plan)
    // The plan, or the field refused.
    type Want = Result<&'static [&'static str], &'static str>;
    let cases: [(&str, CallerRouting, Want); 6] = [
        // No list: the model's own route (a pin keeps the default order
        // after it), reordered.
        (
            "groq",
            prefs(&["anthropic", "openai"], &[], &[], true),
            Ok(&["anthropic:claude", "openai:gpt", "groq:llama"]),
        ),
        (
            "smart",
            prefs(&[], &["openai"], &[], true),
            Ok(&["openai:gpt"]),
        ),
        (
            "default",
            prefs(&[], &[], &["groq"], true),
            Ok(&["openai:gpt", "anthropic:claude"]),
        ),
        // Only the first, after the order.
        (
            "fast",
            prefs(&["openai"], &[], &[], false),
            Ok(&["openai:gpt-mini"]),
        ),
        // Providers the gateway does not have are no one's.
        (
            "fast",
            prefs(&["nobody"], &[], &["nobody-else"], true),
            Ok(&["groq:llama", "openai:gpt-mini"]),
        ),
        (
            "fast",
            prefs(&[], &["anthropic"], &[], true),
            Err("provider"),
        ),
    ];
    for (model, wish, want) in cases {
        let got = check(model, wish.clone(), None);
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, list(want), "{model} {wish:?}"),
            (Err(e), Err(field)) => assert!(
                matches!(&e, Error::InvalidRequest { field: f, .. } if *f == field),
                "{e:?}"
            ),
            (got, want) => panic!("{model} {wish:?}: {got:?}, wanted {want:?}"),
        }
    }
    // Per model: the order does not move a later model's targets ahead.
    let wish = CallerRouting {
        models: list(&["openai:gpt"]),
        order: list(&["openai"]),
        ..CallerRouting::new()
    };
    assert_eq!(
        check("groq:llama", wish, None).unwrap(),
        list(&["groq:llama", "openai:gpt"])
    );
}

#[test]
fn a_record_scope_bounds_every_name_asked() {
    let wish = |models: &[&str]| CallerRouting {
        models: list(models),
        ..CallerRouting::new()
    };
    let scope: &[&str] = &["fast", "openai:*"];
    assert_eq!(
        check("fast", wish(&["openai:gpt-4o"]), Some(scope)).unwrap(),
        list(&["groq:llama", "openai:gpt-mini", "openai:gpt-4o"])
    );
    for (models, named) in [
        (&["anthropic:claude"][..], "anthropic:claude"),
        (&["openai:gpt", "smart"][..], "smart"),
    ] {
        let e = check("fast", wish(models), Some(scope)).unwrap_err();
        assert!(
            matches!(&e, Error::Client(ClientRefusal::Model { asked }) if asked == named),
            "{models:?}: {e:?}"
        );
    }
    // The header's names are held to it too.
    let header = CallerRouting {
        targets: Some(list(&["openai:gpt", "groq:llama"])),
        ..CallerRouting::new()
    };
    let e = check("fast", header, Some(scope)).unwrap_err();
    assert!(e.to_string().contains("groq:llama"), "{e}");
    // Unknown names are the client's error, as `model` is.
    let e = check("fast", wish(&["nobody-knows"]), None).unwrap_err();
    assert!(
        matches!(&e, Error::UnknownModel(m) if m == "nobody-knows"),
        "{e:?}"
    );
}
