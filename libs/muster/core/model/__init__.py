"""Domain model: resources, workloads, queues, the cluster description."""
