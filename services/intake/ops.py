"""Intake's operations, the same for HTTP, gRPC and the Kafka ingest topic, by concern.

Each takes the caller (a ``Principal``) and plain JSON-like input, checks access, limits
and the input before anything is appended (a refusal leaves no event: the core decides,
``core/intake``), and answers with JSON-like output or raises ``Refused``. The
transports only translate.
"""

from __future__ import annotations

from muster.core.access.tokens import Authenticator
from muster.runtime.loop import DeciderLoop
from muster.runtime.settings import Settings
from services.intake.access import Access
from services.intake.admin import Admin
from services.intake.applies import Applies
from services.intake.context import Context
from services.intake.events import Events
from services.intake.explain import Explain
from services.intake.objects import Objects
from services.intake.pending import Pending
from services.intake.report import Report
from services.intake.requests import Requests
from services.intake.workloads import Workloads


class Intake:
    def __init__(self, loop: DeciderLoop, authenticator: Authenticator) -> None:
        self.ctx = Context(loop, Access(authenticator, loop.settings))
        self.access = self.ctx.access
        self.pending = Pending(self.ctx)
        self.workloads = Workloads(self.ctx, self.pending)
        self.events = Events(self.ctx)
        self.explain = Explain(self.ctx, self.pending)
        self.requests = Requests(self.ctx)
        self.applies = Applies(self.ctx)
        self.objects = Objects(self.ctx)
        self.admin = Admin(self.ctx)
        self.report = Report(self.ctx)

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    async def close(self) -> None:
        await self.ctx.committer.close()
        self.applies.close()
