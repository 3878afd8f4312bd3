"""The embedded stack: a Tansu broker, a SQLite store and the four services as processes.

Used by ``muster demo`` and by the end-to-end tests, which kill and restart parts of it.
A service that exits on its own (a crash, a kill from outside) is started again, as a
process supervisor (systemd, Kubernetes) would; ``kill_service`` stops one for good.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from muster.bus.broker import EmbeddedBroker, free_port
from muster.store.migrate import upgrade

SUPERVISE_SECONDS = 0.5  # how often exited services are looked for
MAX_RESTARTS = 20  # a service restarted more often is crash-looping: wait_healthy says so

SERVICES = {
    "intake": "services.intake",
    "queue": "services.queue",
    "provisioner": "services.provisioner",
    "node-agent": "services.node_agent",
}


class Stack:
    def __init__(
        self,
        data_dir: Path,
        *,
        store_url: str | None = None,
        poll_seconds: float = 5.0,
        extra_env: dict[str, str] | None = None,
        node_agents: int = 1,
        queue_shards: dict[str, str] | None = None,
        ports: dict[str, int] | None = None,
        grpc_port: int | None = None,
    ) -> None:
        """``ports``: fixed HTTP ports of some services (``muster up --port``), others on
        free ones; ``grpc_port``: intake's gRPC port (default a free one)."""
        self.data_dir = data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store_url = store_url or f"sqlite:///{self.data_dir / 'muster.db'}"
        self.broker = EmbeddedBroker(log_path=self.data_dir / "broker.log")
        # One process per node-agent shard, named as its decider: node-agent, or
        # node-agent-<shard> when there are several.
        self.services = {k: v for k, v in SERVICES.items() if k != "node-agent"}
        self.shards: dict[str, int] = {}
        for shard in range(node_agents):
            name = "node-agent" if node_agents == 1 else f"node-agent-{shard}"
            self.services[name] = SERVICES["node-agent"]
            self.shards[name] = shard
        self.node_agents = node_agents
        # A split queue: one process per decider (queue-<id> -> the cohorts it prefers).
        self.queue_shards = queue_shards or {}
        if self.queue_shards:
            del self.services["queue"]
            for name in self.queue_shards:
                self.services[name] = SERVICES["queue"]
        fixed = ports or {}
        # Every port its own: the OS may hand a port just released to the next bind, and a
        # service's health check answered by intake's gRPC server fails the start.
        taken = {self.broker.port, *fixed.values(), *([grpc_port] if grpc_port else [])}
        self.ports = {name: fixed.get(name) or _unused(taken) for name in self.services}
        self.grpc_port = grpc_port or _unused(taken)  # intake's gRPC API
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.poll_seconds = poll_seconds
        self.extra_env = extra_env or {}
        self.restarts: dict[str, int] = {}  # service -> times started again after it exited
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def url(self, service: str = "intake") -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def env(self, service: str) -> dict[str, str]:
        return {
            **os.environ,
            **self.extra_env,
            "MUSTER_STORE_URL": self.store_url,
            "MUSTER_KAFKA_BOOTSTRAP": self.broker.bootstrap,
            "MUSTER_HTTP_HOST": "127.0.0.1",
            "MUSTER_HTTP_PORT": str(self.ports[service]),
            "MUSTER_MIGRATE": "false",
            "MUSTER_POLL_SECONDS": str(self.poll_seconds),
            "MUSTER_GRPC_PORT": str(self.grpc_port),
            **(
                {
                    "MUSTER_NODE_AGENT_SHARD": str(self.shards[service]),
                    "MUSTER_NODE_AGENT_SHARDS": str(self.node_agents),
                }
                if service in self.shards
                else {}
            ),
            **(
                {"MUSTER_QUEUE_NAME": service, "MUSTER_QUEUE_PREFERS": self.queue_shards[service]}
                if service in self.queue_shards
                else {}
            ),
        }

    def start(self) -> None:
        self.broker.start()
        upgrade(self.store_url)
        for name in self.services:
            self.start_service(name)
        self._stopping.clear()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()
        self.wait_healthy()

    def start_service(self, name: str) -> None:
        with self._lock:
            self._spawn(name)

    def _spawn(self, name: str) -> None:
        log = open(self.data_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", self.services[name]],
            env=self.env(name),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )

    def kill_service(self, name: str) -> None:
        """SIGKILL a service and leave it down (until ``start_service``)."""
        with self._lock:
            proc = self.processes.pop(name)
        proc.kill()
        proc.wait()

    def _supervise(self) -> None:
        while not self._stopping.wait(SUPERVISE_SECONDS):
            with self._lock:
                for name, proc in list(self.processes.items()):
                    if proc.poll() is not None and not self._stopping.is_set():
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        self._spawn(name)

    def wait_healthy(self, names: list[str] | None = None, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for name in names or list(self.services):
            while True:
                proc = self.processes[name]
                if proc.poll() is not None and self.restarts.get(name, 0) >= MAX_RESTARTS:
                    raise RuntimeError(
                        f"{name} keeps exiting (last with {proc.returncode}, restarted "
                        f"{self.restarts[name]} times); see {self.data_dir / (name + '.log')}"
                    )
                try:
                    with urllib.request.urlopen(f"{self.url(name)}/healthz", timeout=1) as r:
                        if r.status == 200:
                            break
                except (OSError, http.client.HTTPException):
                    pass  # not up yet, or another process's server on its port (it restarts)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not healthy after {timeout}s")
                time.sleep(0.1)

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        for proc in self.processes.values():
            proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()
        self.broker.stop()

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _unused(taken: set[int]) -> int:
    """A free port not in ``taken`` (which it joins)."""
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port
