//! The TLS phase: the gateway in front of an HTTPS provider that speaks
//! HTTP/2, against a do-nothing TLS relay on the same rig.
//!
//! The upstream is the plain one's handler (`/fast/…` answers [`ANSWER`]
//! at once) behind TLS with ALPN `h2` and `http/1.1`, its certificate
//! signed by a CA made at run time (the testkit's [`TestCerts`]), counting
//! TCP connections and TLS handshakes. A second gateway process is started
//! with one provider, `base_url = "https://…"` and `ca_file` set to that
//! CA. The floor is this binary with `--tls-relay`: plain HTTP/1.1 from the
//! load generator, one shared HTTP/2 connection over TLS to the upstream,
//! bodies passed through, nothing parsed; pinned like the gateway.
//!
//! Measured: concurrency 64 (req/s, p50, p99, and the handshakes and
//! connections the upstream saw after warm-up) and concurrency 1 (the
//! gateway's added p50 over the TLS relay's).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use understudy_testkit::TestCerts;

use super::load::closed_loop;
use super::process::{Gateway, serve_args, with_cpu};
use super::report::{Row, Samples, render, row, say};
use super::upstream::upstream_handle;
use super::{ANSWER, Error, REQUEST};

/// Connections and handshakes the TLS upstream has accepted.
#[derive(Default)]
struct Counts {
    connections: AtomicUsize,
    handshakes: AtomicUsize,
}

impl Counts {
    fn now(&self) -> (usize, usize) {
        (
            self.connections.load(Ordering::SeqCst),
            self.handshakes.load(Ordering::SeqCst),
        )
    }
}

/// `UNDERSTUDY_BENCH_ONLY=tls`: this phase alone, printed as rows.
pub(crate) async fn only(bin: &Path, dir: &Path, cpu: Option<&str>) -> Result<(), Error> {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    phase(bin, dir, cpu, &mut rows, &mut notes).await?;
    say(&render(&rows, &notes));
    Ok(())
}

