"""The deployment files agree with the code: commands, settings, ports and objects.

Static checks only (no Docker, no cluster): docker-compose.yml, deploy/k8s/*.yaml and
deploy/docker/Dockerfile are parsed and compared with ``muster.runtime.settings`` and
the modules in ``services/``; the manifests are validated against Kubernetes' own
schemas (``kubernetes-validate``, offline), docker-compose.yml against the Compose
Specification's schema (tests/unit/schemas/), and the dashboard and alert rules name only
metrics the services export.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.runtime.settings import DEFAULT_PORTS, ENV_NAMES, SettingsError, load
from services.node_agent.__main__ import decider as node_agent_decider

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "deploy" / "k8s"
MONITORING = K8S / "monitoring"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SERVICES_DIR = ROOT / "services"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
GRAFANA = ROOT / "deploy" / "grafana" / "muster-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"

IMAGE = "ghcr.io/muster-dev/muster:0.1.0"
STORE_URL = "postgresql://muster:muster@postgres:5432/muster"
REQUIRED_ENV = ("MUSTER_STORE_URL", "MUSTER_KAFKA_BOOTSTRAP")
CONFIG_MAP, SECRET = "muster-config", "muster-store"
# deployment name (compose service, k8s object, DEFAULT_PORTS key) -> services.<module>
MODULES = {
    "intake": "intake",
    "queue": "queue",
    "provisioner": "provisioner",
    "node-agent": "node_agent",
}
MIGRATE = ["muster", "migrate"]
APPLY = ["muster", "apply", "--cluster"]  # followed by the description's path
# What the downward API gives a container, as a sample value the settings can check.
FIELD_SAMPLES = {"spec.nodeName": "gpu-node-1", "metadata.namespace": "muster"}
ENV_REF = re.compile(r"\bMUSTER_[A-Z0-9_]+\b")
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
KUSTOMIZATION_FILES = {"kustomization.yaml", "kustomization.yml", "Kustomization"}


# -- loading -----------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    assert COMPOSE.is_file(), f"{COMPOSE} is missing"
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict), "no services:"
    return doc


def _k8s_files() -> list[Path]:
    """The manifests: deploy/k8s and its monitoring component (kustomize's own files
    are not Kubernetes objects)."""
    files = sorted(
        path
        for folder in (K8S, MONITORING)
        for path in [*folder.glob("*.yaml"), *folder.glob("*.yml")]
        if path.name not in KUSTOMIZATION_FILES
    )
    assert files, f"no manifests under {K8S}"
    return files


def _k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in _k8s_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:  # an empty document (a trailing ---)
                continue
            assert isinstance(doc, dict), f"{path.name}: a document that is not a mapping"
            docs.append((path.name, doc))
    return docs


def _k8s_object(kind: str, name: str) -> dict[str, Any]:
    found = [d for _, d in _k8s_docs() if d.get("kind") == kind and _name(d) == name]
    assert len(found) == 1, f"expected one {kind}/{name} in deploy/k8s, found {len(found)}"
    return found[0]


def _name(doc: Mapping[str, Any]) -> str | None:
    meta = doc.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


def _argv(command: Any) -> list[str]:
    if isinstance(command, str):
        return shlex.split(command)
    assert isinstance(command, list) and all(isinstance(a, str) for a in command), command
    return list(command)


def _module(argv: list[str]) -> str | None:
    """``services.<module>`` of ``python -m services.<module>``; None for anything else."""
    if len(argv) == 3 and argv[0] in ("python", "python3") and argv[1] == "-m":
        parts = argv[2].split(".")
        if len(parts) == 2 and parts[0] == "services":
            return parts[1]
    return None


def _compose_env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=value list form
        env = dict(item.split("=", 1) for item in env)
    assert isinstance(env, dict), env
    bad = {k: v for k, v in env.items() if not isinstance(v, str)}
    assert not bad, f"quote these values, compose would not pass them as strings: {bad}"
    return env


def _pod_spec(workload: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _single_container(workload: Mapping[str, Any]) -> dict[str, Any]:
    containers = _pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{_name(workload)}: expected one container"
    container: dict[str, Any] = containers[0]
    return container


def _k8s_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The environment a container gets: its envFrom sources, then its own env."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            obj = _k8s_object("ConfigMap", source["configMapRef"]["name"])
            values = obj.get("data", {})
        elif "secretRef" in source:
            obj = _k8s_object("Secret", source["secretRef"]["name"])
            values = obj.get("stringData", {})
            assert "data" not in obj, "keep the Secret in stringData so it can be checked"
        else:
            raise AssertionError(f"unexpected envFrom source {source}")
        env.update(values)
    for item in container.get("env", []):
        if "valueFrom" in item:  # the downward API: a sample of what the field holds
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in FIELD_SAMPLES, f"{item['name']}: unexpected valueFrom {path}"
            env[item["name"]] = FIELD_SAMPLES[path]
            continue
        assert "value" in item, f"{item['name']}: only literal values are expected"
        env[item["name"]] = item["value"]
    bad = {k: v for k, v in env.items() if not isinstance(v, str)}
    assert not bad, f"Kubernetes needs string values: {bad}"
    return env


def _resolve_port(container: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert named, f"no container port named {port!r}"
    return int(named[0])


def _workload(name: str) -> dict[str, Any]:
    kind = "DaemonSet" if name == "node-agent" else "Deployment"
    return _k8s_object(kind, name)


def _all_commands() -> Iterator[tuple[str, list[str]]]:
    for name, service in _compose()["services"].items():
        if "command" in service:
            yield f"compose {name}", _argv(service["command"])
    for file, doc in _k8s_docs():
        template = doc.get("spec", {}).get("template", {})
        pod = template.get("spec", {})
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            if "command" in container:
                yield f"{file} {_name(doc)}", _argv(container["command"])


# -- docker compose ----------------------------------------------------------------------


def test_compose_has_every_service() -> None:
    services = set(_compose()["services"])
    missing = {"kafka", "postgres", "migrate", "apply", *MODULES} - services
    assert not missing, f"docker-compose.yml lacks {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compose_service_command_and_order(name: str) -> None:
    service = _compose()["services"][name]
    assert _argv(service.get("command")) == ["python", "-m", f"services.{MODULES[name]}"]
    depends = service.get("depends_on")
    assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
    assert depends.get("migrate", {}).get("condition") == "service_completed_successfully"
    assert depends.get("apply", {}).get("condition") == "service_completed_successfully"
    assert "kafka" in depends, f"{name} must start after kafka"
    assert service.get("image") == IMAGE or "build" in service


def test_compose_migrate_is_one_shot_after_postgres() -> None:
    services = _compose()["services"]
    migrate = services["migrate"]
    assert _argv(migrate.get("command")) == MIGRATE
    assert migrate.get("depends_on", {}).get("postgres", {}).get("condition") == ("service_healthy")
    assert migrate.get("restart", "no") == "no", "a one-shot must not be restarted"
    healthcheck = _argv(services["postgres"].get("healthcheck", {}).get("test", []))
    assert "pg_isready" in healthcheck, "postgres needs a pg_isready healthcheck"
    postgres_env = _compose_env(services["postgres"])
    assert postgres_env["POSTGRES_USER"] == "muster"
    assert postgres_env["POSTGRES_PASSWORD"] == "muster"
    assert postgres_env["POSTGRES_DB"] == "muster"
    assert str(services["postgres"].get("image", "")).startswith("postgres:16")


def _compose_default(value: str) -> str:
    """``${NAME:-default}`` as compose reads it with NAME unset."""
    found = re.fullmatch(r"\$\{[A-Z_]+:-(.+)\}", value)
    return found.group(1) if found else value


def test_compose_apply_loads_the_cluster_description_once() -> None:
    """A one-shot ``muster apply --cluster`` after migrate; the file it names is mounted
    from the checkout and is a cluster description the parser accepts."""
    from muster.core.model import parse

    apply = _compose()["services"]["apply"]
    argv = _argv(apply.get("command"))
    assert argv[:3] == APPLY and len(argv) == 4, argv
    depends = apply.get("depends_on", {})
    assert depends.get("migrate", {}).get("condition") == "service_completed_successfully"
    assert depends.get("kafka", {}).get("condition") == "service_healthy"
    assert apply.get("restart", "no") == "no", "a one-shot must not be restarted"
    mounts = {v["target"]: v for v in apply.get("volumes", []) if isinstance(v, dict)}
    assert argv[3] in mounts, f"{argv[3]} is not mounted"
    source = ROOT / _compose_default(mounts[argv[3]]["source"])
    assert source.is_file(), source
    parse.cluster(yaml.safe_load(source.read_text()))


def test_compose_file_follows_the_compose_specification() -> None:
    """Validated against the Compose Specification's JSON schema (what ``docker compose
    config`` checks first), vendored in tests/unit/schemas/."""
    import jsonschema

    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(_compose())
    ]
    assert not errors, errors
    # and it does catch a mistake
    broken = _compose()
    broken["services"]["intake"]["depends_on"]["kafka"]["condition"] = "service_ready"
    assert list(validator.iter_errors(broken))


def test_compose_kafka_is_single_node_kraft() -> None:
    kafka = _compose()["services"]["kafka"]
    env = _compose_env(kafka)
    assert str(kafka.get("image", "")).startswith("apache/kafka:")
    assert env.get("KAFKA_NODE_ID")
    assert set(env.get("KAFKA_PROCESS_ROLES", "").split(",")) == {"broker", "controller"}
    assert "PLAINTEXT://kafka:9092" in env.get("KAFKA_ADVERTISED_LISTENERS", "")
    assert env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "").startswith(f"{env['KAFKA_NODE_ID']}@")
    assert env.get("KAFKA_LISTENERS") and env.get("KAFKA_CONTROLLER_LISTENER_NAMES")
    assert env.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "true"


@pytest.mark.parametrize("name", [*sorted(MODULES), "migrate", "apply"])
def test_compose_environment_loads(name: str) -> None:
    """``settings.load`` accepts each service's compose environment as it stands."""
    env = _compose_env(_compose()["services"][name])
    for required in REQUIRED_ENV:
        assert env.get(required), f"compose {name}: {required} is not set"
    try:
        settings = load(env)
    except SettingsError as e:
        pytest.fail(f"compose {name}: {e}")
    assert settings.store_url == STORE_URL
    assert settings.kafka_bootstrap == "kafka:9092"
    if name in MODULES:
        assert settings.migrate is False, f"{name}: the migrate service does the migration"
        assert settings.port_for(name) == DEFAULT_PORTS[name]


