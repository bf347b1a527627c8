"""The kernel: frozen snapshots of an execution environment's values, bound to its generation.

Invariants (``tests/kernel/``):

* **A snapshot is frozen.** :meth:`Kernel.snapshot` serialises the value at once (JSON, Parquet or ``.npy``:
  :mod:`refvault.kernel.codecs`, never pickle) and stores the bytes as an artifact of the kernel's scope;
  :meth:`Kernel.resolve` decodes a fresh value from the verified stored bytes. Changing the live object
  after the snapshot, or the resolved value, changes no snapshot.
* **Bound to the kernel and its generation, twice.** The artifact carries ``source_version["kernel"]``
  (kernel id, generation, name, persist, kind), under the manifest MAC, and the kernel keeps the handle it
  issued for each snapshot in memory. A handle resolves only if every field equals what the kernel
  issued and what the artifact carries: a handle of another kernel or scope, or one edited (a generation
  moved forward, a ``persist`` turned on, another artifact id), is :class:`~refvault.errors.UnknownHandle`.
* **Reset makes old handles stale.** :meth:`Kernel.reset` starts a new generation; a handle of an older
  one is :class:`~refvault.errors.StaleHandle`, except a snapshot taken with ``persist=True``, which
  resolves to its durable artifact with ``Resolved.stale`` True and ``state`` ``"durable"``.
* **Transient snapshots go with their generation.** A reset (and :meth:`Kernel.close`) deletes the
  snapshots of the generation it ends that were not persisted (one under a hold is kept and reported);
  ``ttl`` also gives them an expiry, for a kernel that dies without either.
* **The generation lives as long as the kernel object.** A kernel id is 128 random bits minted per
  :class:`Kernel`; a new process (or a new ``Kernel``) is a new kernel, under which no older handle
  resolves. A persisted snapshot stays an ordinary artifact without expiry, readable by id.
* **A computation has lineage.** :meth:`Kernel.compute` resolves its inputs, runs the function on fresh
  values and stores the result through :meth:`Vault.put_computed <refvault.Vault.put_computed>`:
  ``derived_from`` the inputs, an origin ``kernel.compute`` with their content hashes, so
  ``vault.lineage`` and ``vault.receipt`` show it. Nothing is stored if the kernel was reset meanwhile.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any

from refvault.errors import (
    Held,
    InvalidArgument,
    InvalidType,
    NotFound,
    StaleHandle,
    StorageError,
    UnknownHandle,
    shown_id,
)
from refvault.kernel.codecs import Encoded, decode, encode
from refvault.kernel.handles import Handle, ResetReport, Resolved, check_name
from refvault.model import Scope
from refvault.vault.core import Vault

__all__ = ["MAX_INPUTS", "TRANSFORMATION", "Kernel"]

TRANSFORMATION = "kernel.compute"
"""The transformation a computation's receipt names."""
MAX_INPUTS = 64
"""The most handles one :meth:`Kernel.compute` takes."""


def _new_kernel_id() -> str:
    return "krn_" + base64.b32encode(secrets.token_bytes(16)).decode("ascii").rstrip("=").lower()


