//! `understudy events tail`: follows the Redis event stream live and prints
//! one line per generation (or the event as JSON).

use std::path::Path;
use std::time::Duration;

use understudy_core::sink::redis::from_fields;
use understudy_settings::Settings;

use super::{out, report};
use crate::EXIT_USAGE;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Follow the event stream (REDIS_URL) and print each event as it arrives.
    Tail {
        /// Print each event as one JSON object per line.
        #[arg(long)]
        json: bool,
        /// Start from the oldest event kept instead of the next new one.
        #[arg(long)]
        from_start: bool,
        /// Stop after this many events.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
}

pub(crate) async fn run(config: Option<&Path>, args: Args) -> u8 {
    let Command::Tail {
        json,
        from_start,
        limit,
    } = args.command;
    let settings = match Settings::from_env(config) {
        Ok(s) => s,
        Err(e) => {
            report(&format!("configuration error: {e}"));
            return EXIT_USAGE;
        }
    };
    let Some(url) = settings.redis_url.as_ref() else {
        report("REDIS_URL is not set: events are written to Redis only when it is");
        return EXIT_USAGE;
    };
    let client = match redis::Client::open(url.expose()) {
        Ok(c) => c,
        Err(_) => {
            report("REDIS_URL is not a valid redis:// URL");
            return EXIT_USAGE;
        }
    };
    let key = settings.events.stream_key.clone();
    let mut last = if from_start {
        "0-0".to_owned()
    } else {
        "$".to_owned()
    };
    let mut seen = 0u64;
    let mut warned = false;
    loop {
        let mut conn = match client.get_multiplexed_async_connection().await {
            Ok(c) => c,
            Err(e) => {
                if !warned {
                    report(&format!("cannot reach Redis ({e}); retrying"));
                    warned = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        warned = false;
        loop {
            let reply: redis::RedisResult<redis::Value> = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(5000)
                .arg("COUNT")
                .arg(100)
                .arg("STREAMS")
                .arg(&key)
                .arg(&last)
                .query_async(&mut conn)
                .await;
            let entries = match reply {
                Ok(v) => entries(v),
                Err(e) => {
                    report(&format!("Redis error ({e}); reconnecting"));
                    break;
                }
            };
            for (id, fields) in entries {
                last = id;
                print_event(&fields, json);
                seen += 1;
                if limit.is_some_and(|l| seen >= l) {
                    return 0;
                }
            }
        }
    }
}

/// `XREAD`'s nested reply as `(id, fields)` pairs.
fn entries(v: redis::Value) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let streams = match v {
        redis::Value::Array(s) => s,
        redis::Value::Map(m) => m
            .into_iter()
            .map(|(k, v)| redis::Value::Array(vec![k, v]))
            .collect(),
        _ => return out,
    };
    for stream in streams {
        let redis::Value::Array(parts) = stream else {
            continue;
        };
        let Some(redis::Value::Array(items)) = parts.into_iter().nth(1) else {
            continue;
        };
        for item in items {
            let redis::Value::Array(pair) = item else {
                continue;
            };
            let mut pair = pair.into_iter();
            let (Some(id), Some(redis::Value::Array(kv))) = (pair.next(), pair.next()) else {
                continue;
            };
            let Ok(id) = redis::from_redis_value::<String>(id) else {
                continue;
            };
            let strings: Vec<String> = kv
                .into_iter()
                .filter_map(|x| redis::from_redis_value::<String>(x).ok())
                .collect();
            let fields = strings
                .chunks(2)
                .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
                .collect();
            out.push((id, fields));
        }
    }
    out
}

fn print_event(fields: &[(String, String)], json: bool) {
    match from_fields(fields) {
        Ok(e) if json => match serde_json::to_string(&e) {
            Ok(line) => out(&format!("{line}\n")),
            Err(err) => report(&format!("cannot encode an event: {err}")),
        },
        Ok(e) => {
            let outcome = match &e.error_code {
                None => "ok".to_owned(),
                Some(code) => code.to_string(),
            };
            let attempts: Vec<String> = e
                .attempts
                .iter()
                .map(|a| format!("{}:{}", a.provider, a.outcome))
                .collect();
            out(&format!(
                "{} {} {} served_by={} primary={} fell_back={} filtered={} streamed={} cached={} latency={:.1}ms attempts=[{}]\n",
                e.timestamp,
                e.request_id,
                outcome,
                e.provider.as_deref().unwrap_or("-"),
                e.primary,
                e.fell_back,
                e.content_filtered,
                e.streamed,
                e.cached,
                e.latency_ms,
                attempts.join(" ")
            ));
        }
        Err(err) => report(&format!("an entry that is not an event: {err}")),
    }
}
