"""What tracing costs: enqueue and drain with no provider, and with the OpenTelemetry
SDK's tracer provider set (a `BatchSpanProcessor` into an exporter that drops the
spans, so the SDK's own span work is counted and no I/O is).

Each measurement runs in a fresh process (a provider is global and set once per
process): `--mode off` (no provider: what `tracing.instruments()` costs, i.e. nothing
but its check), `--mode sdk` (every enqueue makes a `send` span, every attempt a
`process` span). Without `--mode`, the script runs `--repeat` interleaved pairs of
both and prints each run's JSON line, then a table of medians and the ratio sdk/off.

enqueue: `-n` single `jobs.enqueue` calls on one manager, not started. drain: `-n`
prefilled no-op jobs (enqueued with the same mode, so rows carry the context when
tracing) drained by one started manager (concurrency 50), as `drain.py` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import jobledger as jl
from _common import (
    NOOP,
    Counter,
    Stopwatch,
    base_parser,
    emit,
    fresh_dir,
    make_manager,
    rate,
    wait_completed,
)


def _install_sdk() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


async def _measure(path: str, sync: str, n: int) -> tuple[float, float]:
    producer = jl.JobManager(path, startup_delay=0)
    watch = Stopwatch()
    for _ in range(n):
        producer.enqueue(NOOP, {})
    enqueue_s = watch.elapsed()
    producer._store.close()
    counter = Counter()
    jobs = make_manager(path, sync, concurrency=50, global_cap=50, counter=counter)
    watch = Stopwatch()
    await jobs.start()
    await wait_completed(jobs, counter, n)
    drain_s = watch.elapsed()
    await jobs.stop()
    return enqueue_s, drain_s


def _one(mode: str, sync: str, n: int) -> None:
    if mode == "sdk":
        _install_sdk()
    with fresh_dir() as d:
        enqueue_s, drain_s = asyncio.run(_measure(os.path.join(d, "jobs.db"), sync, n))
    emit("otel", f"jobledger/{mode}", sync, n=n, enqueue_rate=rate(n, enqueue_s),
         drain_rate=rate(n, drain_s))  # fmt: skip


def _compare(sync: str, n: int, repeat: int) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "sdk": []}
    here = os.path.dirname(os.path.abspath(__file__))
    for _ in range(repeat):
        for mode in ("off", "sdk"):
            out = subprocess.run(
                [sys.executable, os.path.join(here, "otel.py"), "--mode", mode,
                 "--sync", sync, "-n", str(n)],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            line = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(line), flush=True)
            runs[mode].append(line)
    print(f"{'':10}{'enqueue/s':>12}{'drain/s':>12}")
    med: dict[str, tuple[float, float]] = {}
    for mode, lines in runs.items():
        e = statistics.median(x["enqueue_rate"] for x in lines)
        d = statistics.median(x["drain_rate"] for x in lines)
        med[mode] = (e, d)
        print(f"{mode:10}{e:>12.0f}{d:>12.0f}")
    ratio = (med["sdk"][0] / med["off"][0], med["sdk"][1] / med["off"][1])
    print(f"{'sdk/off':10}{ratio[0]:>12.2f}{ratio[1]:>12.2f}")


def main() -> None:
    p = base_parser(__doc__ or "", systems=("jobledger",))
    p.add_argument("-n", type=int, default=5_000)
    p.add_argument("--mode", choices=("off", "sdk"))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if args.mode is None:
        _compare(args.sync, args.n, args.repeat)
    else:
        _one(args.mode, args.sync, args.n)


if __name__ == "__main__":
    main()
