"""Checks the rendered Kubernetes manifests offline, for `cargo xtask test`.

    python validate.py OUT.json RENDERED.yaml...

Every object of every rendered file is validated, strictly (no unknown
field), with the `kubernetes-validate` package against the Kubernetes
schemas it ships for the oldest and the newest version it knows. The
ServiceMonitor is a Prometheus Operator CRD, whose schema the package does
not ship: it is checked structurally only (its fields' shapes, and that it
selects the gateway's Service by its labels and scrapes a port the Service
names). The gateway's Deployment is then held to the rules the manifests
promise (non-root, read-only root, no privilege escalation, no capability,
the runtime's seccomp profile, requests and limits, liveness on /healthz,
readiness on /readyz polled often enough that a draining pod is found
unready within `server.drain_grace`, a termination grace of at least the
drain the settings file asks for — or the Deployment's
`UNDERSTUDY_DRAIN_GRACE` and `UNDERSTUDY_DRAIN_TIMEOUT`, which win — plus a
margin, and no `replicas` of its own: an autoscaler scales it, from at
least two).

The objects of the first file are written to OUT.json (a JSON list), for
the fleet test that plays them under Podman.
"""

import json
import sys
import tomllib

import kubernetes_validate
import yaml

# The versions validated against: the oldest and the newest the package has.
VERSIONS = ("1.25.0", kubernetes_validate.latest_version())

# The drain settings' defaults (`[server] drain_grace`, `drain_timeout`), in
# seconds, and the margin the grace period keeps beyond them.
DRAIN_GRACE = 5
DRAIN_TIMEOUT = 30
MARGIN = 5


def main(out, paths):
    problems = []
    first = None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            objects = [o for o in yaml.safe_load_all(f) if o]
        if first is None:
            first = objects
        if not objects:
            problems.append(f"{path}: no object rendered")
        for obj in objects:
            where = f"{path}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            problems += [f"{where}: {p}" for p in check(obj, objects)]
        print(f"validated {len(objects)} objects of {path} against Kubernetes {', '.join(VERSIONS)}")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(first or [], f)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)


def check(obj, objects):
    """What is wrong with `obj` (rendered beside `objects`)."""
    if obj.get("kind") == "ServiceMonitor":
        return service_monitor(obj, objects)
    problems = []
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"Kubernetes {version}: {e.message} at {'.'.join(map(str, e.path))}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
            problems.append(f"Kubernetes {version}: no schema: {e}")
    if obj.get("kind") == "Deployment":
        problems += gateway_rules(obj, objects)
    return problems


def service_monitor(obj, objects):
    """The ServiceMonitor's structure, and that it finds the gateway."""
    problems = []
    if obj.get("apiVersion") != "monitoring.coreos.com/v1":
        problems.append(f"apiVersion {obj.get('apiVersion')!r}, not monitoring.coreos.com/v1")
    spec = obj.get("spec") or {}
    unknown = set(spec) - {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    if unknown:
        problems.append(f"unexpected spec fields {sorted(unknown)}")
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    services = [
        o for o in objects
        if o.get("kind") == "Service"
        and labels
        and labels.items() <= (o["metadata"].get("labels") or {}).items()
    ]
    if [s["metadata"]["name"] for s in services] != ["understudy"]:
        problems.append(f"selects the Services {[s['metadata']['name'] for s in services]}, not the gateway's alone")
    endpoints = spec.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints:
        return problems + ["no endpoints"]
    ports = {p.get("name") for s in services for p in s["spec"].get("ports", [])}
    for e in endpoints:
        if set(e) - {"port", "path", "interval", "scrapeTimeout", "scheme"}:
            problems.append(f"unexpected endpoint fields {sorted(set(e))}")
        if e.get("port") not in ports:
            problems.append(f"scrapes port {e.get('port')!r}, which the Service does not name")
        if e.get("path") != "/metrics":
            problems.append(f"scrapes {e.get('path')!r}, not /metrics")
    return problems


def gateway_rules(deployment, objects):
    """The rules the gateway's Deployment promises."""
    spec = deployment["spec"]["template"]["spec"]
    pod = spec.get("securityContext") or {}
    problems = []
    grace, timeout = drain(objects, spec["containers"])
    if spec.get("terminationGracePeriodSeconds", 30) < grace + timeout + MARGIN:
        problems.append(f"terminationGracePeriodSeconds below the drain ({grace + timeout} s) + {MARGIN} s")
    if (pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("no RuntimeDefault seccomp profile")
    if "replicas" in deployment["spec"]:
        problems.append("sets replicas, which the autoscaler owns (an apply would reset it)")
    problems += autoscaled(deployment, objects)
    for c in spec["containers"]:
        sc = c.get("securityContext") or {}
        rules = {
            "runs as non-root": sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True,
            "a read-only root filesystem": sc.get("readOnlyRootFilesystem") is True,
            "no privilege escalation": sc.get("allowPrivilegeEscalation") is False,
            "every capability dropped": (sc.get("capabilities") or {}).get("drop") == ["ALL"],
            "requests and limits": all(c.get("resources", {}).get(k) for k in ("requests", "limits")),
            "liveness on /healthz": probe_path(c, "livenessProbe") == "/healthz",
            "readiness on /readyz": probe_path(c, "readinessProbe") == "/readyz",
            "found unready within the drain's grace": unready_after(c) <= grace,
        }
        problems += [f"container {c['name']}: not {rule}" for rule, ok in rules.items() if not ok]
    return problems


def autoscaled(deployment, objects):
    """What is wrong with the autoscaler of `deployment`: one, from at least two."""
    name = deployment["metadata"]["name"]
    hpas = [
        o for o in objects
        if o.get("kind") == "HorizontalPodAutoscaler"
        and (o["spec"].get("scaleTargetRef") or {}).get("kind") == "Deployment"
        and o["spec"]["scaleTargetRef"].get("name") == name
    ]
    if len(hpas) != 1:
        return [f"{len(hpas)} HorizontalPodAutoscalers scale it, not one"]
    if hpas[0]["spec"].get("minReplicas", 1) < 2:
        return ["its HorizontalPodAutoscaler's minReplicas is below two"]
    return []


def unready_after(container):
    """Seconds the readiness probe may take to see a pod unready."""
    probe = container.get("readinessProbe") or {}
    return probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)


def probe_path(container, probe):
    return ((container.get(probe) or {}).get("httpGet") or {}).get("path")


def drain(objects, containers):
    """The drain's grace and deadline in seconds: the rendered settings
    file's, the containers' `UNDERSTUDY_DRAIN_*` variables winning."""
    grace, timeout = DRAIN_GRACE, DRAIN_TIMEOUT
    for o in objects:
        if o.get("kind") == "ConfigMap" and "understudy.toml" in (o.get("data") or {}):
            server = tomllib.loads(o["data"]["understudy.toml"]).get("server", {})
            grace = server.get("drain_grace", grace)
            timeout = server.get("drain_timeout", timeout)
    for c in containers:
        for e in c.get("env") or []:
            if e.get("name") == "UNDERSTUDY_DRAIN_GRACE" and "value" in e:
                grace = float(e["value"])
            if e.get("name") == "UNDERSTUDY_DRAIN_TIMEOUT" and "value" in e:
                timeout = float(e["value"])
    return grace, timeout


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
