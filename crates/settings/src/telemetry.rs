//! The `[telemetry]` table and OpenTelemetry's own variables: where spans
//! go (OTLP over HTTP/protobuf), under which service name and resource,
//! and which traces are sampled. The variables win over the file, as every
//! OpenTelemetry SDK has them do.

use std::time::Duration;

use serde::Deserialize;

use super::secret::Secret;
use super::source::{Blame, Env, SettingsError};
use super::timeouts::seconds_or;

/// How spans travel to the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtlpProtocol {
    /// `http/protobuf`: `POST …/v1/traces`.
    #[default]
    HttpProtobuf,
    /// `grpc`: the `TraceService/Export` call over HTTP/2 (cleartext
    /// `http://` with prior knowledge, or `https://`).
    Grpc,
}

/// Which traces are recorded (`OTEL_TRACES_SAMPLER`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// A share of traces, by trace id.
    Ratio(f64),
    /// The caller's decision when it sent one (`traceparent`'s sampled
    /// flag), else the root sampler.
    ParentBased(RootSampler),
    /// `parentbased_always_on`: OpenTelemetry's default.
    #[default]
    ParentBasedAlwaysOn,
}

/// The root sampler of a parent-based one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    AlwaysOff,
    Ratio(f64),
}

/// Spans and where they go. Off (`traces_endpoint` is `None`) unless an
/// endpoint is configured. Its `Debug` shows the endpoint without its
/// userinfo and no header's value.
#[derive(Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go: for `http/protobuf` the full traces URL
    /// (`…/v1/traces`), for `grpc` the collector's base URL.
    pub traces_endpoint: Option<String>,
    /// `http/protobuf` (the default) or `grpc`.
    pub protocol: OtlpProtocol,
    /// Headers sent with each export (a vendor's API key): secret values.
    pub headers: Vec<(String, Secret)>,
    /// `service.name`.
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    pub sampler: Sampler,
    /// Message content in spans (opt-in: prompts and answers are the
    /// users' data).
    pub capture_content: bool,
    /// A caller's `traceparent`/`tracestate` is continued (on by default);
    /// off, every request starts a trace of its own (callers that are not
    /// trusted cannot then choose the trace id or force sampling).
    pub follow_traceparent: bool,
    /// The most spans held for export; beyond it new ones are dropped and
    /// counted.
    pub max_queue: usize,
    /// Spans sent in one export at most.
    pub max_batch: usize,
    /// How long one export may take.
    pub export_timeout: Duration,
    /// How often what is held is sent.
    pub export_every: Duration,
}

impl std::fmt::Debug for TelemetrySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TelemetrySettings")
            .field(
                "traces_endpoint",
                &self
                    .traces_endpoint
                    .as_deref()
                    .map(super::secret::redact_url),
            )
            .field("protocol", &self.protocol)
            .field("headers", &names)
            .field("service_name", &self.service_name)
            .field("sampler", &self.sampler)
            .finish_non_exhaustive()
    }
}

/// The `[telemetry]` table of the file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawTelemetry {
    endpoint: Option<String>,
    traces_endpoint: Option<String>,
    protocol: Option<String>,
    headers: std::collections::BTreeMap<String, String>,
    service_name: Option<String>,
    sampler: Option<String>,
    sampler_arg: Option<f64>,
    capture_content: bool,
    follow_traceparent: Option<bool>,
    max_queue: Option<usize>,
    export_timeout: Option<f64>,
    export_every: Option<f64>,
}

