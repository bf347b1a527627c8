"""OpenTelemetry traces of refvault's operations, through the OpenTelemetry API only.

refvault emits spans whenever the application has configured a tracer provider (``opentelemetry.trace.
set_tracer_provider``, or the ``opentelemetry-instrument`` agent); there is no refvault flag. With none
configured, or without ``opentelemetry-api`` installed, every call here is a no-op that imports nothing:
:func:`span` checks ``sys.modules`` for ``opentelemetry.trace`` first (an application that configured a
provider has imported it), then whether the global provider is the API's default proxy.

Invariants (tested in ``tests/test_tracing.py``):

* **Never content.** Span names are fixed words, route templates and registered tool names; attributes
  are ids, counts, booleans and error class names (:data:`ATTRIBUTES` lists every key refvault sets). No
  argument value, no byte of content, no filename, no exception message reaches a span: an error sets the
  span's status to ERROR without a description and ``error.type`` / ``refvault.outcome`` to the error's
  class name; exceptions are not recorded as events.
* Every audited vault operation is a span (:func:`audited`), so are the read engines (:func:`selection`),
  guard checks and each HTTP request ``refvault serve`` answers (:mod:`refvault.server.traced`).
* **Never in the way.** A failure inside the OpenTelemetry API or SDK while starting, annotating or
  ending a span is swallowed (logged at DEBUG); the operation runs and answers exactly as without tracing.
* Tool calls follow the GenAI semantic conventions: an ``execute_tool {name}`` span with
  ``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``.
* W3C trace context crosses process boundaries: :func:`inject` adds ``traceparent`` (and ``tracestate``)
  to outgoing headers; :func:`extracted` makes an incoming request's context current.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final, Literal, TypeVar

from refvault.ids import is_artifact_id

__all__ = [
    "ATTRIBUTES",
    "EXECUTE_TOOL",
    "SpanFacts",
    "audited",
    "enabled",
    "extracted",
    "inject",
    "selection",
    "selection_facts",
    "selection_name",
    "span",
    "traced_id",
]

logger = logging.getLogger("refvault.tracing")

TRACER_NAME: Final = "refvault"
EXECUTE_TOOL: Final = "execute_tool"

ARTIFACT_ID: Final = "refvault.artifact.id"
BYTES: Final = "refvault.bytes"
RECORDS: Final = "refvault.records"
VERIFIED: Final = "refvault.verified"
OUTCOME: Final = "refvault.outcome"
FINDINGS: Final = "refvault.guard.findings"
ERROR_TYPE: Final = "error.type"

ATTRIBUTES: Final = frozenset(
    {
        ARTIFACT_ID,
        BYTES,
        RECORDS,
        VERIFIED,
        OUTCOME,
        FINDINGS,
        ERROR_TYPE,
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "http.request.method",
        "http.route",
        "http.response.status_code",
    }
)
"""Every attribute key refvault sets on a span (the values: ids, counts, booleans, class names, route templates)."""

Facts = dict[str, Any]
"""An audited vault operation's facts (ids, counts, hashes): :func:`audited` puts the ids and counts on its span."""

Kind = Literal["internal", "client", "server"]
Attribute = str | bool | int


class SpanFacts:
    """What one operation tells its span: :meth:`set` an attribute of :data:`ATTRIBUTES`, :meth:`rename` it.

    A no-op when tracing is off (``recording`` is False), so callers may compute a fact only ``if facts.recording``.
    """

    __slots__ = ("_outcome", "_span")

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span
        self._outcome = False

    @property
    def recording(self) -> bool:
        """True when a real span records what is set."""
        return self._span is not None

    def set(self, key: str, value: Attribute | None) -> None:
        """Set attribute ``key`` (one of :data:`ATTRIBUTES`) to ``value``; None sets nothing."""
        if self._span is None or value is None:
            return
        try:
            self._span.set_attribute(key, value)
            self._outcome = self._outcome or key == OUTCOME
        except Exception:  # tracing never breaks an operation
            logger.debug("could not set a span attribute", exc_info=True)

    def fail(self, error_type: str) -> None:
        """Mark the operation failed with ``error_type`` (an error class name or a refusal's kind): ``error.type``,
        ``refvault.outcome`` and status ERROR, without a description."""
        if self._span is None:
            return
        self.set(ERROR_TYPE, error_type)
        self.set(OUTCOME, error_type)
        try:
            from opentelemetry.trace import StatusCode

            self._span.set_status(StatusCode.ERROR)
        except Exception:
            logger.debug("could not set a span's status", exc_info=True)

    def rename(self, name: str) -> None:
        """Rename the span (a fixed word or a route template: never content)."""
        if self._span is None:
            return
        try:
            self._span.update_name(name)
        except Exception:
            logger.debug("could not rename a span", exc_info=True)