def test_compose_intake_publishes_its_port() -> None:
    ports = [str(p) for p in _compose()["services"]["intake"].get("ports", [])]
    assert f"{DEFAULT_PORTS['intake']}:{DEFAULT_PORTS['intake']}" in ports


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compose_healthcheck_probes_the_service_port(name: str) -> None:
    healthcheck = _compose()["services"][name].get("healthcheck")
    if healthcheck is None:
        return  # optional in compose; when present it must hit the right port
    test = " ".join(_argv(healthcheck["test"]))
    assert f":{DEFAULT_PORTS[name]}/healthz" in test, test


# -- commands and the code they name -----------------------------------------------------


def test_every_command_is_a_service_module_or_migrate() -> None:
    commands = list(_all_commands())
    assert commands
    for where, argv in commands:
        module = _module(argv)
        known = argv == MIGRATE or (argv[:3] == APPLY and len(argv) == 4)
        assert known or module in MODULES.values(), f"{where}: unknown {argv}"


def test_service_modules_exist() -> None:
    if not SERVICES_DIR.is_dir():
        pytest.skip("services/ does not exist yet: the service modules are not written")
    named = {_module(argv) for _, argv in _all_commands()} - {None}
    assert named == set(MODULES.values()), f"commands name {sorted(map(str, named))}"
    for module in sorted(map(str, named)):
        main = SERVICES_DIR / module / "__main__.py"
        assert main.is_file(), f"`python -m services.{module}` needs {main}"


