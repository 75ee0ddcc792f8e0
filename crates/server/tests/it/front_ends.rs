//! Every front end's table against the real router: each method and path
//! a protocol's `Endpoint` lists is routed (not the fallback's 404, not a
//! 405), and an unrouted path under a front end's prefix answers in that
//! front end's error shape.

use understudy_testkit::{SimProvider, TestGateway};
use understudy_wire::endpoint::MODELS_PATH;
use understudy_wire::front_ends;

use crate::common::TestServer;

/// A path of the router's syntax with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{target}", "default:generateContent")
        .replace("{id}", "resp_0")
}

#[tokio::test]
async fn every_front_ends_routes_are_routed() {
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let mut seen = 0;
    for edge in front_ends::front_ends() {
        for route in edge.routes {
            let path = concrete(route.path);
            let url = s.at(&path);
            let req = s
                .client()
                .request(route.method.clone(), &url)
                .header("content-type", "application/json");
            let req = if route.method == reqwest::Method::POST {
                req.body("{}")
            } else {
                req
            };
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap();
            assert_ne!(status, 405, "{} {path}: {body}", route.method);
            assert!(
                !body.contains("no endpoint at"),
                "{} {path} is not routed: {status} {body}",
                route.method
            );
            seen += 1;
        }
    }
    assert!(seen >= 10, "{seen}");
    // The shared model list is routed once, for every front end's clients.
    assert_eq!(s.get(MODELS_PATH).await.status, 200);
}

#[tokio::test]
async fn an_unrouted_path_answers_in_its_front_ends_shape() {
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let anthropic = s.get("/v1/messages/nowhere").await;
    assert_eq!(anthropic.status, 404);
    assert_eq!(anthropic.json()["type"], "error");
    let google = s.get("/v1beta/nowhere").await;
    assert_eq!(google.json()["error"]["status"], "NOT_FOUND");
    let openai_shape = s.get("/v1/nowhere").await;
    assert_eq!(
        openai_shape.json()["error"]["type"],
        "invalid_request_error"
    );
}
