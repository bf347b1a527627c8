"""A planted canary passed by Ref never leaves the tool, and a Ref projects as its id through every door.

The canary is unique random bytes stored as a *sealed* artifact. A tool reads it
and returns only its length and SHA-256 (which proves it really read it); then
the canary, any 32-byte slice of it and its hex and base64 forms are looked for
everywhere the dispatch leaves a trace (issue 3, "Tests").
"""

import asyncio
import base64
import copy
import dataclasses
import gc
import hashlib
import io
import json
import logging
import pickle
import pprint
import secrets
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from refvault import AuditRecord, Descriptor, Observation, Ref, Scope, Toolbox, ToolEvent, Vault
from refvault.errors import UnresolvedRef

SCOPE = Scope("acme", "ana", "s1")
FLAVORS = ("openai", "anthropic", "gemini", "mcp")
MODES = ("call", "call_sync")


# -- the canary ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Planted:
    canary: bytes
    descriptor: Descriptor
    period: int

    @property
    def artifact_id(self) -> str:
        return self.descriptor.artifact_id

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canary).hexdigest()

    def forms(self) -> Iterator[bytes]:
        """Every 32-byte slice, in raw, hex and base64 form at every alignment (the canary is periodic)."""
        for start in range(self.period):
            window = self.canary[start : start + 32]
            yield window
            yield window.hex().encode()
            yield window.hex().upper().encode()
            chunk = self.canary[start : start + 48]
            yield base64.b64encode(chunk)
            yield base64.urlsafe_b64encode(chunk)

    def assert_absent(self, haystack: str | bytes, where: str) -> None:
        data = haystack.encode("utf-8", "surrogatepass") if isinstance(haystack, str) else bytes(haystack)
        leaked = sum(form in data for form in self.forms())
        assert leaked == 0, f"{leaked} forms of the canary leaked into {where}"


