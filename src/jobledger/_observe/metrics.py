"""Prometheus text exposition (format 0.0.4) of the read model's `MetricsData`.

Every number is computed from the rows the table holds at scrape time, so several
processes sharing one file report one consistent picture and nothing is kept in memory.
The price: the `_total` counters count the rows still stored, so they drop when GC
deletes old terminal rows; Prometheus' `rate()`/`increase()` treat a drop as a counter
reset, which is the documented way to handle it. The run-time histogram uses the last
attempt of each finished job; queue latency is `started_at - scheduled_at` of the
current (or last) attempt, i.e. how long a due job waited for a slot.
"""

from __future__ import annotations

from jobledger._observe.read_model import STATUSES, Histogram, MetricsData

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _num(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: str) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_num(value)}")

    def histogram(self, name: str, data: dict[str, Histogram]) -> None:
        for queue in sorted(data):
            h = data[queue]
            for bound, n in h.buckets:
                self.sample(f"{name}_bucket", n, queue=queue, le=_num(bound))
            self.sample(f"{name}_bucket", h.count, queue=queue, le="+Inf")
            self.sample(f"{name}_sum", h.total, queue=queue)
            self.sample(f"{name}_count", h.count, queue=queue)


def render(data: MetricsData) -> str:
    out = _Out()
    out.family("jobledger_jobs", "gauge", "Jobs stored, by queue and state.")
    for (queue, state), n in sorted(data.jobs.items()):
        if state in STATUSES:
            out.sample("jobledger_jobs", n, queue=queue, state=state)

    counters = (
        ("jobledger_jobs_started_total", "Attempts started.", data.started),
        ("jobledger_jobs_completed_total", "Jobs completed.", data.completed),
        ("jobledger_jobs_failed_total", "Jobs failed for good.", data.failed),
        ("jobledger_jobs_cancelled_total", "Jobs cancelled.", data.cancelled),
        ("jobledger_jobs_retried_total", "Retries scheduled.", data.retried),
    )
    for name, help_text, values in counters:
        out.family(name, "counter", help_text + " Computed from the stored rows.")
        for queue in sorted(values):
            out.sample(name, values[queue], queue=queue)

    out.family(
        "jobledger_job_run_seconds",
        "histogram",
        "Run time of the last attempt of finished (completed or failed) jobs.",
    )
    out.histogram("jobledger_job_run_seconds", data.run_seconds)
    out.family(
        "jobledger_job_queue_latency_seconds",
        "histogram",
        "Time from a job falling due (scheduled_at) to its attempt starting.",
    )
    out.histogram("jobledger_job_queue_latency_seconds", data.latency_seconds)

    out.family(
        "jobledger_oldest_pending_age_seconds", "gauge", "Age of the oldest due pending job."
    )
    for queue, age in sorted(data.oldest_pending_age.items()):
        out.sample("jobledger_oldest_pending_age_seconds", age, queue=queue)

    out.family("jobledger_workers", "gauge", "Registered workers, by state.")
    for state in sorted(data.workers):
        out.sample("jobledger_workers", data.workers[state], state=state)
    out.family("jobledger_leader_term", "gauge", "Term of the current leader lease (0: none).")
    out.sample("jobledger_leader_term", data.leader_term or 0)
    return "\n".join(out.lines) + "\n"
