//! Admission by one instance's counters (no Redis), as data.

use std::sync::Arc;

use understudy_settings::{RawClient, Secret};
use understudy_types::chat::ChatRequest;

use super::*;

fn tenants(records: Vec<RawClient>) -> (Arc<Tenants>, Vec<Arc<ClientRecord>>) {
    let clients: Vec<ClientRecord> = records
        .iter()
        .map(|r| r.read("", &|_| None).unwrap())
        .collect();
    let server = ServerSettings {
        clients: clients.clone(),
        api_keys: vec![Secret::new("plain-key-0123456789")],
        ..understudy_settings::Settings::load(None, |_| None)
            .unwrap()
            .server
    };
    let t = Arc::new(Tenants::new(&server, None, Arc::new(Metrics::new())));
    let found = clients.iter().map(|c| t.named(&c.name).unwrap()).collect();
    (t, found)
}

fn record(name: &str) -> RawClient {
    RawClient {
        name: Some(name.into()),
        key: Some(format!("sk-{name}-0123456789abcdef")),
        ..RawClient::default()
    }
}

fn chat(text: &str, max_tokens: Option<u32>) -> ChatRequest {
    ChatRequest {
        max_tokens,
        ..ChatRequest::user(text)
    }
}

#[tokio::test]
async fn exactly_rpm_requests_are_admitted_in_a_minute() {
    let (t, r) = tenants(vec![RawClient {
        rpm: Some(3),
        ..record("a")
    }]);
    let route = RouteSelector::Default;
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..5 {
        match t.admit(&r[0], &route, &chat("hi", None), &[]).await {
            Ok(ticket) => admitted.push(ticket),
            Err(e) => refused.push(e),
        }
    }
    // The minute may turn between two admissions; then the count starts
    // again, so at least three and at most six are admitted.
    assert!(admitted.len() >= 3, "{refused:?}");
    for e in &refused {
        let ClientRefusal::Requests { limit, retry_after } = e else {
            panic!("{e:?}");
        };
        assert_eq!(*limit, 3);
        assert!(*retry_after <= Duration::from_secs(60));
    }
    assert_eq!(t.find("sk-a-0123456789abcdef").unwrap().name, r[0].name);
    assert!(t.find("sk-b-0123456789abcdef").is_none());
}

#[tokio::test]
async fn tokens_are_reserved_then_settled_from_the_usage() {
    let (t, r) = tenants(vec![RawClient {
        tpm: Some(1000),
        ..record("a")
    }]);
    let route = RouteSelector::Default;
    // 400 bytes of prompt (100 tokens) and max_tokens 500: 600 reserved.
    let big = chat(&"x".repeat(400), Some(500));
    let first = t.admit(&r[0], &route, &big, &[]).await.unwrap();
    let minute = first.counts.minute;
    let second = t.admit(&r[0], &route, &big, &[]).await;
    if t.remaining(&r[0])
        .is_some_and(|_| unix_ms() / 60_000 == minute)
    {
        assert!(
            matches!(second, Err(ClientRefusal::Tokens { limit: 1000, .. })),
            "{second:?}"
        );
        // The answer used 150 tokens: 850 are left, room for another.
        first.settle(Used::Known {
            tokens: 150,
            cost_usd: 0.0,
        });
        let left = t.remaining(&r[0]).unwrap().tokens.unwrap();
        assert_eq!(left, (1000, 850));
        assert!(t.admit(&r[0], &route, &big, &[]).await.is_ok());
    }
    // A request larger than the whole minute is not worth a retry.
    let huge = chat("hi", Some(5000));
    let e = t.admit(&r[0], &route, &huge, &[]).await.unwrap_err();
    assert!(matches!(e, ClientRefusal::TooLarge { limit: 1000, .. }));
    assert_eq!(e.retry_after(), None);
}

#[tokio::test]
async fn a_run_that_ends_not_knowing_what_it_used_is_charged_its_estimate() {
    let (t, r) = tenants(vec![RawClient {
        tpm: Some(10_000),
        budget_usd: Some(1.0),
        ..record("a")
    }]);
    let c = chat(&"x".repeat(400), Some(900));
    // A provider was called (USD 1 000 a million either way): a stream
    // cut after it committed, a client gone while the provider worked.
    let priced = [(1000.0, 1000.0)];
    // The worst case is the whole budget: it fits, once.
    let ticket = t
        .admit(&r[0], &RouteSelector::Default, &c, &priced)
        .await
        .unwrap();
    let minute = ticket.counts.minute;
    ticket.calling(Some((1000.0, 1000.0)));
    drop(ticket);
    if unix_ms() / 60_000 == minute {
        assert_eq!(t.remaining(&r[0]).unwrap().tokens, Some((10_000, 9_000)));
    }
    assert!(
        (t.usage(&r[0]).spent_usd - 1.0).abs() < 1e-9,
        "{:?}",
        t.usage(&r[0])
    );
    // Now the budget is spent.
    let e = t
        .admit(&r[0], &RouteSelector::Default, &c, &[])
        .await
        .unwrap_err();
    assert!(matches!(e, ClientRefusal::Budget { .. }), "{e:?}");
}

