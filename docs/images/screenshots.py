"""Regenerate the dashboard screenshots of docs/howto/monitor.md.

    .venv/bin/python docs/images/screenshots.py [--db PATH] [--out docs/images]

It fills a fresh database (default: a temporary SQLite file; a PostgreSQL URL works too,
an empty schema) with an hour of a small shop's work: e-mails, card charges of which a
few fail with a traceback and log lines, reports with progress, a workflow, schedules,
queue limits and a paused queue. It then serves the dashboard with actions, takes a few
actions through it as an operator (so the audit page has entries), and drives Debian's
chromium (`/usr/bin/chromium`, as the browser tests do) over every page at 1280x800.

The hour is written with a fake clock that starts an hour ago and moves a minute at a
time, so the throughput chart has an hour of history; one report runs for real while the
pictures are taken (its progress bar is live).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pydantic
from playwright.sync_api import ViewportSize, sync_playwright

import jobledger as jl
from jobledger._observe.auth import ApiToken
from jobledger._observe.http import create_app
from jobledger.cli._serve import bind, url_of
from jobledger.testing import FakeClock, drain

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
TOKEN = "screenshots"
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


class Email(pydantic.BaseModel):
    to: str
    template: str


class Charge(pydantic.BaseModel):
    order: str
    cents: int
    customer: str


class Report(pydantic.BaseModel):
    name: str
    month: str


class Part(pydantic.BaseModel):
    n: int = 0


EMAIL = jl.JobType("email.send", Email)
CHARGE = jl.JobType("shop.charge", Charge)
REPORT = jl.JobType("report.build", Report)
EXPORT = jl.JobType("export.step", Part)


class CardDeclined(RuntimeError):
    pass


def _history(db: str, rnd: random.Random) -> None:
    """An hour of work, a fake minute at a time, ending now."""
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=59)
    clock = FakeClock(start)
    jobs = jl.JobManager(db, clock=clock, startup_delay=0)
    declined = {f"A-{n}" for n in rnd.sample(range(1000, 1400), 14)}

    @jobs.handler(EMAIL, recovery="retry", queue="emails")
    async def send(ctx: jl.JobContext[Email]) -> dict[str, str]:
        return {"message_id": f"<{ctx.job_id[:8]}@mail.example.com>"}

    @jobs.handler(
        CHARGE,
        recovery="retry",
        retry=jl.RetryPolicy(max_attempts=3, backoff="fixed", base_delay=5),
        queue=lambda p: "payments.eu" if p.customer.endswith(".eu") else "payments.us",
    )
    def charge(ctx: jl.JobContext[Charge]) -> dict[str, Any]:
        ctx.logger.info("charging %s cents for order %s", ctx.payload.cents, ctx.payload.order)
        if ctx.payload.order in declined:
            ctx.logger.warning("gateway answered 402 for %s", ctx.payload.customer)
            raise CardDeclined(f"card declined for order {ctx.payload.order} (gateway code 05)")
        return {"receipt": f"R-{ctx.payload.order}", "cents": ctx.payload.cents}

    @jobs.handler(REPORT, recovery="retry", queue="reports")
    async def build(ctx: jl.JobContext[Report]) -> dict[str, int]:
        for pct in (25, 50, 75):
            await ctx.report_progress(pct, f"{pct // 25} of 4 sections")
        return {"pages": 12}

    @jobs.handler(EXPORT, recovery="retry")
    async def step(ctx: jl.JobContext[Part]) -> int:
        return ctx.payload.n

    async def main() -> None:
        async with jobs:
            order = 1000
            for minute in range(60):
                busy = 4 + int(3 * (1 + (minute % 20) / 10))
                for _ in range(busy + rnd.randrange(4)):
                    jobs.enqueue(
                        EMAIL, Email(to=f"user{rnd.randrange(900)}@example.com", template="receipt")
                    )
                for _ in range(rnd.randrange(2, 6)):
                    order += 1
                    region = rnd.choice(("eu", "us"))
                    jobs.enqueue(
                        CHARGE,
                        Charge(
                            order=f"A-{order}",
                            cents=rnd.randrange(500, 20000),
                            customer=f"c{rnd.randrange(400)}@shop.{region}",
                        ),
                    )
                if minute % 15 == 0:
                    jobs.enqueue(REPORT, Report(name="sales", month="2026-11"))
                if minute == 40:
                    wf = jobs.workflow("nightly-export")
                    extract = wf.add(EXPORT, Part(n=1), name="extract")
                    parts = wf.add_many(
                        EXPORT, [Part(n=i) for i in range(3)], name="transform", after=[extract]
                    )
                    wf.add(EXPORT, Part(n=9), name="load", after=[parts])
                    wf.enqueue()
                await drain(jobs)
                clock.advance(60)
            jobs.register_job_schedule(
                REPORT,
                Report(name="sales", month="current"),
                trigger=jl.Cron("0 2 * * *", timezone="Europe/Paris"),
                name="nightly sales report",
            )
            jobs.register_job_schedule(
                EMAIL,
                Email(to="ops@example.com", template="digest"),
                trigger=jl.Interval(seconds=900),
                name="ops digest",
            )
            jobs.set_queue_limits("payments.us", concurrency=2, rate_limit="10/s")
            jobs.set_queue_limits("payments.eu", concurrency=4)
            jobs.pause_queue("emails.bulk")
            for n in range(6):
                jobs.enqueue(EMAIL, Email(to=f"list{n}@example.com", template="newsletter"),
                             queue="emails.bulk")  # fmt: skip

    asyncio.run(main())


class LiveReport:
    """A worker on real time running one report at 40% until `finish()`."""

    def __init__(self, db: str) -> None:
        self.jobs = jl.JobManager(db, startup_delay=0)
        self.release = threading.Event()
        self.ready = threading.Event()
        self.job_id = ""

        @self.jobs.handler(REPORT, recovery="retry", queue="reports")
        async def build(ctx: jl.JobContext[Report]) -> dict[str, int]:
            await ctx.report_progress(40, "2 of 5 sections")
            self.ready.set()
            while not self.release.is_set():
                await asyncio.sleep(0.05)
            return {"pages": 20}

        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("the live report did not start")

    async def _run(self) -> None:
        async with self.jobs:
            self.job_id = self.jobs.enqueue(REPORT, Report(name="inventory", month="2026-11")).id
            await drain(self.jobs, timeout=120)

    def finish(self) -> None:
        self.release.set()
        self.thread.join(30)


def _act(client: httpx.Client, db: str) -> dict[str, str]:
    """Take a few actions as an operator (the audit log's entries); return ids to show."""
    failed = client.get("/api/jobs", params={"status": "failed", "limit": 5}).json()["items"]
    shown = {"failed": failed[0]["id"]}
    client.post(f"/api/jobs/{failed[-1]['id']}/retry")
    client.post("/api/queues/reports/limits", json={"concurrency": 1})
    schedules = client.get("/api/schedules").json()["items"]
    digest = next(s for s in schedules if s["name"] == "ops digest")
    client.post(f"/api/schedules/{digest['id']}/trigger", json={"every": 600})
    client.post(f"/api/schedules/{digest['id']}/pause")
    wf = client.get("/api/workflows").json()["items"]
    shown["workflow"] = wf[0]["id"]
    return shown


def _pictures(url: str, out: Path, shown: dict[str, str]) -> list[Path]:
    made: list[Path] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{url}/?token={TOKEN}")

        def shot(name: str, path: str, before: Any = None) -> None:
            page.goto(url + path)
            page.wait_for_load_state("networkidle")
            if before is not None:
                before()
            target = out / f"{name}.png"
            page.screenshot(path=str(target))
            made.append(target)

        shot("overview", "/")
        shot("jobs", "/jobs?status=failed")
        shot("jobs-bulk-retry", "/jobs?status=failed&queue=payments.eu&confirm=retry")
        shot(
            "job-failed",
            f"/jobs/{shown['failed']}",
            lambda: page.evaluate("document.getElementById('error-section').scrollIntoView()"),
        )
        shot("job-running", f"/jobs/{shown['running']}")
        shot(
            "schedules",
            "/schedules",
            lambda: page.locator("details.edit-trigger summary").first.click(),
        )
        shot("workflow", f"/workflows/{shown['workflow']}")
        shot("workers", "/workers")
        shot("audit", "/audit")
        browser.close()
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a database to fill (default: a temporary SQLite file)")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    logging.getLogger("jobledger").setLevel(logging.ERROR)  # the failures are on purpose
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "shop.db")
        rnd = random.Random(7)
        _history(db, rnd)
        live = LiveReport(db)
        import uvicorn

        alice = ApiToken("alice", TOKEN, "operator")
        app = create_app(db, tokens=[alice], allow_actions=True, poll_interval=0.1)
        sock = bind("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            thread.join(0.02)
        url = url_of(sock).rstrip("/")
        try:
            auth = {"authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
                shown = _act(client, db)
            shown["running"] = live.job_id
            for path in _pictures(url, args.out, shown):
                print(path)
        finally:
            live.finish()
            server.should_exit = True
            thread.join(30)
            app.state.read_model.close()


if __name__ == "__main__":
    main()
