"""`/metrics`: the read model's `MetricsData` in Prometheus' text exposition (format
0.0.4), produced by `prometheus-client` (a custom collector on a registry of its own, so
nothing of the process's default registry leaks in).

Every number is read from the tables at scrape time, so several processes sharing one
database report one consistent picture and nothing is kept in memory. A scrape costs
O(queues), not O(rows): the counts, sums and histogram buckets per (queue, state) are
kept current by the write path (`job_counts`, SQLite migration 16 / PostgreSQL 12, 14), with
the same meaning as the pass over `jobs` they replace (a database no worker has migrated
yet is still read by that pass). The `_total`
counters are monotonic: they add what GC has collected (the `job_totals` table, kept by
the migrations' delete trigger) to what the stored rows hold, so deleting old rows never
lowers or removes a series. The gauges and histograms describe the rows stored now: the
run-time histogram uses the last attempt of each finished job still stored; queue latency
is `started_at - scheduled_at` of the current (or last) attempt, i.e. how long a due job
waited for a slot.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from jobledger._observe.read_model import STATUSES, Histogram, MetricsData

__all__ = ["CONTENT_TYPE", "MetricsCollector", "render"]

# What `generate_latest` writes (newer clients also speak 1.0.0; scrapers accept this).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _histogram(name: str, help_text: str, data: dict[str, Histogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help_text, labels=["queue"])
    for queue in sorted(data):
        h = data[queue]
        buckets = [(repr(float(bound)), float(n)) for bound, n in h.buckets]
        buckets.append(("+Inf", float(h.count)))
        family.add_metric([queue], buckets, h.total)
    return family


class MetricsCollector(Collector):
    """Yields the families of one `MetricsData` (read before the collector is made)."""

    def __init__(self, data: MetricsData) -> None:
        self.data = data

    def collect(self) -> Iterator[Metric]:
        data = self.data
        jobs = GaugeMetricFamily(
            "jobledger_jobs", "Jobs stored, by queue and state.", labels=["queue", "state"]
        )
        for (queue, state), n in sorted(data.jobs.items()):
            if state in STATUSES:
                jobs.add_metric([queue, state], n)
        yield jobs

        counters = (
            ("jobledger_jobs_started", "Attempts started.", data.started),
            ("jobledger_jobs_completed", "Jobs completed.", data.completed),
            ("jobledger_jobs_failed", "Jobs failed for good.", data.failed),
            ("jobledger_jobs_cancelled", "Jobs cancelled.", data.cancelled),
            ("jobledger_jobs_retried", "Retries scheduled.", data.retried),
        )
        for name, help_text, values in counters:
            family = CounterMetricFamily(
                name,
                help_text + " Stored rows plus the rows GC has collected.",
                labels=["queue"],
            )
            for queue in sorted(values):
                family.add_metric([queue], values[queue])
            yield family

        yield _histogram(
            "jobledger_job_run_seconds",
            "Run time of the last attempt of finished (completed or failed) jobs.",
            data.run_seconds,
        )
        yield _histogram(
            "jobledger_job_queue_latency_seconds",
            "Time from a job falling due (scheduled_at) to its attempt starting.",
            data.latency_seconds,
        )

        oldest = GaugeMetricFamily(
            "jobledger_oldest_pending_age_seconds",
            "Age of the oldest due pending job.",
            labels=["queue"],
        )
        for queue, age in sorted(data.oldest_pending_age.items()):
            oldest.add_metric([queue], age)
        yield oldest

        workers = GaugeMetricFamily(
            "jobledger_workers", "Registered workers, by state.", labels=["state"]
        )
        for state in sorted(data.workers):
            workers.add_metric([state], data.workers[state])
        yield workers
        yield GaugeMetricFamily(
            "jobledger_leader_term",
            "Term of the current leader lease (0: none).",
            value=data.leader_term or 0,
        )


def render(data: MetricsData) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(data))
    return generate_latest(registry).decode("utf-8")