#[tokio::test]
async fn an_unsettled_ticket_gives_its_estimate_back() {
    let (t, r) = tenants(vec![RawClient {
        tpm: Some(2000),
        ..record("a")
    }]);
    let ticket = t
        .admit(&r[0], &RouteSelector::Default, &chat("hi", Some(1000)), &[])
        .await
        .unwrap();
    let minute = ticket.counts.minute;
    drop(ticket);
    let (_, left) = t.remaining(&r[0]).unwrap().tokens.unwrap();
    if unix_ms() / 60_000 == minute {
        assert_eq!(left, 2000);
    }
}

#[tokio::test]
async fn a_spent_budget_refuses_until_its_window_ends() {
    let (t, r) = tenants(vec![RawClient {
        budget_usd: Some(0.01),
        window: Some("day".into()),
        ..record("a")
    }]);
    let route = RouteSelector::Default;
    let one = t
        .admit(&r[0], &route, &chat("hi", None), &[])
        .await
        .unwrap();
    let two = t
        .admit(&r[0], &route, &chat("hi", None), &[])
        .await
        .unwrap();
    one.settle(Used::Known {
        tokens: 100,
        cost_usd: 0.006,
    });
    // Still under: admitted.
    let three = t
        .admit(&r[0], &route, &chat("hi", None), &[])
        .await
        .unwrap();
    two.settle(Used::Known {
        tokens: 100,
        cost_usd: 0.006,
    });
    three.settle(Used::Nothing);
    let e = t
        .admit(&r[0], &route, &chat("hi", None), &[])
        .await
        .unwrap_err();
    let ClientRefusal::Budget {
        budget_usd,
        resets_in,
        left_usd,
        ..
    } = e
    else {
        panic!("{e:?}");
    };
    assert_eq!(budget_usd, 0.01);
    assert_eq!(left_usd, 0.0);
    assert!(e.to_string().starts_with("budget spent"), "{e}");
    assert!(resets_in <= Duration::from_secs(86_400));
    assert_eq!(e.retry_after(), None, "a budget is never a Retry-After");
}

/// USD per million tokens such that one request of `chat("hi", Some(20))`
/// (no prompt tokens at four characters a token, 20 answer tokens) costs
/// `usd` at most.
fn priced_at(usd: f64) -> Price {
    (usd * 1e6 / 20.0, usd * 1e6 / 20.0)
}

#[test]
fn the_worst_case_is_at_the_dearest_target() {
    let usage = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    };
    // (usage, prices, nano-USD)
    let cases: [(Usage, &[Price], u64); 5] = [
        (usage(1000, 1000), &[], 0),
        (usage(1000, 1000), &[(1.0, 2.0)], 3_000_000),
        (
            usage(1000, 1000),
            &[(1.0, 2.0), (3.0, 0.5), (0.1, 0.1)],
            3_500_000,
        ),
        // The dearest for this request, not the dearest per token.
        (usage(0, 1000), &[(10.0, 1.0), (1.0, 2.0)], 2_000_000),
        (usage(2, 0), &[(-5.0, 0.0)], 0),
    ];
    for (u, prices, nanos) in cases {
        assert_eq!(worst_cost_nanos(u, prices), nanos, "{u:?} {prices:?}");
    }
}

