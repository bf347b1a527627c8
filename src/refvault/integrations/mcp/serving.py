"""Serving an SDK ``Server`` downstream: over stdio (stdin read by a daemon thread) or streamable HTTP on a
bound loopback socket, until the client leaves or a stop signal arrives."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import IO, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.lowlevel import Server

__all__ = [
    "STOP_SIGNALS",
    "StdinLines",
    "bind_loopback",
    "serve_http",
    "serve_stdio",
    "serve_until_stopped",
    "stderr_line",
    "until_stopped",
]

logger = logging.getLogger("refvault.mcp")


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects (or this is cancelled)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server(stdin=StdinLines.open()) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class StdinLines(anyio.AsyncFile[str]):
    """This process's stdin as the SDK's ``stdio_server`` reads it, line by line, from a daemon thread.

    The SDK's own reader blocks a worker thread in ``readline`` that a cancellation has to wait for (and
    that the interpreter joins at exit), so a proxy told to stop while its client keeps stdin open would
    hang, its upstream still running. Here a daemon thread reads and hands each line over: a stop never
    waits for the next line, and the process can exit with the thread still blocked.
    """

    def __init__(self, fp: IO[str]) -> None:
        super().__init__(fp)
        self._send, self._receive = anyio.create_memory_object_stream[str](0)
        self._started = False

    @classmethod
    def open(cls) -> StdinLines:
        """Over a duplicate of file descriptor 0 (UTF-8, invalid bytes replaced), or ``sys.stdin`` itself."""
        try:
            fp: IO[str] = open(os.dup(0), encoding="utf-8", errors="replace")  # noqa: SIM115 (the thread owns it)
        except OSError:
            fp = sys.stdin
        return cls(fp)

    async def readline(self) -> str:
        if not self._started:
            self._started = True
            token = anyio.lowlevel.current_token()
            threading.Thread(target=self._pump, args=(token,), name="refvault-mcp-stdin", daemon=True).start()
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return ""  # end of input: the SDK's reader stops

    def _pump(self, token: anyio.lowlevel.EventLoopToken) -> None:
        try:
            while line := self.wrapped.readline():
                anyio.from_thread.run(self._send.send, line, token=token)
        except Exception as exc:  # a read error is the end of input; a closed loop or stream: nobody listens
            logger.debug("stdin reader stopped: %s", type(exc).__name__)
        finally:
            with suppress(Exception):
                anyio.from_thread.run_sync(self._send.close, token=token)


def bind_loopback(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), so the address is known before serving."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(server: Server[Any], sock: socket.socket) -> None:
    """Serve streamable HTTP at ``/mcp`` on an already bound socket until SIGINT or SIGTERM, then return."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """Returns after a signal instead of re-raising it, so the upstream and the vault close cleanly."""

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._captured_signals.clear()

    host = sock.getsockname()[0]
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await GracefulServer(config).serve(sockets=[sock])


async def serve_until_stopped(server: Server[Any], *, announce: Callable[[], None] | None = None) -> None:
    """Serve ``server`` over stdio until the client disconnects or SIGINT, SIGTERM or SIGHUP arrives.

    ``announce`` runs once the stop signals are handled (so a signal sent after it stops the server cleanly).
    """

    async def serve() -> None:
        if announce is not None:
            announce()
        await serve_stdio(server)

    await until_stopped(serve)


async def until_stopped(work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work()`` until it returns or a stop signal cancels it (then return normally)."""
    # Signals are received for the whole run, the upstream's shutdown included: a signal arriving while
    # the upstream is being stopped must not kill the proxy before it has stopped it.
    with _stop_signals() as signals:
        async with anyio.create_task_group() as group:
            if signals is not None:
                group.start_soon(_cancel_on_signal, signals, group.cancel_scope)
            try:
                await work()
            finally:
                group.cancel_scope.cancel()


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def _stop_signals() -> Iterator[AsyncIterator[int] | None]:
    """A receiver of the signals that stop the proxy; None where signals cannot be received here.

    (Not the main thread, or a platform without loop signal handlers: the default handling stays.)
    """
    with ExitStack() as stack:
        try:
            receiver = stack.enter_context(anyio.open_signal_receiver(*STOP_SIGNALS))
        except (NotImplementedError, RuntimeError, ValueError):
            receiver = None
        yield receiver


async def _cancel_on_signal(signals: AsyncIterator[int], scope: anyio.CancelScope) -> None:
    async for signum in signals:
        logger.info("received signal %d: stopping", signum)
        scope.cancel()
        return


def stderr_line(text: str) -> None:
    """Print one line on stderr (stdout may be the MCP wire)."""
    print(text, file=sys.stderr, flush=True)
