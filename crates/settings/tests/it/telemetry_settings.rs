//! Traces' settings from OpenTelemetry's own variables over `[telemetry]`.

use understudy_settings::Settings;
use understudy_settings::{RootSampler, Sampler};

fn load(toml: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
    crate::settings_with(toml, env).map_err(|e| e.to_string())
}

#[test]
fn the_standard_variables_win_over_the_table() {
    let table = "[telemetry]\nendpoint = \"http://file:4318\"\nservice_name = \"from-file\"\n";
    let s = load(table, &[]).unwrap().telemetry;
    assert_eq!(
        s.traces_endpoint.as_deref(),
        Some("http://file:4318/v1/traces")
    );
    assert_eq!(s.service_name, "from-file");
    let s = load(
        table,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=secret%3D1,x-team=a",
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs,region=eu",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ],
    )
    .unwrap()
    .telemetry;
    assert_eq!(
        s.traces_endpoint.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
    assert_eq!(s.headers[0].1.expose(), "secret=1");
    assert_eq!(
        s.service_name, "from-file",
        "the table's name over the attributes'"
    );
    assert_eq!(s.resource, [("region".to_owned(), "eu".to_owned())]);
    assert_eq!(s.sampler, Sampler::ParentBased(RootSampler::Ratio(0.5)));
    assert!(!format!("{s:?}").contains("secret"), "{s:?}");
    // The signal's own URL is used as it is; OTEL_SDK_DISABLED turns it off.
    let s = load(
        "",
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:1/custom")],
    )
    .unwrap()
    .telemetry;
    assert_eq!(s.traces_endpoint.as_deref(), Some("http://h:1/custom"));
    let off = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    )
    .unwrap();
    assert_eq!(off.telemetry.traces_endpoint, None);
    assert_eq!(
        load("", &[]).unwrap().telemetry.traces_endpoint,
        None,
        "off by default"
    );
}

#[test]
fn grpc_takes_the_base_endpoint_as_it_is() {
    use understudy_settings::OtlpProtocol;
    let grpc = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    )
    .unwrap();
    assert_eq!(grpc.telemetry.protocol, OtlpProtocol::Grpc);
    assert_eq!(
        grpc.telemetry.traces_endpoint.as_deref(),
        Some("http://collector:4317")
    );
    let file = load(
        "[telemetry]\nendpoint = \"http://collector:4317\"\nprotocol = \"grpc\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(file.telemetry.protocol, OtlpProtocol::Grpc);
    assert_eq!(
        file.telemetry.traces_endpoint.as_deref(),
        Some("http://collector:4317")
    );
    // The signal's own variable wins over the general one.
    let http = load(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ],
    )
    .unwrap();
    assert_eq!(http.telemetry.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(
        http.telemetry.traces_endpoint.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
}

#[test]
fn what_cannot_be_honoured_is_a_settings_error() {
    for (var, value, says) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "grpc"),
        ("OTEL_TRACES_SAMPLER", "sometimes", "always_on"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "http://"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "key=value"),
    ] {
        let e = load("", &[(var, value), ("OTEL_TRACES_SAMPLER_ARG", "0.5")]).unwrap_err();
        assert!(e.contains(var) && e.contains(says), "{var}: {e}");
    }
}
