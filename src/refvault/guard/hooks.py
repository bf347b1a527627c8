"""Where the leak guard sits: the HTTP transport of an LLM SDK, log handlers, span exporters.

Three hooks put a :class:`~refvault.guard.LeakGuard` on the paths by which
protected bytes could leave the process:

Every hook has one shape, ``Hook(guard, <what it wraps>)``: ``guard`` is a
:class:`~refvault.guard.LeakGuard`, or a Toolbox whose ``box.guard`` to use,
resolved by :func:`~refvault.guard.contract.resolve_guard` (the transport) or
:func:`~refvault.guard.contract.resolve_redactor` (logs, spans) with the same
errors; the framework hooks in :mod:`refvault.integrations` take it the same way.

:class:`GuardedTransport`
    An httpx-style transport wrapper. Pass it to the SDK's HTTP client and every
    request body is checked before it reaches the network::

        guard = LeakGuard()
        openai.OpenAI(http_client=httpx2.Client(transport=GuardedTransport(guard)))
        anthropic.AsyncAnthropic(http_client=httpx2.AsyncClient(transport=GuardedTransport(guard)))

    One instance serves sync and async clients (it implements both transport
    interfaces) of either ``httpx2`` (what the current OpenAI and Anthropic SDKs
    use) or the legacy ``httpx`` (still accepted by ``openai``; ``anthropic``
    refuses ``httpx`` objects). The SDKs' own client factories take it too and
    keep the SDK's timeouts and redirect policy:
    ``openai.DefaultHttpxClient(transport=GuardedTransport(guard))``.

    The wrapped transport defaults to a plain ``HTTPTransport`` /
    ``AsyncHTTPTransport`` of the library the request comes from; pass
    ``transport=`` to wrap another one (limits, socket options, TLS, proxies).
    Give proxies to the wrapped transport, ``GuardedTransport(guard,
    httpx2.HTTPTransport(proxy=...))``, not to the client: a client's
    ``proxy=``/``mounts=`` route requests around its ``transport`` (and a client
    given a transport ignores the proxy environment variables).

    The class derives from ``httpx2``'s transport bases for the type checker
    only: at runtime it has no third-party base, so importing
    :mod:`refvault.guard.hooks` imports neither library, and the Anthropic SDK
    (which rejects anything from the ``httpx`` package) accepts it.

:class:`LogRedactor`
    A :class:`logging.Filter` that replaces protected spans in a record's
    message, arguments, ``extra`` attributes, exception text and stack text by
    ``[refvault:art_…]``. Attach it to *handlers*.

:class:`GuardSpanProcessor` / :class:`GuardedSpanExporter`
    OpenTelemetry hooks redacting span names, attributes, event names and
    attributes, link attributes and the status description. OpenTelemetry is
    imported on first instantiation, not with this module.

What the transport checks
-------------------------
The body is read (streamed bodies are buffered; httpx does the same for
replays), decoded from ``Content-Encoding`` ``gzip``/``deflate``/``identity``
(the OpenAI and Anthropic SDKs send none) and then:

* a JSON body (``application/json``, ``application/*+json``, or no content
  type) that parses to an object or array is passed to
  :meth:`LeakGuard.check` as the parsed value, so the guard sees the request's
  structure (messages, tool calls, data URLs) with JSON escapes decoded;
* any other body that decodes as text (its ``charset``, else UTF-8) is checked
  as one string: text bodies, form posts and multipart uploads of text files
  (a JSONL batch file, for instance);
* a body that is not text (a multipart upload with binary parts, audio) is
  scanned as bytes by the content arm (and the piece arm) only (an upload is not
  a tool payload, so the size arm does not apply); a hit is refused under either policy, since
  bytes cannot be redacted in place without corrupting the upload;
* a body with a ``Content-Encoding`` is also scanned as sent (its raw bytes, by
  the content arm); one the guard cannot decode (``br``, ``zstd``, corrupt or
  mislabelled ``gzip``) is checked that way only, and a hit is refused. A gzip
  body is inflated by its first member, as zlib-based servers do;
* empty bodies pass through.

JSON with duplicate object keys is checked as text, since parsing would hide
all but the last value of a key.

Policy ``raise``: :class:`~refvault.errors.ContextLeak` propagates out of the
SDK call and nothing is sent. Policy ``redact``: the redacted body is
re-serialised (compact JSON, as the SDKs write it), re-encoded, and sent with
a corrected ``Content-Length``. A request without findings is forwarded
untouched: the bytes that arrive are the bytes the SDK wrote.

Retries: the OpenAI SDK re-raises exceptions that are not httpx errors as they
are, so a leak is neither retried nor wrapped. The Anthropic SDK wraps *any*
exception from its HTTP client in ``APIConnectionError`` and retries it
(``max_retries`` times, with back-off), except its own ``AnthropicError``. For
a request from the Anthropic SDK (``anthropic-version`` header or an
``Anthropic…`` user agent) the transport therefore raises a subclass of both
``ContextLeak`` and ``anthropic.AnthropicError``: it propagates at once, once,
and ``except ContextLeak`` catches it.
"""

