"""The vault contract: what every layer above the vault may call on one, whichever one it has.

:class:`VaultContract` is a :class:`typing.Protocol` satisfied by the embedded
:class:`~refvault.Vault` and by the HTTP :class:`~refvault.client.Client`
(checked by mypy in ``refvault.client`` and ``refvault.vault.core``).
:mod:`refvault.read`, :mod:`refvault.guard`, :mod:`refvault.toolbox`,
:mod:`refvault.evidence` and the integrations type their vault argument with it
and never ask which implementation they hold.

Its boundary (as httpx's transport: plain values in, plain values out): scopes,
ids, bytes, :class:`~refvault.model.Descriptor` values and the request types of
:mod:`refvault.operations`. Selective reads (windows, grep, record queries,
record sets) go through one method, :meth:`VaultContract.read_selection`: an
embedded vault runs the read engine it is handed, on itself; a client has the
server run the same read. A new concern that wraps every operation (policy,
audit, budgets) is one wrapper around this contract.

This module sits in the bottom layer: it imports only :mod:`refvault.model`,
:mod:`refvault.operations`, the values of :mod:`refvault.copies` and :mod:`refvault.runs`, and the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, TypeVar, Unpack, runtime_checkable

from refvault.budgets import Budget, Usage
from refvault.copies import DeletionReport
from refvault.model import Descriptor, Scope
from refvault.operations import CaptureOptions, Selection
from refvault.runs import EvidenceRecord, EvidenceRequest, ReplayPacket

__all__ = ["ArtifactReader", "EmbeddedHandle", "LocalRead", "LocalVault", "VaultContract"]

T = TypeVar("T")

LocalRead = Callable[[Any], T]
"""A read engine run on an embedded vault: called with the vault itself (a :class:`refvault.Vault`)."""


class ArtifactReader(Protocol):
    """A read-only binary stream of one artifact, verified as it is read (``vault.stream``'s answer).

    An embedded vault's stream is seekable and verified chunk by chunk; a
    client's is sequential and verified whole when its end is read.
    """

    @property
    def size(self) -> int: ...

    def on_chunk(self, observer: Callable[[int, bytes], None]) -> None:
        """Call ``observer(offset, chunk)`` with each chunk read, before any of it is handed out."""
        ...

    def seekable(self) -> bool: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...

    def read(self, size: int = -1, /) -> bytes | None: ...

    def readall(self) -> bytes: ...

    def iter_chunks(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> Any: ...


class VaultContract(Protocol):
    """The operations of a vault, embedded or remote; each takes the reader's scope first.

    Errors are those of :mod:`refvault.errors`, the same whichever
    implementation raises them: another tenant's artifact is
    :class:`~refvault.errors.NotFound`, damaged bytes
    :class:`~refvault.errors.IntegrityError`, and so on.

    Every read takes ``purpose`` (why, default ``"default"``) and ``recipient``
    (who the bytes go to: ``"user"``, ``"export"``, ``"model:<name>"``,
    ``"tool:<name>"``; default ``"user"``); the tenant's policy decides
    (:mod:`refvault.policy`): a refusal is :class:`~refvault.errors.PolicyDenied`
    for the owner and :class:`~refvault.errors.NotFound` for anyone else. A
    selective read carries them in its request (:mod:`refvault.operations`).
    """

    def put(self, scope: Scope, data: object, **metadata: Unpack[CaptureOptions]) -> Descriptor:
        """Capture ``data`` (bytes, a binary file, an iterable of bytes) with its metadata
        (:class:`~refvault.operations.CaptureMetadata`); the descriptor once it is durable."""
        ...

    def describe(
        self, scope: Scope, artifact_id: str, *, purpose: str = "default", recipient: str = "user"
    ) -> Descriptor:
        """The descriptor of an artifact ``scope`` may read for ``purpose``, to ``recipient``."""
        ...

    def read_bytes(self, scope: Scope, artifact_id: str, *, purpose: str = "default", recipient: str = "user") -> bytes:
        """Every byte of the artifact, verified."""
        ...

    def read_range(
        self,
        scope: Scope,
        artifact_id: str,
        offset: int,
        length: int | None,
        *,
        purpose: str = "default",
        recipient: str = "user",
    ) -> bytes:
        """Verified bytes ``[offset, offset + length)`` (``None``: to the end), clipped to the artifact."""
        ...

    def stream(
        self, scope: Scope, artifact_id: str, *, purpose: str = "default", recipient: str = "user"
    ) -> ArtifactReader:
        """A stream of the artifact, verified as it is read."""
        ...

    def list(self, scope: Scope, *, purpose: str = "default", recipient: str = "user") -> list[Descriptor]:
        """Unexpired artifacts of ``scope``, newest first (without those the policy refuses this purpose/recipient)."""
        ...

    def delete(self, scope: Scope, artifact_id: str, *, cascade: bool = False) -> DeletionReport:
        """Remove the artifact (with ``cascade``, every copy derived from it that ``scope`` owns): what went,
        what stayed and why, and what no deletion can take back (:class:`refvault.copies.DeletionReport`)."""
        ...

    def verify_artifact(
        self, scope: Scope, artifact_id: str, *, purpose: str = "default", recipient: str = "user"
    ) -> dict[str, Any]:
        """Re-read and hash every byte: ``{"artifact_id", "ok", "content_hash", "size"}``."""
        ...

    def record_evidence(self, scope: Scope, request: EvidenceRequest) -> EvidenceRecord:
        """Append one record of what a decision of ``scope``'s run used (:mod:`refvault.runs`); the stored record."""
        ...

    def replay_packet(self, scope: Scope, session: str) -> ReplayPacket:
        """Every evidence reference run ``session``'s decisions used, each with its availability now."""
        ...

    def set_budget(self, scope: Scope, budget: Budget, *, restart: bool = False) -> Usage:
        """Set what ``scope``'s run (its session) may spend (:mod:`refvault.budgets`); its usage after."""
        ...

    def usage(self, scope: Scope) -> Usage:
        """What ``scope``'s run spent and has left, per dimension."""
        ...

    def read_selection(self, scope: Scope, artifact_id: str, request: Selection[T], local: LocalRead[T]) -> T:
        """Run a selective read (:data:`refvault.operations.ReadRequest`) where the bytes are.

        An embedded vault returns ``local(self)``: the read engine of
        :mod:`refvault.read`, run on it. A client sends ``request`` to the
        server, which runs that same engine on its vault; ``local`` is not called.
        """
        ...


class LocalVault(VaultContract, Protocol):
    """A vault that runs in this process (:class:`refvault.Vault`): the contract, and the vault's own clock.

    For writers that must agree with the vault on what "now" is (the parts of one
    materialised result share one ``created_at``, which may not be in its future).
    """

    def clock(self) -> datetime:
        """The vault's notion of now (an aware UTC datetime)."""
        ...


@runtime_checkable
class EmbeddedHandle(Protocol):
    """A handle on a vault in this process: :class:`refvault.Vault` itself or an :class:`refvault.AsyncVault`.

    :func:`refvault.content.materialize` takes one (a remote
    :class:`~refvault.client.Client` is not one: its writes are the server's).
    """

    def embedded_vault(self) -> LocalVault:
        """The vault in this process that this handle works on."""
        ...