/// The telemetry settings: the file's `[telemetry]` with `OTEL_*` over it.
pub(super) fn read(
    raw: RawTelemetry,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<TelemetrySettings, SettingsError> {
    let protocol = read_protocol(raw.protocol.as_deref(), env, blame)?;
    let endpoint = read_endpoint(&raw, protocol, env, blame)?;
    let headers = read_headers(raw.headers, env, blame)?;
    let (service_name, resource) = read_identity(raw.service_name, env, blame)?;
    let sampler = read_sampler(raw.sampler.as_deref(), raw.sampler_arg, env, blame)?;
    let export_timeout = seconds_or(raw.export_timeout, Duration::from_secs(10))
        .map_err(|m| blame.file("telemetry.export_timeout", m))?;
    let export_every = seconds_or(raw.export_every, Duration::from_secs(1))
        .map_err(|m| blame.file("telemetry.export_every", m))?;
    let max_queue = raw.max_queue.unwrap_or(8192);
    if max_queue == 0 {
        return Err(blame.file("telemetry.max_queue", "must be at least 1".into()));
    }
    Ok(TelemetrySettings {
        traces_endpoint: endpoint,
        protocol,
        headers,
        service_name,
        resource,
        sampler,
        capture_content: raw.capture_content,
        follow_traceparent: raw.follow_traceparent.unwrap_or(true),
        max_queue,
        max_batch: 512,
        export_timeout,
        export_every,
    })
}

/// The OTLP transport: the traces variable, the general one, the file.
fn read_protocol(
    file: Option<&str>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<OtlpProtocol, SettingsError> {
    Ok(
        match (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
            env.get("OTEL_EXPORTER_OTLP_PROTOCOL"),
        ) {
            (Some(p), _) => otlp_protocol(p.trim())
                .map_err(|m| blame.env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", m))?,
            (None, Some(p)) => {
                otlp_protocol(p.trim()).map_err(|m| blame.env("OTEL_EXPORTER_OTLP_PROTOCOL", m))?
            }
            (None, None) => match file {
                Some(p) => otlp_protocol(p).map_err(|m| blame.file("telemetry.protocol", m))?,
                None => OtlpProtocol::default(),
            },
        },
    )
}

/// Where traces go (`None`: nowhere, or `OTEL_SDK_DISABLED`): the traces
/// variable as a whole URL, the general one or the file's base with the
/// signal's path added over HTTP.
fn read_endpoint(
    raw: &RawTelemetry,
    protocol: OtlpProtocol,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<Option<String>, SettingsError> {
    // A base endpoint gets the signal's path over HTTP; gRPC names the
    // service in its own path, so its base is used as it is.
    let base = |url: String| match protocol {
        OtlpProtocol::HttpProtobuf => traces_url(&url),
        OtlpProtocol::Grpc => url,
    };
    let disabled = env
        .get("OTEL_SDK_DISABLED")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let endpoint = match (
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        // The signal's own variable is the whole URL; the base one is a
        // base the path is added to.
        (Some(url), _) => Some(check_url(
            url.trim(),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            blame,
            true,
        )?),
        (None, Some(url)) => Some(base(check_url(
            url.trim(),
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            blame,
            true,
        )?)),
        (None, None) => match (&raw.traces_endpoint, &raw.endpoint) {
            (Some(url), _) => Some(check_url(url, "telemetry.traces_endpoint", blame, false)?),
            (None, Some(url)) => Some(base(check_url(url, "telemetry.endpoint", blame, false)?)),
            (None, None) => None,
        },
    };
    Ok(endpoint.filter(|_| !disabled))
}

/// The headers sent with every export (secrets: they often carry a token).
fn read_headers(
    file: std::collections::BTreeMap<String, String>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<Vec<(String, Secret)>, SettingsError> {
    Ok(
        match env
            .get("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env.get("OTEL_EXPORTER_OTLP_HEADERS"))
        {
            Some(list) => parse_pairs(&list)
                .map_err(|m| blame.env("OTEL_EXPORTER_OTLP_HEADERS", m))?
                .into_iter()
                .map(|(k, v)| (k, Secret::new(v)))
                .collect(),
            None => file.into_iter().map(|(k, v)| (k, Secret::new(v))).collect(),
        },
    )
}

/// The service's name and the other resource attributes: the variables,
/// then the file, then `understudy`.
fn read_identity(
    file_name: Option<String>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<(String, Vec<(String, String)>), SettingsError> {
    let mut resource = match env.get("OTEL_RESOURCE_ATTRIBUTES") {
        Some(list) => parse_pairs(&list).map_err(|m| blame.env("OTEL_RESOURCE_ATTRIBUTES", m))?,
        None => Vec::new(),
    };
    let from_resource = resource
        .iter()
        .position(|(k, _)| k == "service.name")
        .map(|i| resource.remove(i).1);
    let service_name = env
        .get("OTEL_SERVICE_NAME")
        .or(file_name)
        .or(from_resource)
        .unwrap_or_else(|| "understudy".to_owned());
    Ok((service_name, resource))
}

/// The root sampler: the variables, then the file.
fn read_sampler(
    file: Option<&str>,
    file_arg: Option<f64>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<Sampler, SettingsError> {
    Ok(match env.get("OTEL_TRACES_SAMPLER") {
        Some(name) => {
            let arg = env
                .get("OTEL_TRACES_SAMPLER_ARG")
                .map(|a| a.trim().parse::<f64>())
                .transpose()
                .map_err(|_| blame.env("OTEL_TRACES_SAMPLER_ARG", "not a number".into()))?;
            sampler(name.trim(), arg).map_err(|m| blame.env("OTEL_TRACES_SAMPLER", m))?
        }
        None => match file {
            Some(name) => {
                sampler(name, file_arg).map_err(|m| blame.file("telemetry.sampler", m))?
            }
            None => Sampler::default(),
        },
    })
}

/// `url` if it is an `http(s)://` URL (the message never shows it: it may
/// hold a token).
fn check_url(url: &str, setting: &str, blame: &Blame, env: bool) -> Result<String, SettingsError> {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace);
    if ok {
        return Ok(url.to_owned());
    }
    let message = "an http:// or https:// URL".to_owned();
    Err(if env {
        blame.env(setting, message)
    } else {
        blame.file(setting, message)
    })
}

/// The traces URL of a base endpoint: `v1/traces` added to its path.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// `k1=v1,k2=v2` (W3C baggage's form, values percent-decoded).
fn parse_pairs(list: &str) -> Result<Vec<(String, String)>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| "a list of key=value pairs, comma-separated".to_owned())?;
            let k = k.trim();
            if k.is_empty() {
                return Err("a pair without a key".to_owned());
            }
            Ok((k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A protocol by OpenTelemetry's name.
fn otlp_protocol(name: &str) -> Result<OtlpProtocol, String> {
    match name {
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "grpc" => Ok(OtlpProtocol::Grpc),
        other => Err(format!(
            "`{other}`: this gateway exports OTLP as `http/protobuf` or `grpc` (not `http/json`)"
        )),
    }
}

/// A sampler by OpenTelemetry's name.
fn sampler(name: &str, arg: Option<f64>) -> Result<Sampler, String> {
    let ratio = || {
        let r = arg.unwrap_or(1.0);
        if (0.0..=1.0).contains(&r) {
            Ok(r)
        } else {
            Err(format!("the ratio {r} is not between 0 and 1"))
        }
    };
    Ok(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::Ratio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBasedAlwaysOn,
        "parentbased_always_off" => Sampler::ParentBased(RootSampler::AlwaysOff),
        "parentbased_traceidratio" => Sampler::ParentBased(RootSampler::Ratio(ratio()?)),
        other => {
            return Err(format!(
                "`{other}` is not always_on, always_off, traceidratio, parentbased_always_on, \
                 parentbased_always_off or parentbased_traceidratio"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_urls() {
        assert_eq!(
            parse_pairs("a=1, b = x%2Cy ,").unwrap(),
            [("a".into(), "1".into()), ("b".into(), "x,y".into())]
        );
        assert!(parse_pairs("novalue").is_err());
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/x"), "http://h:4318/x/v1/traces");
        assert_eq!(
            sampler("traceidratio", Some(0.25)),
            Ok(Sampler::Ratio(0.25))
        );
        assert!(sampler("traceidratio", Some(2.0)).is_err());
        assert!(sampler("sometimes", None).is_err());
    }
}
