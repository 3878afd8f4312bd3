"""One Condition type and one time format for every view an operator reads.

Kubernetes' metav1.Condition (type, status, reason, message, lastTransitionTime as an RFC
3339 time) serves both a workload's conditions (kueue.md §1.14) and a ProvisioningRequest's
(peers.md, GKE DWS: Accepted, Provisioned, Failed, ...): the same class, the same JSON."""

from __future__ import annotations

from muster.core.events import provisioning as pev
from muster.core.model.times import rfc3339
from muster.core.views import conditions as cond
from muster.core.views import provisioning as prov
from muster.core.views.workloads import WorkloadView

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _accepted(rid: str = "r1") -> pev.ProvisioningAccepted:
    return pev.ProvisioningAccepted(
        request_id=rid, workload_id="w1", attempt=1, pod_sets=(), message="accepted"
    )


def test_rfc3339_is_seconds_or_milliseconds_in_utc() -> None:
    assert rfc3339(T0) == "2027-01-15T08:00:00Z"
    assert rfc3339(T0 + 0.25) == "2027-01-15T08:00:00.250Z"
    assert rfc3339(None) is None


def test_a_workload_shows_both_its_times_in_rfc3339() -> None:
    """submittedTime and updatedTime, one moment (a fresh submission) or two."""
    view = WorkloadView("w", "n", "ns", "q", 0, 1, T0, None, updated_at=T0)
    body = view.to_json()
    assert body["submittedTime"] == body["updatedTime"] == "2027-01-15T08:00:00Z"
    view.updated_at = T0 + 0.25
    body = view.to_json()
    assert (body["submittedTime"], body["updatedTime"]) == (
        "2027-01-15T08:00:00Z",
        "2027-01-15T08:00:00.250Z",
    )


def test_a_provisioning_request_has_the_workloads_condition_type_and_json() -> None:
    views: dict[str, prov.RequestView] = {}
    prov.fold(views, pev.ProvisioningRequested(request_id="r1", spec=None), T0)  # type: ignore[arg-type]
    prov.fold(views, _accepted(), T0 + 1)
    (accepted,) = views["r1"].conditions.values()
    assert isinstance(accepted, cond.Condition)
    body = views["r1"].to_json()
    assert body["conditions"] == [
        {
            "type": "Accepted",
            "status": "True",
            "reason": "Accepted",
            "message": "accepted",
            "lastTransitionTime": "2027-01-15T08:00:01Z",
        }
    ]
    assert body["createdAt"] == "2027-01-15T08:00:00Z"


def test_a_request_condition_moves_its_time_only_when_its_status_does() -> None:
    """apimachinery's SetStatusCondition, as the workload's conditions do: a new reason in
    the same status keeps lastTransitionTime."""
    views: dict[str, prov.RequestView] = {}
    prov.fold(views, _accepted(), T0)
    waiting = pev.ProvisioningWaiting(request_id="r1", reason="Waiting", message="no capacity")
    prov.fold(views, waiting, T0 + 5)
    booting = pev.ProvisioningWaiting(request_id="r1", reason="NotProvisioned", message="booting")
    prov.fold(views, booting, T0 + 9)
    provisioned = views["r1"].conditions["Provisioned"]
    assert (provisioned.status, provisioned.reason, provisioned.at) == (
        "False",
        "NotProvisioned",
        T0 + 5,
    )
    done = pev.ProvisioningProvisioned(request_id="r1", zone="a", assignments={}, message="up")
    prov.fold(views, done, T0 + 20)
    assert views["r1"].conditions["Provisioned"].at == T0 + 20