def test_pyproject_declares_the_muster_script() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project.get("scripts", {}).get("muster") == "muster.cli.main:main"


# -- settings names ----------------------------------------------------------------------


def test_every_muster_variable_is_a_setting() -> None:
    """Any MUSTER_* name in the deployment files (keys, values, comments) is a real one."""
    known = set(ENV_NAMES)
    files = [COMPOSE, *_k8s_files(), DOCKERFILE]
    for path in files:
        unknown = set(ENV_REF.findall(path.read_text())) - known
        assert not unknown, f"{path.relative_to(ROOT)}: not in ENV_NAMES: {sorted(unknown)}"
    # And structurally: the keys that actually reach a process.
    for name, service in _compose()["services"].items():
        keys = {k for k in _compose_env(service) if k.startswith("MUSTER_")}
        assert keys <= known, f"compose {name}: {sorted(keys - known)}"
    for _, doc in _k8s_docs():
        # Those a container takes as environment (envFrom); muster-auth is mounted as files.
        if doc["kind"] in ("ConfigMap", "Secret") and _name(doc) in (CONFIG_MAP, SECRET):
            keys = set(doc.get("data", {})) | set(doc.get("stringData", {}))
            assert keys <= known, f"{doc['kind']}/{_name(doc)}: {sorted(keys - known)}"


# -- kubernetes ----------------------------------------------------------------------------


