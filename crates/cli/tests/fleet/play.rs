//! The rendered Kubernetes objects turned into what `podman kube play`
//! (4.3) runs on one host, as data in, data out. What changes, and why:
//!
//! - The gateway's Deployment is played once per replica of the [`Plan`]
//!   (`understudy-a-…`, `understudy-b-…`), each with one replica: Podman
//!   plays a Deployment's replicas as pods on one network, where two
//!   gateways cannot share a port.
//! - Every pod uses the host's network (`hostNetwork`): Podman's pods have
//!   no cluster DNS, so the gateways reach Redis, and the test reaches the
//!   gateways, on loopback ports: `UNDERSTUDY_LISTEN` per replica, Redis's
//!   `--port`, `REDIS_URL` in the [`Plan`]'s Secret. Container ports are
//!   left out (Podman refuses port mappings on the host's network).
//! - The probes are left out: Podman 4.3 runs an `httpGet` probe as `curl`
//!   inside the container, and the image has no `curl`. The test asks
//!   `/healthz` and `/readyz` itself.
//! - The Secret the operator makes is a ConfigMap of the test's keys:
//!   Podman 4.3 does not read Kubernetes Secrets; `envFrom` takes it the
//!   same way. Redis's `env` entries that read one of its keys
//!   (`secretKeyRef`) are left out, and each `$(VAR)` of its arguments is
//!   replaced with the variable's value: Podman 4.3 does not expand them.
//! - Redis's StatefulSet is played as a Deployment (Podman does not play
//!   StatefulSets), its volume claim an `emptyDir`. Its arguments lose the
//!   leading `redis-server`, which the official image's entrypoint takes
//!   and the local image's entrypoint (`redis-server` itself) would read
//!   as a file name.
//! - Services, the disruption budget, the autoscaler and the network
//!   policy are not played (Podman has no such objects).
//! - Every played name carries the run's suffix, so runs never share a
//!   pod or a volume (Podman makes a named volume of each ConfigMap and
//!   `emptyDir`, named after it).
//! - Redis is played first: a gateway that starts before Redis answers
//!   counts alone until it does, which the test waits out all the same.
//!
//! The settings file is the example's, with the [`Plan`]'s edits (each
//! must find its text) and additions.

use serde_json::{Value, json};

/// What is played.
pub struct Plan {
    /// Appended to every played name.
    pub run: String,
    /// The gateway's image and Redis's.
    pub image: String,
    pub redis_image: String,
    /// Redis's loopback port.
    pub redis_port: u16,
    /// The gateway replicas: each a name and its loopback port.
    pub replicas: Vec<(String, u16)>,
    /// The keys and other variables the Secret would hold.
    pub secret: Vec<(String, String)>,
    /// Text replaced in the settings file: each `from` must be there.
    pub edits: Vec<(String, String)>,
    /// Appended to the settings file.
    pub append: String,
}

/// The objects Podman plays, from the base's rendered `objects`.
pub fn play(objects: &[Value], plan: &Plan) -> Result<Vec<Value>, String> {
    let mut played = Vec::new();
    let mut gateways = Vec::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        match (kind, name) {
            ("ConfigMap", "understudy-config") => played.push(config(object, plan)?),
            ("Deployment", "understudy") => {
                for (replica, port) in &plan.replicas {
                    gateways.push(gateway(object, plan, replica, *port)?);
                }
            }
            ("StatefulSet", "understudy-redis") => played.push(redis(object, plan)?),
            (
                "Service" | "PodDisruptionBudget" | "HorizontalPodAutoscaler" | "NetworkPolicy",
                _,
            ) => {}
            _ => {
                return Err(format!(
                    "{kind}/{name}: the fleet test does not know how to play it"
                ));
            }
        }
    }
    played.extend(gateways);
    played.push(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("understudy-keys-{}", plan.run)},
        "data": plan
            .secret
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>(),
    }));
    Ok(played)
}

/// The pod Podman makes of the Deployment `name`: `<name>-<run>-pod-0`.
pub fn pod(name: &str, plan: &Plan) -> String {
    format!("{name}-{}-pod-0", plan.run)
}

/// The settings file with the plan's edits.
fn config(object: &Value, plan: &Plan) -> Result<Value, String> {
    let mut object = renamed(object, plan);
    let text = object["data"]["understudy.toml"]
        .as_str()
        .ok_or("understudy-config holds no understudy.toml")?;
    let mut text = text.to_owned();
    for (from, to) in &plan.edits {
        if !text.contains(from.as_str()) {
            return Err(format!("understudy.toml no longer holds {from:?}"));
        }
        text = text.replace(from.as_str(), to);
    }
    text.push_str(&plan.append);
    object["data"]["understudy.toml"] = json!(text);
    Ok(object)
}

/// One gateway replica.
fn gateway(object: &Value, plan: &Plan, replica: &str, port: u16) -> Result<Value, String> {
    let mut object = object.clone();
    object["metadata"]["name"] = json!(format!("understudy-{replica}-{}", plan.run));
    object["spec"]["replicas"] = json!(1);
    let pod = on_host(&mut object["spec"]["template"]["spec"], plan)?;
    let container = &mut pod["containers"][0];
    container["image"] = json!(plan.image);
    container["env"]
        .as_array_mut()
        .ok_or("the gateway's container has no env")?
        .push(json!({"name": "UNDERSTUDY_LISTEN", "value": format!("127.0.0.1:{port}")}));
    for source in container["envFrom"]
        .as_array_mut()
        .ok_or("the gateway's container has no envFrom")?
    {
        if let Some(secret) = source.get("secretRef").cloned() {
            *source = json!({"configMapRef": secret});
        }
        let reference = source
            .as_object_mut()
            .and_then(|s| s.values_mut().next())
            .ok_or("an empty envFrom entry")?;
        reference["name"] = json!(format!(
            "{}-{}",
            reference["name"].as_str().unwrap_or_default(),
            plan.run
        ));
    }
    Ok(object)
}

