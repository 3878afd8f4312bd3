"""``python -m services.intake``: the submission APIs (HTTP, gRPC, an optional Kafka
topic) over the workloads read model."""

from muster.core.views.workloads import WorkloadsView
from muster.runtime.service import main
from services.intake.server import routes

if __name__ == "__main__":
    main("intake", lambda settings: WorkloadsView(), decides=False, routes=routes)