def test_k8s_objects_are_well_formed() -> None:
    docs = _k8s_docs()
    kinds = {d.get("kind") for _, d in docs}
    for file, doc in docs:
        assert doc.get("apiVersion"), f"{file}: an object without apiVersion"
        assert doc.get("kind"), f"{file}: an object without kind"
        assert _name(doc), f"{file}: {doc.get('kind')} without metadata.name"
        namespace = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{file}: {doc['kind']} is cluster-scoped"
        else:
            assert namespace == "muster", f"{file}: {doc['kind']}/{_name(doc)} namespace"
    assert {"Namespace", "ConfigMap", "Secret", "Job", "Deployment", "DaemonSet"} <= kinds
    _k8s_object("Namespace", "muster")


def test_k8s_config_and_secret() -> None:
    config = _k8s_object("ConfigMap", CONFIG_MAP).get("data", {})
    secret = _k8s_object("Secret", SECRET).get("stringData", {})
    assert secret.get("MUSTER_STORE_URL") == STORE_URL
    assert "MUSTER_STORE_URL" not in config, "the store URL holds a password: Secret only"
    # Shared by every service, a port here would put them all on one port.
    assert "MUSTER_HTTP_PORT" not in config
    assert config.get("MUSTER_KAFKA_BOOTSTRAP")
    assert config.get("MUSTER_MIGRATE") == "false", "the migrate Job does the migration"


