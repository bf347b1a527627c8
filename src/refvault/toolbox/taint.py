"""Labels follow the data: what a tool call's inputs carry, and whether the model may see a result that carries it.

Invariants (tested in ``tests/toolbox/test_taint.py``):

* **A result carries the union of its inputs' labels.** The labels of a call are those of every
  ``Ref`` it received (:func:`input_labels`, read from the descriptors the dispatcher resolved).
  Whatever the Toolbox captures from the call (returned bytes, an :class:`~refvault.toolbox.values.Artifact`,
  an offloaded result) is put with those labels (and any the tool adds on its ``Artifact``) and with
  ``derived_from`` naming the inputs. A tool cannot remove a label: only ``Vault.declassify`` can.
* **Chains keep propagating.** A tool handed the captured result by ``Ref`` sees its labels as an
  input's, so its own output carries them too.
* **Reads through the ToolContext count too.** A tool handed a :class:`~refvault.toolbox.ToolContext` gets
  a :class:`ContextReads` as its ``vault``: every artifact it reads there (describe, bytes, ranges,
  streams, selective reads) joins the call's labels and ``derived_from``, and whatever it ``put``s there
  carries them too (and is noted in :attr:`ContextReads.written`: what the call produced). So no door of
  the Toolbox lets a tool drop a label.
* **A labelled text result the model may not see is captured, not inlined.** :func:`model_may_see`
  asks the tenant's policy (:func:`refvault.policy.decide` for the model recipient and the
  Toolbox's purpose): a local vault's, or the one an HTTP client's server reports. With no policy
  (none set, or none to be had) the built-in meanings hold: a result derived from ``pii``, ``secret`` or
  ``confidential`` input is captured and the model gets its descriptor and size, never its text.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from refvault.errors import Forbidden, RefvaultError
from refvault.model import LABEL_MEANINGS, Scope, check_labels
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.model import Descriptor
    from refvault.policy import Policy
    from refvault.toolbox.ref import DispatchFrame

__all__ = [
    "WITHHELD_BY_DEFAULT",
    "ContextReads",
    "input_labels",
    "model_may_see",
    "model_recipient",
    "recipient_name",
    "tenant_policy",
    "tool_recipient",
    "watch_labelled",
]

WITHHELD_BY_DEFAULT = frozenset(LABEL_MEANINGS)
"""Labels whose text a model is not shown inline unless a policy allows it: ``pii``, ``secret``, ``confidential``."""


def input_labels(frame: DispatchFrame, refs: Iterable[str]) -> frozenset[str]:
    """The union of the labels of the artifacts a call received by ``Ref`` (resolved in ``frame``)."""
    found: set[str] = set()
    for ref in refs:
        found |= frame.descriptor(ref).labels
    return frozenset(found)


def model_recipient(model: str | None) -> str:
    """The recipient a model is: ``model:<name>`` (``model:unknown`` when not told), the name reduced to what a
    recipient allows (``_`` for any other character)."""
    return "model:" + recipient_name(model)


def recipient_name(name: str | None) -> str:
    """``name`` reduced to what a recipient's name allows: ``_`` for any other character, at most 122 characters."""
    return re.sub(r"[^A-Za-z0-9._:/@+-]", "_", name or "")[:122] or "unknown"


def model_may_see(
    vault: VaultContract, scope: Scope, labels: frozenset[str], *, model: str | None, purpose: str
) -> bool:
    """Whether text derived from inputs carrying ``labels`` may go inline to the model.

    No labels: yes. Else the tenant's policy decides (a local vault's, or the one a client's server
    reports), for :func:`model_recipient` and ``purpose``; with no policy (none set, or none to be had)
    only labels without a built-in meaning pass (:data:`WITHHELD_BY_DEFAULT`).
    """
    if not labels:
        return True
    policy = tenant_policy(vault, scope)
    if policy is not None:
        from refvault.policy import decide

        return decide(policy, labels, purpose, model_recipient(model)).allowed
    return not (labels & WITHHELD_BY_DEFAULT)


def tenant_policy(vault: VaultContract, scope: Scope) -> Policy | None:
    """The tenant's policy: a local vault's ``policy(tenant)``, a client's ``policy(scope)`` (asked of its server).

    None when none is set or it cannot be had (a policy that cannot be read falls back to the built-in meanings).
    """
    try:
        embedded = getattr(vault, "embedded_vault", None)
        if callable(embedded):
            policy: Policy | None = embedded().policy(scope.tenant)
            return policy
        lookup = getattr(vault, "policy", None)
        return lookup(scope) if callable(lookup) else None
    except Exception:
        return None


