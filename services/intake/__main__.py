"""``python -m services.intake``: the submission API (HTTP) over the workloads read model."""

from muster.core.views.workloads import WorkloadsView
from muster.runtime.service import main
from services.intake.api import routes

if __name__ == "__main__":
    main("intake", lambda settings: WorkloadsView(), decides=False, routes=routes)