/// Runs the phase and adds its rows and notes.
pub(crate) async fn phase(
    bin: &Path,
    dir: &Path,
    cpu: Option<&str>,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> Result<(), Error> {
    let certs = TestCerts::generate()?;
    let ca_file = dir.join("bench-ca.pem");
    std::fs::write(&ca_file, certs.ca_pem())?;
    let counts = Arc::new(Counts::default());
    let upstream = start_tls_upstream(&certs, Arc::clone(&counts)).await?;
    let gw = start_gateway(bin, dir, upstream, &ca_file, cpu).await?;
    let relay = start_relay(upstream, &ca_file, cpu).await?;
    let gateway_url = format!("http://{}/v1/chat/completions", gw.addr);
    let relay_url = format!("http://{}/fast/v1/chat/completions", relay.addr);

    warm_up(&gw, &gateway_url, &relay, &relay_url).await?;
    // Concurrency 64: the relay, then the gateway, each counted alone.
    let (r64, relay_new, relay_cpu) = counted(&relay, &relay_url, &counts).await?;
    let (g64, gateway_new, gateway_cpu) = counted(&gw, &gateway_url, &counts).await?;
    let (r1, g1) = interleaved(&relay, &relay_url, &gw, &gateway_url).await?;
    let (connections, handshakes) = counts.now();
    drop(gw);
    drop(relay);

    rows.push(row(
        "floor: TLS relay (HTTP/2 upstream), concurrency 64".into(),
        &r64,
        format!(
            "one shared h2 connection; {} new TLS handshakes, {} new connections during the run; CPU {relay_cpu:.1} µs per request",
            relay_new.1, relay_new.0
        ),
    ));
    rows.push(row(
        "gateway, TLS + HTTP/2 provider, concurrency 64".into(),
        &g64,
        format!(
            "{:.2} of the TLS relay's req/s; {} new TLS handshakes, {} new connections after warm-up; CPU {gateway_cpu:.1} µs per request ({:.2}× the relay's)",
            g64.rps() / r64.rps().max(1.0),
            gateway_new.1,
            gateway_new.0,
            gateway_cpu / relay_cpu.max(f64::MIN_POSITIVE)
        ),
    ));
    rows.push(row(
        "floor: TLS relay (HTTP/2 upstream), concurrency 1".into(),
        &r1,
        String::new(),
    ));
    rows.push(row(
        "gateway, TLS + HTTP/2 provider, concurrency 1".into(),
        &g1,
        format!(
            "added p50 {:.3} ms, p99 {:.3} ms over the TLS relay",
            g1.p50() - r1.p50(),
            g1.p99() - r1.p99()
        ),
    ));
    notes.push(format!(
        "TLS upstream (HTTP/2 by ALPN, a CA made at run time): {connections} TCP connections and {handshakes} TLS handshakes in the whole phase, the gateway's and the relay's together (its answer: {} bytes, the plain upstream's)",
        ANSWER.len()
    ));
    let _ = std::fs::remove_file(&ca_file);
    Ok(())
}

/// One request first (its connection is the one the rest share), then
/// the load; the relay's one connection opens at start.
async fn warm_up(
    gw: &Gateway,
    gateway_url: &str,
    relay: &Gateway,
    relay_url: &str,
) -> Result<(), Error> {
    closed_loop(gw.addr, gateway_url, REQUEST, 1, Duration::from_millis(300)).await?;
    closed_loop(
        gw.addr,
        gateway_url,
        REQUEST,
        64,
        Duration::from_millis(800),
    )
    .await?;
    closed_loop(
        relay.addr,
        relay_url,
        REQUEST,
        64,
        Duration::from_millis(800),
    )
    .await?;
    Ok(())
}

/// `process` at concurrency 64 for 3 s: its samples, the connections and
/// handshakes the upstream saw meanwhile, and its CPU µs per request.
async fn counted(
    process: &Gateway,
    url: &str,
    counts: &Counts,
) -> Result<(Samples, (usize, usize), f64), Error> {
    let before = counts.now();
    let load = closed_loop(process.addr, url, REQUEST, 64, Duration::from_secs(3));
    let (s, cpu) = with_cpu(process, load).await?;
    Ok((s, delta(before, counts.now()), cpu))
}

/// Concurrency 1, interleaved (relay, gateway, relay, gateway): the
/// relay's samples and the gateway's.
async fn interleaved(
    relay: &Gateway,
    relay_url: &str,
    gw: &Gateway,
    gateway_url: &str,
) -> Result<(Samples, Samples), Error> {
    let mut r1 = Vec::new();
    let mut g1 = Vec::new();
    for _ in 0..2 {
        let d = Duration::from_millis(1500);
        r1.push(closed_loop(relay.addr, relay_url, REQUEST, 1, d).await?);
        g1.push(closed_loop(gw.addr, gateway_url, REQUEST, 1, d).await?);
    }
    Ok((merge(r1), merge(g1)))
}

/// Runs of one measurement as one set of samples.
fn merge(runs: Vec<Samples>) -> Samples {
    let mut all = Samples {
        micros: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for run in runs {
        all.micros.extend(run.micros);
        all.elapsed += run.elapsed;
    }
    all
}

/// `(connections, handshakes)` added between two readings.
fn delta(before: (usize, usize), after: (usize, usize)) -> (usize, usize) {
    (after.0 - before.0, after.1 - before.1)
}

/// The plain upstream's handler behind TLS, HTTP/2 or HTTP/1.1 by ALPN.
async fn start_tls_upstream(certs: &TestCerts, counts: Arc<Counts>) -> Result<SocketAddr, Error> {
    let acceptor = TlsAcceptor::from(certs.server_config(&[b"h2", b"http/1.1"])?);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                counts.handshakes.fetch_add(1, Ordering::SeqCst);
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let service = hyper::service::service_fn(upstream_handle);
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    Ok(addr)
}

/// A second gateway process whose one provider is the TLS upstream.
async fn start_gateway(
    bin: &Path,
    dir: &Path,
    upstream: SocketAddr,
    ca_file: &Path,
    cpu: Option<&str>,
) -> Result<Gateway, Error> {
    let config = dir.join("gateway-tls.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
allowed_hosts = ["bench"]

[routing]
default = "tls"
order = ["tls"]

[providers.tls]
kind = "openai"
base_url = "https://{upstream}/fast/v1"
model = "bench-model"
ca_file = {ca_file:?}

[breaker]
failure_threshold = 0

[cache]
enabled = false
"#,
            ca_file = ca_file.display().to_string()
        ),
    )?;
    Gateway::spawn(bin, &serve_args(&config)?, cpu, true, "the TLS gateway").await
}

/// The TLS relay as a child process, pinned like the gateway.
async fn start_relay(
    upstream: SocketAddr,
    ca_file: &Path,
    cpu: Option<&str>,
) -> Result<Gateway, Error> {
    let args = [
        "--tls-relay".into(),
        upstream.to_string().into(),
        ca_file.as_os_str().to_owned(),
    ]; // the listen address follows
    Gateway::spawn(std::env::current_exe()?, &args, cpu, false, "the TLS relay").await
}

/// `--tls-relay <upstream> <ca file> <listen>`: HTTP/1.1 in, every request
/// forwarded over one HTTP/2 connection over TLS (trusting only the CA in
/// the file), the answer's body passed through as it arrives.
pub(crate) async fn relay(args: &[String]) -> Result<(), Error> {
    const USAGE: &str = "--tls-relay <upstream> <ca file> <listen>";
    let upstream: SocketAddr = args.first().ok_or(USAGE)?.parse()?;
    let ca = std::fs::read(args.get(1).ok_or(USAGE)?)?;
    let listen: SocketAddr = args.get(2).ok_or(USAGE)?.parse()?;
    let mut roots = rustls::RootCertStore::empty();
    {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        for der in CertificateDer::pem_slice_iter(&ca) {
            roots.add(der?)?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(upstream).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::IpAddress(upstream.ip().into());
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let authority = format!("https://{upstream}");

    let listener = TcpListener::bind(listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let sender = sender.clone();
        let authority = authority.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let mut sender = sender.clone();
                let authority = authority.clone();
                async move {
                    let (mut parts, body) = req.into_parts();
                    let body: Bytes = body.collect().await?.to_bytes();
                    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                    parts.uri = format!("{authority}{path}").parse().unwrap_or_default();
                    parts.version = hyper::Version::HTTP_2;
                    parts.headers.remove(hyper::header::HOST);
                    sender.ready().await?;
                    sender
                        .send_request(Request::from_parts(parts, Full::new(body)))
                        .await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
