"""muster: queueing, fair sharing and atomic provisioning for accelerator batch workloads."""