#[tokio::test]
async fn a_budget_admits_only_the_worst_cases_it_can_pay() {
    let (t, r) = tenants(vec![RawClient {
        budget_usd: Some(0.05),
        window: Some("day".into()),
        ..record("a")
    }]);
    let route = RouteSelector::Default;
    let c = chat("hi", Some(20));
    // USD 0.015 each at worst: three fit in USD 0.05, the fourth does not.
    let prices = [priced_at(0.005), priced_at(0.015)];
    let mut tickets = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..8 {
        match t.admit(&r[0], &route, &c, &prices).await {
            Ok(ticket) => tickets.push(ticket),
            Err(e) => refusals.push(e),
        }
    }
    assert_eq!((tickets.len(), refusals.len()), (3, 5), "{refusals:?}");
    let ClientRefusal::Budget {
        left_usd,
        worst_usd,
        ..
    } = refusals[0]
    else {
        panic!("{:?}", refusals[0]);
    };
    assert!((left_usd - 0.005).abs() < 1e-9, "{left_usd}");
    assert!((worst_usd - 0.015).abs() < 1e-9, "{worst_usd}");
    assert!(refusals[0].to_string().contains("nearly spent"));
    assert!((t.usage(&r[0]).spent_usd - 0.045).abs() < 1e-9);
    let spent = |usd: f64| {
        let now = t.usage(&r[0]).spent_usd;
        assert!((now - usd).abs() < 1e-9, "spent {now}, not {usd}");
    };
    // Settled: the cost replaces the reservation (0.045 - 0.015 + 0.004).
    tickets.pop().unwrap().settle(Used::Known {
        tokens: 10,
        cost_usd: 0.004,
    });
    spent(0.034);
    // Room again for one worst case, not two.
    let again = t.admit(&r[0], &route, &c, &prices).await.unwrap();
    assert!(t.admit(&r[0], &route, &c, &prices).await.is_err());
    spent(0.049);
    // A run that cannot tell what it used after calling the cheaper target
    // is charged the estimate at that target's price.
    again.calling(Some(priced_at(0.005)));
    drop(again);
    spent(0.039);
    // A reservation nothing used is given back.
    tickets.pop().unwrap().settle(Used::Nothing);
    spent(0.024);
    // A provider that used more than the estimate is charged it all: only
    // that can pass the budget.
    tickets.pop().unwrap().settle(Used::Known {
        tokens: 100,
        cost_usd: 0.045,
    });
    spent(0.054);
    let spent = t.admit(&r[0], &route, &c, &[]).await.unwrap_err();
    assert!(spent.to_string().starts_with("budget spent"), "{spent}");
}

#[tokio::test]
async fn a_worst_case_above_the_whole_budget_says_so() {
    let (t, r) = tenants(vec![RawClient {
        budget_usd: Some(0.01),
        ..record("a")
    }]);
    let e = t
        .admit(
            &r[0],
            &RouteSelector::Default,
            &chat("hi", Some(20)),
            &[priced_at(0.02)],
        )
        .await
        .unwrap_err();
    let ClientRefusal::Budget { worst_usd, .. } = e else {
        panic!("{e:?}");
    };
    assert!((worst_usd - 0.02).abs() < 1e-9);
    let message = e.to_string();
    assert!(
        message.contains("more than this key's whole budget of USD 0.01")
            && message.contains("max_tokens"),
        "{message}"
    );
    assert_eq!(t.usage(&r[0]).spent_usd, 0.0, "nothing reserved");
}

#[tokio::test]
async fn models_and_expiry_scope_a_record() {
    let (t, r) = tenants(vec![
        RawClient {
            models: Some(vec!["fast".into(), "groq:*".into()]),
            ..record("scoped")
        },
        RawClient {
            expires: Some("2020-01-01T00:00:00Z".into()),
            ..record("old")
        },
    ]);
    let c = chat("hi", None);
    let named = |n: &str| RouteSelector::Model(n.into());
    assert!(t.admit(&r[0], &named("fast"), &c, &[]).await.is_ok());
    assert!(
        t.admit(&r[0], &RouteSelector::pin("groq"), &c, &[])
            .await
            .is_ok()
    );
    assert!(t.admit(&r[0], &named("groq:llama"), &c, &[]).await.is_ok());
    let e = t
        .admit(&r[0], &named("openai:gpt-4o"), &c, &[])
        .await
        .unwrap_err();
    assert_eq!(
        e,
        ClientRefusal::Model {
            asked: "openai:gpt-4o".into()
        }
    );
    let e = t
        .admit(&r[1], &RouteSelector::Default, &c, &[])
        .await
        .unwrap_err();
    assert_eq!(e, ClientRefusal::Expired);
}

#[test]
fn admin_records_leave_the_file_s_alone() {
    let (t, _) = tenants(vec![record("file-a")]);
    let admin = |name: &str| record(name).read("", &|_| None).unwrap();
    t.set_admin_records(vec![admin("b"), admin("file-a")]);
    assert!(t.from_file("file-a"));
    assert_eq!(
        t.list()
            .iter()
            .map(|r| r.name.to_string())
            .collect::<Vec<_>>(),
        ["b", "file-a"]
    );
    assert_eq!(t.admin_records().len(), 1);
    t.set_admin_records(Vec::new());
    assert!(t.named("b").is_none() && t.named("file-a").is_some());
}

#[tokio::test]
async fn a_reloaded_file_replaces_the_file_s_records_and_keeps_the_admin_s() {
    let (t, _) = tenants(vec![record("file-a"), record("file-gone")]);
    let read = |raw: RawClient| raw.read("", &|_| None).unwrap();
    t.set_admin_records(vec![read(record("admin-b")), read(record("admin-c"))]);
    let reloaded = [
        read(RawClient {
            rpm: Some(7),
            ..record("file-a")
        }),
        // A new file record named as an admin one: the file's wins.
        read(record("admin-c")),
    ];
    t.reload_file(&reloaded).await;
    let names: Vec<String> = t.list().iter().map(|r| r.name.to_string()).collect();
    assert_eq!(names, ["admin-b", "admin-c", "file-a"]);
    assert_eq!(t.named("file-a").unwrap().rpm, Some(7));
    assert!(t.from_file("admin-c") && !t.from_file("file-gone") && !t.from_file("admin-b"));
    assert!(t.find("sk-file-gone-0123456789abcdef").is_none());
    assert_eq!(t.admin_records().len(), 1);
}