from __future__ import annotations

import gzip
import json
import logging
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self, cast

from refvault.errors import ContextLeak, InvalidType
from refvault.guard.contract import resolve_guard, resolve_redactor
from refvault.guard.findings import EVENT, event_line
from refvault.observe import guard_stopped

if TYPE_CHECKING:
    import httpx2
    from httpx2 import AsyncBaseTransport as _AsyncTransportBase
    from httpx2 import BaseTransport as _SyncTransportBase
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span
    from opentelemetry.sdk.trace import SpanProcessor as _SpanProcessorBase
    from opentelemetry.sdk.trace.export import SpanExporter as _SpanExporterBase
    from opentelemetry.sdk.trace.export import SpanExportResult

    from refvault.guard.contract import GuardHolder, Redactor, RequestChecker
else:  # no third-party import at module load: see the module docstring

    class _SyncTransportBase:
        pass

    class _AsyncTransportBase:
        pass

    _SpanProcessorBase = _SpanExporterBase = object

__all__ = [
    "AsyncGuardedTransport",
    "GuardSpanProcessor",
    "GuardedSpanExporter",
    "GuardedTransport",
    "LogRedactor",
    "redact_span",
]

# ---------------------------------------------------------------------------
# HTTP transport
# ---------------------------------------------------------------------------

_PASS: Final = None  # "send the request unchanged"
_GUARD_LOGGER: Final = logging.getLogger("refvault.guard")


class _DuplicateKeys(ValueError):
    pass


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKeys
    return out


def _media_type(content_type: str) -> tuple[str, str | None]:
    """``"application/json; charset=utf-8"`` → ``("application/json", "utf-8")``."""
    main, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"').lower()
    return main.strip().lower(), charset


def _is_json_media(media: str) -> bool:
    return media == "" or media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _decode_content(body: bytes, encodings: list[str]) -> bytes | None:
    """Undo ``Content-Encoding`` (listed in the order applied); None if unsupported or corrupt."""
    try:
        for coding in reversed(encodings):
            if coding == "gzip" or coding == "x-gzip":
                # The first member, as zlib-based servers inflate it (trailing bytes are scanned raw too).
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                body = inflater.decompress(body) + inflater.flush()
                if not inflater.eof:
                    return None
            elif coding == "deflate":
                try:
                    body = zlib.decompress(body)
                except zlib.error:  # raw deflate, as some clients send it
                    body = zlib.decompress(body, -zlib.MAX_WBITS)
            elif coding != "identity":
                return None
    except (OSError, EOFError, zlib.error):
        return None
    return body


def _encode_content(body: bytes, encodings: list[str]) -> bytes:
    for coding in encodings:
        if coding == "gzip" or coding == "x-gzip":
            body = gzip.compress(body, mtime=0)
        elif coding == "deflate":
            body = zlib.compress(body)
    return body


def _unchanged(original: object, result: object) -> bool:
    if result is None or result is original:
        return True
    try:
        return bool(result == original)
    except Exception:  # a pathological __eq__: treat as changed and send the result
        return False


def _is_anthropic_request(request: Any) -> bool:
    headers = request.headers
    return "anthropic-version" in headers or str(headers.get("user-agent", "")).lower().startswith("anthropic")


_SDK_LEAK_CLASSES: dict[tuple[type[ContextLeak], type[BaseException]], type[ContextLeak]] = {}
_SDK_LEAK_LOCK = threading.Lock()


