//! A provider's connection settings: `http1_only` (no HTTP/2 by ALPN) and
//! `ca_file` (extra CA certificates, read when the settings load; a file
//! that is missing, unreadable or holds no certificate is an error naming
//! the setting and the provider).

use std::path::PathBuf;

use understudy_settings::Settings;

fn load(toml: &str) -> Result<Settings, String> {
    Settings::from_toml_str(toml, |_| None).map_err(|e| e.to_string())
}

/// A file in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "understudy-transport-settings-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, contents).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A DER SEQUENCE (`30 03 02 01 00`): the structure a certificate has; the
/// certificate itself is parsed when the provider's client is built.
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n";

#[test]
fn http1_only_is_off_by_default_and_set_per_provider() {
    let s = load("[providers.claude]\nhttp1_only = true\n").unwrap();
    assert!(s.providers["claude"].http1_only);
    assert!(!s.providers["groq"].http1_only);
    let err = load("[providers.claude]\nhttp1_only = \"yes\"\n").unwrap_err();
    assert!(err.contains("providers.claude.http1_only"), "{err}");
}

#[test]
fn a_ca_file_is_read_when_the_settings_load() {
    let file = TempFile::new("ok.pem", PEM);
    let s = load(&format!(
        "[providers.corp]\nbase_url = \"https://llm.corp.example/v1\"\nmodel = \"m\"\nca_file = {:?}\n",
        file.0.display().to_string()
    ))
    .unwrap();
    let ca = s.providers["corp"].ca_file.as_ref().unwrap();
    assert_eq!(ca.path, file.0);
    assert_eq!(&*ca.pem, PEM.as_bytes());
    assert!(s.providers["groq"].ca_file.is_none());
    // Its Debug names the file, not its contents.
    let shown = format!("{:?}", s.providers["corp"]);
    assert!(
        shown.contains("ok.pem") && !shown.contains("MIIB"),
        "{shown}"
    );
}

#[test]
fn a_missing_or_unusable_ca_file_names_the_setting_and_the_provider() {
    let err =
        load("[providers.openai]\nca_file = \"/nonexistent/understudy/ca.pem\"\n").unwrap_err();
    assert!(err.contains("providers.openai.ca_file"), "{err}");
    assert!(err.contains("/nonexistent/understudy/ca.pem"), "{err}");
    assert!(err.contains("cannot read"), "{err}");

    let not_pem = TempFile::new("not.pem", "sk-secret-looking-text\n");
    let err = load(&format!(
        "[providers.groq]\nca_file = {:?}\n",
        not_pem.0.display().to_string()
    ))
    .unwrap_err();
    assert!(err.contains("providers.groq.ca_file"), "{err}");
    assert!(err.contains("no PEM certificate"), "{err}");
    // The file's contents are never echoed.
    assert!(!err.contains("sk-secret"), "{err}");

    for (name, text, says) in [
        (
            "not-base64.pem",
            "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n",
            "certificate 1 is not a base64 DER certificate",
        ),
        (
            "second-broken.pem",
            &format!(
                "{PEM}-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
            ),
            "certificate 2 is not a base64 DER certificate",
        ),
        (
            "unterminated.pem",
            "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n",
            "certificate 1 has no `-----END CERTIFICATE-----`",
        ),
    ] {
        let file = TempFile::new(name, text);
        let err = load(&format!(
            "[providers.groq]\nca_file = {:?}\n",
            file.0.display().to_string()
        ))
        .unwrap_err();
        assert!(err.contains("providers.groq.ca_file"), "{err}");
        assert!(err.contains(says), "{err}");
    }

    let dir = std::env::temp_dir();
    let err = load(&format!(
        "[providers.groq]\nca_file = {:?}\n",
        dir.display().to_string()
    ))
    .unwrap_err();
    assert!(err.contains("providers.groq.ca_file"), "{err}");
}

#[test]
fn a_real_ca_bundle_is_accepted() {
    // The system's bundle, where there is one: every certificate in it
    // passes the structural check.
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if std::path::Path::new(bundle).exists() {
        let s = load(&format!("[providers.openai]\nca_file = {bundle:?}\n")).unwrap();
        assert!(s.providers["openai"].ca_file.is_some());
    }
}
