//! `understudy-sim`: the testkit's simulated providers as a process, for
//! tests that run the gateway somewhere a test's own process cannot reach
//! into (a container: `cargo xtask container-test`).
//!
//! ```text
//! understudy-sim NAME=BEHAVIOUR...
//! ```
//!
//! Each `NAME=BEHAVIOUR` starts one OpenAI-compatible simulator on a free
//! loopback port. `BEHAVIOUR` is `fail:STATUS` (every call gets that
//! status), `answer` (text, and streams sent at once) or
//! `stream:CHUNKSxMS` (text, and a streamed call gets CHUNKS chunks, one
//! every MS milliseconds). It prints `NAME BASE_URL` for each simulator,
//! then `ready`, then `NAME METHOD PATH` for each call one receives, and
//! runs until its standard input closes (so it ends with the test that
//! started it).

use std::io::{BufRead as _, Write as _};
use std::time::Duration;

use understudy_testkit::{Received, Reply, SimProvider, StreamSpec};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What one simulator does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// Every call gets this status.
    Fail(u16),
    /// Text; a streamed call gets this many chunks at this interval.
    Answer { chunks: usize, every: Duration },
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        let _ = writeln!(std::io::stderr(), "understudy-sim: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let specs: Vec<(String, Behaviour)> = std::env::args()
        .skip(1)
        .map(|arg| parse(&arg))
        .collect::<Result<_, _>>()?;
    if specs.is_empty() {
        return Err("usage: understudy-sim NAME=fail:STATUS|answer|stream:CHUNKSxMS...".into());
    }
    let mut sims = Vec::new();
    for (name, behaviour) in specs {
        let sim = SimProvider::openai().await?;
        let shown = name.clone();
        sim.respond_with(move |call| {
            say(&format!("{shown} {} {}", call.method, call.path));
            reply(behaviour, call)
        });
        say(&format!("{name} {}", sim.base_url()));
        sims.push(sim);
    }
    say("ready");
    // Runs until stdin closes: read it on a thread of its own.
    let (closed, wait) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines() {}
        let _ = closed.send(());
    });
    let _ = wait.await;
    drop(sims);
    Ok(())
}

/// One `NAME=BEHAVIOUR` argument.
fn parse(arg: &str) -> Result<(String, Behaviour), Error> {
    let (name, behaviour) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not NAME=BEHAVIOUR"))?;
    let behaviour = match behaviour.split_once(':') {
        Some(("fail", status)) => Behaviour::Fail(status.parse()?),
        Some(("stream", pace)) => {
            let (chunks, ms) = pace
                .split_once('x')
                .ok_or_else(|| format!("{pace:?} is not CHUNKSxMS"))?;
            Behaviour::Answer {
                chunks: chunks.parse()?,
                every: Duration::from_millis(ms.parse()?),
            }
        }
        None if behaviour == "answer" => Behaviour::Answer {
            chunks: 3,
            every: Duration::ZERO,
        },
        _ => return Err(format!("unknown behaviour {behaviour:?} in {arg:?}").into()),
    };
    Ok((name.to_owned(), behaviour))
}

/// The reply `behaviour` gives `call`.
fn reply(behaviour: Behaviour, call: &Received) -> Reply {
    match behaviour {
        Behaviour::Fail(status) => Reply::status(status),
        Behaviour::Answer { chunks, every } => {
            if call.json()["stream"] == serde_json::Value::Bool(true) {
                let words: Vec<String> = (1..=chunks).map(|i| format!("w{i} ")).collect();
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                StreamSpec::new(&words).every(every).reply()
            } else {
                Reply::text("Hello from the simulator.")
            }
        }
    }
}

/// One line on stdout, flushed at once (the test reads it as it comes).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaviours_parse() {
        let check = |arg: &str, expected: Option<(&str, Behaviour)>| {
            let got = parse(arg).ok();
            assert_eq!(
                got.as_ref().map(|(n, b)| (n.as_str(), *b)),
                expected,
                "{arg}"
            );
        };
        check("primary=fail:503", Some(("primary", Behaviour::Fail(503))));
        check(
            "backup=stream:40x200",
            Some((
                "backup",
                Behaviour::Answer {
                    chunks: 40,
                    every: Duration::from_millis(200),
                },
            )),
        );
        check(
            "b=answer",
            Some((
                "b",
                Behaviour::Answer {
                    chunks: 3,
                    every: Duration::ZERO,
                },
            )),
        );
        check("nameless", None);
        check("x=fail:many", None);
        check("x=stream:40", None);
        check("x=whatever", None);
    }
}
