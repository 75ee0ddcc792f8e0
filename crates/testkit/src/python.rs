//! The Python the tests' out-of-process checks run on (the official SDKs,
//! the OTLP receiver): the venv `cargo xtask test` provisions.

/// The Python interpreter that has `package` (and fails the test with how to
/// get one when it has not): `$UNDERSTUDY_PYTHON` (`cargo xtask test` sets
/// it to the venv it provisions in `target/test-venv`), else that venv when
/// a previous run made it, else `python3`.
pub fn python_with(package: &str) -> String {
    let python = std::env::var("UNDERSTUDY_PYTHON").unwrap_or_else(|_| {
        let venv = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/test-venv/bin/python"
        );
        if std::path::Path::new(venv).exists() {
            venv.to_owned()
        } else {
            "python3".to_owned()
        }
    });
    let probe = std::process::Command::new(&python)
        .args(["-c", &format!("import {package}")])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs a Python with the `{package}` package, and `{python}` has none: \
         run `cargo xtask test`, which provisions a venv with it in target/test-venv \
         (or set UNDERSTUDY_PYTHON to a Python that has it) — {probe:?}"
    );
    python
}