def _leak_for(request: Any, leak: ContextLeak) -> ContextLeak:
    """The exception to raise: ``leak``, or for the Anthropic SDK a ContextLeak that is also an AnthropicError."""
    if not _is_anthropic_request(request):
        return leak
    module = sys.modules.get("anthropic")
    base = getattr(module, "AnthropicError", None)
    if not (isinstance(base, type) and issubclass(base, Exception)) or isinstance(leak, base):
        return leak
    with _SDK_LEAK_LOCK:
        cls = _SDK_LEAK_CLASSES.get((type(leak), base))
        if cls is None:
            cls = cast(
                "type[ContextLeak]",
                type(
                    "ContextLeak",
                    (type(leak), base),
                    {
                        "__module__": __name__,
                        "__doc__": "A ContextLeak that the Anthropic SDK propagates instead of retrying.",
                    },
                ),
            )
            _SDK_LEAK_CLASSES[type(leak), base] = cls
    return cls(leak.findings)


class GuardedTransport(_SyncTransportBase, _AsyncTransportBase):
    """An httpx/httpx2 transport that refuses (or redacts) requests carrying protected content.

    ``transport`` is the wrapped transport; by default a plain ``HTTPTransport``
    (sync) or ``AsyncHTTPTransport`` (async) of the request's library, created
    on first use. Closing this transport closes the wrapped ones.
    """

    def __init__(self, guard: RequestChecker | GuardHolder | None, transport: Any = None) -> None:
        self.guard = resolve_guard(guard)
        self._transport = transport
        self._defaults: dict[tuple[str, bool], Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GuardedTransport({self.guard!r}, transport={self._transport!r})"

    # -- the wrapped transport -------------------------------------------------

    def _inner(self, request: Any, *, is_async: bool) -> Any:
        if self._transport is not None:
            return self._transport
        library = type(request).__module__.partition(".")[0]  # "httpx2" or "httpx"
        key = (library, is_async)
        with self._lock:
            inner = self._defaults.get(key)
            if inner is None:
                module = sys.modules[library]
                inner = module.AsyncHTTPTransport() if is_async else module.HTTPTransport()
                self._defaults[key] = inner
        return inner

    # -- the check ---------------------------------------------------------------

    def _checked_body(self, request: Any, body: bytes) -> bytes | None:
        """The body to send instead, or None to send the request as it is. Raises ContextLeak."""
        if not body:
            return _PASS
        headers = request.headers
        encodings = [c.strip().lower() for c in str(headers.get("content-encoding", "")).split(",") if c.strip()]
        raw = _decode_content(body, encodings)
        if raw is None or raw is not body:
            # Fail closed: bytes the guard cannot decode (an unknown or corrupt encoding, a mislabelled body,
            # trailing bytes after a gzip member) are still scanned as they are sent, by the content arm.
            self._check_binary(request, body)
            if raw is None:
                return _PASS
        media, charset = _media_type(str(headers.get("content-type", "")))

        parsed: object = None
        if _is_json_media(media):
            try:
                parsed = json.loads(raw, object_pairs_hook=_pairs_no_duplicates)
            except (ValueError, RecursionError):  # includes _DuplicateKeys and UnicodeDecodeError
                parsed = None
        if isinstance(parsed, dict | list):
            result = self._check(request, parsed)
            if _unchanged(parsed, result):
                return _PASS
            new_raw = json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        else:
            encoding = charset or "utf-8"
            try:
                text = raw.decode(encoding)
            except (UnicodeDecodeError, LookupError):
                self._check_binary(request, raw)
                return _PASS
            result = self._check(request, text)
            if _unchanged(text, result) or not isinstance(result, str):
                return _PASS
            try:
                new_raw = result.encode(encoding)
            except UnicodeEncodeError:  # a marker the charset cannot spell
                new_raw = result.encode(encoding, errors="xmlcharrefreplace")
        return _encode_content(new_raw, encodings)

    def _check(self, request: Any, value: object) -> object:
        try:
            return self.guard.check(value)
        except ContextLeak as leak:
            raised = _leak_for(request, leak)
            if raised is leak:
                raise
            raise raised from None

    def _check_binary(self, request: Any, raw: bytes) -> None:
        """A body that is not text: the content and piece arms (not the size arm), and a hit is refused under
        either policy."""
        findings = [f for f in self.guard.scan(raw) if f.arm != "size"]
        if findings:
            _GUARD_LOGGER.warning(
                event_line(findings, "raise"),  # refused under either policy: bytes cannot be redacted in place
                extra={"event": EVENT, "findings": [f.to_dict() for f in findings], "policy": self.guard.policy},
            )
            guard_stopped(findings)
            raise _leak_for(request, ContextLeak(findings))

    @staticmethod
    def _with_body(request: Any, body: bytes) -> Any:
        headers = request.headers.copy()
        headers.pop("transfer-encoding", None)
        headers["Content-Length"] = str(len(body))
        return type(request)(request.method, request.url, headers=headers, content=body, extensions=request.extensions)

    # -- httpx transport interfaces --------------------------------------------------

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        new_body = self._checked_body(request, request.read())
        if new_body is not None:
            request = self._with_body(request, new_body)
        return cast("httpx2.Response", self._inner(request, is_async=False).handle_request(request))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        new_body = self._checked_body(request, await request.aread())
        if new_body is not None:
            request = self._with_body(request, new_body)
        return cast("httpx2.Response", await self._inner(request, is_async=True).handle_async_request(request))

    def _owned(self, *, is_async: bool) -> list[Any]:
        with self._lock:
            inners = [t for (_, a), t in self._defaults.items() if a == is_async]
            for key in [k for k in self._defaults if k[1] == is_async]:
                del self._defaults[key]
        return inners

    def close(self) -> None:
        for inner in self._owned(is_async=False):
            inner.close()
        if self._transport is not None and callable(getattr(self._transport, "close", None)):
            self._transport.close()

    async def aclose(self) -> None:
        for inner in self._owned(is_async=True):
            await inner.aclose()
        if self._transport is not None and callable(getattr(self._transport, "aclose", None)):
            await self._transport.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


AsyncGuardedTransport = GuardedTransport
"""The same class: one :class:`GuardedTransport` implements the sync and the async transport interface."""

# ---------------------------------------------------------------------------
# Deep redaction of Python values (log arguments and extras)
# ---------------------------------------------------------------------------

_MAX_DEPTH: Final = 32


class _Redactor:
    """Redacts strings, bytes and plain containers through ``guard.redact_text``; counts what it replaced."""

    def __init__(self, guard: Redactor) -> None:
        self.guard = guard
        self.found = 0

    def text(self, value: str) -> str:
        redacted, findings = self.guard.redact_text(value)
        if findings:
            self.found += len(findings)
            return redacted
        return value

    def value(self, value: object, depth: int = 0) -> object:
        """``value`` with protected spans replaced; the same object when nothing was found."""
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bytes | bytearray):
            # Bytes that are not UTF-8 are scanned with U+FFFD in their place; only a redacted value is re-encoded.
            text = bytes(value).decode("utf-8", errors="replace")
            redacted = self.text(text)
            return value if redacted is text else redacted.encode("utf-8")
        if depth >= _MAX_DEPTH:
            return self._other(value)
        before = self.found
        kind = type(value)
        if kind is dict:
            items = cast("dict[object, object]", value)
            out_dict = {self.value(k, depth + 1): self.value(v, depth + 1) for k, v in items.items()}
            return out_dict if self.found != before else value
        if kind is list or kind is tuple or kind is set or kind is frozenset:
            elements = [self.value(v, depth + 1) for v in cast("Iterable[object]", value)]
            return cast("Callable[[list[object]], object]", kind)(elements) if self.found != before else value
        return self._other(value)

    def _other(self, value: object) -> object:
        """Any other object is shown through ``str``: keep it unless its text carries protected content."""
        try:
            text = str(value)
        except Exception:
            return value
        redacted = self.text(text)
        return value if redacted is text else redacted


