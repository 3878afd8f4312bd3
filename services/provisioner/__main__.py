"""``python -m services.provisioner``: bring up every node a reservation needs, in one zone.

``MUSTER_PROVISIONER_BACKEND=simulated`` (default): the decider plays the cloud a
``CloudConfigured`` event describes. ``kubernetes``: the decider only folds, and the
``services.provisioner.kube`` routine serves requests through a real cluster's autoscaler.
"""

from collections.abc import Sequence

from muster.core.provisioning.decider import ProvisionerDecider
from muster.core.provisioning.figures import figures
from muster.runtime.figures import FiguresCollector
from muster.runtime.loop import DeciderLoop
from muster.runtime.service import Routine, main
from muster.runtime.settings import Settings
from services.provisioner.kube import kube_backend


def _routines(settings: Settings) -> Sequence[Routine]:
    return [kube_backend] if settings.provisioner_backend == "kubernetes" else []


def _collector(loop: DeciderLoop) -> FiguresCollector:
    return FiguresCollector(lambda: figures(loop.runner.state))


if __name__ == "__main__":
    main(
        "provisioner",
        lambda settings: ProvisionerDecider(simulated=settings.provisioner_backend == "simulated"),
        routines_for=_routines,
        collectors=[_collector],
    )