_OFF: Final = SpanFacts()
_cached: tuple[object, Any] | None = None  # (the provider, its tracer)


def _tracer() -> Any:
    """The refvault tracer of the configured provider; None when none is configured (no import happens)."""
    global _cached
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:  # nobody imported the API: no provider can have been configured in this process
        return None
    try:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        cached = _cached
        if cached is not None and cached[0] is provider:
            return cached[1]
        tracer = provider.get_tracer(TRACER_NAME, _version())
        _cached = (provider, tracer)
        return tracer
    except Exception:
        logger.debug("no tracer", exc_info=True)
        return None


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("refvault")
    except PackageNotFoundError:
        return None


def enabled() -> bool:
    """True when an application-configured tracer provider will receive refvault's spans."""
    return _tracer() is not None


@contextmanager
def span(
    name: str, attributes: Mapping[str, Attribute | None] | None = None, *, kind: Kind = "internal"
) -> Iterator[SpanFacts]:
    """Run the block in a span ``name`` (current while it runs), with ``attributes`` (keys: :data:`ATTRIBUTES`;
    None values are left out).

    The block's exception propagates unchanged; the span records its class name only (``error.type``,
    ``refvault.outcome``, status ERROR without a description). A block that ends normally has outcome
    ``"ok"`` unless it set one.
    """
    tracer = _tracer()
    if tracer is None:
        yield _OFF
        return
    started = _start(tracer, name, kind, attributes or {})
    if started is None:
        yield _OFF
        return
    otel_span, scope = started
    facts = SpanFacts(otel_span)
    outcome = "ok"
    try:
        yield facts
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        _end(otel_span, scope, outcome, facts._outcome)


def _start(tracer: Any, name: str, kind: Kind, attributes: Mapping[str, Attribute | None]) -> tuple[Any, Any] | None:
    try:
        from opentelemetry import trace

        kinds = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT, "server": trace.SpanKind.SERVER}
        given = {key: value for key, value in attributes.items() if value is not None}
        otel_span = tracer.start_span(name, kind=kinds[kind], attributes=given)
        scope = trace.use_span(otel_span, end_on_exit=False, record_exception=False, set_status_on_exception=False)
        scope.__enter__()
        return otel_span, scope
    except Exception:
        logger.debug("could not start a span", exc_info=True)
        return None