# ---------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------

_STANDARD_RECORD_ATTRS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_EXCEPTION_FORMATTER: Final = logging.Formatter()
_WITHHELD: Final = "[refvault: log record withheld: redaction failed]"


class LogRedactor(logging.Filter):
    """A logging filter that replaces protected spans in a record by ``[refvault:art_…]``.

    Redacts, in place: the formatted message (``msg % args``; when it carries
    a span, ``msg`` becomes the redacted message and ``args`` None), the
    arguments themselves (including a dict argument and nested containers),
    every ``extra`` attribute (strings, bytes, containers, and objects whose
    ``str`` carries a span), the exception text (when the formatted traceback
    carries a span, ``exc_text`` becomes the redacted traceback and
    ``exc_info`` None, so no handler formats the original exception again) and
    ``stack_info``. Always keeps the record (returns True).

    Attach it to handlers: ``handler.addFilter(LogRedactor(guard))``. A filter
    on a logger only sees records logged on that very logger, not those
    propagating from its children. If redaction itself fails, the record is
    emitted with its message replaced by ``[refvault: log record withheld:
    redaction failed]`` and without its arguments, extras, exception and stack.
    A formatter that renders more of an exception than its standard traceback
    (local variables, say) may show what this filter did not see.
    """

    def __init__(self, guard: Redactor | GuardHolder | None, name: str = "") -> None:
        super().__init__(name)
        self.guard = resolve_redactor(guard)
        self._local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if not super().filter(record):
            return False
        if getattr(self._local, "active", False):  # a record logged while we redact (the guard's own events)
            return True
        self._local.active = True
        try:
            self._redact(record)
        except Exception:  # fail closed: keep that something was logged, not what
            try:
                _withhold(record)
            except Exception:
                return False
        finally:
            self._local.active = False
        return True

    def _redact(self, record: logging.LogRecord) -> None:
        redactor = _Redactor(self.guard)
        try:
            message: str | None = record.getMessage()
        except Exception:  # a broken format: redact the parts; logging reports the error itself
            message = None
        if message is not None:
            redacted_message = redactor.text(message)
            if redacted_message is not message:
                record.msg = redacted_message
                record.args = None
            elif record.args:  # e.g. a dict argument whose other keys the format does not show
                record.args = cast("Any", redactor.value(record.args))
        else:
            record.msg = redactor.value(record.msg)
            if record.args:
                record.args = cast("Any", redactor.value(record.args))

        if record.exc_info and record.exc_info[0] is not None:
            text = _EXCEPTION_FORMATTER.formatException(record.exc_info)
            redacted = redactor.text(text)
            if redacted is not text:
                record.exc_info = None
                record.exc_text = redacted
            elif record.exc_text:
                record.exc_text = redactor.text(record.exc_text)
        elif record.exc_text:
            record.exc_text = redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.text(record.stack_info)
        cached = record.__dict__.get("message")
        if isinstance(cached, str):
            record.message = redactor.text(cached)

        for key, value in list(record.__dict__.items()):
            if key in _STANDARD_RECORD_ATTRS:
                continue
            new = redactor.value(value)
            if new is not value:
                record.__dict__[key] = new


