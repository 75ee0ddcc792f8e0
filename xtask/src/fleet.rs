//! `cargo xtask fleet-test` (and the last step of `cargo xtask test`): the
//! Kubernetes manifests' fleet under `podman kube play`.
//!
//! With Podman able to run containers here ([`Podman::detect`]; otherwise
//! a loud SKIPPED line, and the step succeeds without having passed), it
//! makes the gateway's image from the real `Containerfile` and Redis's
//! image from the host's `redis-server` (the helpers of `container.rs`),
//! then runs understudy-cli's `fleet` test — built with its
//! `container-tests` feature — on the base's objects that the deployment
//! check rendered (`deploy.rs`), giving it the images, and Podman with
//! this machine's settings.

use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

use crate::container::Podman;
use crate::{cargo_with_env, deploy, note};

/// Runs the fleet test; see the module's doc. The base must have been
/// rendered (`deploy::check`).
pub(crate) fn run(root: &Path) -> Result<(), String> {
    let podman = match Podman::detect() {
        Ok(podman) => podman,
        Err(skip) => {
            skip.announce("the Kubernetes fleet test (podman kube play)");
            return Ok(());
        }
    };
    let objects = deploy::objects_json(root);
    if !objects.exists() {
        return Err(format!(
            "{} is missing: the deployment check renders it (cargo xtask deploy-check)",
            objects.display()
        ));
    }
    let started = Instant::now();
    let image = podman.build_gateway_image()?;
    let redis = podman.make_redis_image()?;
    note(&format!(
        "fleet test: podman kube play with {image} and {redis}"
    ));
    // Podman as the helpers run it: their program and settings.
    let command = podman.command();
    let mut env: Vec<(OsString, OsString)> = command
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    env.extend(
        [
            ("PODMAN", command.get_program().to_owned()),
            ("UNDERSTUDY_FLEET_OBJECTS", objects.into_os_string()),
            ("UNDERSTUDY_FLEET_IMAGE", image.into()),
            ("UNDERSTUDY_FLEET_REDIS_IMAGE", redis.into()),
        ]
        .map(|(k, v)| (OsString::from(k), v)),
    );
    let env: Vec<(&str, &std::ffi::OsStr)> = env
        .iter()
        .filter_map(|(k, v)| Some((k.to_str()?, v.as_os_str())))
        .collect();
    cargo_with_env(
        &[
            "test",
            "-p",
            "understudy-cli",
            "--features",
            "container-tests",
            "--test",
            "fleet",
        ],
        &env,
    )?;
    note(&format!(
        "fleet test passed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