def test_k8s_intake_reads_its_tokens_from_the_auth_secret() -> None:
    """The files MUSTER_AUTH_* name are keys of the muster-auth Secret, mounted where named,
    and the token file in it loads."""
    from muster.core.access.tokens import parse_token_file

    container = _single_container(_workload("intake"))
    settings = load(_k8s_env(container))
    volumes = {v["name"]: v for v in _pod_spec(_workload("intake"))["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    secret = _k8s_object("Secret", "muster-auth")["stringData"]
    for path in (settings.auth_token_file, settings.auth_secret_file):
        folder, _, key = path.rpartition("/")
        assert mounts[folder]["secret"]["secretName"] == "muster-auth", path
        assert key in secret, path
    parse_token_file(yaml.safe_load(secret["tokens.yaml"]))


def _check_container_env(where: str, container: Mapping[str, Any]) -> dict[str, str]:
    refs = {next(iter(s.values()))["name"]: next(iter(s)) for s in container.get("envFrom", [])}
    assert refs == {CONFIG_MAP: "configMapRef", SECRET: "secretRef"}, f"{where}: {refs}"
    env = _k8s_env(container)
    for required in REQUIRED_ENV:
        assert env.get(required), f"{where}: {required} is not set"
    return env


def test_k8s_bootstrap_job_migrates_then_applies_the_cluster_description() -> None:
    """The one-shot Job: ``muster migrate`` as an init container (so it ends first), then
    ``muster apply --cluster`` on the muster-cluster ConfigMap, mounted where it names."""
    from muster.core.model import parse

    job = _k8s_object("Job", "bootstrap")
    pod = _pod_spec(job)
    assert pod.get("restartPolicy") in ("OnFailure", "Never")
    (migrate,) = pod["initContainers"]
    assert _argv(migrate["command"]) == MIGRATE
    apply = _single_container(job)
    argv = _argv(apply["command"])
    assert argv[:3] == APPLY and len(argv) == 4, argv
    for where, container in (("migrate", migrate), ("apply", apply)):
        assert container["image"] == IMAGE, where
        load(_check_container_env(f"Job/bootstrap {where}", container))

    folder, _, key = argv[3].rpartition("/")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in apply["volumeMounts"]}
    config_map = mounts[folder]["configMap"]["name"]
    description = _k8s_object("ConfigMap", config_map)["data"][key]
    assert parse.cluster(yaml.safe_load(description)).name


def test_k8s_node_agent_learns_its_node_from_the_downward_api() -> None:
    """docs/operations.md: in the DaemonSet, MUSTER_NODE_NAME comes from spec.nodeName."""
    container = _single_container(_workload("node-agent"))
    (item,) = [e for e in container["env"] if e["name"] == "MUSTER_NODE_NAME"]
    assert item["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    settings = load(_k8s_env(container))
    assert settings.node_name == FIELD_SAMPLES["spec.nodeName"]
    # Each DaemonSet pod is the agent of its own node: not shard 0 of 1 claiming them all.
    decider = node_agent_decider(settings)
    assert (decider.node, decider.shards) == (FIELD_SAMPLES["spec.nodeName"], 1)
    assert decider.name == f"node-agent-{FIELD_SAMPLES['spec.nodeName']}"
    names = {e["name"] for e in container["env"]}
    assert not names & {"MUSTER_NODE_AGENT_SHARD", "MUSTER_NODE_AGENT_SHARDS"}
    assert "`MUSTER_NODE_NAME`" in OPERATIONS.read_text()
    assert "spec.nodeName" in OPERATIONS.read_text()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_k8s_workload(name: str) -> None:
    workload = _workload(name)
    where = f"{workload['kind']}/{name}"
    container = _single_container(workload)
    port = DEFAULT_PORTS[name]

    assert container["image"] == IMAGE, where
    assert _argv(container["command"]) == ["python", "-m", f"services.{MODULES[name]}"]

    env = _check_container_env(where, container)
    try:
        settings = load(env)
    except SettingsError as e:
        pytest.fail(f"{where}: {e}")
    assert settings.port_for(name) == port, f"{where}: the process would listen elsewhere"

    container_ports = {int(p["containerPort"]) for p in container.get("ports", [])}
    expected = {port, settings.grpc_port} if name == "intake" else {port}
    assert container_ports == expected, f"{where}: container ports {container_ports}"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe not in container and probe == "startupProbe":
            continue  # optional; when present it must hit /healthz on the right port
        http = container.get(probe, {}).get("httpGet")
        assert http, f"{where}: no {probe}"
        assert http.get("path") == "/healthz", f"{where}: {probe} path"
        assert _resolve_port(container, http["port"]) == port, f"{where}: {probe} port"

    annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/scrape") == "true", where
    assert annotations.get("prometheus.io/port") == str(port), where
    assert annotations.get("prometheus.io/path", "/metrics") == "/metrics", where

    resources = container.get("resources", {})
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources.get(bound, {})), f"{where}: {bound}"

    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    selector = workload["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items(), f"{where}: selector does not match its pods"


def test_k8s_node_agent_is_a_daemonset() -> None:
    kinds = {d["kind"] for _, d in _k8s_docs() if _name(d) == "node-agent"} - {"Service"}
    assert kinds == {"DaemonSet"}, f"node-agent is {sorted(kinds)}"


def test_k8s_queue_runs_one_replica() -> None:
    queue = _k8s_object("Deployment", "queue")
    assert queue["spec"].get("replicas") == 1
    assert queue["spec"].get("strategy", {}).get("type") == "Recreate"


@pytest.mark.parametrize("name", ["intake", "queue", "provisioner", "node-agent"])
def test_k8s_service_fronts_the_workload(name: str) -> None:
    service = _k8s_object("Service", name)
    workload = _workload(name)
    container = _single_container(workload)
    ports = service["spec"]["ports"]
    grpc = [load(_k8s_env(container)).grpc_port] if name == "intake" else []
    assert [p["port"] for p in ports] == [DEFAULT_PORTS[name], *grpc]
    for p, want in zip(ports, [DEFAULT_PORTS[name], *grpc], strict=True):
        assert _resolve_port(container, p.get("targetPort", p["port"])) == want
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_k8s_provisioner_rbac() -> None:
    deployment = _k8s_object("Deployment", "provisioner")
    account = _pod_spec(deployment).get("serviceAccountName")
    assert account, "the provisioner needs its own ServiceAccount"
    _k8s_object("ServiceAccount", account)

    roles = [d for _, d in _k8s_docs() if d["kind"] == "ClusterRole"]
    bindings = [
        d
        for _, d in _k8s_docs()
        if d["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": account, "namespace": "muster"}
        in d.get("subjects", [])
    ]
    assert len(bindings) == 1, "bind the provisioner's ServiceAccount to its ClusterRole"
    role = next(r for r in roles if _name(r) == bindings[0]["roleRef"]["name"])

    granted: set[tuple[str, str, str]] = set()
    for rule in role.get("rules", []):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                granted |= {(group, resource, verb) for verb in rule.get("verbs", [])}
    read = {"get", "list", "watch"}
    manage = {*read, "create", "delete"}
    needed = {("autoscaling.x-k8s.io", "provisioningrequests", v) for v in manage}
    needed |= {("", "podtemplates", v) for v in {*manage, "patch"}}
    needed |= {("", "nodes", v) for v in read}
    assert not needed - granted, f"missing permissions: {sorted(needed - granted)}"


# -- image ---------------------------------------------------------------------------------


def test_dockerfile() -> None:
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    lines = [ln.strip() for ln in DOCKERFILE.read_text().splitlines()]
    instructions = [ln for ln in lines if ln and not ln.startswith("#")]
    froms = [ln.split()[1:] for ln in instructions if ln.upper().startswith("FROM ")]
    assert len(froms) >= 2, "expected a multi-stage build"
    stages: set[str] = set()
    for words in froms:
        base = words[0]
        # pyproject.toml pins requires-python to 3.11: every stage not built on an
        # earlier stage must be a python:3.11 image.
        assert base in stages or re.fullmatch(r"python:3\.11(-[\w.-]+)?", base), f"FROM {base}"
        if len(words) == 3 and words[1].upper() == "AS":
            stages.add(words[2])
    copies = [ln for ln in instructions if ln.upper().startswith("COPY ")]
    assert any("pyproject.toml" in ln.split()[1:-1] for ln in copies), "pyproject.toml not copied"
    users = [ln.split(None, 1)[1] for ln in instructions if ln.upper().startswith("USER ")]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), f"USER {users[-1]}"


def test_dockerignore_keeps_local_state_out() -> None:
    assert DOCKERIGNORE.is_file(), f"{DOCKERIGNORE} is missing"
    entries = {
        ln.strip().rstrip("/")
        for ln in DOCKERIGNORE.read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    for needed in (".venv", ".git", ".muster", "bench/results"):
        assert needed in entries, f".dockerignore lacks {needed}"
    assert entries & {"__pycache__", "**/__pycache__"}, ".dockerignore lacks __pycache__"
    # a checkout's generated gRPC code never reaches the image: the codegen stage makes it
    assert "libs/muster/api/v1/muster_pb2*" in entries


# -- schemas -------------------------------------------------------------------------------

# The Kubernetes release the manifests are validated against (its OpenAPI schemas ship with
# kubernetes-validate: no cluster, no network). Strict: an unknown field is an error.
KUBERNETES_VERSION = "1.33.0"
# Prometheus Operator objects (monitoring.coreos.com CRDs, not in Kubernetes' schemas):
# checked against the parts of their CRDs' schemas these manifests use, unknown fields
# refused as the strict Kubernetes check does.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
    r"(([0-9]+)s)?(([0-9]+)ms)?)$",
}
ALERT_NAME = "^[A-Za-z][A-Za-z0-9]*$"
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": {"type": "object"}},
                        "additionalProperties": False,
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                        "additionalProperties": False,
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "honorLabels": {"type": "boolean"},
                            },
                            "additionalProperties": False,
                        },
                    },
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "properties": {"groups": {"$ref": "#/$defs/groups"}},
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
        "$defs": {
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": _DURATION,
                        "rules": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["alert", "expr"],
                                "properties": {
                                    "alert": {"type": "string", "pattern": ALERT_NAME},
                                    "expr": {"type": "string", "minLength": 1},
                                    "for": _DURATION,
                                    "labels": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                    "annotations": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                },
                                "additionalProperties": False,
                            },
                        },
                    },
                    "additionalProperties": False,
                },
            }
        },
    },
}