def _end(otel_span: Any, scope: Any, outcome: str, outcome_set: bool) -> None:
    try:
        from opentelemetry.trace import StatusCode

        if outcome != "ok":
            otel_span.set_attribute(ERROR_TYPE, outcome)
            otel_span.set_attribute(OUTCOME, outcome)
            otel_span.set_status(StatusCode.ERROR)
        elif not outcome_set:
            otel_span.set_attribute(OUTCOME, "ok")
    except Exception:
        logger.debug("could not annotate a span", exc_info=True)
    try:
        scope.__exit__(None, None, None)
    except Exception:
        logger.debug("could not leave a span", exc_info=True)
    try:
        otel_span.end()
    except Exception:
        logger.debug("could not end a span", exc_info=True)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current trace context (``traceparent``, ``tracestate``: the application's propagators) to
    ``headers``; nothing when tracing is off or no span is current."""
    if _tracer() is None:
        return
    try:
        from opentelemetry import propagate

        propagate.inject(headers)
    except Exception:
        logger.debug("could not inject trace context", exc_info=True)


@contextmanager
def extracted(headers: Mapping[str, str]) -> Iterator[None]:
    """Make the trace context ``headers`` carry (W3C ``traceparent``) current while the block runs; without
    one, or with tracing off, the block runs in the context it had."""
    if "traceparent" not in headers or _tracer() is None:
        yield
        return
    token = None
    try:
        from opentelemetry import context, propagate

        token = context.attach(propagate.extract(headers))
    except Exception:
        logger.debug("could not extract trace context", exc_info=True)
    try:
        yield
    finally:
        if token is not None:
            try:
                from opentelemetry import context

                context.detach(token)
            except Exception:
                logger.debug("could not detach trace context", exc_info=True)


def traced_id(artifact_id: object) -> str | None:
    """``artifact_id`` when it is a well-formed artifact id, else None: a malformed "id" could be any text."""
    return artifact_id if isinstance(artifact_id, str) and is_artifact_id(artifact_id) else None


_SELECTIONS: Final = {
    "WindowRequest": "refvault.window",
    "GrepRequest": "refvault.grep",
    "QueryRequest": "refvault.query",
    "RecordSetRequest": "refvault.records",
}


R = TypeVar("R")


def selection(name: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate a selective read's engine (``run_window(vault, scope, artifact_id, ...)``): each run is a span
    ``name`` with ``refvault.artifact.id`` and the counts of its answer (:func:`selection_facts`)."""

    def decorate(engine: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(engine)
        def traced(vault: object, scope: object, artifact_id: object, *args: Any, **kwargs: Any) -> R:
            if _tracer() is None:
                return engine(vault, scope, artifact_id, *args, **kwargs)
            with span(name, {ARTIFACT_ID: traced_id(artifact_id)}) as facts:
                answer = engine(vault, scope, artifact_id, *args, **kwargs)
                selection_facts(facts, answer)
            return answer

        return traced

    return decorate


def selection_name(request: object) -> str:
    """The span name of a selective read (:class:`refvault.operations.Selection`): ``refvault.window``,
    ``refvault.grep``, ``refvault.query`` or ``refvault.records``."""
    return _SELECTIONS.get(type(request).__name__, "refvault.read_selection")


def selection_facts(facts: SpanFacts, answer: object) -> None:
    """Counts of a selective read's ``answer`` on its span: ``refvault.records`` (records, matches or lines
    returned), ``refvault.bytes`` (a window's text, UTF-8). Never the answer itself."""
    if not facts.recording:
        return
    count = getattr(answer, "count", None)  # a RecordSet
    if not isinstance(answer, Mapping):
        facts.set(RECORDS, _count(count))
        return
    records = answer.get("records")
    if isinstance(records, list):
        facts.set(RECORDS, len(records))
    elif isinstance(answer.get("returned"), int) and not isinstance(answer.get("returned"), bool):
        facts.set(RECORDS, answer["returned"])
    text = answer.get("text")
    if isinstance(text, str):
        facts.set(BYTES, len(text.encode("utf-8", "surrogatepass")))


UNTRACED: Final = "-"
"""The ``op`` of an audited vault operation that is no span of its own (an audit entry for a read an engine
served, inside that read's span)."""


def audited(
    operation: Callable[..., Iterator[Facts]],
) -> Callable[..., AbstractContextManager[Facts]]:
    """:func:`contextlib.contextmanager` for the vault's audited operations (``Vault._audited(action, scope,
    artifact_id=None, op="")``), each run also in a span: ``op``, else ``refvault.<action>`` (none for
    :data:`UNTRACED`).

    The span has ``refvault.artifact.id`` (a well-formed id given or found) and, once the operation ends
    normally, what its audit facts count: ``refvault.bytes`` (the byte range read, or the size captured)
    and ``refvault.records``; ``refvault.verified`` for a byte read (its bytes were checked before they
    were returned). The facts' other values (hashes, selections, purposes) are never put on a span.
    """
    managed = contextmanager(operation)

    @contextmanager
    @functools.wraps(operation)
    def traced(owner: object, action: str, scope: object, artifact_id: object = None, op: str = "") -> Iterator[Facts]:
        if op == UNTRACED or _tracer() is None:
            with managed(owner, action, scope, artifact_id, op) as facts:
                yield facts
            return
        name = op or f"refvault.{action}"
        with (
            span(name, {ARTIFACT_ID: traced_id(artifact_id)}) as told,
            managed(owner, action, scope, artifact_id, op) as facts,
        ):
            yield facts
            _audit_facts(told, facts, verified=name == "refvault.read_range")

    return traced


def _audit_facts(told: SpanFacts, facts: Mapping[str, Any], *, verified: bool) -> None:
    if not told.recording:
        return
    told.set(ARTIFACT_ID, traced_id(facts.get("artifact_id")))
    byte_range = facts.get("byte_range")
    if isinstance(byte_range, tuple) and len(byte_range) == 2 and all(isinstance(n, int) for n in byte_range):
        told.set(BYTES, byte_range[1] - byte_range[0])
        if verified:
            told.set(VERIFIED, True)
    else:
        told.set(BYTES, _count(facts.get("size")) or _count(facts.get("bytes")))
    told.set(RECORDS, _count(facts.get("records")))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
