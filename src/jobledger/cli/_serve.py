"""`jobledger serve` (the HTTP API and dashboard) and `jobledger demo`.

Both bind the socket themselves, so `--port 0` can print the port the OS chose before
serving, and run uvicorn inside their own event loop with their own SIGINT/SIGTERM
handling (uvicorn's would re-raise the signal after shutdown). Starlette and uvicorn are
imported only here, so the rest of the CLI works without the `web` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import click

from jobledger._observe.read_model import ReadModel
from jobledger._runtime.manager import JobManager
from jobledger._storage.open import redact
from jobledger.cli._common import EXIT_BAD_INPUT, Settings, fail, load_manager, reader
from jobledger.cli._params import Seconds
from jobledger.cli._text import visible

__all__ = ["bind", "demo", "is_loopback", "serve", "serve_app"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 lets the OS choose."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _web() -> tuple[Any, Any]:
    try:
        import uvicorn

        from jobledger._observe import http
    except ImportError as exc:
        fail(
            f"the HTTP server needs the web extra (pip install 'jobledger[web]'): {exc}",
            EXIT_BAD_INPUT,
        )
    return uvicorn, http


async def serve_app(app: Any, sock: socket.socket, *, on_ready: Any = None) -> None:
    """Serve `app` on `sock` until SIGINT/SIGTERM; `on_ready()` once it accepts."""
    uvicorn, _ = _web()

    class Server(uvicorn.Server):  # type: ignore[misc, name-defined]
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # SIGINT/SIGTERM are handled by serve_app itself

    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = Server(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    task: asyncio.Task[None] | None = None
    try:
        task = loop.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            await task
            return
        if on_ready is not None:
            on_ready()
        stopper = loop.create_task(stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        click.echo("jobledger: shutting down", err=True)
    finally:
        server.should_exit = True
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sig in signals:
            loop.remove_signal_handler(sig)


def _origins(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    _, http = _web()
    for url in value:
        if http.origin_of(url) is None:
            raise click.BadParameter(
                f"{url!r} is not an http(s) origin such as https://jobs.example.com", ctx, param
            )
    return value


Role = Literal["operator", "viewer"]


def _tokens(role: Role) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], Any]:
    def parse(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
        _, http = _web()
        out = []
        for spec in value:
            try:
                out.append(http.parse_token(spec, role))
            except ValueError as exc:
                raise click.BadParameter(str(exc), ctx, param) from None
        return tuple(out)

    return parse


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--token",
    "operators",
    envvar="JOBLEDGER_TOKEN",
    multiple=True,
    metavar="NAME:SECRET",
    callback=_tokens("operator"),
    help="An operator's token (may read and, with --allow-actions, act); NAME is who the "
    "audit log says acted. Sent as Authorization: Bearer SECRET, or ?token=SECRET once "
    "in the browser. Repeatable; also read from $JOBLEDGER_TOKEN (space-separated).",
)
@click.option(
    "--viewer-token",
    "viewers",
    envvar="JOBLEDGER_VIEWER_TOKEN",
    multiple=True,
    metavar="NAME:SECRET",
    callback=_tokens("viewer"),
    help="A viewer's token: reads every page and API route, takes no action. Repeatable.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Add the action routes and buttons (cancel, retry, bulk retry/cancel, queue and "
    "schedule actions), for operators only (needs --token). Each action is audited.",
)
@click.option(
    "--app",
    default=None,
    metavar="MODULE:ATTR",
    help="With --allow-actions: the JobManager whose handlers run schedules on demand.",
)
@click.option(
    "--origin",
    "origins",
    multiple=True,
    metavar="URL",
    callback=_origins,
    help="With --allow-actions behind a proxy: the public origin (https://jobs.example.com) "
    "the dashboard's POSTs come from, besides the server's own. Repeatable.",
)
@click.option("--poll", type=Seconds(0.01, 3600), default=0.25, show_default=True)
@click.pass_obj
def serve(
    settings: Settings,
    host: str,
    port: int,
    operators: tuple[Any, ...],
    viewers: tuple[Any, ...],
    allow_actions: bool,
    app: str | None,
    origins: tuple[str, ...],
    poll: float,
) -> None:
    """Serve the HTTP API and the dashboard (read-only unless --allow-actions)."""
    tokens = (*operators, *viewers)
    if not is_loopback(host) and not tokens:
        fail(f"binding to {host} (beyond loopback) needs --token or --viewer-token", EXIT_BAD_INPUT)
    if allow_actions and not operators:
        fail("--allow-actions needs an operator --token", EXIT_BAD_INPUT)
    if app is not None and not allow_actions:
        fail("--app is only used with --allow-actions", EXIT_BAD_INPUT)
    if origins and not allow_actions:
        fail("--origin is only used with --allow-actions", EXIT_BAD_INPUT)
    _, http = _web()
    try:
        http.check_tokens(tokens)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    rm = reader(settings)
    manager = load_manager(app, settings) if app is not None else None
    asgi = http.create_app(
        settings.db,
        tokens=tokens,
        allow_actions=allow_actions,
        poll_interval=poll,
        allowed_hosts=None if tokens else list(http.LOOPBACK_HOSTS),
        read_model=rm,
        action_manager=manager,
        allowed_origins=origins,
    )
    try:
        sock = bind(host, port)
    except OSError as exc:
        rm.close()
        if isinstance(exc, socket.gaierror):  # a name that does not resolve is bad input
            fail(f"--host {host!r} does not resolve: {exc.strerror or exc}", EXIT_BAD_INPUT)
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")

    def ready() -> None:
        click.echo(f"jobledger: serving {visible(redact(settings.db))} at {url_of(sock)}")
        sys.stdout.flush()

    async def main() -> None:
        try:
            await serve_app(asgi, sock, on_ready=ready)
        finally:
            for used in asgi.state.action_managers.values():
                await used.stop()

    try:
        asyncio.run(main())
    finally:
        rm.close()


# -- demo ------------------------------------------------------------------------------


def _demo_module() -> ModuleType:
    """examples/demo_app.py from the current directory or from the source checkout."""
    candidates = [
        Path.cwd() / "examples" / "demo_app.py",
        Path(__file__).resolve().parents[3] / "examples" / "demo_app.py",
    ]
    for path in candidates:
        if path.is_file():
            spec = importlib.util.spec_from_file_location("jobledger_demo_app", path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    return fail("the demo needs examples/demo_app.py (run it from the jobledger source checkout)")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="A free port is used if this one is taken.",
)
@click.pass_obj
def demo(settings: Settings, host: str, port: int) -> None:
    """Run the demo: a worker with sample jobs, a cron schedule and the dashboard."""
    if not is_loopback(host):
        fail("the demo serves on loopback only", EXIT_BAD_INPUT)
    os.environ["JOBLEDGER_DB"] = settings.db
    module = _demo_module()
    manager: JobManager = module.jobs
    _, http = _web()
    try:
        sock = bind(host, port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        sock = bind(host, 0)

    def ready() -> None:
        ids = module.seed(manager)
        url = url_of(sock)
        click.echo(
            f"\njobledger demo: {len(ids)} sample jobs enqueued in {manager.path}\n"
            f"  dashboard   {url}\n"
            f"  a job       {url}jobs/{ids[0]}\n"
            f"  CLI         .venv/bin/jobledger --db {manager.path} jobs list\n"
            f"Ctrl-C to stop.\n"
        )
        sys.stdout.flush()

    async def main() -> None:
        # The worker creates the file; only then can the read-only side open it.
        await manager.start()
        rm = ReadModel(manager.path)
        try:
            app = http.create_app(
                manager.path,
                poll_interval=0.2,
                allowed_hosts=list(http.LOOPBACK_HOSTS),
                read_model=rm,
            )
            await serve_app(app, sock, on_ready=ready)
        finally:
            rm.close()
            await manager.stop()

    asyncio.run(main())