def _withhold(record: logging.LogRecord) -> None:
    record.msg = _WITHHELD
    record.args = None
    record.exc_info = None
    record.exc_text = None
    record.stack_info = None
    record.__dict__.pop("message", None)
    for key in [k for k in record.__dict__ if k not in _STANDARD_RECORD_ATTRS]:
        del record.__dict__[key]


# ---------------------------------------------------------------------------
# OpenTelemetry
# ---------------------------------------------------------------------------

_OTEL_CLASSES: dict[type, type] = {}
_OTEL_LOCK = threading.Lock()


def _with_otel_base(cls: type, base_name: str) -> type:
    """``cls`` mixed with the real OpenTelemetry base (imported now), cached per class."""
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

    base: type = SpanProcessor if base_name == "SpanProcessor" else SpanExporter
    if issubclass(cls, base):
        return cls
    with _OTEL_LOCK:
        mixed = _OTEL_CLASSES.get(cls)
        if mixed is None:
            mixed = type(cls.__name__, (cls, base), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
            _OTEL_CLASSES[cls] = mixed
    return mixed


def _redact_attributes(redactor: _Redactor, attributes: Mapping[str, Any] | None, dropped: int) -> Any:
    """A redacted copy of ``attributes`` (a BoundedAttributes keeping the drop count), or None if clean."""
    if not attributes:
        return None
    before = redactor.found
    cleaned: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, str):
            cleaned[key] = redactor.text(value)
        elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
            cleaned[key] = tuple(redactor.text(v) if isinstance(v, str) else v for v in value)
        else:
            cleaned[key] = value
    if redactor.found == before:
        return None
    return _bounded(cleaned, dropped)


def _bounded(attributes: Mapping[str, Any] | None, dropped: int) -> Any:
    from opentelemetry.attributes import BoundedAttributes

    bounded = BoundedAttributes(maxlen=None, attributes=attributes, immutable=True)
    bounded.dropped = dropped
    return bounded


