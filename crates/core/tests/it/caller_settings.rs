//! The `[caller_routing]` example of the configuration docs loads and
//! plans as the docs say: the record that may choose its routing walks its
//! list, within its `models`.

use understudy_policy::caller::targets;
use understudy_types::caller::CallerRouting;
use understudy_types::error::{ClientRefusal, Error};
use understudy_types::{RouteSelector, Target};

/// The TOML block of `docs/configuration.md` under `heading`.
fn doc_example(heading: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = doc.split(heading).nth(1).unwrap();
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    section[start..][..section[start..].find("```").unwrap()].to_owned()
}

#[test]
fn the_caller_routing_example_of_the_docs_plans_as_it_says() {
    let s = crate::settings_with(
        &doc_example("### `[caller_routing]`"),
        &[
            ("AGENTS_KEY", "sk-agents-0123456789"),
            ("GROQ_API_KEY", "k-groq-0123456789"),
            ("OPENAI_API_KEY", "k-openai-0123456789"),
            ("ANTHROPIC_API_KEY", "k-anthropic-0123456789"),
        ],
    )
    .unwrap();
    let record = &s.server.clients[0];
    assert!(!s.caller_routing.enabled);
    assert!(s.caller_routing.allows(Some(record)));
    assert!(!s.caller_routing.allows(None), "other keys: ignored");
    let default_route = s.default_route();
    let plan = |model: &str, wish: CallerRouting| {
        let asked = RouteSelector::Model(model.into());
        let route =
            understudy_policy::plan::resolve(&asked, &s, &default_route, &s.routes).unwrap();
        targets(
            &asked,
            route,
            &wish,
            Some(record),
            (&s, &default_route, &s.routes),
        )
    };
    let models = |names: &[&str]| CallerRouting {
        models: names.iter().map(|n| (*n).to_owned()).collect(),
        ..CallerRouting::new()
    };
    let groq = s.providers["groq"].model.clone();
    assert_eq!(
        plan("groq", models(&["openai:gpt-4o"])).unwrap(),
        [Target::new("groq", &groq), Target::new("openai", "gpt-4o")]
    );
    let openai_first = CallerRouting {
        order: vec!["openai".into()],
        ..CallerRouting::new()
    };
    let first = plan("default", openai_first).unwrap();
    assert_eq!(&*first[0].provider, "openai");
    let e = plan("groq", models(&["claude:claude-sonnet-4-5"])).unwrap_err();
    assert!(
        matches!(&e, Error::Client(ClientRefusal::Model { asked }) if asked == "claude:claude-sonnet-4-5"),
        "{e:?}"
    );
}
