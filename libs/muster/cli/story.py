"""The demo's narration: one short line per event a person watching would want to know
about (a pending reason with its numbers, a preemption and why, a multi-node request
provisioned all at once, a failure), told from the store as the events are appended.

``Story.tell`` is pure (an envelope in, lines out), so the sim's log can be narrated in
tests; ``Narrator`` follows a store in a thread and prints what ``Story`` tells.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable

from muster.core.events import Envelope
from muster.core.events import provisioning as pev
from muster.core.events import queue as qev
from muster.core.events import workload as wev
from muster.store import SqlEventStore

POLL_SECONDS = 0.3  # how often the store is asked for new events while the demo runs
BATCH = 2000


class Story:
    """What happened, in words; remembers names, queues and requests from earlier events."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # workload id -> namespace/name
        self.pending_since: dict[str, float] = {}  # workload id -> first pending, this wait
        self.requests: dict[str, tuple[str, int]] = {}  # request id -> (for whom, nodes)
        self.preempted: list[str] = []  # workload ids, in the order they were preempted
        self.preemptions: list[str] = []  # "who preempted whom (why)", for the recap
        self.waits: list[tuple[float, str]] = []  # (seconds pending, workload), admitted ones
        self.all_at_once: list[int] = []  # node counts of multi-node requests provisioned

    def name(self, workload_id: str | None) -> str:
        return self.names.get(workload_id or "", workload_id or "?")

    def tell(self, env: Envelope) -> list[str]:
        ev = env.event
        at = time.strftime("%H:%M:%S", time.localtime(env.occurred_at))
        said = self._tell(ev, env.occurred_at)
        return [f"{at} {what:<10} {text}" for what, text in said]

    def _tell(self, ev: object, at: float) -> list[tuple[str, str]]:
        match ev:
            case wev.WorkloadSubmitted():
                self.names[ev.workload_id] = f"{ev.spec.namespace}/{ev.spec.name}"
            case wev.GangMemberSubmitted():  # the gang's own submission names it later
                self.names.setdefault(ev.workload_id, f"{ev.spec.namespace}/{ev.spec.name}")
            case qev.WorkloadPending():
                self.pending_since.setdefault(ev.workload_id, at)
                return [("pending", f"{self.name(ev.workload_id)}: {ev.message}")]
            case qev.WorkloadAdmitted() if ev.workload_id in self.pending_since:
                waited = at - self.pending_since.pop(ev.workload_id)
                self.waits.append((waited, self.name(ev.workload_id)))
                where = f" in ClusterQueue {ev.cluster_queue}" if ev.cluster_queue else ""
                return [
                    (
                        "admitted",
                        f"{self.name(ev.workload_id)}{where} after {waited:.1f}s pending",
                    )
                ]
            case qev.WorkloadEvicted() if ev.preemptor:
                self.preempted.append(ev.workload_id)
                victim = self.name(ev.workload_id)
                why = ev.preemption_reason or ev.reason
                self.preemptions.append(f"{self.name(ev.preemptor)} preempted {victim} ({why})")
                return [
                    (
                        "preempted",
                        f"{self.name(ev.preemptor)} preempted {victim} "
                        f"({why}); {victim} goes back to its queue",
                    )
                ]
            case qev.WorkloadEvicted():
                return [("evicted", f"{self.name(ev.workload_id)}: {ev.reason}: {ev.message}")]
            case qev.WorkloadShrunk():
                return [
                    (
                        "preempted",
                        f"{self.name(ev.preemptor)} took {len(ev.pods)} pod(s) of "
                        f"{self.name(ev.workload_id)} ({ev.preemption_reason})",
                    )
                ]
            case qev.WorkloadFinished() if ev.outcome != "Succeeded":
                return [
                    (
                        "finished",
                        f"{self.name(ev.workload_id)}: {ev.outcome} ({ev.reason}) {ev.message}",
                    )
                ]
            case qev.WorkloadRejected():
                return [("rejected", f"{self.name(ev.workload_id)}: {ev.message}")]
            case pev.ProvisioningAccepted():
                return self._accepted(ev)
            case pev.ProvisioningWaiting():
                _, nodes = self.requests.get(ev.request_id, ("", 0))
                whole = f" (all {nodes} nodes in one zone, or none)" if nodes > 1 else ""
                return [("provision", f"{self._request(ev.request_id)}: {ev.message}{whole}")]
            case pev.ProvisioningProvisioned() if ev.accepted is not None:
                # Accepted in the same decision: what the acceptance says, then the rest.
                return [*self._accepted(ev.accepted), *self._tell(ev.alone(), at)]
            case pev.ProvisioningProvisioned():
                _, nodes = self.requests.get(ev.request_id, ("", len(set(ev.assignments.values()))))
                if nodes > 1:
                    self.all_at_once.append(nodes)
                    return [
                        (
                            "provision",
                            f"{self._request(ev.request_id)}: all {nodes} nodes Ready at once "
                            f"in {ev.zone}",
                        )
                    ]
            case pev.ProvisioningFailed():
                return [("provision", f"{self._request(ev.request_id)} failed: {ev.message}")]
            case pev.ProvisioningCancelled():
                return [("provision", f"{self._request(ev.request_id)}: {ev.message}")]
            case pev.ProvisioningBookingExpired() | pev.ProvisioningCapacityRevoked():
                return [("provision", f"{self._request(ev.request_id)}: {ev.message}")]
        return []

    def recap(self) -> list[str]:
        """The story in three lines, for the end of the demo."""
        lines = [f"preemption: {p}" for p in self.preemptions] or ["preemption: none"]
        if self.waits:
            longest, who = max(self.waits)
            lines.append(
                f"pending: {len(self.waits)} workload(s) waited for quota, room or nodes "
                f"before admission; longest {who}, {longest:.1f}s"
            )
        if self.all_at_once:
            lines.append(
                f"provisioning: {len(self.all_at_once)} multi-node request(s), "
                f"{sum(self.all_at_once)} nodes, each all at once in one zone"
            )
        return lines

    def _accepted(self, ev: pev.ProvisioningAccepted) -> list[tuple[str, str]]:
        """Nothing to say yet (``waiting`` or ``provisioned`` follows); remembered for them."""
        whom = self.name(ev.workload_id) if ev.workload_id else "standalone"
        self.requests[ev.request_id] = (whom, sum(ps.nodes for ps in ev.pod_sets))
        return []

    def _request(self, request_id: str) -> str:
        whom, _ = self.requests.get(request_id, ("", 0))
        suffix = f" ({whom})" if whom and whom != "standalone" else ""
        return f"request {request_id}{suffix}"


class Narrator:
    """Follows a store from its start in a thread and prints ``Story``'s lines."""

    def __init__(self, store_url: str, say: Callable[[str], None] | None = None) -> None:
        self.store_url = store_url
        self.say = say or _say
        self.story = Story()
        self.position = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="narrator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Tell what is left up to the store's head, then stop."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except Exception as exc:  # the story is a help; the demo goes on without it
            self.say(f"(narration stopped: {str(exc).splitlines()[0] if str(exc) else exc!r})")

    async def _follow(self) -> None:
        store = SqlEventStore(self.store_url)
        try:
            while True:
                last_round = self._stop.is_set()
                batch = await store.read_all(self.position, limit=BATCH)
                for env in batch:
                    for line in self.story.tell(env):
                        self.say(line)
                    self.position = env.position
                if len(batch) == BATCH:
                    continue
                if last_round:
                    return
                await asyncio.to_thread(self._stop.wait, POLL_SECONDS)
        finally:
            await store.close()


def _say(line: str) -> None:
    """A line of its own; on a terminal it overwrites the demo's progress line first."""
    if sys.stdout.isatty():
        sys.stdout.write(f"\r{line}\x1b[K\n")
    else:
        sys.stdout.write(f"{line}\n")
    sys.stdout.flush()