/// Redis's StatefulSet as a Deployment on the host's network.
fn redis(object: &Value, plan: &Plan) -> Result<Value, String> {
    let mut object = renamed(object, plan);
    object["kind"] = json!("Deployment");
    let spec = object["spec"]
        .as_object_mut()
        .ok_or("the StatefulSet has no spec")?;
    spec.remove("serviceName");
    spec.remove("volumeClaimTemplates");
    object["spec"]["template"]["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let pod = on_host(&mut object["spec"]["template"]["spec"], plan)?;
    let container = &mut pod["containers"][0];
    container["image"] = json!(plan.redis_image);
    let vars = variables(&container["env"], plan)?;
    let args = container["args"]
        .as_array_mut()
        .ok_or("Redis's container has no args")?;
    if args.first().and_then(Value::as_str) == Some("redis-server") {
        args.remove(0);
    }
    for arg in args.iter_mut() {
        *arg = json!(expanded(arg.as_str().unwrap_or_default(), &vars)?);
    }
    args.extend(
        [
            "--port",
            &plan.redis_port.to_string(),
            "--bind",
            "127.0.0.1",
        ]
        .map(|a| json!(a)),
    );
    if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
        env.retain(|e| e["valueFrom"]["secretKeyRef"].is_null());
    }
    Ok(object)
}

/// A container's `env` as name and value, each `secretKeyRef` read from
/// the [`Plan`]'s Secret.
fn variables(env: &Value, plan: &Plan) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for entry in env.as_array().into_iter().flatten() {
        let name = entry["name"]
            .as_str()
            .ok_or("an env entry without a name")?;
        let value = match entry["valueFrom"]["secretKeyRef"]["key"].as_str() {
            Some(key) => plan
                .secret
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("the Secret sets no {key}, which {name} reads"))?,
            None => entry["value"].as_str().unwrap_or_default().to_owned(),
        };
        vars.push((name.to_owned(), value));
    }
    Ok(vars)
}

/// `text` with each `$(VAR)` replaced with `VAR`'s value in `vars`, as
/// Kubernetes expands a container's arguments; a `VAR` not there is an
/// error (Kubernetes would pass it on as it is, and Redis would take the
/// text for a password).
fn expanded(text: &str, vars: &[(String, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("$(") {
        let end = rest[start..]
            .find(')')
            .ok_or_else(|| format!("{text:?}: an unclosed $("))?;
        let name = &rest[start + 2..start + end];
        let value = vars
            .iter()
            .find(|(k, _)| k == name)
            .ok_or_else(|| format!("{text:?}: the container's env sets no {name}"))?;
        out.push_str(&rest[..start]);
        out.push_str(&value.1);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A pod spec on the host's network, without ports or probes, its
/// ConfigMap and `emptyDir` volumes renamed for the run.
fn on_host<'a>(pod: &'a mut Value, plan: &Plan) -> Result<&'a mut Value, String> {
    pod["hostNetwork"] = json!(true);
    for container in pod["containers"]
        .as_array_mut()
        .ok_or("a pod without containers")?
    {
        let container = container
            .as_object_mut()
            .ok_or("a container not an object")?;
        for field in ["ports", "livenessProbe", "readinessProbe"] {
            container.remove(field);
        }
    }
    let mut empty_dirs = Vec::new();
    for volume in pod["volumes"].as_array_mut().into_iter().flatten() {
        if volume["configMap"]["name"].is_string() {
            suffixed(&mut volume["configMap"]["name"], plan);
        }
        if volume.get("emptyDir").is_some() {
            empty_dirs.push(volume["name"].clone());
            suffixed(&mut volume["name"], plan);
        }
    }
    for container in pod["containers"].as_array_mut().into_iter().flatten() {
        for mount in container["volumeMounts"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if empty_dirs.contains(&mount["name"]) {
                suffixed(&mut mount["name"], plan);
            }
        }
    }
    Ok(pod)
}

/// `name` with the run's suffix.
fn suffixed(name: &mut Value, plan: &Plan) {
    *name = json!(format!(
        "{}-{}",
        name.as_str().unwrap_or_default(),
        plan.run
    ));
}

/// `object` with the run's suffix on its name.
fn renamed(object: &Value, plan: &Plan) -> Value {
    let mut object = object.clone();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    object["metadata"]["name"] = json!(format!("{name}-{}", plan.run));
    object
}

#[test]
fn arguments_expand_as_kubernetes_expands_them() {
    let vars = [("PW", "s3cret"), ("PORT", "6379")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    let cases: [(&str, Result<&str, ()>); 5] = [
        ("--appendonly", Ok("--appendonly")),
        ("$(PW)", Ok("s3cret")),
        ("a$(PW)b:$(PORT)", Ok("as3cretb:6379")),
        ("$(NOPE)", Err(())),
        ("$(PW", Err(())),
    ];
    for (text, want) in cases {
        assert_eq!(
            expanded(text, &vars).map_err(|_| ()),
            want.map(str::to_owned),
            "{text}"
        );
    }
}
