"""The deployment files agree with the code: commands, settings, ports and objects.

Static checks only (no Docker, no cluster): docker-compose.yml, deploy/k8s/*.yaml and
deploy/docker/Dockerfile are parsed and compared with ``muster.runtime.settings`` and
the modules in ``services/``.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.runtime.settings import DEFAULT_PORTS, ENV_NAMES, SettingsError, load

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SERVICES_DIR = ROOT / "services"

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
ENV_REF = re.compile(r"\bMUSTER_[A-Z0-9_]+\b")
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


# -- loading -----------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    assert COMPOSE.is_file(), f"{COMPOSE} is missing"
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict), "no services:"
    return doc


def _k8s_files() -> list[Path]:
    files = sorted([*K8S.glob("*.yaml"), *K8S.glob("*.yml")])
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
        for container in template.get("spec", {}).get("containers", []):
            if "command" in container:
                yield f"{file} {_name(doc)}", _argv(container["command"])


# -- docker compose ----------------------------------------------------------------------


def test_compose_has_every_service() -> None:
    services = set(_compose()["services"])
    missing = {"kafka", "postgres", "migrate", *MODULES} - services
    assert not missing, f"docker-compose.yml lacks {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_compose_service_command_and_order(name: str) -> None:
    service = _compose()["services"][name]
    assert _argv(service.get("command")) == ["python", "-m", f"services.{MODULES[name]}"]
    depends = service.get("depends_on")
    assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
    assert depends.get("migrate", {}).get("condition") == "service_completed_successfully"
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


@pytest.mark.parametrize("name", [*sorted(MODULES), "migrate"])
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
        assert argv == MIGRATE or module in MODULES.values(), f"{where}: unknown {argv}"


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


def test_k8s_migrate_job() -> None:
    job = _k8s_object("Job", "migrate")
    container = _single_container(job)
    assert container["image"] == IMAGE
    assert _argv(container["command"]) == MIGRATE
    assert _pod_spec(job).get("restartPolicy") in ("OnFailure", "Never")
    env = _check_container_env("Job/migrate", container)
    load(env)  # raises SettingsError on a bad name or value


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
    kinds = {d["kind"] for _, d in _k8s_docs() if _name(d) == "node-agent"}
    assert kinds == {"DaemonSet"}, f"node-agent is {sorted(kinds)}"


def test_k8s_queue_runs_one_replica() -> None:
    queue = _k8s_object("Deployment", "queue")
    assert queue["spec"].get("replicas") == 1
    assert queue["spec"].get("strategy", {}).get("type") == "Recreate"


@pytest.mark.parametrize("name", ["intake", "queue", "provisioner"])
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
