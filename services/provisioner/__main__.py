"""``python -m services.provisioner``: bring up every node a reservation needs, in one zone."""

from muster.core.provisioning.decider import ProvisionerDecider
from muster.runtime.service import main

if __name__ == "__main__":
    main("provisioner", lambda settings: ProvisionerDecider())
