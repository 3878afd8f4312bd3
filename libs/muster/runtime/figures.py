"""Exposing a decider's figures (core/queueing/figures.py, core/provisioning/figures.py) to
Prometheus at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from muster.core.queueing.figures import Family


class FiguresCollector(Collector):
    """``compute`` returns the figures of the service's current state."""

    def __init__(self, compute: Callable[[], list[Family]]) -> None:
        self.compute = compute

    def collect(self) -> Iterator[Metric]:
        for fam in self.compute():
            names = _label_names(fam.samples, fam.histograms)
            metric: Any
            if fam.kind == "histogram":
                metric = HistogramMetricFamily(fam.name, fam.help, labels=names)
                for labels, buckets, total in fam.histograms:
                    metric.add_metric([v for _, v in labels], buckets, total)
            else:
                cls = CounterMetricFamily if fam.kind == "counter" else GaugeMetricFamily
                name = fam.name.removesuffix("_total") if fam.kind == "counter" else fam.name
                metric = cls(name, fam.help, labels=names)
                for labels, value in fam.samples:
                    metric.add_metric([v for _, v in labels], value)
            yield metric


def _label_names(samples: list[Any], histograms: list[Any]) -> list[str]:
    first = samples[0][0] if samples else histograms[0][0] if histograms else ()
    return [k for k, _ in first]
