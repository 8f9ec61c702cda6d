"""Running the service: the web server (uvicorn, with a header-read timeout and a connection cap) and the
worker process (`traceanalyzer serve worker`).

uvicorn bounds the idle time between requests (`timeout_keep_alive`) but not the time a client may take
to send a request's headers: a thousand connections that send a byte now and then would hold every
slot. `protocol()` closes a connection that has not sent a whole request head within `header_timeout_s`
of its opening or of its last response; past `max_connections` open connections, new requests get 503.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import Any

from .settings import Settings


def protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_cycle = self.cycle
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            idle = self.cycle is None or self.cycle.response_complete
            if idle and self.cycle is self._head_cycle and not self.transport.is_closing():
                self.transport.close()  # no request head since the connection opened or its last answer

        def handle_events(self) -> None:
            super().handle_events()
            if self._head_timer is not None and self.cycle is not self._head_cycle:
                self._disarm()  # a request head arrived

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


def raise_open_files(wanted: int) -> None:
    """Room for `wanted` connections besides the files the service opens itself."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted + 256 if hard == resource.RLIM_INFINITY else min(hard, wanted + 256)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):
        pass


def run_web(settings: Settings, host: str, port: int) -> None:
    import uvicorn

    from .app import create_app

    raise_open_files(settings.max_connections)
    app = create_app(settings)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, server_header=False,
                            http=protocol(settings.header_timeout_s), limit_concurrency=settings.max_connections,
                            timeout_keep_alive=10, h11_max_incomplete_event_size=64 * 1024)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            """SIGTERM / SIGINT: no analysis starts from now on (the answers under way still finish)."""
            app.state.runner.drain()
            super().handle_exit(sig, frame)

    Server(config).run()


def run_worker(settings: Settings) -> None:
    """Analyses queued jobs until SIGINT or SIGTERM (an analysis under way is stopped and queued again)."""
    import dataclasses

    from .jobs import JobRunner, backfill_metrics, clean_leftovers
    from .settings import instance_name
    from .store import Store

    settings = dataclasses.replace(settings, data=settings.data.resolve(), instance=instance_name())
    settings.make_dirs()
    store = Store(settings.database_url)
    store.migrate()
    released = clean_leftovers(settings, store)
    backfill_metrics(settings, store)
    runner = JobRunner(settings, store)
    stop = threading.Event()
    def on_signal(*_: Any) -> None:  # no job is taken after the signal (drain), then the worker stops
        runner.drain()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    runner.start()
    print(f"traceanalyzer: worker {runner.worker_id} running {settings.jobs} analyses at a time"
          + (f" ({released} job(s) of stopped workers queued again)" if released else ""), file=sys.stderr)
    while not stop.wait(1.0):
        pass
    runner.stop()
    store.close()