class Kernel:
    """Frozen, generation-bound snapshots of an execution environment's values, stored in ``vault``.

    ``scope`` owns every snapshot. ``ttl`` (optional) gives transient snapshots an expiry besides
    their deletion at :meth:`reset`/:meth:`close`. Thread-safe. See the module docstring for what it
    promises; ``docs/kernel.md`` for how to use it.
    """

    def __init__(self, vault: Vault, scope: Scope, *, ttl: timedelta | None = None) -> None:
        embedded = getattr(vault, "embedded_vault", None)
        vault = embedded() if callable(embedded) else vault
        if not isinstance(vault, Vault):
            raise InvalidArgument("a Kernel needs a refvault.Vault (or an AsyncVault); a Client is not supported")
        if not isinstance(scope, Scope):
            raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
        if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
            raise InvalidArgument("ttl must be a positive datetime.timedelta, or None")
        self.vault = vault
        self.scope = scope
        self.ttl = ttl
        self.kernel_id = _new_kernel_id()
        self._generation = 1
        self._issued: dict[str, Handle] = {}  # artifact id -> the handle issued: persisted, and the current transient
        self._lock = threading.RLock()
        self._closed = False

    @property
    def generation(self) -> int:
        """The current generation: 1 for a new kernel, one more after each :meth:`reset`."""
        return self._generation

    def __repr__(self) -> str:
        return f"Kernel({self.kernel_id}, generation {self._generation}, {self.scope})"

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot(self, name: str, obj: object, *, persist: bool = False) -> Handle:
        """Store a frozen copy of ``obj`` now, as an artifact bound to this kernel's generation; its handle.

        ``obj`` is serialised before this returns (:mod:`refvault.kernel.codecs`: JSON for plain Python
        values, Parquet for a pandas DataFrame or pyarrow Table, ``.npy`` for a NumPy array; never
        pickle); anything else is :class:`~refvault.errors.InvalidType` and nothing is stored. With
        ``persist=True`` the snapshot survives :meth:`reset` (its artifact has no expiry); otherwise the
        next reset deletes it.
        """
        check_name(name)
        _check_persist(persist)
        encoded = encode(obj)
        with self._lock:
            self._check_open()
            return self._store(name, encoded, persist)

    def resolve(self, handle: Handle | Mapping[str, Any]) -> Resolved:
        """The snapshot ``handle`` names, decoded afresh from its verified stored bytes.

        ``handle`` is a :class:`Handle` or its dict. A handle of the current generation resolves with
        ``state="current"``; of an older one, it is :class:`~refvault.errors.StaleHandle` unless it was
        taken with ``persist=True``: then it resolves with ``state="durable"`` and ``stale`` True. A
        handle this kernel did not issue exactly as given (another kernel's or scope's, edited, or its
        snapshot deleted) is :class:`~refvault.errors.UnknownHandle`.
        """
        return self._resolve(handle)[0]

    def compute(
        self,
        fn: Callable[..., object],
        *handles: Handle | Mapping[str, Any],
        name: str,
        persist: bool = False,
    ) -> Handle:
        """Run ``fn`` on the values of ``handles`` and snapshot its result as ``name``, with lineage.

        Each input is resolved (:meth:`resolve`: stale or unknown handles fail before ``fn`` runs) and
        passed as a fresh value. The result is stored with ``derived_from`` the inputs and an origin
        ``kernel.compute`` (their content hashes, the function's name, which inputs were durable
        snapshots of an older generation): ``vault.lineage`` and ``vault.receipt`` show it. A result with
        ``persist=True`` may derive only from persisted inputs (a reset deletes the others:
        :class:`~refvault.errors.InvalidArgument`, before ``fn`` runs). If the kernel is reset while
        ``fn`` runs, nothing is stored (:class:`~refvault.errors.StaleHandle`).
        """
        check_name(name)
        _check_persist(persist)
        if not callable(fn):
            raise InvalidType("compute takes a function (a callable) first, then the handles of its inputs")
        if not 1 <= len(handles) <= MAX_INPUTS:
            raise InvalidArgument(f"compute takes 1 to {MAX_INPUTS} input handles (to store a value, use snapshot)")
        generation = self._generation
        inputs = [self._resolve(h) for h in handles]
        if persist and not all(r.durable for r, _ in inputs):
            raise InvalidArgument(
                "a persisted result may derive only from persisted snapshots (a reset deletes the others): "
                "snapshot the inputs with persist=True, or compute with persist=False"
            )
        result = fn(*(r.value for r, _ in inputs))
        encoded = encode(result)
        described = [
            {"artifact_id": r.handle.artifact_id, "generation": r.handle.generation, "stale": r.stale}
            for r, _ in inputs
        ]
        extra = {"function": _function_name(fn), "inputs": described}
        counts = {"inputs": len(inputs), "bytes_in": sum(size for _, size in inputs), "bytes_out": len(encoded.data)}
        with self._lock:
            self._check_open()
            if self._generation != generation:
                raise StaleHandle(
                    f"the kernel was reset while the computation ran (now generation {self._generation}); "
                    "nothing was stored: compute again"
                )
            sources = [r.handle.artifact_id for r, _ in inputs]
            return self._store(name, encoded, persist, extra=extra, sources=sources, counts=counts)

    # -- generations -----------------------------------------------------------------------------

    def reset(self) -> ResetReport:
        """Start a new generation: every handle issued so far goes stale, except persisted ones.

        The transient snapshots of the generation that ends are deleted (newest first: a computation's
        result before its inputs); one under a hold is kept and reported (its handle is stale all the
        same). Returns a :class:`~refvault.kernel.handles.ResetReport`.
        """
        with self._lock:
            self._check_open()
            return self._retire()

    def close(self) -> None:
        """Reset one last time (deleting the transient snapshots) and close the kernel; the vault stays open.

        Every later call raises :class:`~refvault.errors.StorageError`. Persisted snapshots stay in the vault.
        """
        with self._lock:
            if self._closed:
                return
            try:
                self._retire()
            finally:
                self._closed = True

    def __enter__(self) -> Kernel:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("this kernel is closed")

    def _retire(self) -> ResetReport:
        """Bump the generation and delete the transient snapshots of the one that ended (lock held)."""
        self._generation += 1
        doomed = [i for i, h in self._issued.items() if not h.persist]
        for artifact_id in doomed:
            del self._issued[artifact_id]
        deleted: list[str] = []
        kept: list[str] = []
        for artifact_id in reversed(doomed):
            try:
                self.vault.delete(self.scope, artifact_id)
            except Held:
                kept.append(artifact_id)
            except NotFound:
                continue  # deleted already
            else:
                deleted.append(artifact_id)
        return ResetReport(self._generation, tuple(deleted), tuple(kept))

    def _store(
        self,
        name: str,
        encoded: Encoded,
        persist: bool,
        *,
        extra: Mapping[str, Any] | None = None,
        sources: list[str] | None = None,
        counts: dict[str, int] | None = None,
    ) -> Handle:
        """Put ``encoded`` bound to the current generation and record the handle issued (lock held)."""
        binding = self._binding(name, self._generation, persist, encoded.kind)
        binding.update(extra or {})
        options: dict[str, Any] = {"media_type": encoded.media_type, "source_version": {"kernel": binding}}
        if not persist and self.ttl is not None:
            options["expires_at"] = self.vault.clock() + self.ttl
        if sources:
            descriptor = self.vault.put_computed(
                self.scope,
                encoded.data,
                derived_from=sources,
                transformation=TRANSFORMATION,
                counts=counts,
                **options,
            )
        else:
            descriptor = self.vault.put(self.scope, encoded.data, **options)
        handle = Handle(
            name=name,
            artifact_id=descriptor.artifact_id,
            generation=self._generation,
            kernel_id=self.kernel_id,
            persist=persist,
            media_type=encoded.media_type,
            kind=encoded.kind,
        )
        self._issued[handle.artifact_id] = handle
        return handle

    def _binding(self, name: str, generation: int, persist: bool, kind: str) -> dict[str, Any]:
        """What the artifact of a snapshot carries about it (under the manifest MAC)."""
        return {"id": self.kernel_id, "generation": generation, "name": name, "persist": persist, "kind": kind}

    def _resolve(self, given: Handle | Mapping[str, Any]) -> tuple[Resolved, int]:
        """The snapshot and its size in bytes."""
        handle = given if isinstance(given, Handle) else Handle.from_dict(given)
        with self._lock:
            self._check_open()
            current = self._generation
            issued = self._issued.get(handle.artifact_id) if handle.kernel_id == self.kernel_id else None
        if issued is None:
            if handle.kernel_id == self.kernel_id and handle.generation < current:
                raise _stale(handle, current)  # a transient snapshot of a generation that ended (or claims to be)
            raise UnknownHandle
        if issued != handle:
            raise UnknownHandle
        if issued.generation != current and not issued.persist:
            raise _stale(handle, current)
        try:
            descriptor = self.vault.describe(self.scope, handle.artifact_id)
        except NotFound:
            raise self._gone(handle) from None
        bound = descriptor.source_version.get("kernel")
        expected = self._binding(handle.name, handle.generation, handle.persist, handle.kind)
        if not isinstance(bound, Mapping) or any(bound.get(k) != v for k, v in expected.items()):
            raise UnknownHandle
        if descriptor.media_type != handle.media_type:
            raise UnknownHandle
        try:
            data = self.vault.read_bytes(self.scope, handle.artifact_id)  # verified; an id names one content
        except NotFound:
            raise self._gone(handle) from None
        with self._lock:
            now = self._generation
        if handle.generation != now and not handle.persist:
            raise _stale(handle, now)  # reset while it was read: the snapshot is gone, or going
        value = decode(handle.kind, data)
        if handle.generation == now:
            return Resolved("current", handle, now, descriptor.content_hash, value), len(data)
        return Resolved("durable", handle, now, descriptor.content_hash, value), len(data)

    def _gone(self, handle: Handle) -> StaleHandle | UnknownHandle:
        """The error for a snapshot the vault no longer has: stale if a reset deleted it meanwhile."""
        with self._lock:
            now = self._generation
        return _stale(handle, now) if handle.generation != now and not handle.persist else UnknownHandle()


def _stale(handle: Handle, current: int) -> StaleHandle:
    return StaleHandle(
        f"snapshot {shown_id(handle.artifact_id)} is from generation {handle.generation} of this kernel, which "
        f"was reset since (now generation {current}): snapshot the value again, or take it with persist=True "
        "to keep it across resets"
    )


def _check_persist(persist: object) -> None:
    if not isinstance(persist, bool):
        raise InvalidArgument("persist must be True or False")


def _function_name(fn: Callable[..., object]) -> str:
    """``module.qualname`` of ``fn`` (printable ASCII, at most 200 characters): what the binding records."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or ""
    text = f"{module}.{qualname}" if module else str(qualname)
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:200]
