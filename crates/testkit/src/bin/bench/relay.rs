//! The floors below the gateway: the do-nothing hyper relay
//! (`--relay`), a TCP echo (`--echo`) and the ping-pong against it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::Error;
use super::load::connect;
use super::process::{free_addr, pinned};
use super::report::Samples;

/// Forwards every request on a client connection over its own upstream
/// connection, bodies collected, nothing parsed.
pub(crate) async fn relay(upstream: Option<&String>, listen: Option<&String>) -> Result<(), Error> {
    let upstream: SocketAddr = upstream.ok_or("--relay <upstream> <listen>")?.parse()?;
    let listen: SocketAddr = listen.ok_or("--relay <upstream> <listen>")?.parse()?;
    let listener = TcpListener::bind(listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(sender) = connect(upstream).await else {
                return;
            };
            let sender = Arc::new(tokio::sync::Mutex::new(sender));
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let sender = Arc::clone(&sender);
                async move {
                    let (mut parts, body) = req.into_parts();
                    let body = body.collect().await?.to_bytes();
                    let mut sender = sender.lock().await;
                    // `/fallback/...`: one call to the failing path first, as
                    // the gateway's fallback path does.
                    if let Some(rest) = parts.uri.path().strip_prefix("/fallback") {
                        let fast: hyper::Uri = format!("/fast{rest}").parse().unwrap_or_default();
                        let mut fail = Request::new(Full::new(body.clone()));
                        *fail.method_mut() = hyper::Method::POST;
                        *fail.uri_mut() = format!("/fail{rest}").parse().unwrap_or_default();
                        *fail.headers_mut() = parts.headers.clone();
                        sender.ready().await?;
                        let failed = sender.send_request(fail).await?;
                        let _ = failed.into_body().collect().await?;
                        parts.uri = fast;
                    }
                    let req = Request::from_parts(parts, Full::new(body));
                    sender.ready().await?;
                    // The answer's body is passed through as it arrives.
                    sender.send_request(req).await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A blocking TCP echo on `listen` for one connection (the ping-pong floor).
pub(crate) fn echo(listen: Option<&String>) -> Result<(), Error> {
    use std::io::Read as _;
    let listen: SocketAddr = listen.ok_or("--echo <listen>")?.parse()?;
    let listener = std::net::TcpListener::bind(listen)?;
    let (mut stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut buf = [0u8; 64];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}

/// 20 000 blocking round trips of 4 bytes to an echo process pinned to
/// `cpu`, from this process (pinned to core 1 by xtask).
pub(crate) async fn ping_pong(cpu: Option<&str>) -> Result<Samples, Error> {
    let addr = free_addr()?;
    let mut cmd = pinned(cpu, std::env::current_exe()?);
    cmd.arg("--echo")
        .arg(addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    let result = tokio::task::spawn_blocking(move || -> Result<Samples, Error> {
        use std::io::Read as _;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match std::net::TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nodelay(true)?;
        let mut buf = [0u8; 4];
        let started = Instant::now();
        let mut micros = Vec::with_capacity(20_000);
        for _ in 0..20_000 {
            let t = Instant::now();
            stream.write_all(b"ping")?;
            stream.read_exact(&mut buf)?;
            micros.push(t.elapsed().as_micros() as u32);
        }
        Ok(Samples {
            micros,
            elapsed: started.elapsed(),
        })
    })
    .await?;
    let _ = child.kill();
    let _ = child.wait();
    result
}