#[tokio::test]
async fn spent_refuses_early_only_what_admission_would() {
    let (t, r) = tenants(vec![
        RawClient {
            rpm: Some(2),
            ..record("rate")
        },
        RawClient {
            budget_usd: Some(0.01),
            ..record("budget")
        },
        RawClient {
            tpm: Some(10_000),
            ..record("tokens")
        },
    ]);
    let (rate, budget, tokens) = (&r[0], &r[1], &r[2]);
    let route = RouteSelector::Default;
    // Nothing counted yet: nothing to refuse.
    for record in [rate, budget, tokens] {
        assert_eq!(t.spent(record), Ok(()), "{}", record.name);
    }
    let mut kept = Vec::new();
    for _ in 0..2 {
        kept.push(t.admit(rate, &route, &chat("hi", None), &[]).await.unwrap());
    }
    // The minute may turn between the admissions and the check (then the
    // count is of a minute gone, and nothing is refused).
    match t.spent(rate) {
        Ok(()) => {}
        Err(ClientRefusal::Requests { limit, retry_after }) => {
            assert_eq!(limit, 2);
            assert!(retry_after <= Duration::from_secs(60));
        }
        Err(other) => panic!("{other:?}"),
    }
    // A budget spent is refused early as admission would (402's refusal).
    let ticket = t
        .admit(budget, &route, &chat("hi", None), &[])
        .await
        .unwrap();
    ticket.settle(Used::Known {
        tokens: 10,
        cost_usd: 0.02,
    });
    let early = t.spent(budget);
    assert!(
        matches!(early, Err(ClientRefusal::Budget { budget_usd, .. }) if budget_usd == 0.01),
        "{early:?}"
    );
    assert!(matches!(
        t.admit(budget, &route, &chat("hi", None), &[]).await,
        Err(ClientRefusal::Budget { .. })
    ));
    // Tokens are not refused early: a settlement can give them back.
    let ticket = t
        .admit(tokens, &route, &chat("hi", Some(9_000)), &[])
        .await
        .unwrap();
    assert_eq!(t.spent(tokens), Ok(()));
    drop(ticket);
}

#[tokio::test(start_paused = true)]
async fn a_spend_count_refuses_early_only_while_fresh() {
    let (t, r) = tenants(vec![RawClient {
        budget_usd: Some(0.01),
        window: Some("day".into()),
        ..record("a")
    }]);
    let (route, c) = (RouteSelector::Default, chat("hi", Some(20)));
    // One request in flight holds the whole budget as its worst case.
    let held = t
        .admit(&r[0], &route, &c, &[priced_at(0.01)])
        .await
        .unwrap();
    let budget = |e: Result<(), ClientRefusal>| matches!(e, Err(ClientRefusal::Budget { .. }));
    assert!(budget(t.spent(&r[0])), "a fresh count refuses early");
    // The count grows old: its reservation may have been given back where
    // this instance does not see it, so the request goes on to admission.
    tokio::time::advance(SPEND_FRESH).await;
    assert_eq!(
        t.spent(&r[0]),
        Ok(()),
        "a stale count refuses nothing early"
    );
    // Admission reads the counts again (here: still held) and refreshes
    // them, so the next request is refused early once more.
    let e = t.admit(&r[0], &route, &c, &[priced_at(0.01)]).await;
    assert!(matches!(e, Err(ClientRefusal::Budget { .. })), "{e:?}");
    assert!(budget(t.spent(&r[0])), "admission refreshed the count");
    // Given back: nothing refused, early or at admission.
    held.settle(Used::Nothing);
    assert_eq!(t.spent(&r[0]), Ok(()));
    assert!(t.admit(&r[0], &route, &c, &[priced_at(0.01)]).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_request_count_refuses_early_at_any_age() {
    let (t, r) = tenants(vec![RawClient {
        rpm: Some(1),
        ..record("a")
    }]);
    let ticket = t
        .admit(&r[0], &RouteSelector::Default, &chat("hi", None), &[])
        .await
        .unwrap();
    let minute = ticket.counts.minute;
    // Paused time leaves the wall clock's minute alone; a settlement gives
    // no request back.
    tokio::time::advance(SPEND_FRESH * 10).await;
    ticket.settle(Used::Nothing);
    if unix_ms() / 60_000 == minute {
        assert!(matches!(
            t.spent(&r[0]),
            Err(ClientRefusal::Requests { limit: 1, .. })
        ));
    }
}