_TRACKED = frozenset(
    {"describe", "read_bytes", "read_range", "stream", "open_artifact", "verify_artifact", "read_selection"}
)
"""The vault methods whose second argument names an artifact the tool reads (the first is the scope)."""


class ContextReads:
    """The vault a tool's :class:`~refvault.toolbox.ToolContext` hands it: the Toolbox's own, watched.

    Every artifact the tool reads through it is noted with its labels (looked up once, for the tool's
    purpose and recipient); :meth:`labels` and :attr:`read` are what the call's result then carries. A
    ``put`` through it carries the call's labels (its ``Ref`` inputs' and every one read so far) and names
    those artifacts in ``derived_from``, whatever labels it asked for besides. Anything else is the
    vault's own attribute. Thread-safe.
    """

    def __init__(
        self,
        vault: VaultContract,
        *,
        purpose: str,
        recipient: str,
        labels: frozenset[str],
        refs: tuple[str, ...],
    ) -> None:
        self._vault = vault
        self._purpose = purpose
        self._recipient = recipient
        self._labels = labels
        self._refs = refs
        self._lock = threading.Lock()
        self.read: dict[str, frozenset[str]] = {}
        """The artifacts the tool read through this vault, and their labels."""
        self.written: list[str] = []
        """The artifacts the tool put through this vault, in order."""

    def labels(self) -> frozenset[str]:
        """The union of the labels of every artifact the tool read through this vault."""
        with self._lock:
            return frozenset().union(*self.read.values())

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._vault, name)
        if name == "put":
            return self._put
        if name == "declassify":
            raise Forbidden("a tool cannot remove a label: only the artifact's owner declassifies, outside a tool call")
        if name not in _TRACKED:
            return value

        def read(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            scope = args[0] if args else kwargs.get("scope")
            artifact_id = args[1] if len(args) > 1 else kwargs.get("artifact_id")
            request = args[2] if len(args) > 2 else kwargs.get("request")  # read_selection's request type
            purpose = kwargs.get("purpose") or getattr(request, "purpose", None) or DEFAULT_PURPOSE
            recipient = kwargs.get("recipient") or getattr(request, "recipient", None) or DEFAULT_RECIPIENT
            if isinstance(scope, Scope) and isinstance(artifact_id, str):
                self._note(scope, artifact_id, purpose, recipient)
            return result

        return read

    def _note(self, scope: Scope, artifact_id: str, purpose: str, recipient: str) -> None:
        """Note the labels of an artifact just read, looked up for the same reader as the read (so a policy that
        allowed the read allows the lookup). A lookup that fails now fails the call: no label is dropped."""
        with self._lock:
            if artifact_id in self.read:
                return
        found = self._vault.describe(scope, artifact_id, purpose=purpose, recipient=recipient)
        with self._lock:
            self.read[found.artifact_id] = found.labels

    def _put(self, scope: Scope, data: object, **metadata: Any) -> Any:
        asked = metadata.get("labels")
        labels = check_labels(() if asked is None else asked) | self._labels | self.labels()
        named = [*(metadata.get("derived_from") or ()), *self._refs, *self.read]
        metadata["labels"] = labels
        metadata["derived_from"] = tuple(dict.fromkeys(named))
        stored = self._vault.put(scope, data, **metadata)
        artifact_id = getattr(stored, "artifact_id", None)
        if isinstance(artifact_id, str):
            with self._lock:
                self.written.append(artifact_id)
        return stored


def tool_recipient(name: str) -> str:
    """The recipient a tool is: ``tool:<name>``, its name reduced to what a recipient allows (``_`` for the rest)."""
    return "tool:" + recipient_name(name)


def watch_labelled(
    guard: object,
    vault: VaultContract,
    scope: Scope,
    text: str,
    owners: set[str],
    known: Mapping[str, Descriptor],
    *,
    model: str | None,
    purpose: str,
) -> None:
    """Have ``guard`` watch ``text`` for every labelled artifact among ``owners`` it shows the model.

    The model was allowed to see it; a later request carrying it to a recipient the tenant's policy
    denies those labels (another model, say) is then stopped at the LLM edge (:meth:`LeakGuard.watch
    <refvault.guard.LeakGuard.watch>`). A guard without ``watch`` is not told.
    """
    watch = getattr(guard, "watch", None)
    if watch is None:
        return
    for owner in owners:
        descriptor = known.get(owner)
        if descriptor is None:
            try:
                to = model_recipient(model)
                descriptor = vault.describe(scope, owner, purpose=purpose, recipient=to)
            except RefvaultError:
                continue
        if descriptor.labels:
            watch(owner, text, descriptor.labels)
