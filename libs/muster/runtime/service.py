"""Running one service: migrate, restore, serve /healthz /metrics /state, follow the log.

Each service's ``bootstrap`` builds its decider and calls ``run``; everything runs
in one TaskGroup and SIGTERM/SIGINT stop it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from muster.bus.kafka import Doorbell, Publisher, ensure_topics
from muster.core.decider import Decider
from muster.runtime.loop import DeciderLoop
from muster.runtime.memory import settle_collector
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.settings import Settings
from muster.store import SqlEventStore
from muster.store.migrate import upgrade_async

# Adds a service's routes; may hand back more long-lived routines that share what it built
# (intake's gRPC server and ingest consumer share its operations with the HTTP routes).
Routes = Callable[[web.Application, DeciderLoop], Sequence[Callable[[], Awaitable[None]]] | None]
# A long-lived routine of one service (e.g. node-agent heartbeats), restarted if it fails.
Routine = Callable[[DeciderLoop, Settings], Awaitable[None]]


def _bind(routine: Routine, loop: DeciderLoop, settings: Settings) -> Callable[[], Awaitable[None]]:
    return lambda: routine(loop, settings)


class Stop(Exception):
    """Raised inside the TaskGroup to end every routine."""


async def run(
    service: str,
    decider: Decider[Any],
    settings: Settings,
    *,
    decides: bool = True,
    routes: Routes | None = None,
    on_step: Callable[[DeciderLoop], None] | None = None,
    routines: Sequence[Routine] = (),
    collectors: Sequence[Callable[[DeciderLoop], Collector]] = (),
) -> None:
    log = structlog.get_logger(service)
    store = SqlEventStore(settings.store_url)
    metrics = ServiceMetrics()
    loop = DeciderLoop(decider, store, settings, metrics, decides=decides)
    if settings.migrate:  # a store not up yet is waited for, like one that goes away later
        await loop.until_done(lambda: upgrade_async(settings.store_url))
    for make in collectors:
        metrics.registry.register(make(loop))
    await loop.restore()
    await loop.until_done(loop.step)
    app = http_app(loop, metrics, on_step)
    extra = (routes(app, loop) or []) if routes is not None else []
    web_runner = web.AppRunner(app, access_log=None)
    await web_runner.setup()
    site = web.TCPSite(web_runner, settings.http_host, settings.port_for(service))
    await site.start()
    settle_collector()
    log.info(
        "started",
        http=f"{settings.http_host}:{settings.port_for(service)}",
        position=loop.runner.position,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as tg:
            for routine in routines:
                tg.create_task(_supervise(log, routine.__name__, _bind(routine, loop, settings)))
            for task in extra:
                tg.create_task(_supervise(log, task.__name__, task))
            tg.create_task(loop.follow())
            tg.create_task(loop.timers())
            tg.create_task(_supervise(log, "relay", lambda: _relay(loop, settings)))
            tg.create_task(_supervise(log, "store doorbell", loop.listen_store))
            if settings.kafka_doorbell:
                tg.create_task(
                    _supervise(
                        log,
                        "doorbell",
                        lambda: loop.listen(
                            Doorbell(
                                settings.kafka_bootstrap, settings.topic_prefix, decider.categories
                            )
                        ),
                    )
                )
            tg.create_task(_until(stop))
    except* Stop:
        pass
    finally:
        await web_runner.cleanup()
        await store.close()
        log.info("stopped", position=loop.runner.position)


async def _until(stop: asyncio.Event) -> None:
    await stop.wait()
    raise Stop


async def _relay(loop: DeciderLoop, settings: Settings) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topic_prefix)
    publisher = Publisher(settings.kafka_bootstrap, settings.topic_prefix)
    await publisher.start()
    try:
        await loop.relay(publisher)
    finally:
        await publisher.stop()


async def _supervise(log: Any, what: str, routine: Callable[[], Awaitable[None]]) -> None:
    """Kafka routines come back after the broker does; cancellation goes through; a
    routine that returns is done (a start-up announcement)."""
    while True:
        try:
            await routine()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(f"{what} failed; restarting", error=repr(exc))
            await asyncio.sleep(1.0)


def http_app(
    loop: DeciderLoop, metrics: ServiceMetrics, on_step: Callable[[DeciderLoop], None] | None
) -> web.Application:
    app = web.Application(client_max_size=loop.settings.max_body_bytes)

    async def healthz(_: web.Request) -> web.Response:
        # Alive: the follow loop stepped within a few poll intervals, and the store answers
        # (while it does not, the service waits for it: degraded, 503, not down).
        age = time.time() - loop.last_step_at
        ok = age < 10 * loop.settings.poll_seconds + 30 and loop.degraded is None
        body: dict[str, Any] = {"ok": ok, "position": loop.runner.position}
        if loop.degraded is not None:
            body["degraded"] = loop.degraded
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_view(_: web.Request) -> web.Response:
        if on_step is not None:
            on_step(loop)
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def state(request: web.Request) -> web.Response:
        if request.query.get("fresh") == "1":
            await loop.step()
        summary = loop.runner.decider.summary(loop.runner.state)
        return web.json_response(
            {"service": loop.name, "position": loop.runner.position, "summary": summary}
        )

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/state", state)
    return app


def main(
    service: str,
    build: Callable[[Settings], Decider[Any]],
    argv: list[str] | None = None,
    *,
    routines_for: Callable[[Settings], Sequence[Routine]] | None = None,
    **kwargs: Any,
) -> None:
    """Entry point shared by ``python -m services.<name>``: settings, logging, run.
    ``routines_for`` picks routines once the settings are known."""
    import argparse

    from muster.runtime import settings as settings_mod
    from muster.runtime.logging import configure

    parser = argparse.ArgumentParser(
        prog=f"python -m services.{service.replace('-', '_')}",
        description=f"muster {service} service",
    )
    parser.add_argument("--store-url", help="overrides MUSTER_STORE_URL")
    parser.add_argument("--kafka-bootstrap", help="overrides MUSTER_KAFKA_BOOTSTRAP")
    parser.add_argument("--http-port", type=int, help="overrides MUSTER_HTTP_PORT")
    args = parser.parse_args(argv)
    log = configure(service)  # JSON from the first line on, the level once it is known
    try:
        settings = settings_mod.load(
            store_url=args.store_url, kafka_bootstrap=args.kafka_bootstrap, http_port=args.http_port
        )
    except settings_mod.SettingsError as exc:
        log.error("bad settings", error=str(exc))
        raise SystemExit(2) from None
    configure(service, settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        if routines_for is not None:
            kwargs["routines"] = [*kwargs.get("routines", ()), *routines_for(settings)]
        asyncio.run(run(service, build(settings), settings, **kwargs))
