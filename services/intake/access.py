"""Who is calling, what they may do, and how fast: the checks every operation makes
before it reads or appends anything."""

from __future__ import annotations

import time

from muster.core.access.policy import Action, visible_namespaces
from muster.core.access.rate import Limit, Limiter
from muster.core.access.tokens import Authenticator, AuthError, Principal
from muster.core.intake.refusal import Refusal, forbidden
from muster.runtime.settings import Settings
from services.intake.errors import Refused, refuse


class Access:
    def __init__(self, authenticator: Authenticator, settings: Settings) -> None:
        self.auth = authenticator
        self.settings = settings
        self.limiter = Limiter()

    def authenticate(self, authorization: str | None) -> Principal:
        try:
            return self.auth.authenticate(authorization, time.time())
        except AuthError as exc:
            raise refuse("Unauthenticated", exc.reason) from None

    @staticmethod
    def require(
        who: Principal, action: Action, namespace: str | None = None, queue: str | None = None
    ) -> None:
        refused = forbidden(who, action, namespace, queue)
        if refused is not None:
            raise Refused(refused)

    @staticmethod
    def visible(who: Principal, namespace: str | None) -> bool:
        allowed = visible_namespaces(who)
        return allowed is None or (namespace is not None and namespace in allowed)

    def rate(self, who: Principal, cost: int) -> None:
        """Take ``cost`` submissions from the tenant's bucket, or refuse (429 with when to
        retry; 413 when more than the burst could ever allow)."""
        rate = who.rate if who.rate is not None else self.settings.submit_rate
        if rate <= 0:  # 0: no limit
            return
        burst = who.burst if who.burst is not None else self.settings.submit_burst
        try:
            wait = self.limiter.check(who.name, Limit(rate, burst), time.time(), cost)
        except ValueError as exc:
            raise refuse("BatchTooLarge", str(exc)) from None
        if wait is not None:
            raise Refused(
                Refusal(
                    "RateLimited",
                    f"tenant {who.name} is over its submission rate of {rate:g}/s "
                    f"(burst {burst}); retry in {wait:.2f}s",
                    retry_after=wait,
                )
            )
