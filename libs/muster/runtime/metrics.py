"""Prometheus metrics every service exposes, in one registry per process."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class ServiceMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.events_folded = Counter(
            "muster_events_folded_total", "Events folded into state", ["service"], registry=r
        )
        self.position = Gauge(
            "muster_fold_position", "Global position folded up to", ["service"], registry=r
        )
        self.decisions = Counter(
            "muster_decisions_total", "Events decided and appended", ["service", "type"], registry=r
        )
        self.conflicts = Counter(
            "muster_append_conflicts_total",
            "Appends refused by optimistic concurrency",
            ["service"],
            registry=r,
        )
        self.store_unavailable = Counter(
            "muster_store_unavailable_total",
            "Store calls that failed because the database could not be reached (then retried)",
            ["service"],
            registry=r,
        )
        self.published = Counter(
            "muster_relay_published_total", "Events published to Kafka", ["service"], registry=r
        )
        self.relay_lag = Gauge(
            "muster_relay_lag_events", "Committed events not yet published", ["service"], registry=r
        )
        self.timers = Counter(
            "muster_timers_fired_total", "Timer events appended", ["service"], registry=r
        )
        self.step_seconds = Histogram(
            "muster_decide_step_seconds",
            "One catch-up + decide + append step",
            ["service"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.decide_seconds = Histogram(
            "muster_decide_duration_seconds",
            "One decide call (for the queue: settle plus one admission cycle)",
            ["service"],
            registry=r,
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
        )
        # Kueue's kueue_admission_attempts_total: one per decide call whose admission cycle
        # judged pending workloads (muster.core.queueing.figures.admission_attempt).
        self.admission_attempts = Counter(
            "muster_admission_attempts_total",
            "Admission cycles that judged pending workloads: success if one reserved quota",
            ["service", "result"],
            registry=r,
        )
        self.heartbeats = Counter(
            "muster_node_heartbeats_total", "Node heartbeats published", ["service"], registry=r
        )
        self.state = Gauge(
            "muster_state", "Service-specific state figures", ["service", "name", "key"], registry=r
        )
