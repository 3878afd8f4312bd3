"""The one loop every service runs around its decider.

follow: wake on the store's doorbell (a commit), a Kafka message or a poll tick -> fold
the store's tail (in position order) -> decide -> append (guarded by stream versions; a
conflict means another replica decided first: re-read and decide again) -> fold what was
appended.
timers: sleep until the decider's next deadline, then append an explicit timer event.
relay: publish, in order, what this producer committed past its tracking position.

A store that cannot be reached (a database restart, a dropped connection) stops no
routine: the loop says it is degraded (``/healthz``), waits with a growing backoff, and
goes on from the position it had folded once the store answers again. Nothing is lost:
a decision whose append failed is made again from the same state.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from muster.bus.kafka import Doorbell, Publisher
from muster.core.decider import Decider, clock_only, clock_only_when, wakes_later
from muster.core.events import Envelope, NewEvent, StreamAppend, registered_types
from muster.core.runner import DeciderRunner
from muster.runtime import history
from muster.runtime.memory import collection_paused
from muster.runtime.metrics import ServiceMetrics
from muster.runtime.relay import RELAY_BATCH, relay_step, track_relay
from muster.runtime.settings import Settings
from muster.store import ConcurrencyConflict, SqlEventStore, Tracking, bell, unavailable

READ_BATCH = 5000
RING_WITHIN = 0.01  # seconds a step's commit may wait for the step's end to ring
RELAY_LINGER = 0.05  # seconds a relay waits after a wake-up, gathering what comes with it
RELAY_TRACK_SECONDS = 1.0  # a relay's tracking row moves at most this often while it publishes
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0  # seconds between tries while the store is away


class DeciderLoop:
    def __init__(
        self,
        decider: Decider[Any],
        store: SqlEventStore,
        settings: Settings,
        metrics: ServiceMetrics,
        *,
        decides: bool = True,
    ) -> None:
        self.runner: DeciderRunner[Any] = DeciderRunner(decider)
        self.name = decider.name
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.decides = decides
        self.log = structlog.get_logger(self.name)
        self._wake = asyncio.Event()
        self._relay_wake = asyncio.Event()
        self._deadline_changed = asyncio.Event()
        self._moved = asyncio.Event()  # replaced each time the fold moves (watchers wait on it)
        self._lock = asyncio.Lock()
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()  # a restart replays what came since start-up
        self.last_step_at = 0.0
        self.published_up_to = 0
        self.rounds_beaten = 0  # heartbeat rounds sent (node-agent)
        self.degraded: str | None = None  # why the store cannot be used now, while it cannot
        self._backoff = BACKOFF_FIRST
        # Groups appended outside a step that wait to be folded in order (fold_appended):
        # the tasks, and the last position they will have folded.
        self._own_folds: set[asyncio.Task[None]] = set()
        self._own_through = 0

    # -- start ------------------------------------------------------------------

    async def restore(self) -> None:
        """Latest snapshot (if its format is current) plus the store's tail; waits for a
        store that cannot be reached yet."""
        with collection_paused():
            await self.until_done(self._restore)

    async def _restore(self) -> None:
        snap = await self.store.load_snapshot(self.name)
        if snap is not None and snap[1] == self.runner.decider.snapshot_format:
            try:
                self.runner.restore(snap[2])
                self.log.info("snapshot restored", position=snap[0])
            except Exception as exc:  # a stale or broken snapshot only costs a longer replay
                self.log.warning("snapshot unusable; replaying from the start", error=str(exc))
                self.runner = DeciderRunner(self.runner.decider)
        await self.catch_up()

    # -- following the log ---------------------------------------------------------

    async def catch_up(self, until: int | None = None) -> int:
        """Fold everything committed so far (up to ``until``); returns how many events
        were folded."""
        folded = 0
        # As a replay reads them: what a fold needs of a row, the types the decider only
        # moves its clock on without their payload (not decoded: ``Decider.clock_only``,
        # and ``clock_only_when`` those whose payload says so).
        decider = self.runner.decider
        bare, bare_when = clock_only(decider), clock_only_when(decider)
        while True:
            if until is None:
                # Through the head, read with the first batch, so that the position moves
                # past what came last of categories this decider does not fold: it stayed
                # at its last own category's event, and every later step scanned again
                # all that came after it (the provisioner folds no node events: while
                # pods only start and finish on existing nodes, all of those since).
                until, envs = await self.store.read_folding_to_head(
                    self.runner.position,
                    categories=self.runner.categories,
                    limit=READ_BATCH,
                    bare=bare,
                    bare_when=bare_when,
                )
            else:
                envs = await self.store.read_folding(
                    self.runner.position,
                    until=until,
                    categories=self.runner.categories,
                    limit=READ_BATCH,
                    bare=bare,
                    bare_when=bare_when,
                )
            # A read of the decider's categories, in position order: folded as a replay
            # folds a read (``ours``: no category looked up per event, the bookkeeping
            # taken per batch): 1-2 us a workload less in each service.
            folded += self.runner.fold(envs, ours=True)
            if len(envs) < READ_BATCH:
                break
        if until is not None and self.runner.position < until:
            # Read through ``until``: what came last was of other categories.
            self.runner.position = until
        self.last_step_at = time.time()
        self._folded(folded)
        return folded

    def _folded(self, count: int) -> None:
        if count:
            self.metrics.events_folded.labels(self.name).inc(count)
            self.metrics.position.labels(self.name).set(self.runner.position)
            self._since_snapshot += count
            moved, self._moved = self._moved, asyncio.Event()
            moved.set()

    async def _fold_own(self, appended: list[Envelope]) -> None:
        """Fold what this service just appended from what ``append`` returned (decoded from
        the stored JSON, as a read would give it), without reading it back; if others
        committed before it since this service's position, read those first (an append's
        rows are one transaction: consecutive positions), then fold it."""
        if appended and appended[0].position > self.runner.position + 1:
            await self.catch_up(until=appended[0].position - 1)
        if not self._fold_next(appended):
            await self.catch_up()

    def fold_appended(self, appended: list[Envelope]) -> None:
        """Fold what was appended on this service's behalf outside a step (intake's group
        commits) from what ``append`` returned, without reading it back: at once when it
        is next in the log and no step is folding (the fold is synchronous, so none starts
        meanwhile); otherwise in a task that waits for the step, reads what others
        committed before it (as a step folds its own appends, ``_fold_own``) and folds
        it. In a burst, others commit between nearly every two groups: a group left to
        the next step was read back and decoded a second time."""
        if not appended or appended[-1].position <= self.runner.position:
            return
        if not self._lock.locked() and not self._own_folds:
            try:
                if self._fold_next(appended):
                    return
            except Exception as exc:  # the step's catch-up meets it again, and rides it out
                self.log.warning("folding own appends failed", error=_brief(exc))
                return
        self._own_through = max(self._own_through, appended[-1].position)
        task = asyncio.get_running_loop().create_task(self._fold_own_later(appended))
        self._own_folds.add(task)
        task.add_done_callback(self._own_folds.discard)

    async def _fold_own_later(self, appended: list[Envelope]) -> None:
        try:
            async with self._lock:  # asyncio's lock is fair: groups fold in commit order
                if appended[-1].position > self.runner.position:
                    await self._fold_own(appended)
        except Exception as exc:  # the store is away: a step reads it once it is back
            self.log.warning("folding own appends failed", error=_brief(exc))
            self._wake.set()

    def _fold_next(self, appended: list[Envelope]) -> bool:
        """Fold ``appended`` if it is next in the log; False (nothing folded) otherwise."""
        if not appended or appended[0].position != self.runner.position + 1:
            return False
        self._folded(self.runner.fold(appended))
        return True

    async def moved(self, timeout: float) -> bool:
        """Wait until the fold moves past where it is now; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._moved.wait()
        except TimeoutError:
            return False
        return True

    async def step(self, unrung: Sequence[Envelope] = ()) -> None:
        """Catch up, then decide until the decider has nothing more to say.

        The step's appends ring the store's doorbell once, when it ends (with ``unrung``: what
        was appended for it before it began, a timer's event): a decider often appends more
        than once a step (the queue's releases, then the cycle that sees them), and every
        ring wakes each service it concerns for a read and a fold. Readers learn of the
        step's first commit a decision later, or ``RING_WITHIN`` later in a long step; a
        ring is only a wake-up, never the data."""
        async with self._lock:
            started = time.perf_counter()
            appended = list(unrung)
            try:
                await self._decide_all(appended)
            finally:
                self.store.ring(appended)
            self.last_step_at = time.time()
            self.metrics.step_seconds.labels(self.name).observe(time.perf_counter() - started)
            self._deadline_changed.set()
            await self._maybe_snapshot()

    async def _decide_all(self, appended_all: list[Envelope]) -> None:
        """The step's work: catch up, decide and append until quiet; what is appended is
        added to ``appended_all`` (not rung: the step rings once), and rung at once when it
        has waited ``RING_WITHIN`` (a long step, a batch's rounds: downstream services
        should not wait for its end to start on its first decisions)."""
        since = time.perf_counter() if appended_all else None
        await self.catch_up()
        while self.decides and not self.runner.quiet:
            decide_started = time.perf_counter()
            news = self.runner.decide()
            self.metrics.decide_seconds.labels(self.name).observe(
                time.perf_counter() - decide_started
            )
            self._count_attempt(news)
            if not news:
                break
            try:
                appended = await self.store.append(
                    self.runner.appends(news),
                    producer=self.name,
                    recorded_at=time.time(),
                    tracking_row=Tracking(self.name, self.runner.position),
                    ring=False,
                )
            except ConcurrencyConflict as exc:
                self.metrics.conflicts.labels(self.name).inc()
                self.log.info("another writer decided first; re-reading", stream=exc.stream_id)
                await self.catch_up()
            else:
                appended_all.extend(appended)
                now = time.perf_counter()
                if since is None:
                    since = now
                elif now - since >= RING_WITHIN:
                    self.store.ring(appended_all)
                    appended_all.clear()
                    since = None
                self._count(appended)
                self._relay_wake.set()
                await self._fold_own(appended)

    def _count_attempt(self, news: list[NewEvent]) -> None:
        """The queue's admission attempts (a decider without ``admission_attempt`` has none)."""
        judge = getattr(self.runner.decider, "admission_attempt", None)
        if judge is None:
            return
        result = judge(self.runner.state, news)
        if result is not None:
            self.metrics.admission_attempts.labels(self.name, result).inc()

    def _count(self, appended: list[Envelope]) -> None:
        # One ``labels`` (a lock and a lookup) per type, not per event.
        for wire_type, count in collections.Counter(env.type for env in appended).items():
            self.metrics.decisions.labels(self.name, wire_type).inc(count)

    def wake(self) -> None:
        self._wake.set()

    def appended(self, through: int | None = None) -> None:
        """Something was appended on this service's behalf: publish it and fold it soon.
        ``through``: the position it ended at, when known; a fold already there (intake's
        group commit folds its own appends, at once or in a task that is on its way: no
        step needs to read it back)."""
        self._relay_wake.set()
        if through is None or (self.runner.position < through and self._own_through < through):
            self._wake.set()

    async def follow(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_seconds):
                    await self._wake.wait()
            self._wake.clear()
            if not await self.riding_out(self.step()):
                self._wake.set()  # try again at once after the backoff

    async def until_done(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` again until the store lets it through (start-up's steps)."""
        while not await self.riding_out(work()):
            pass

    async def riding_out(self, work: Awaitable[None]) -> bool:
        """Run ``work``; if the store cannot be reached, say so, wait out a backoff and
        return False (the caller tries again). Other errors propagate."""
        try:
            await work
        except Exception as exc:
            if not unavailable(exc):
                raise
            if self.degraded is None:
                self.log.warning("store unavailable; retrying", error=_brief(exc))
            self.degraded = f"store unavailable: {_brief(exc)}"
            self.metrics.store_unavailable.labels(self.name).inc()
            await asyncio.sleep(self._backoff)
            self._backoff = min(BACKOFF_MAX, self._backoff * 2)
            return False
        if self.degraded is not None:
            self.log.info("store back", position=self.runner.position)
            self.degraded = None
        self._backoff = BACKOFF_FIRST
        return True

    async def listen(self, doorbell: Doorbell) -> None:
        async for position in doorbell.rings():
            if position > self.runner.position:
                self._wake.set()

    async def listen_store(self) -> None:
        """Wake on every commit to the store that concerns this service (store/bell.py):
        milliseconds from another service's append to this one's fold, with nothing spent
        while the log is still or holds only what the decider would fold for its clock."""
        async for head in bell.rings(self.store.url, waking(self.runner.decider)):
            if head == 0 or head > self.runner.position:
                self._wake.set()

    # -- timers -------------------------------------------------------------------

    async def timers(self) -> None:
        while True:
            self._deadline_changed.clear()
            deadline = self.runner.next_deadline() if self.decides else None
            wait = None if deadline is None else max(0.0, deadline - time.time())
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._deadline_changed.wait()
                continue
            assert deadline is not None
            await self.riding_out(self._fire(deadline))

    async def _fire(self, deadline: float) -> None:
        new = self.runner.timer_event(deadline)
        fired = await self.store.append(
            [StreamAppend(new.stream_id, None, [new])],
            producer=self.name,
            recorded_at=time.time(),
            ring=False,
        )
        self.metrics.timers.labels(self.name).inc()
        self._relay_wake.set()
        try:
            await self.step(unrung=fired)  # one ring for the timer and what it made due
        except BaseException:
            self.store.ring(fired)  # the step may not have begun (a second ring is harmless)
            raise

    # -- relay ------------------------------------------------------------------

    async def relay(self, publisher: Publisher) -> None:
        position = tracked = await self.store.tracking_position(f"relay:{self.name}")
        tracked_at = -RELAY_TRACK_SECONDS  # the first step moves the tracking row
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_seconds):
                    await self._relay_wake.wait()
            # Kafka is off the decision path (services wake on the store's doorbell), so a
            # relay lingers to publish more per step: each step is a read and a publish.
            await asyncio.sleep(RELAY_LINGER)
            self._relay_wake.clear()
            while True:
                # The tracking row is a write that contends for the store's write lock: it
                # moves at most every RELAY_TRACK_SECONDS (a crash republishes what was
                # published since, which consumers skip), and on a quiet wake-up.
                track = time.monotonic() - tracked_at >= RELAY_TRACK_SECONDS
                try:
                    moved, sent = await relay_step(
                        self.store, publisher, self.name, position, track=track
                    )
                    if not sent and position > tracked:
                        await track_relay(self.store, self.name, position)
                        track = True
                except Exception as exc:  # the broker is away: keep the position, retry later
                    self.log.warning("publish failed; will retry", error=str(exc))
                    await asyncio.sleep(1.0)
                    break
                if sent:
                    self.metrics.published.labels(self.name).inc(sent)
                    position = self.published_up_to = moved
                if track:
                    tracked, tracked_at = position, time.monotonic()
                if sent < RELAY_BATCH:
                    break

    # -- snapshots ----------------------------------------------------------------

    async def _maybe_snapshot(self) -> None:
        every = self.settings.snapshot_every
        now = time.monotonic()
        if (
            every
            and self._since_snapshot >= every
            and now - self._snapshot_at >= self.settings.snapshot_seconds
        ):
            self._since_snapshot = 0
            self._snapshot_at = now
            data = self.runner.snapshot()
            decider = self.runner.decider
            await self.store.save_snapshot(
                self.name, self.runner.position, decider.snapshot_format, data
            )
            if getattr(decider, "keeps_history", False):  # explain --at starts from these
                await self.store.save_history_snapshot(
                    self.name,
                    self.runner.position,
                    self.runner.state.now,
                    decider.snapshot_format,
                    data,
                    keep=history.KEEP,
                    spacing=history.SNAPSHOT_EVERY,  # one every so many events is enough
                )


def waking(decider: Decider[Any]) -> bell.Interest:
    """The commits a decider's loop wakes for: an event of its categories of a type it does
    more with than move its clock, and that can make a decision due. The others
    (``Decider.clock_only``, and ``wakes_later``: recorded for a later event to act on) wait
    for the next wake-up, the poll or its own timer: what time alone makes due, its
    ``next_deadline`` names, so folding them at once could only bring a decision forward to
    when that timer fires anyway."""
    later = clock_only(decider) | wakes_later(decider)
    return bell.Interest(decider.categories, (t for t in registered_types() if t not in later))


def _brief(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