def redact_span(guard: Redactor, span: ReadableSpan) -> ReadableSpan:
    """``span`` with protected spans replaced in its name, attributes, events, links and status description.

    Returns the same object when nothing was found, else a new ``ReadableSpan``
    (an ended span is immutable) carrying the same identity, times, kind,
    resource, scope and drop counts. The resource is not redacted: it is set
    once per provider, not by the traced code.
    """
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util import BoundedList
    from opentelemetry.trace import Link, Status

    redactor = _Redactor(guard)
    name = redactor.text(span.name)
    attributes = _redact_attributes(redactor, span.attributes, span.dropped_attributes)

    before = redactor.found
    events: list[Event] = []
    for event in span.events:
        event_name = redactor.text(event.name)
        event_attributes = _redact_attributes(redactor, event.attributes, event.dropped_attributes)
        if event_name is event.name and event_attributes is None:
            events.append(event)
        else:
            kept = event.attributes if event_attributes is None else event_attributes
            events.append(Event(event_name, kept, event.timestamp))
    events_changed = redactor.found != before

    before = redactor.found
    links: list[Link] = []
    for link in span.links:
        link_attributes = _redact_attributes(redactor, link.attributes, link.dropped_attributes)
        links.append(link if link_attributes is None else Link(link.context, link_attributes))
    links_changed = redactor.found != before

    status = span.status
    if status.description:
        description = redactor.text(status.description)
        if description is not status.description:
            status = Status(status.status_code, description)

    if not redactor.found:
        return span

    if attributes is None:  # unchanged, but the copy must keep the drop count
        attributes = _bounded(span.attributes, span.dropped_attributes)
    event_list: Sequence[Event] = span.events
    if events_changed:
        bounded_events = BoundedList.from_seq(None, events)
        bounded_events.dropped = span.dropped_events
        event_list = bounded_events
    link_list: Sequence[Link] = span.links
    if links_changed:
        bounded_links = BoundedList.from_seq(None, links)
        bounded_links.dropped = span.dropped_links
        link_list = bounded_links
    return ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=event_list,
        links=link_list,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class GuardSpanProcessor(_SpanProcessorBase):
    """A span processor that hands *redacted* spans to the processors it wraps.

    An ended span is immutable (the SDK freezes attributes and refuses
    ``set_attribute`` before any processor's ``on_end``), so this processor
    does not edit the span: it builds a redacted copy (:func:`redact_span`) and
    forwards it to the wrapped processors, which export it::

        provider.add_span_processor(GuardSpanProcessor(guard, BatchSpanProcessor(exporter)))

    Register exporting processors only through it: a processor added to the
    provider directly still receives the original span. The wrapped
    processors' ``on_start`` sees the live span, as the SDK passes it. If
    redaction fails the span is not forwarded (fail closed).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        return cast("Self", object.__new__(_with_otel_base(cls, "SpanProcessor")))

    def __init__(self, guard: Redactor | GuardHolder | None, *processors: _SpanProcessorBase) -> None:
        if not processors:
            raise InvalidType("GuardSpanProcessor wraps at least one span processor, e.g. BatchSpanProcessor(exporter)")
        self.guard = resolve_redactor(guard)
        self.processors: tuple[_SpanProcessorBase, ...] = processors

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in self.processors:
            processor.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        for processor in self.processors:
            hook = getattr(processor, "_on_ending", None)
            if hook is not None:
                hook(span)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            redacted = redact_span(self.guard, span)
        except Exception:  # fail closed, and never into the code that ended the span
            _GUARD_LOGGER.warning("span withheld: redaction failed", exc_info=False)
            return
        for processor in self.processors:
            processor.on_end(redacted)

    def shutdown(self) -> None:
        for processor in self.processors:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all([processor.force_flush(timeout_millis) for processor in self.processors])


class GuardedSpanExporter(_SpanExporterBase):
    """A span exporter wrapper that exports redacted copies of the spans (:func:`redact_span`).

    For pipelines configured by exporter rather than processor::

        provider.add_span_processor(BatchSpanProcessor(GuardedSpanExporter(guard, OTLPSpanExporter())))
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        return cast("Self", object.__new__(_with_otel_base(cls, "SpanExporter")))

    def __init__(self, guard: Redactor | GuardHolder | None, exporter: _SpanExporterBase) -> None:
        self.guard = resolve_redactor(guard)
        self.exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            redacted = [redact_span(self.guard, span) for span in spans]
        except Exception:  # fail closed: nothing of this batch is exported
            from opentelemetry.sdk.trace.export import SpanExportResult

            _GUARD_LOGGER.warning("spans withheld: redaction failed", exc_info=False)
            return SpanExportResult.FAILURE
        return self.exporter.export(redacted)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)