def _crd_validator(doc: Mapping[str, Any]) -> Any:
    import jsonschema

    schema = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    return None if schema is None else jsonschema.Draft202012Validator(schema)


def test_k8s_manifests_follow_the_kubernetes_schemas() -> None:
    """Every object under deploy/k8s, strictly, against the pinned release's schemas; the
    Prometheus Operator's against the CRD excerpts above."""
    import kubernetes_validate

    checked: set[str] = set()
    for file, doc in _k8s_docs():
        where = f"{file}: {doc['kind']}/{_name(doc)}"
        validator = _crd_validator(doc)
        if validator is not None:
            errors = [e.message for e in validator.iter_errors(doc)]
            assert not errors, f"{where}: {errors}"
        else:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(map(str, exc.path))
                pytest.fail(f"{where}: {path}: {exc.message}")
        checked.add(doc["kind"])
    assert {"Deployment", "DaemonSet", "Job", "ServiceMonitor", "PrometheusRule"} <= checked


def test_k8s_schema_check_catches_mistakes() -> None:
    """The validation is not a formality: a misspelt field and a wrong type fail."""
    import kubernetes_validate

    broken = json.loads(json.dumps(_k8s_object("Deployment", "queue")))
    _single_container(broken)["envForm"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    broken = json.loads(json.dumps(_k8s_object("Deployment", "queue")))
    broken["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    monitor = json.loads(json.dumps(_k8s_object("ServiceMonitor", "muster")))
    monitor["spec"]["endpoints"][0]["interval"] = "thirty seconds"
    assert list(_crd_validator(monitor).iter_errors(monitor))


def test_kustomization_lists_every_manifest() -> None:
    """``kubectl apply -k deploy/k8s`` applies every manifest; the monitoring component
    (Prometheus Operator CRDs needed) every one of its own."""
    top = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert top["kind"] == "Kustomization" and top["namespace"] == "muster"
    on_disk = {p.name for p in K8S.glob("*.yaml")} - KUSTOMIZATION_FILES
    assert set(top["resources"]) == on_disk
    assert len(top["resources"]) == len(set(top["resources"]))
    component = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert set(component["resources"]) == {p.name for p in MONITORING.glob("*.yaml")} - (
        KUSTOMIZATION_FILES
    )
    (image,) = top["images"]
    assert f"{image['name']}:{image['newTag']}" == IMAGE
    # the commented-out line that enables monitoring names the real folder
    assert "#   - monitoring" in (K8S / "kustomization.yaml").read_text()


def test_servicemonitor_scrapes_every_service() -> None:
    monitor = _k8s_object("ServiceMonitor", "muster")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True, "keep the metrics' own `service` label"
    for name in MODULES:
        service = _k8s_object("Service", name)
        assert selector.items() <= service["metadata"]["labels"].items(), name
        port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
        assert port["port"] == DEFAULT_PORTS[name]
        assert endpoint["path"] == "/metrics"


# -- dashboards and alerts -------------------------------------------------------------------

# Prometheus' own series, which a query may name besides muster's.
PROMETHEUS_OWN = {"up"}


def _exported_metric_names() -> set[str]:
    """Every series name the services expose: each service's registry, the queue's and the
    provisioner's figures (counters end in _total, histograms add _bucket/_count/_sum)."""
    from muster.core.provisioning.figures import figures as provisioner_figures
    from muster.core.provisioning.state import ProvisionerState
    from muster.core.queueing.figures import figures as queue_figures
    from muster.core.queueing.state import QueueState
    from muster.runtime.metrics import ServiceMetrics

    kinds: dict[str, str] = {}
    for metric in ServiceMetrics().registry.collect():
        name = f"{metric.name}_total" if metric.type == "counter" else metric.name
        kinds[name] = metric.type
    for fam in [*queue_figures(QueueState()), *provisioner_figures(ProvisionerState())]:
        kinds[fam.name] = fam.kind
    names = set()
    for name, kind in kinds.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        else:
            names.add(name)
    return names


def _metric_names(expr: str) -> set[str]:
    """The series a PromQL expression selects, from its syntax tree (promql-parser).
    Grafana's variables are replaced by values of their kind first."""
    import promql_parser

    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GRAFANA.read_text())
    return doc


def _alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


def test_dashboard_is_a_grafana_dashboard() -> None:
    """The model Grafana imports: uid, title, schemaVersion, panels placed on the 24-column
    grid without overlapping, unique ids, Prometheus targets, the datasource variable."""
    board = _dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"] and target["refId"], panel["title"]
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("pending", "reason", "admission wait", "quota", "eviction", "provisioning"):
        assert topic in titles, f"no panel about {topic}"
    assert "gpu" in titles and "nodes" in titles


def test_dashboard_and_alerts_query_only_exported_metrics() -> None:
    """Every series named in a panel, a variable or an alert rule is one the services
    export (or Prometheus' own ``up``); a renamed metric breaks this test, not the board."""
    exported = _exported_metric_names() | PROMETHEUS_OWN
    queried: dict[str, set[str]] = {}
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            queried.setdefault(f"panel {panel['title']!r}", set()).update(
                _metric_names(target["expr"])
            )
    for variable in _dashboard()["templating"]["list"]:
        query = variable.get("definition", "")
        for found in re.findall(r"label_values\(\s*([a-zA-Z_:][\w:]*)", query):
            queried.setdefault(f"variable {variable['name']}", set()).add(found)
    for group in _alert_groups():
        for rule in group["rules"]:
            queried[f"alert {rule['alert']}"] = _metric_names(rule["expr"])
    assert len(queried) > 20
    for where, names in queried.items():
        assert names, f"{where}: selects no series"
        assert names <= exported, f"{where}: not exported: {sorted(names - exported)}"
    # and the dashboard covers the Kueue-named metrics users look for
    used = set().union(*queried.values())
    for name in (
        "muster_admission_wait_time_seconds_bucket",
        "muster_admitted_active_workloads",
        "muster_cluster_queue_status",
        "muster_admission_attempts_total",
        "muster_unadmitted_workloads",
        "muster_cluster_queue_resource_usage",
        "muster_evicted_workloads_total",
        "muster_provisioning_wait_seconds_bucket",
        "muster_node_gpus",
    ):
        assert name in used, f"nothing shows {name}"


def test_alert_rules_file_and_the_prometheusrule_agree() -> None:
    groups = _alert_groups()
    # the same rules (so the CRD schema check above covers the plain file too)
    assert _k8s_object("PrometheusRule", "muster")["spec"]["groups"] == groups
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    for needed in (
        "MusterAdmissionWaitHigh",
        "MusterEvictionsSpike",
        "MusterStoreUnavailable",
        "MusterNodeLost",
        "MusterProvisioningFailing",
    ):
        assert needed in alerts
    for group in groups:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]


