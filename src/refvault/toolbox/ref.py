"""``Ref``: a tool argument that is an artifact id to the model and bytes to the tool.

Invariants (tested in ``tests/toolbox/test_toolbox.py`` and ``tests/security/test_ref_canaries.py``):

* **A Ref holds only its id.** Every way Python turns an object into text or
  bytes (``str``, ``repr``, ``format``, ``%``, ``logging``, ``json`` with
  ``default=str``, pydantic dumps, ``pickle``, ``copy``, ``vars``,
  ``dataclasses.asdict``) yields the id, because there is nothing else on it.
* **Resolved values are dispatch-local.** The dispatcher opens a
  :class:`DispatchFrame` in a :class:`~contextvars.ContextVar` for the length of
  one tool call and closes it when the call ends. ``read``/``text``/``open``
  look the id up in the current frame; outside a call, after it, in a task
  that outlived it, or in another run's call they raise
  :class:`~refvault.errors.UnresolvedRef`. Closing the frame (not just
  resetting the variable) is what makes tasks spawned inside the call lose
  access too.
* The frame reads through the vault in the caller's scope, so a Ref can never
  reach beyond what that scope may read.
* **Errors name well-formed ids only.** :class:`~refvault.errors.BadRef` and
  :class:`~refvault.errors.UnresolvedRef` show the id only when it is a
  well-formed artifact id (:func:`~refvault.errors.shown_id`); any other string
  a model passed as a Ref is never repeated (``tests/security/test_bad_ref_echo.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from refvault.errors import BadRef, Expired, InvalidArgument, InvalidType, NotFound, UnresolvedRef, shown_id
from refvault.ids import ARTIFACT_ID_PATTERN

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

    from refvault.contract import ArtifactReader, VaultContract
    from refvault.model import Descriptor, Scope

__all__ = ["REF_DESCRIPTION", "DispatchFrame", "Ref", "current_frame", "finish_ref_schemas"]

T = TypeVar("T")
FRAME_CACHE_BYTES = 16 << 20

REF_DESCRIPTION = (
    "A refvault artifact id (art_…). Pass the id of an artifact you were given; "
    "the tool receives its content, you do not."
)


class DispatchFrame:
    """The resolved values of one tool call: descriptors, and verified bytes read on demand.

    Bytes are cached up to :data:`FRAME_CACHE_BYTES` per call (so reading a
    Ref twice reads the vault once); streams opened with ``Ref.open`` are
    tracked and closed with the frame. After :meth:`close`, nothing is
    readable through the frame, including reads that were already in flight.
    """

    __slots__ = (
        "_bytes",
        "_cached",
        "_closed",
        "_descriptors",
        "_lock",
        "_streams",
        "protect",
        "purpose",
        "recipient",
        "run_id",
        "scope",
        "vault",
    )

    def __init__(
        self,
        vault: VaultContract,
        scope: Scope,
        run_id: str | None,
        protect: Callable[[str, bytes, bool], None] | None = None,
        *,
        purpose: str = "default",
        recipient: str = "user",
    ) -> None:
        self.vault = vault
        self.scope = scope
        self.run_id = run_id
        self.protect = protect
        self.purpose = purpose  # every resolution and read of this call's Refs carries them (the policy decides)
        self.recipient = recipient
        self._descriptors: dict[str, Descriptor] = {}
        self._bytes: dict[str, bytes] = {}
        self._cached = 0
        self._streams: list[ArtifactReader] = []
        self._closed = False
        self._lock = threading.Lock()

    def admit(self, artifact_id: str, descriptor: Descriptor) -> None:
        """Make ``artifact_id`` readable in this call (only ``bind_refs`` does this)."""
        if descriptor.artifact_id != artifact_id:
            raise InvalidArgument("a descriptor is admitted under its own id only")
        with self._lock:
            if not self._closed:
                self._descriptors[artifact_id] = descriptor

    def is_resolved(self, artifact_id: str) -> bool:
        return artifact_id in self._descriptors

    def _require(self, artifact_id: str) -> Descriptor:
        with self._lock:
            descriptor = None if self._closed else self._descriptors.get(artifact_id)
        if descriptor is None:
            raise UnresolvedRef(
                f"{shown_id(artifact_id)} is not resolved here: read a Ref inside the tool call that received it"
            )
        return descriptor

    def descriptor(self, artifact_id: str) -> Descriptor:
        return self._require(artifact_id)

    def read(self, artifact_id: str) -> bytes:
        self._require(artifact_id)
        with self._lock:
            data = self._bytes.get(artifact_id)
        if data is None:
            data = self._vault_call(
                lambda: self.vault.read_bytes(self.scope, artifact_id, purpose=self.purpose, recipient=self.recipient),
                artifact_id,
            )
            if self.protect is not None:  # the leak guard learns every value resolved by reference
                self.protect(artifact_id, data, True)
            with self._lock:
                if self._closed:  # the call ended while we were reading: hand out nothing
                    data = None
                elif self._cached + len(data) <= FRAME_CACHE_BYTES:
                    self._bytes[artifact_id] = data
                    self._cached += len(data)
            if data is None:
                self._require(artifact_id)  # raises UnresolvedRef
                raise AssertionError("unreachable")
        return data

    def open(self, artifact_id: str) -> ArtifactReader:
        self._require(artifact_id)
        stream = self._vault_call(
            lambda: self.vault.stream(self.scope, artifact_id, purpose=self.purpose, recipient=self.recipient),
            artifact_id,
        )
        if self.protect is not None:
            stream.on_chunk(_chunk_protector(self.protect, artifact_id))
        with self._lock:
            if not self._closed:
                self._streams.append(stream)
                return stream
        stream.close()
        self._require(artifact_id)
        raise AssertionError("unreachable")

    @staticmethod
    def _vault_call(call: Callable[[], T], artifact_id: str) -> T:
        try:
            return call()
        except (NotFound, Expired):  # deleted or expired mid-call: the same error as at dispatch
            raise BadRef(artifact_id) from None

    def close(self) -> None:
        """Discard every resolved value and close open streams; later reads raise UnresolvedRef."""
        with self._lock:
            self._closed = True
            self._descriptors.clear()
            self._bytes.clear()
            streams, self._streams = self._streams, []
        for stream in streams:
            stream.close()

    def __repr__(self) -> str:
        return f"DispatchFrame(refs={sorted(self._descriptors)}, closed={self._closed})"


PROTECT_OVERLAP = 4096  # >= the guard's min_match: a span across a chunk edge lies whole in one protected join


def _chunk_protector(protect: Callable[[str, bytes, bool], None], artifact_id: str) -> Callable[[int, bytes], None]:
    """Protect a stream's chunks as they are loaded, in any order, and the join across every loaded edge.

    Each chunk is protected whole; the edges of loaded chunks are kept
    (``PROTECT_OVERLAP`` bytes each side), and when both neighbours of an
    edge have been loaded, the bytes across it are protected too.
    """
    heads: dict[int, bytes] = {}  # chunk start offset -> its first bytes
    tails: dict[int, bytes] = {}  # chunk end offset -> its last bytes

    def observe(offset: int, chunk: bytes) -> None:
        protect(artifact_id, chunk, False)
        end = offset + len(chunk)
        if offset in heads and end in tails:
            return  # loaded before: its joins are protected already
        heads[offset] = chunk[:PROTECT_OVERLAP]
        tails[end] = chunk[-PROTECT_OVERLAP:]
        if offset in tails:  # the chunk before this one was loaded
            protect(artifact_id, tails[offset] + heads[offset], False)
        if end in heads:  # the chunk after this one was loaded
            protect(artifact_id, tails[end] + heads[end], False)

    return observe


_FRAME: ContextVar[DispatchFrame | None] = ContextVar("refvault_dispatch_frame", default=None)


def current_frame() -> DispatchFrame | None:
    """The dispatch frame of the tool call running in this context, if any."""
    return _FRAME.get()


def enter_frame(frame: DispatchFrame) -> Callable[[], None]:
    """Make ``frame`` current; return the function that closes it and restores the previous one."""
    token = _FRAME.set(frame)

    def leave() -> None:
        frame.close()
        _FRAME.reset(token)

    return leave


class Ref:
    """An artifact id passed to a tool by reference.

    The model sees (and writes) a plain string; the tool calls :meth:`read`,
    :meth:`text` or :meth:`open` to get the verified bytes, only while its call
    runs. The object itself never holds content.
    """

    __slots__ = ("_artifact_id",)
    _artifact_id: str

    def __init__(self, artifact_id: str) -> None:
        if not isinstance(artifact_id, str):
            raise InvalidType("a Ref is made from an artifact id string")
        object.__setattr__(self, "_artifact_id", artifact_id)

    @property
    def artifact_id(self) -> str:
        return self._artifact_id

    # -- reading (inside a dispatch only) -----------------------------------------

    def _frame(self) -> DispatchFrame:
        frame = _FRAME.get()
        if frame is None:
            raise UnresolvedRef(
                f"{shown_id(self._artifact_id)} is not resolved here: read a Ref inside the tool call that received it"
            )
        return frame

    def read(self) -> bytes:
        """The artifact's verified bytes."""
        return self._frame().read(self._artifact_id)

    def text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The artifact's bytes decoded as text."""
        return self.read().decode(encoding, errors)

    def open(self) -> ArtifactReader:
        """A binary stream over the artifact, closed with the call: from a vault, seekable and verified chunk by
        chunk; from a :class:`~refvault.client.Client`, sequential and verified whole when its end is read."""
        return self._frame().open(self._artifact_id)

    @property
    def descriptor(self) -> Descriptor:
        """The artifact's descriptor."""
        return self._frame().descriptor(self._artifact_id)

    # -- every projection is the id --------------------------------------------------

    def __str__(self) -> str:
        return self._artifact_id

    def __repr__(self) -> str:
        return f"Ref({self._artifact_id!r})"

    def __format__(self, spec: str) -> str:
        return format(self._artifact_id, spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other._artifact_id == self._artifact_id

    def __hash__(self) -> int:
        return hash(("refvault.Ref", self._artifact_id))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Ref is immutable")

    def __reduce__(self) -> tuple[type[Ref], tuple[str]]:
        return (Ref, (self._artifact_id,))

    def __copy__(self) -> Ref:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Ref:
        return self

    @property
    def __dict__(self) -> dict[str, str]:  # type: ignore[override]
        """What ``vars(ref)`` shows: the id, which is all there is."""
        return {"artifact_id": self._artifact_id}

    # -- pydantic: a string in schemas and JSON, a Ref in Python ---------------------

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        from_str = core_schema.no_info_after_validator_function(cls, core_schema.str_schema())
        return core_schema.json_or_python_schema(
            json_schema=from_str,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_str]),
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string", "description": REF_DESCRIPTION, REF_MARKER: True}


REF_MARKER = "x-refvault-ref"


def finish_ref_schemas(node: Any, *, pattern: bool) -> Any:
    """Remove the private Ref marker from a JSON schema, adding the id ``pattern`` where it was (opt-in).

    The marker (rather than the description, which a field may override) is
    how a Ref's string is recognised.
    """
    if isinstance(node, list):
        return [finish_ref_schemas(item, pattern=pattern) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: finish_ref_schemas(v, pattern=pattern) for k, v in node.items() if k != REF_MARKER}
    if node.get(REF_MARKER) is True and pattern:
        out["pattern"] = ARTIFACT_ID_PATTERN
    return out
