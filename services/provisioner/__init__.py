"""provisioner: atomic node provisioning on the simulated cloud (muster.core.provisioning)."""
