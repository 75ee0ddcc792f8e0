//! `understudy ask`: one question through the failover chain.

use std::path::Path;

use understudy_core::GenerateRequest;
use understudy_server::api::GenerateResponse;
use understudy_types::{
    ChatRequest, Error, Message, Part, RefusalPolicy, ResponseFormat, Role, RouteSelector,
    StreamItem,
};

use super::{engine, out, report};
use crate::{EXIT_FAILED, EXIT_USAGE};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The question.
    prompt: String,
    /// A system prompt.
    #[arg(long, short)]
    system: Option<String>,
    /// Sampling temperature, 0 to 2.
    #[arg(long, short)]
    temperature: Option<f32>,
    /// The most tokens to generate.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// A named route from the settings (`default` is the configured order).
    #[arg(long, conflicts_with = "provider")]
    route: Option<String>,
    /// Pin the primary: PROVIDER or PROVIDER:MODEL; the default order follows as fallbacks.
    #[arg(long, short, value_name = "PROVIDER[:MODEL]")]
    provider: Option<String>,
    /// What a refusal leads to: soften_then_fallback, soften_only, fallback_only, surface.
    #[arg(long, value_name = "POLICY")]
    refusal_policy: Option<RefusalPolicy>,
    /// Print one JSON object instead of the answer (with --stream: one per line).
    #[arg(long)]
    json: bool,
    /// Stream the answer as it arrives (no softened retry; committed to the
    /// first provider that sends text).
    #[arg(long)]
    stream: bool,
    /// Ask for a JSON answer valid against the JSON Schema in this file (an
    /// answer that breaks it counts as that provider's failure).
    #[arg(long, value_name = "FILE", conflicts_with = "json_object")]
    schema: Option<std::path::PathBuf>,
    /// Ask for a JSON object as the answer.
    #[arg(long)]
    json_object: bool,
    /// Attach an image: an `https:` URL or a `data:` URL (repeatable).
    #[arg(long, value_name = "URL")]
    image: Vec<String>,
}

pub(crate) async fn run(config: Option<&Path>, args: Args) -> u8 {
    super::init_logging("warn", false);
    let engine = match engine(config).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let route = match (&args.route, &args.provider) {
        (Some(r), _) => RouteSelector::Named(r.clone()),
        (None, Some(p)) => RouteSelector::pin(p),
        (None, None) => RouteSelector::Default,
    };
    let response_format = match (&args.schema, args.json_object) {
        (Some(path), _) => {
            let schema = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))
                .and_then(|text| {
                    serde_json::from_str::<serde_json::Value>(&text)
                        .map_err(|e| format!("{} is not JSON: {e}", path.display()))
                });
            match schema {
                Ok(schema) => Some(ResponseFormat::JsonSchema {
                    name: "answer".into(),
                    schema,
                    strict: true,
                }),
                Err(message) => {
                    report(&format!("error: --schema: {message}"));
                    engine.shutdown().await;
                    return EXIT_USAGE;
                }
            }
        }
        (None, true) => Some(ResponseFormat::JsonObject),
        (None, false) => None,
    };
    let mut message = Message::text(Role::User, args.prompt);
    message.content.extend(
        args.image
            .into_iter()
            .map(|url| Part::Image { url, detail: None }),
    );
    let chat = ChatRequest {
        system: args.system,
        messages: vec![message],
        temperature: args.temperature,
        max_tokens: args.max_tokens,
        response_format,
        ..ChatRequest::default()
    };
    let mut request = GenerateRequest::new(chat).route(route);
    request.refusal_policy = args.refusal_policy;
    if args.stream {
        let code = stream(&engine, request, args.json).await;
        engine.shutdown().await;
        return code;
    }
    let result = engine.generate(request).await;
    engine.shutdown().await;

    if args.json {
        let view = GenerateResponse::from_result(&result);
        match serde_json::to_string(&view) {
            Ok(json) => out(&format!("{json}\n")),
            Err(e) => report(&format!("cannot encode the result: {e}")),
        }
    }
    match result {
        Ok(g) => {
            if !args.json {
                out(&format!("{}\n", g.text));
                if g.fell_back || g.content_filtered {
                    report(&format!(
                        "served by {} ({}), fell back: {}, content filtered: {}",
                        g.provider, g.model, g.fell_back, g.content_filtered
                    ));
                }
            }
            0
        }
        Err(e) => {
            if !args.json {
                report(&format!("{}: {e}", e.code()));
                hint(&e);
            }
            exit_code(&e)
        }
    }
}

/// `ask --stream`: text as it arrives, then a status line on stderr (or
/// JSON lines with `--json`). Exit 0 only for a complete answer.
async fn stream(engine: &understudy_core::Engine, request: GenerateRequest, json: bool) -> u8 {
    let mut stream = match engine.generate_stream(request).await {
        Ok(s) => s,
        Err(e) => {
            if json {
                let line = serde_json::json!({"error": {
                    "code": e.code(), "message": e.to_string(), "provider": null, "attempts": e.attempts()
                }});
                out(&format!("{line}\n"));
            } else {
                report(&format!("{}: {e}", e.code()));
                hint(&e);
            }
            return exit_code(&e);
        }
    };
    let mut code = EXIT_FAILED;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Delta(text) if json => {
                out(&format!("{}\n", serde_json::json!({ "delta": text })))
            }
            StreamItem::Delta(text) => out(&text),
            // `ask` offers no tools, so no model calls one; printed anyway.
            StreamItem::ToolCall(delta) if json => {
                out(&format!("{}\n", serde_json::json!({ "tool_call": delta })))
            }
            StreamItem::Reasoning(text) if json => {
                out(&format!("{}\n", serde_json::json!({ "reasoning": text })))
            }
            StreamItem::ToolCall(_) | StreamItem::Native(_) | StreamItem::Reasoning(_) => {}
            StreamItem::Done(done) => {
                if json {
                    out(&format!("{}\n", serde_json::json!({ "done": done })));
                } else {
                    out("\n");
                    report(&format!(
                        "served by {} ({}), fell back: {}, content filtered: {}",
                        done.provider, done.model, done.fell_back, done.content_filtered
                    ));
                }
                code = 0;
            }
            StreamItem::Error(error) => {
                if json {
                    out(&format!("{}\n", serde_json::json!({ "error": error })));
                } else {
                    out("\n");
                    report(&format!(
                        "the stream from {} broke off: {}: {}",
                        error.provider, error.code, error.message
                    ));
                }
                code = EXIT_FAILED;
            }
        }
    }
    code
}

/// What to do about an error a newcomer is likely to meet.
fn hint(e: &Error) {
    if let Error::NoProviderAvailable(_) = e {
        report(
            "hint: set a provider's key (GROQ_API_KEY, GEMINI_API_KEY, ANTHROPIC_API_KEY or OPENAI_API_KEY), \
             check `understudy providers`, or watch failover without keys: `understudy demo`",
        );
    }
}

fn exit_code(e: &Error) -> u8 {
    match e {
        Error::InvalidRequest { .. } | Error::UnknownProvider(_) | Error::UnknownRoute(_) => {
            EXIT_USAGE
        }
        _ => EXIT_FAILED,
    }
}