@pytest.fixture
def planted(vault: Vault) -> Planted:
    unit = b"CANARY-" + secrets.token_hex(24).encode()
    canary = unit * (4096 // len(unit) + 1)
    descriptor = vault.put(SCOPE, canary, media_type="text/plain", disclosure="sealed")
    assert vault.read_bytes(SCOPE, descriptor.artifact_id) == canary
    return Planted(canary, descriptor, len(unit))


def test_the_canary_checker_can_fail(vault: Vault, planted: Planted) -> None:
    slice_ = planted.canary[100:132]
    for leak in [
        planted.canary.decode(),
        "prefix " + slice_.decode() + " suffix",
        json.dumps({"hex": planted.canary[7:200].hex()}),
        "data:text/plain;base64," + base64.b64encode(b"x" + planted.canary).decode(),
        repr(planted.canary[5:60]),
    ]:
        with pytest.raises(AssertionError, match="leaked"):
            planted.assert_absent(leak, "a deliberate leak")
    planted.assert_absent(planted.artifact_id + " " + planted.sha256, "ids and digests")


# -- harness ---------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """A formatter that dumps every attribute of the record, args and extras included."""

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(record.__dict__)
        fields["formatted_message"] = record.getMessage()
        if record.exc_info:
            fields["formatted_exc"] = self.formatException(record.exc_info)
        return json.dumps(fields, default=repr, sort_keys=True)


class Traces:
    """Everything a dispatch leaves behind outside the tool."""

    def __init__(self, vault: Vault, box: Toolbox) -> None:
        self.events: list[ToolEvent] = []
        self.audit: list[AuditRecord] = []
        box.add_sink(self.events.append)
        vault.add_audit_sink(self.audit.append)
        self.plain = io.StringIO()
        self.structured = io.StringIO()
        self.handlers = [logging.StreamHandler(self.plain), logging.StreamHandler(self.structured)]
        self.handlers[0].setFormatter(
            logging.Formatter(
                "%(asctime)s %(name)s %(levelname)s %(pathname)s:%(lineno)d %(funcName)s "
                "%(threadName)s %(process)d %(module)s %(message)s args=%(args)r"
            )
        )
        self.handlers[1].setFormatter(JsonFormatter())

    def __enter__(self) -> "Traces":
        root = logging.getLogger()
        for handler in self.handlers:
            handler.setLevel(logging.DEBUG)
            root.addHandler(handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for handler in self.handlers:
            logging.getLogger().removeHandler(handler)


def dispatch(box: Toolbox, mode: str, name: str, arguments: str, **kw: Any) -> Observation:
    if mode == "call":
        return asyncio.run(box.call(name, arguments, scope=SCOPE, **kw))
    return box.call_sync(name, arguments, scope=SCOPE, **kw)


def canary_box(vault: Vault, captured: dict[str, Any]) -> Toolbox:
    box = Toolbox(vault)
    log = logging.getLogger("refvault.tests.tool")

    def fingerprint_of(doc: Ref, label: str) -> dict[str, Any]:
        body = doc.read()
        log.debug("fingerprinting %s (%r) label=%s", doc, doc, label, extra={"ref": doc})
        captured["pickled_args"] = pickle.dumps({"doc": doc, "label": label})
        return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    @box.tool
    def fingerprint(doc: Ref, label: str = "") -> dict[str, Any]:
        """Report the length and SHA-256 of a document."""
        return fingerprint_of(doc, label)

    @box.tool
    async def fingerprint_async(doc: Ref, label: str = "") -> dict[str, Any]:
        """Report the length and SHA-256 of a document, asynchronously."""
        await asyncio.sleep(0)
        return fingerprint_of(doc, label)

    @box.tool
    def leak_in_exception(doc: Ref, style: str) -> str:
        """Read a document, then fail with its content in the exception."""
        body = doc.read()
        captured["read_length"] = len(body)
        if style == "message":
            raise ValueError(body.decode())
        if style == "chained":
            raise RuntimeError("wrapped") from ValueError(body)
        error = LookupError("noted")
        error.add_note(body.decode())
        raise error

    return box


def assert_no_trace_of_canary(
    planted: Planted, box: Toolbox, traces: Traces, obs: Observation, run_id: str, captured_io: str
) -> None:
    planted.assert_absent(obs.content, "the observation content")
    planted.assert_absent(repr(obs), "the observation repr")
    planted.assert_absent(json.dumps([dict(a) for a in obs.artifacts]), "the observation artifacts")
    planted.assert_absent(pickle.dumps(obs), "a pickled observation")
    trajectory = [e.to_dict() for e in box.trajectory(run_id)]
    assert trajectory, "the run left no trajectory"
    planted.assert_absent(json.dumps(trajectory), "the trajectory")
    planted.assert_absent(pickle.dumps(box.trajectory(run_id)), "a pickled trajectory")
    assert traces.events
    for event in traces.events:
        planted.assert_absent(repr(event), "an event")
        planted.assert_absent(json.dumps(event.to_dict()), "an event as JSON")
    assert traces.audit
    for record in traces.audit:
        planted.assert_absent(repr(record), "an audit record")
    planted.assert_absent(traces.plain.getvalue(), "plain log output")
    planted.assert_absent(traces.structured.getvalue(), "structured log output")
    for flavor in FLAVORS:
        planted.assert_absent(json.dumps(box.schemas(flavor)), f"the {flavor} schemas")  # type: ignore[arg-type]
    planted.assert_absent(json.dumps(box.schemas("openai", strict=True)), "the strict openai schemas")
    planted.assert_absent(captured_io, "stdout/stderr")


# -- the canary never leaves -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["fingerprint", "fingerprint_async"])
def test_a_sealed_canary_read_by_ref_leaves_no_trace(
    vault: Vault,
    planted: Planted,
    mode: str,
    tool: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    captured: dict[str, Any] = {}
    box = canary_box(vault, captured)
    caplog.set_level(logging.DEBUG)
    with Traces(vault, box) as traces:
        obs = dispatch(
            box, mode, tool, json.dumps({"doc": planted.artifact_id, "label": "q3"}), run_id="run_c", tool_call_id="c1"
        )
    out, err = capfd.readouterr()

    # non-vacuity: the tool really read the canary, the sinks really saw the dispatch
    assert not obs.is_error
    assert json.loads(obs.content) == {"length": len(planted.canary), "sha256": planted.sha256}
    assert ("read", planted.artifact_id, "sha256:" + planted.sha256) in {
        (r.action, r.artifact_id, r.content_hash) for r in traces.audit
    }
    assert [e.kind for e in traces.events] == ["tool_started", "tool_finished"]
    assert traces.events[0].refs == (planted.artifact_id,)
    assert f"fingerprinting {planted.artifact_id} (Ref('{planted.artifact_id}'))" in caplog.text
    assert planted.artifact_id in traces.plain.getvalue()
    assert planted.artifact_id in traces.structured.getvalue()
    assert planted.artifact_id.encode() in captured["pickled_args"]

    planted.assert_absent(caplog.text, "caplog at DEBUG")
    for record in caplog.records:
        planted.assert_absent(record.getMessage(), "a log record message")
        planted.assert_absent(repr(record.__dict__), "a log record's attributes")
    planted.assert_absent(captured["pickled_args"], "the pickled arguments")
    assert_no_trace_of_canary(planted, box, traces, obs, "run_c", out + err)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("style", ["message", "chained", "note"])
def test_a_tool_that_raises_the_canary_does_not_echo_it(
    vault: Vault,
    planted: Planted,
    mode: str,
    style: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    captured: dict[str, Any] = {}
    box = canary_box(vault, captured)
    caplog.set_level(logging.DEBUG)
    with Traces(vault, box) as traces:
        obs = dispatch(
            box,
            mode,
            "leak_in_exception",
            json.dumps({"doc": planted.artifact_id, "style": style}),
            run_id="run_x",
            tool_call_id="x1",
        )
    out, err = capfd.readouterr()

    kind = {"message": "ValueError", "chained": "RuntimeError", "note": "LookupError"}[style]
    assert captured["read_length"] == len(planted.canary)  # it read the canary before raising
    assert obs == Observation("x1", f"error: the tool raised {kind}", is_error=True)
    assert [(e.kind, e.error_type) for e in traces.events] == [("tool_started", None), ("tool_failed", kind)]
    planted.assert_absent(caplog.text, "caplog at DEBUG")
    assert_no_trace_of_canary(planted, box, traces, obs, "run_x", out + err)


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_event_sink_does_not_carry_the_tools_exception(vault: Vault, planted: Planted, mode: str) -> None:
    box = canary_box(vault, {})

    def sink(event: ToolEvent) -> None:
        if event.kind == "tool_failed":
            raise RuntimeError("event store unavailable")

    box.add_sink(sink)
    arguments = json.dumps({"doc": planted.artifact_id, "style": "message"})
    text = ""
    try:
        dispatch(box, mode, "leak_in_exception", arguments, run_id="run_s")
    except RuntimeError as exc:  # the sink's failure may propagate (events fail closed) ...
        text = "".join(traceback.format_exception(exc))
        assert "event store unavailable" in text
    planted.assert_absent(text, "the traceback of a failing sink")  # ... but not with the canary chained to it


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_log_handler_does_not_print_the_tools_exception(
    vault: Vault, planted: Planted, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                raise OSError("log pipe closed")
            except OSError:
                self.handleError(record)  # what every stdlib handler does: prints the exception chain to stderr

    handler = Broken(logging.DEBUG)
    logger = logging.getLogger("refvault")
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        box = canary_box(vault, {})
        arguments = json.dumps({"doc": planted.artifact_id, "style": "message"})
        obs = dispatch(box, mode, "leak_in_exception", arguments, run_id="run_h")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    err = capfd.readouterr().err
    assert obs.content == "error: the tool raised ValueError"
    assert "log pipe closed" in err  # non-vacuity: the handler did fail and report
    planted.assert_absent(err, "stderr after a log handler failed")


def test_the_ref_after_its_call_is_an_id_and_its_error_names_only_that(vault: Vault, planted: Planted) -> None:
    box = Toolbox(vault)
    kept: list[Ref] = []

    @box.tool
    def keep(doc: Ref) -> int:
        kept.append(doc)
        return len(doc.read())

    assert box.call_sync("keep", json.dumps({"doc": planted.artifact_id}), scope=SCOPE).content == str(
        len(planted.canary)
    )
    with pytest.raises(UnresolvedRef) as caught:
        kept[0].read()
    text = "".join(traceback.format_exception(caught.value))
    assert planted.artifact_id in text
    planted.assert_absent(text, "the UnresolvedRef traceback")
    planted.assert_absent(pickle.dumps(kept), "a pickled Ref after the call")


# -- the doors -------------------------------------------------------------------------


class Holder(BaseModel):
    doc: Ref
    docs: list[Ref] = []


@dataclasses.dataclass
class Carrier:
    doc: Ref
    docs: list[Ref]


def logged(ref: Ref, formatter: logging.Formatter) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.setLevel(1)
    logger = logging.getLogger("refvault.tests.doors")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(1)
    try:
        for level in (5, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL):
            logger.log(level, "doc %s %r %-60s|", ref, ref, ref, extra={"ref": ref, "refs": [ref]})
        logger.info("doc %(doc)s %(doc)r", {"doc": ref}, extra={"ref": ref})
        logger.warning(ref, extra={"ref": ref})  # a Ref as the message itself
        try:
            raise ValueError(f"cannot use {ref}")
        except ValueError:
            logger.exception("failed on %s", ref, extra={"ref": ref})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return stream.getvalue()


def raised(ref: Ref) -> str:
    def inner(doc: Ref) -> None:
        raise KeyError(f"no section in {doc!r}")

    try:
        try:
            inner(ref)
        except KeyError as exc:
            raise RuntimeError(f"failed for {ref}") from exc
    except RuntimeError as exc:
        plain = "".join(traceback.format_exception(exc))
        with_locals = "".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format())
        return plain + with_locals
    raise AssertionError("unreachable")


DOORS: dict[str, Callable[[Ref], str | bytes]] = {
    "str": str,
    "repr": repr,
    "ascii": ascii,
    "format": lambda r: format(r),
    "f-string": lambda r: f"{r} {r!r} {r!s} {r!a}",
    "format-specs": lambda r: f"{r:>80}|{r:<72}|{r:^90}|{r!s:*>60}|{r!r:>70}|{r:.30}",
    "str.format": lambda r: "{0} {0!r} {0.artifact_id} {0:>50} {d[k]}".format(r, d={"k": r}),
    "percent": lambda r: "%s %r %a %-60s|%60s|%.30s" % (r, r, r, r, r, r),  # noqa: UP031 - under test
    "percent-mapping": lambda r: "%(d)s %(d)r" % {"d": r},  # noqa: UP031 - under test
    "logging": lambda r: logged(
        r,
        logging.Formatter("%(levelname)s %(message)s | ref=%(ref)s refs=%(refs)r args=%(args)r", defaults={"refs": ""}),
    ),
    "logging-json": lambda r: logged(r, JsonFormatter()),
    "json": lambda r: json.dumps({"doc": r, "docs": [r, (r,)]}, default=str),
    "pydantic-model_dump": lambda r: repr(Holder(doc=r, docs=[r]).model_dump()),
    "pydantic-model_dump-json-mode": lambda r: json.dumps(Holder(doc=r, docs=[r]).model_dump(mode="json")),
    "pydantic-model_dump_json": lambda r: Holder(doc=r, docs=[r]).model_dump_json(),
    "pydantic-repr": lambda r: repr(Holder(doc=r, docs=[r])),
    "pickle": lambda r: b"".join(pickle.dumps(r, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)),
    "pickle-roundtrip": lambda r: repr(pickle.loads(pickle.dumps(r))),
    "copy": lambda r: repr([copy.copy(r), copy.deepcopy(r), copy.deepcopy({"k": [r]})]),
    "vars": lambda r: repr(vars(r)),
    "getstate": lambda r: repr(r.__getstate__()),
    "reduce_ex": lambda r: repr([r.__reduce_ex__(p) for p in range(pickle.HIGHEST_PROTOCOL + 1)]),
    "dataclasses.asdict": lambda r: repr(dataclasses.asdict(Carrier(doc=r, docs=[r]))),
    "dataclasses.asdict-json": lambda r: json.dumps(dataclasses.asdict(Carrier(doc=r, docs=[r])), default=str),
    "dataclass-repr": lambda r: repr(Carrier(doc=r, docs=[r])),
    "pprint": lambda r: pprint.pformat({"doc": r, "docs": [r] * 3}),
    "traceback": raised,
}


def check_door(planted: Planted, name: str, projected: str | bytes, where: str) -> None:
    data = projected if isinstance(projected, bytes) else projected.encode()
    assert planted.artifact_id.encode() in data, f"{name} {where}"
    planted.assert_absent(projected, f"{name} {where}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_ref_projects_as_its_id_through_every_door(vault: Vault, planted: Planted, door: str, mode: str) -> None:
    box = Toolbox(vault)
    inside: dict[str, str | bytes] = {}
    kept: list[Ref] = []

    @box.tool
    def probe(doc: Ref) -> int:
        size = len(doc.read())  # the bytes are now resolved in this call's frame
        kept.append(doc)
        inside[door] = DOORS[door](doc)
        return size

    obs = dispatch(box, mode, "probe", json.dumps({"doc": planted.artifact_id}))
    assert obs.content == str(len(planted.canary))
    check_door(planted, door, inside[door], "inside the call")
    check_door(planted, door, DOORS[door](kept[0]), "after the call")


def test_format_specs_apply_to_the_id(planted: Planted) -> None:
    ref, aid = Ref(planted.artifact_id), planted.artifact_id
    for spec in ["", ">80", "<72", "^90", "*>60", ".12", "40.8"]:
        assert format(ref, spec) == format(aid, spec)
        assert f"{ref:{spec}}" == f"{aid:{spec}}"
    assert "%-40s|%.7s" % (ref, ref) == "%-40s|%.7s" % (aid, aid)  # noqa: UP031 - under test


def test_a_model_parameter_holding_a_ref_dumps_the_id(vault: Vault, planted: Planted) -> None:
    box = Toolbox(vault)
    inside: list[str] = []
    kept: list[Holder] = []

    @box.tool
    def via_model(holder: Holder) -> int:
        size = len(holder.doc.read())
        kept.append(holder)
        inside.extend([holder.model_dump_json(), repr(holder.model_dump()), repr(holder)])
        return size

    obs = box.call_sync("via_model", json.dumps({"holder": {"doc": planted.artifact_id}}), scope=SCOPE)
    assert obs.content == str(len(planted.canary))
    after = [kept[0].model_dump_json(), repr(kept[0].model_dump()), repr(kept[0])]
    assert json.loads(inside[0]) == json.loads(after[0]) == {"doc": planted.artifact_id, "docs": []}
    for text in inside + after:
        assert planted.artifact_id in text
        planted.assert_absent(text, "a model holding a Ref")


def test_a_ref_has_no_state_but_its_id(vault: Vault, planted: Planted) -> None:
    assert Ref.__slots__ == ("_artifact_id",)
    assert Ref.__dictoffset__ == 0  # no instance __dict__: nothing can be stashed on it
    box = Toolbox(vault)
    referents: list[list[Any]] = []
    kept: list[Ref] = []

    @box.tool
    def probe(doc: Ref) -> int:
        size = len(doc.read())
        referents.append(gc.get_referents(doc))  # after reading: still only the id
        kept.append(doc)
        return size

    assert box.call_sync("probe", json.dumps({"doc": planted.artifact_id}), scope=SCOPE).content == str(
        len(planted.canary)
    )
    [doc] = kept
    for seen in [*referents, gc.get_referents(doc)]:
        assert all(x is Ref or x == planted.artifact_id for x in seen), seen
        assert planted.artifact_id in seen
    assert vars(doc) == {"artifact_id": planted.artifact_id}
    with pytest.raises(AttributeError):
        doc.cache = planted.canary
    with pytest.raises(AttributeError):
        object.__setattr__(doc, "cache", planted.canary)
    with pytest.raises(AttributeError):
        doc._artifact_id = "art_" + "a" * 26
    copied = copy.deepcopy(doc)
    assert copied == doc
    assert pickle.loads(pickle.dumps(doc)) == doc
    assert hash(pickle.loads(pickle.dumps(doc))) == hash(doc)


def test_a_traceback_raised_in_the_tool_names_the_id_only(vault: Vault, planted: Planted) -> None:
    box = Toolbox(vault)
    caught: list[BaseException] = []
    texts: list[str] = []

    @box.tool
    def fails(doc: Ref) -> str:
        size = len(doc.read())
        try:
            raise LookupError(f"no section 9 in {doc!r} ({size} bytes)")
        except LookupError as exc:
            caught.append(exc)
            texts.append("".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format()))
            raise

    obs = box.call_sync("fails", json.dumps({"doc": planted.artifact_id}), scope=SCOPE)
    assert obs == Observation(None, "error: the tool raised LookupError", is_error=True)
    [exc] = caught
    after = "".join(traceback.TracebackException.from_exception(exc, capture_locals=True).format())
    for text in [texts[0], after, "".join(traceback.format_exception(exc)), str(exc)]:
        assert f"Ref('{planted.artifact_id}')" in text
        assert f"({len(planted.canary)} bytes)" in text  # it really had read the canary
        planted.assert_absent(text, "a traceback from the tool")