def _compose_mounts(service: str) -> dict[str, Path]:
    """target -> the checkout's file or folder bind-mounted there."""
    volumes = _compose()["services"][service].get("volumes", [])
    return {
        v["target"]: ROOT / _compose_default(v["source"]) for v in volumes if v["type"] == "bind"
    }


def test_compose_monitoring_profile_scrapes_alerts_and_shows_the_dashboard() -> None:
    """``docker compose --profile monitoring up``: Prometheus scrapes every service on its
    port and loads the alert rules; Grafana gets the data source and the dashboard."""
    services = _compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name].get("profiles") == ["monitoring"], name
    prometheus_mounts = _compose_mounts("prometheus")
    config = yaml.safe_load(prometheus_mounts["/etc/prometheus/prometheus.yml"].read_text())
    (job,) = config["scrape_configs"]
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    assert targets == {f"{name}:{DEFAULT_PORTS[name]}" for name in MODULES}
    assert job.get("metrics_path", "/metrics") == "/metrics"
    (rules,) = config["rule_files"]
    assert prometheus_mounts[rules] == ALERTS

    grafana_mounts = _compose_mounts("grafana")
    provisioning = grafana_mounts["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "muster.yaml").read_text())[
        "providers"
    ]
    folder = provider["options"]["path"]
    assert grafana_mounts[f"{folder}/{GRAFANA.name}"] == GRAFANA
    home = _compose_env(services["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert grafana_mounts[home] == GRAFANA


def test_operations_doc_lists_every_exported_metric() -> None:
    """docs/operations.md, "Metrics", names every family the services export."""
    text = OPERATIONS.read_text()
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in _exported_metric_names()}
    missing = sorted(f for f in families if f"`{f}`" not in text and f"`{f}{{" not in text)
    assert not missing, f"docs/operations.md does not mention {missing}"


# -- image -------------------------------------------------------------------------------------

BUILD_ONLY = ("grpcio-tools", "mypy-protobuf")


def _stages() -> dict[str, list[str]]:
    """The Dockerfile's stages, by name (or index), with their instructions."""
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            words = line.split()
            current = []
            name = words[3] if len(words) >= 4 and words[2].upper() == "AS" else str(len(stages))
            stages[name] = current
        current.append(line)
    return stages


def test_build_only_tools_stay_out_of_the_runtime_image() -> None:
    """grpcio-tools and mypy-protobuf are pyproject's `codegen` extra, not a runtime
    dependency; the Dockerfile installs them in a stage the runtime copies nothing of but
    the generated code, and the runtime's venv comes from a stage that never installs them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    for tool in BUILD_ONLY:
        assert tool not in runtime, f"{tool} is a runtime dependency"
        assert any(d.startswith(f"{tool}==") for d in extras["codegen"]), tool
    assert "muster[codegen]" in extras["dev"], "make setup (the dev extra) generates the code"

    stages = _stages()
    final = list(stages)[-1]
    installs_tools = {
        name
        for name, lines in stages.items()
        if any("codegen" in ln and "pip install" in ln for ln in lines)
    }
    assert installs_tools, "no stage generates the gRPC code"
    copied = [
        (re.search(r"--from=(\S+)", ln).group(1), ln)  # type: ignore[union-attr]
        for ln in stages[final]
        if ln.upper().startswith("COPY ") and "--from=" in ln
    ]
    assert not {name for name, _ in copied} & installs_tools, "the runtime copies codegen's"
    venv_from = [name for name, ln in copied if "/opt/venv" in ln]
    assert venv_from, "the runtime has no venv"
    for name in venv_from:
        assert name not in installs_tools
        lines = stages[name]
        assert not any(tool in ln for ln in lines for tool in BUILD_ONLY)
        # it takes only the generated files from the codegen stage
        takes = [ln for ln in lines if "--from=" in ln]
        assert all("/muster/api/v1/" in ln for ln in takes), takes
