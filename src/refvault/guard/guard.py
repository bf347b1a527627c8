"""The leak guard: protected bytes, the two arms, the policies and the event.

See :mod:`refvault.guard` for the invariants and :mod:`refvault.guard.fingerprints` for the matching guarantee.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from refvault import tracing
from refvault.errors import ContextLeak, InvalidArgument, InvalidType
from refvault.guard.base64_scan import base64_runs
from refvault.guard.compiling import compile_all
from refvault.guard.findings import EVENT, Finding, Policy, event_line, marker
from refvault.guard.fingerprints import MIN_MATCH_RANGE, FingerprintIndex, Match, Params
from refvault.guard.folding import fold
from refvault.guard.payloads import base64_payloads, hex_payloads, payload_digest
from refvault.guard.pieces import Coverage, Piece, Short, locate, pieces_of
from refvault.guard.redaction import LeafHits, redact_leaf, whole_marker
from refvault.guard.requests import Leaf, normalized_form, payload_views, views, walk
from refvault.model import check_labels
from refvault.observe import guard_stopped
from refvault.policy import DEFAULT_PURPOSE, check_purpose, check_recipient, decide
from refvault.policy import Policy as DisclosurePolicy

if TYPE_CHECKING:
    from refvault.contract import VaultContract
    from refvault.model import Scope

__all__ = ["EVENT", "Finding", "LeakGuard", "Policy", "marker"]

_LOGGER: Final = logging.getLogger("refvault.guard")
_BATCH_BYTES: Final = 16 << 20  # protect_many hashes up to this much per kernel call
_MAX_ADMITTED: Final = 10_000  # payloads admitted past the size arm, most recent kept
_MAX_DISCLOSED: Final = 10_000  # texts refvault showed the model from model-disclosed artifacts, most recent kept
PIECE_K: Final = 16
"""The k-gram length of the piece arm: pieces of fewer bytes are never counted."""
_DECODE_DEPTH: Final = 3  # encodings decoded inside one another (base64 of base64 of hex, ...)
_DECODE_BUDGET: Final = 4  # decoded bytes per scan: at most this many times the scanned bytes (and 1 MiB)
_PIECE_CACHE: Final = 4096  # leaves whose piece-arm chains are remembered (most recent)
_MAX_LABELLED: Final = 100_000  # artifacts whose labels the guard remembers (most recent)
_UNKNOWN_MODEL: Final = "model:unknown"

PolicySource = DisclosurePolicy | Callable[[], DisclosurePolicy | None]
"""A tenant's disclosure policy, or a callable that returns the current one (None: no policy)."""
StopSink = Callable[[Sequence[Finding], str, str], None]
"""Told of each refused or redacted request: its findings, its recipient and its purpose (never content)."""
PassSink = Callable[[Sequence[tuple[str, str, int]], str, str], None]
"""Told of each request let through that carries allowed artifacts' content: ``(artifact_id, sha256 of the
request part, its byte count)`` each, the recipient and the purpose (never content)."""


class _Scanned(NamedTuple):
    leaves: list[Leaf]
    hits: dict[int, LeafHits]
    shorts: list[Short]
    denied: dict[str, str | None]  # artifacts found that the policy denies to the recipient -> the rule
    recipient: str
    purpose: str
    passed: dict[int, frozenset[str]]  # leaf -> allowed artifacts (watched, or disclosed) found in it


class LeakGuard:
    """Refuses (or redacts) outgoing LLM requests that carry protected bytes or oversized tool payloads.

    ``min_match``: every verbatim span of at least this many protected bytes is found (32 to 2**20).
    ``size_threshold``: tool output, tool-call arguments and data payloads of at least this many bytes
    are flagged. ``policy``: ``"raise"`` (:class:`ContextLeak`) or ``"redact"`` (a redacted copy).
    ``piece_min``: the piece arm counts pieces of an artifact of this many bytes or more (16 to
    ``min_match``; None turns the arm off); ``piece_limit``: the bytes of any ``2 * min_match``
    stretch of one artifact that such pieces may cover in a run (default ``1.5 * min_match``);
    ``piece_budget``: the arm covers the most recently protected bytes, at least this many (it
    indexes about 4.6 bytes per byte at ``piece_min = 20``: 4 MiB by default); see :meth:`check`.
    ``disclosure``: the tenant's disclosure policy (:class:`refvault.policy.Policy`, or a callable
    returning the current one), applied at the LLM edge to the artifacts labelled here (:meth:`label`,
    :meth:`watch`); see :meth:`check`. ``on_stop(findings, recipient, purpose)`` is called each time
    :meth:`check` refuses or redacts a request, before it raises or returns (a Toolbox audits the stop
    with it); an exception from it propagates, so the request is still not sent. ``on_pass(passes,
    recipient, purpose)`` is called when :meth:`check` lets a request through that carries content of an
    artifact it recognises and the policy allows there (a watched one, or text refvault showed the model):
    ``passes`` holds ``(artifact_id, sha256_hex, byte_count)`` of each request part that carried it (a
    Toolbox records them in the disclosure ledger); never the content.
    """

    def __init__(
        self,
        min_match: int = 64,
        size_threshold: int = 128 * 1024,
        *,
        policy: Policy = "raise",
        piece_min: int | None = 20,
        piece_limit: int | None = None,
        piece_budget: int = 4 << 20,
        disclosure: PolicySource | None = None,
        on_stop: StopSink | None = None,
        on_pass: PassSink | None = None,
    ) -> None:
        if isinstance(min_match, bool) or not isinstance(min_match, int):
            raise InvalidArgument("min_match must be an integer")
        if not MIN_MATCH_RANGE[0] <= min_match <= MIN_MATCH_RANGE[1]:
            raise InvalidArgument(f"min_match must be between {MIN_MATCH_RANGE[0]} and {MIN_MATCH_RANGE[1]}")
        if isinstance(size_threshold, bool) or not isinstance(size_threshold, int) or size_threshold < 1:
            raise InvalidArgument("size_threshold must be a positive integer")
        if policy not in ("raise", "redact"):
            raise InvalidArgument("policy must be 'raise' or 'redact'")
        if piece_min is not None and (
            isinstance(piece_min, bool) or not isinstance(piece_min, int) or not PIECE_K <= piece_min <= min_match
        ):
            raise InvalidArgument(f"piece_min must be None or an integer between {PIECE_K} and min_match")
        window = 2 * min_match
        if piece_limit is not None and (
            isinstance(piece_limit, bool) or not isinstance(piece_limit, int) or not PIECE_K <= piece_limit <= window
        ):
            raise InvalidArgument(f"piece_limit must be None or an integer between {PIECE_K} and 2 * min_match")
        if isinstance(piece_budget, bool) or not isinstance(piece_budget, int) or piece_budget < 1:
            raise InvalidArgument("piece_budget must be a positive integer")
        if disclosure is not None and not (isinstance(disclosure, DisclosurePolicy) or callable(disclosure)):
            raise InvalidArgument("disclosure must be a refvault.policy.Policy, a callable returning one, or None")
        if on_stop is not None and not callable(on_stop):
            raise InvalidArgument("on_stop must be a callable (findings, recipient, purpose) or None")
        if on_pass is not None and not callable(on_pass):
            raise InvalidArgument("on_pass must be a callable (passes, recipient, purpose) or None")
        self.disclosure = disclosure
        self.on_stop = on_stop
        self.on_pass = on_pass
        self.min_match = min_match
        self.size_threshold = size_threshold
        self.policy: Policy = policy
        self.piece_min = piece_min
        self.piece_limit = 3 * min_match // 2 if piece_limit is None else piece_limit
        self.piece_window = window
        self.piece_budget = piece_budget
        self.params = Params.for_min_match(min_match)
        self._floor = self.params.threshold if piece_min is None else piece_min  # the shortest span either arm sees
        # A string of fewer bytes (of fewer characters than a quarter of that) no arm can flag.
        self._min_bytes = max(1, min(self._floor, size_threshold))
        self._min_chars = max(1, self._min_bytes // 4)
        self._index = FingerprintIndex(self.params)
        self._pieces = (
            None
            if piece_min is None
            else FingerprintIndex(Params(piece_min, PIECE_K, piece_min - PIECE_K + 1), budget=piece_budget, unique=True)
        )
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()  # the pieces sent in this run
        self._sent: dict[str, Coverage] = {}  # artifact -> the protected coordinates its pieces sent cover
        self._piece_cache: OrderedDict[tuple[str, int, int], tuple[int, list[Short]]] = OrderedDict()  # leaf -> chains
        self._seen: set[tuple[str, bytes]] = set()  # in the index
        self._admitted: dict[bytes, None] = {}  # digests of payloads admitted past the size arm (insertion order)
        self._disclosed: dict[bytes, frozenset[str]] = {}  # digest of a text shown the model -> artifacts it shows
        self._pending: dict[tuple[str, bytes], threading.Event] = {}  # being added by some thread
        self._labels: dict[str, frozenset[str]] = {}  # artifact -> its labels (most recent kept)
        self._protected_ids: set[str] = set()  # artifacts protect()ed: any finding of them stops
        self._watched: set[str] = set()  # artifacts indexed by watch() only: a finding counts if the policy denies
        compile_all(LeakGuard, when_uncached=False)  # the first guard in a process: every kernel, compiled once

    # -- protecting ------------------------------------------------------------------------------------------------

    def protect(self, artifact_id: str, data: bytes | str) -> None:
        """Protect ``data`` (str: its UTF-8) under ``artifact_id``. Protecting the same bytes again is a no-op."""
        self.protect_many([(artifact_id, data)])

    def protect_many(self, items: Iterable[tuple[str, bytes | str]]) -> int:
        """Protect many ``(artifact_id, data)`` at once (hashed in large batches); return how many were new.

        Returns only once every item is in the index: bytes another thread is protecting right now are
        waited for (and protected here if that thread fails).
        """
        return self._protect_many(items, watched=False)

    def _protect_many(self, items: Iterable[tuple[str, bytes | str]], *, watched: bool) -> int:
        ids: set[str] = set()
        batch: list[tuple[str, bytes]] = []
        keys: list[tuple[str, bytes]] = []
        waits: list[tuple[threading.Event, tuple[str, bytes], str, bytes]] = []
        size = 0
        added = 0
        try:
            for artifact_id, data in items:
                raw = _checked(artifact_id, data)
                ids.add(artifact_id)
                key = (artifact_id, hashlib.blake2b(raw, digest_size=16).digest())
                with self._lock:
                    if key in self._seen:
                        continue
                    pending = self._pending.get(key)
                    if pending is not None:
                        waits.append((pending, key, artifact_id, raw))
                        continue
                    self._pending[key] = threading.Event()
                batch.append((artifact_id, raw))
                keys.append(key)
                size += len(raw)
                added += 1
                if size >= _BATCH_BYTES:
                    self._add(batch, keys)
                    batch, keys, size = [], [], 0
            self._add(batch, keys)
            if not watched:
                with self._lock:  # protected now: any finding of these stops, policy or not
                    self._protected_ids |= ids
                    self._watched -= ids
        except BaseException:
            with self._lock:  # claimed but never added (an invalid item, say): let others go on
                for key in keys:
                    event = self._pending.pop(key, None)
                    if event is not None:
                        event.set()
            raise
        for event, key, artifact_id, raw in waits:
            event.wait()
            with self._lock:
                done = key in self._seen
            if not done:  # the other thread failed: protect them here
                added += self._protect_many([(artifact_id, raw)], watched=watched)
        return added

    def _add(self, batch: list[tuple[str, bytes]], keys: list[tuple[str, bytes]]) -> None:
        ok = False
        try:
            if batch:
                # Text that Unicode normalisation changes is indexed in both forms by the content arm (the
                # verbatim guarantee holds for the raw form) and in its normal form only by the piece arm
                # (whose pieces must each name one protected place).
                normal = [normalized_form(raw) for _, raw in batch]
                self._index.add(batch)
                forms = [(aid, n) for (aid, _), n in zip(batch, normal, strict=True) if n is not None]
                if forms:
                    self._index.add(forms, counted=False)
                if self._pieces is not None:
                    # Only the most recent piece_budget bytes are kept: the head of a larger batch is skipped.
                    recent: list[tuple[str, bytes]] = []
                    size = 0
                    for (aid, raw), n in zip(reversed(batch), reversed(normal), strict=True):
                        if size >= self.piece_budget:
                            break
                        recent.append((aid, raw if n is None else n))
                        size += len(recent[-1][1])
                    self._pieces.add(recent[::-1])
            ok = True
        finally:
            with self._lock:  # on failure not protected after all: a later protect() must try again
                for key in keys:
                    if ok:
                        self._seen.add(key)
                    event = self._pending.pop(key, None)
                    if event is not None:
                        event.set()

    def protect_scope(self, vault: VaultContract, scope: Scope) -> int:
        """Protect every sealed artifact of ``scope`` (``vault.list`` / ``vault.read_bytes``); return their number."""
        sealed = [d.artifact_id for d in vault.list(scope) if d.disclosure == "sealed"]
        self.protect_many((artifact_id, vault.read_bytes(scope, artifact_id)) for artifact_id in sealed)
        return len(sealed)

    def exempt_payload(self, payload: str) -> None:
        """Let this exact base64 ``payload`` (as a field or in a data URL) past the size arm; the content arm stays.

        For content the model asked for on purpose: the Toolbox admits every
        image ``load_artifacts`` loads (a model-disclosed artifact, up to its own
        cap), so a framework that sends it as a data URL is not refused for its
        size. Matching ignores the base64 alphabet (standard or URL-safe) and
        padding; the most recent 10,000 payloads are remembered.
        """
        digest = payload_digest(payload)
        with self._lock:
            self._admitted.pop(digest, None)
            self._admitted[digest] = None
            while len(self._admitted) > _MAX_ADMITTED:
                del self._admitted[next(iter(self._admitted))]

    def exempt_disclosed(self, text: str, artifact_ids: Iterable[str]) -> None:
        """Let this exact ``text`` carry the content of ``artifact_ids`` in later requests: it was disclosed on purpose.

        For what refvault itself showed the model of model-disclosed artifacts: an offload preview, a read
        tool's answer. A tool that later reads one of them by reference protects it, and the preview already
        in the conversation must not then count as a leak. The exemption is narrow: a leaf whose text is
        exactly ``text`` (by digest) is not flagged for ``artifact_ids``; any other artifact found in it, and
        the same content anywhere else (a tool pasting it into its own result), still is. Never call it with
        a sealed artifact's id. The most recent 10,000 texts are remembered.
        """
        owners = frozenset(artifact_ids)
        if not owners:
            return
        digest = _text_digest(text)
        with self._lock:
            owners |= self._disclosed.pop(digest, frozenset())
            self._disclosed[digest] = owners
            while len(self._disclosed) > _MAX_DISCLOSED:
                del self._disclosed[next(iter(self._disclosed))]

    def label(self, artifact_id: str, labels: Iterable[str]) -> None:
        """Remember an artifact's labels, for the disclosure policy (see :meth:`check`); the latest call wins."""
        checked = check_labels(labels)
        with self._lock:
            self._labels.pop(artifact_id, None)
            self._labels[artifact_id] = checked
            while len(self._labels) > _MAX_LABELLED:
                del self._labels[next(iter(self._labels))]

    def watch(self, artifact_id: str, text: bytes | str, labels: Iterable[str]) -> None:
        """Index ``text`` of a labelled artifact that refvault showed a model, for the disclosure policy only.

        A watched artifact's content in a later request is not a leak by itself (the model was allowed to
        see it); it stops the request only when the policy denies the artifact's labels to that request's
        recipient (another model, say). An artifact also protected (:meth:`protect`) stays protected.
        """
        self.label(artifact_id, labels)
        with self._lock:
            if artifact_id not in self._protected_ids:
                self._watched.add(artifact_id)
        self._protect_many([(artifact_id, text)], watched=True)

    # -- checking --------------------------------------------------------------------------------------------------

    def scan(self, request: object, *, recipient: str | None = None, purpose: str = DEFAULT_PURPOSE) -> list[Finding]:
        """Findings of every arm for ``request`` (a dict, list, str, bytes or SDK model); empty if it is clean.

        The piece arm counts the pieces this run has sent (see :meth:`check`) but records nothing: a scan
        reports what :meth:`check` would find, and changes nothing.
        """
        scanned = self._scan(request, recipient, purpose)
        with self._run_lock:
            return self._findings(scanned, self._totals(scanned.shorts))

    def check(self, request: object, *, recipient: str | None = None, purpose: str = DEFAULT_PURPOSE) -> object:
        """``request`` itself if clean; else raise :class:`ContextLeak` or return a redacted copy (per policy).

        The disclosure policy (``disclosure``): the request goes to ``recipient`` (default: ``model:<the
        request's "model" field>``, else ``model:unknown``) for ``purpose``. Content of an artifact whose
        labels (:meth:`label`) the policy denies to that recipient is a finding naming the rule
        (``Finding.rule_id``), even where it would otherwise pass: a text refvault disclosed to another
        model (:meth:`exempt_disclosed`), a watched artifact (:meth:`watch`). Content of a watched artifact
        the policy allows is not a finding; a protected one's always is. Tested in
        ``tests/guard/test_guard_policy.py``.

        The piece arm: short pieces of an artifact (``piece_min`` bytes or more; each found by a
        fingerprint the protected set holds once, so common boilerplate never counts) that this guard's
        checks let through are remembered as the protected bytes they cover. A request whose pieces,
        with those already sent, would cover ``piece_limit`` bytes or more of some ``piece_window``
        (``2 * min_match``) consecutive bytes of one artifact is refused (or those pieces redacted): a
        passage sent piece by piece adds up; unrelated text that shares common phrases with a large
        artifact, spread over it, does not. A run is this guard's lifetime, or until :meth:`new_run`.
        Pieces of a refused request are not remembered (they were not sent), so what a run sends of
        one passage stays under ``piece_limit``; nor are pieces in a leaf where the content arm found the
        same artifact (it is refused, or redacted and its copy counted). Tested in
        ``tests/security/test_guard_transforms.py``.

        Traced as a ``refvault.guard.check`` span (:mod:`refvault.tracing`): the number of findings and the
        outcome (``ok``, ``redacted`` or ``ContextLeak``), never the request.
        """
        with tracing.span("refvault.guard.check") as traced:
            try:
                checked, findings = self._check(request, recipient, purpose)
            except ContextLeak as exc:
                traced.set(tracing.FINDINGS, len(exc.findings))
                raise
            traced.set(tracing.FINDINGS, len(findings))
            if findings:
                traced.set(tracing.OUTCOME, "redacted")
            return checked

    def _check(self, request: object, recipient: str | None, purpose: str) -> tuple[object, list[Finding]]:
        scanned = self._scan(request, recipient, purpose)
        with self._run_lock:  # the decision and the record of what is sent, at once
            totals = self._totals(scanned.shorts)
            findings = self._findings(scanned, totals)
            if not findings:
                self._remember(scanned.shorts)
            elif self.policy == "raise":
                self._log(findings)
                self._stopped(findings, scanned)
                guard_stopped(findings)
                raise ContextLeak(findings)
            else:
                redacted, sent = self._redact(request, scanned, totals, findings)
                self._remember(sent)
        if not findings:
            self._passed(scanned)
            return request, findings
        self._log(findings)
        self._stopped(findings, scanned)
        return redacted, findings

    def _passed(self, scanned: _Scanned) -> None:
        """Tell ``on_pass`` which request parts carried content of artifacts the policy allows there."""
        if self.on_pass is None or not scanned.passed:
            return
        passes = []
        for index, owners in sorted(scanned.passed.items()):
            value = scanned.leaves[index].value
            data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value or b"")
            digest = hashlib.sha256(data).hexdigest()
            passes += [(owner, digest, len(data)) for owner in sorted(owners)]
        self.on_pass(passes, scanned.recipient, scanned.purpose)

    def _stopped(self, findings: Sequence[Finding], scanned: _Scanned) -> None:
        if self.on_stop is not None:
            self.on_stop(findings, scanned.recipient, scanned.purpose)

    def new_run(self) -> None:
        """Start a new run: forget the pieces sent so far, and the piece arm's cache (the protected index stays)."""
        with self._run_lock:
            self._sent.clear()
        with self._lock:
            self._piece_cache.clear()

    def redact_text(self, text: str) -> tuple[str, list[Finding]]:
        """``text`` with protected spans replaced by ``[refvault:<artifact_id>]``, and the findings (site ``text``).

        Returns ``text`` itself when nothing was found. Does not log (the caller decides). The content arm
        only: log lines and spans are not part of a run's pieces.
        """
        leaves = [Leaf("text", "text", text, None)]
        hits, _ = self._content(leaves, pieces=False)
        if not hits:
            return text, []
        findings = self._findings(_Scanned(leaves, hits, [], {}, _UNKNOWN_MODEL, DEFAULT_PURPOSE, {}), {})
        redacted = redact_leaf(hits[0], None)
        for _ in range(2):
            again, _ = self._content([Leaf("text", "text", redacted, None)], pieces=False)
            if not again:
                return redacted, findings
            redacted = redact_leaf(again[0], None)
        return whole_marker(hits[0]), findings

    # -- the arms --------------------------------------------------------------------------------------------------

    def _scan(self, request: object, recipient: str | None, purpose: str) -> _Scanned:
        """Leaves, content hits, and the piece-arm chains that count: not those in a leaf where the content arm
        found the same artifact (that leaf is stopped, or redacted and scanned again, already)."""
        to = _recipient(request) if recipient is None else check_recipient(recipient)
        purpose = check_purpose(purpose)
        leaves: list[Leaf] = []
        walk(request, leaves.append, min_chars=self._min_chars, min_bytes=self._min_bytes)
        hits, shorts = self._content(leaves)
        denied: dict[str, str | None] = {}
        passed: dict[int, frozenset[str]] = {}
        if hits or shorts:
            owners = {short.owner for short in shorts}
            for entry in hits.values():
                owners |= {owner for owner, _ in entry.cover} | entry.whole | {span[2] for span in entry.spans}
            denied = self._denied(owners, to, purpose)
            with self._lock:
                quiet = frozenset(owner for owner in owners if owner in self._watched and owner not in denied)
            if quiet or self._disclosed:
                hits, shorts, passed = self._without_disclosed(leaves, hits, shorts, quiet, denied)
        found = {(i, owner) for i, entry in hits.items() for owner, _ in entry.cover}
        kept = [s for s in shorts if (s.leaf, s.owner) not in found]
        return _Scanned(leaves, hits, kept, denied, to, purpose, passed)

    def _denied(self, owners: set[str], recipient: str, purpose: str) -> dict[str, str | None]:
        """The artifacts of ``owners`` whose labels the disclosure policy denies to ``recipient``, and the rule."""
        source = self.disclosure
        policy = source if source is None or isinstance(source, DisclosurePolicy) else source()
        if policy is None:
            return {}
        with self._lock:
            labels = {owner: self._labels.get(owner, frozenset()) for owner in owners}
        denied: dict[str, str | None] = {}
        for owner, names in labels.items():
            decision = decide(policy, names, purpose, recipient)
            if not decision.allowed:
                denied[owner] = decision.rule_id
        return denied

    def _without_disclosed(
        self,
        leaves: Sequence[Leaf],
        hits: dict[int, LeafHits],
        shorts: list[Short],
        quiet: frozenset[str],
        denied: Mapping[str, str | None],
    ) -> tuple[dict[int, LeafHits], list[Short], dict[int, frozenset[str]]]:
        """Hits and chains less those of artifacts a leaf shows because refvault disclosed it (exempt_disclosed)
        and of watched artifacts the policy allows (``quiet``); never of one the policy denies (``denied``).
        Also which of those each leaf carried (what passes, for ``on_pass``)."""
        exempt: dict[int, frozenset[str]] = {}
        with self._lock:
            for i in {*hits, *(s.leaf for s in shorts)}:
                value = leaves[i].value
                shown = None if value is None or not self._disclosed else self._disclosed.get(_text_digest(value))
                passing = quiet if not shown else quiet | frozenset(o for o in shown if o not in denied)
                if passing:
                    exempt[i] = passing
        if not exempt:
            return hits, shorts, {}
        passed: dict[int, frozenset[str]] = {}
        for i, entry in hits.items():
            found = (
                {key[0] for key in entry.cover} | {span[2] for span in entry.spans} | entry.whole | set(entry.pieces)
            )
            if found & exempt.get(i, frozenset()):
                passed[i] = frozenset(found & exempt[i])
        for short in shorts:
            if short.owner in exempt.get(short.leaf, frozenset()):
                passed[short.leaf] = passed.get(short.leaf, frozenset()) | {short.owner}
        kept: dict[int, LeafHits] = {}
        for i, entry in hits.items():
            owners = exempt.get(i)
            if owners:
                entry.cover = {key: extents for key, extents in entry.cover.items() if key[0] not in owners}
                entry.spans = [span for span in entry.spans if span[2] not in owners]
                entry.whole -= owners
                entry.pieces = {owner: n for owner, n in entry.pieces.items() if owner not in owners}
                if not (entry.cover or entry.spans or entry.whole or entry.pieces):
                    continue
            kept[i] = entry
        return kept, [s for s in shorts if s.owner not in exempt.get(s.leaf, frozenset())], passed

    def _content(self, leaves: Sequence[Leaf], *, pieces: bool = True) -> tuple[dict[int, LeafHits], list[Short]]:
        """Content-arm hits per leaf and (with ``pieces``) piece-arm chains, over every view and decoded run.

        Decoded runs (base64, hex) are scanned like text: their own views, and the runs inside them, to
        ``_DECODE_DEPTH`` encodings deep and at most ``_DECODE_BUDGET`` times the scanned bytes (and 1 MiB).
        The piece arm's chains of a leaf depend on its bytes and the piece index only: they are cached
        per leaf until the index changes, so a run's history, sent again with every request, is not
        scanned by that arm again.
        """
        t = self.params.threshold
        index = self._pieces if pieces else None
        floor = t if index is None else self._floor
        raws: dict[int, bytes] = {}
        scanned: list[Piece] = []
        shorts: list[Short] = []
        fresh: dict[int, tuple[str, int, int]] = {}  # leaves the piece arm scans: their cache keys
        generation = index.generation if index is not None else 0
        for i, leaf in enumerate(leaves):
            value = leaf.value
            if value is None or len(value) * (1 if isinstance(value, bytes) else 4) < floor:
                continue
            raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
            if len(raw) < floor:
                continue
            raws[i] = raw
            if index is not None:
                key: tuple[str, int, int] = (leaf.kind, len(value), hash(value))  # a str caches its (keyed) hash
                with self._lock:
                    cached = self._piece_cache.get(key)
                    if cached is not None:
                        self._piece_cache.move_to_end(key)
                if cached is not None and cached[0] == generation:
                    shorts += (short._replace(leaf=i) for short in cached[1])
                else:
                    fresh[i] = key
            for view in views(leaf, raw, t):
                scanned.extend(pieces_of(i, view, floor, None))
        hits: dict[int, LeafHits] = {}
        found: list[Short] = []
        budget = max(1 << 20, _DECODE_BUDGET * sum(len(p.data) for p in scanned))
        for depth in range(_DECODE_DEPTH + 1):
            if not scanned:
                break
            arm = (index if fresh else None, fresh, found, floor)
            scanned, budget = self._scan_pieces(scanned, leaves, raws, hits, arm, depth < _DECODE_DEPTH, budget)
        if index is not None and fresh:
            by_leaf: dict[int, list[Short]] = {i: [] for i in fresh}
            for short in found:
                by_leaf[short.leaf].append(short)
            with self._lock:
                for i, key in fresh.items():
                    self._piece_cache[key] = (generation, by_leaf[i])
                while len(self._piece_cache) > _PIECE_CACHE:
                    del self._piece_cache[next(iter(self._piece_cache))]
        return hits, shorts + found

    def _scan_pieces(
        self,
        pieces: list[Piece],
        leaves: Sequence[Leaf],
        raws: dict[int, bytes],
        hits: dict[int, LeafHits],
        arm: tuple[FingerprintIndex | None, dict[int, tuple[str, int, int]], list[Short], int],
        decode: bool,
        budget: int,
    ) -> tuple[list[Piece], int]:
        """Match ``pieces``; record hits (and, if ``arm`` has an index, the piece-arm chains of the leaves it
        names, in its list); return the pieces of the runs decoded in their text (to scan next) and the
        budget left."""
        index, fresh, shorts, floor = arm
        buf_bytes = b"".join(p.data for p in pieces)
        buf = np.frombuffer(buf_bytes, np.uint8)
        starts = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum([len(p.data) for p in pieces], out=starts[1:])
        folded = fold(buf, starts)
        for m in self._index.match(folded, starts, folded=True):
            self._record(m, pieces[m.piece], int(starts[m.piece]), leaves, raws, hits)
        if index is not None:
            chosen = [j for j, p in enumerate(pieces) if p.leaf in fresh and p.view.text]
            sub, sub_starts = folded, starts
            if len(chosen) < len(pieces):  # some leaves' chains are cached: scan the others only
                sub = np.concatenate([folded[starts[j] : starts[j + 1]] for j in chosen] or [folded[:0]])
                sub_starts = np.zeros(len(chosen) + 1, np.int64)
                np.cumsum([len(pieces[j].data) for j in chosen], out=sub_starts[1:])
            for m in index.match(sub, sub_starts, folded=True):
                piece = pieces[chosen[m.piece]]
                span = locate(m.start, m.end, piece, int(sub_starts[m.piece]), leaves[piece.leaf])
                shorts.append(Short(piece.leaf, m.owner, m.coord, m.coord + m.verified, span))
        if not decode:
            return [], budget
        t = self.params.threshold
        runs = base64_runs(buf, starts, -(-4 * t // 3))
        decoded: list[Piece] = []
        for j in range(0, runs.size, 2):
            start, end = int(runs[j]), int(runs[j + 1])
            at = int(np.searchsorted(starts, start, side="right")) - 1
            piece = pieces[at]
            if not piece.view.textual:
                continue
            origin = piece.origin
            if origin is None:
                lo = start - int(starts[at]) + piece.offset
                hi = end - int(starts[at]) + piece.offset
                mapping = piece.view.mapping
                origin = (mapping.start(lo), mapping.end(hi)) if mapping else (lo, hi)
            run = buf_bytes[start:end]
            for payload in [*base64_payloads(run, t), *hex_payloads(run, t)]:
                budget -= len(payload)
                if budget < 0:  # deliberately deep or wide encodings: out of reach (documented)
                    return decoded, 0
                for view in payload_views(payload, t):
                    decoded.extend(pieces_of(piece.leaf, view, floor, origin))
        return decoded, budget

    @staticmethod
    def _record(
        m: Match, piece: Piece, offset: int, leaves: Sequence[Leaf], raws: dict[int, bytes], hits: dict[int, LeafHits]
    ) -> None:
        leaf = leaves[piece.leaf]
        entry = hits.get(piece.leaf)
        if entry is None:
            entry = hits[piece.leaf] = LeafHits(leaf, raws[piece.leaf], [], set(), {})
        entry.cover.setdefault((m.owner, id(piece)), []).append((m.start, m.end))
        span = locate(m.start, m.end, piece, offset, leaf)
        if span is None:
            entry.whole.add(m.owner)
        else:
            entry.spans.append((span[0], span[1], m.owner))

    # -- the piece arm ---------------------------------------------------------------------------------------------

    def _totals(self, shorts: Sequence[Short]) -> dict[str, int]:
        """Per artifact with pieces here: the most bytes of any ``piece_window`` stretch of it that this run's
        pieces with these would cover (lock held)."""
        spans: dict[str, list[tuple[int, int]]] = {}
        for short in shorts:
            spans.setdefault(short.owner, []).append((short.lo, short.hi))
        empty = Coverage()
        return {owner: self._sent.get(owner, empty).densest(new, self.piece_window) for owner, new in spans.items()}

    def _remember(self, shorts: Sequence[Short]) -> None:
        """Record the pieces of a request that is sent (lock held)."""
        for short in shorts:
            self._sent.setdefault(short.owner, Coverage()).add(short.lo, short.hi)

    # -- findings --------------------------------------------------------------------------------------------------

    def _findings(self, scanned: _Scanned, totals: dict[str, int]) -> list[Finding]:
        leaves, hits = scanned.leaves, scanned.hits
        over = {owner: total for owner, total in totals.items() if total >= self.piece_limit}
        pieces: dict[int, set[str]] = {}
        for short in scanned.shorts:
            if short.owner in over:
                pieces.setdefault(short.leaf, set()).add(short.owner)
        findings: list[Finding] = []
        threshold = self.size_threshold
        for i, leaf in enumerate(leaves):
            entry = hits.get(i)
            if entry is not None or i in pieces:
                matched = entry.matched if entry is not None else {}
                rules = scanned.denied
                findings += [Finding(leaf.site, owner, n, "content", rules.get(owner)) for owner, n in matched.items()]
                findings += [
                    Finding(leaf.site, owner, over[owner], "pieces", rules.get(owner))
                    for owner in sorted(pieces.get(i, ()))
                    if owner not in matched
                ]
            size = leaf.size
            if size is not None and size >= threshold and not self._is_admitted(leaf):
                findings.append(Finding(leaf.site, None, size, "size"))
        return findings

    def _is_admitted(self, leaf: Leaf) -> bool:
        if leaf.kind != "data" or not isinstance(leaf.value, str) or not self._admitted:
            return False
        digest = payload_digest(leaf.value)
        with self._lock:
            return digest in self._admitted

    # -- redaction and events --------------------------------------------------------------------------------------

    def _redact(
        self, request: object, scanned: _Scanned, totals: dict[str, int], findings: list[Finding]
    ) -> tuple[object, list[Short]]:
        """The redacted copy, and the pieces it still sends (of artifacts under ``piece_limit``)."""
        leaves, hits = scanned.leaves, scanned.hits
        for short in scanned.shorts:  # pieces of an artifact over the limit go like content hits
            if totals.get(short.owner, 0) < self.piece_limit:
                continue
            entry = hits.get(short.leaf)
            if entry is None:
                value = leaves[short.leaf].value
                raw = value if isinstance(value, bytes) else (value or "").encode("utf-8", "surrogatepass")
                entry = hits[short.leaf] = LeafHits(leaves[short.leaf], raw, [], set(), {})
            entry.pieces[short.owner] = totals[short.owner]
            if short.span is None:
                entry.whole.add(short.owner)
            else:
                entry.spans.append((short.span[0], short.span[1], short.owner))
        oversized = {f.site: f.matched for f in findings if f.arm == "size"}
        by_site = {leaves[i].site: entry for i, entry in hits.items()}

        def replace(leaf: Leaf) -> object:
            if leaf.site in oversized:
                text = f"[refvault:omitted {oversized[leaf.site]} bytes]"
                if leaf.value is None:
                    return {"refvault": text}
                return text.encode() if isinstance(leaf.value, bytes) else text
            entry = by_site.get(leaf.site)
            if entry is None:
                return None
            return redact_leaf(entry, leaf.value)

        redacted = walk(request, replace, rewrite=True, min_chars=self._min_chars, min_bytes=self._min_bytes)
        again = self._scan(redacted, scanned.recipient, scanned.purpose)
        remaining = [f for f in self._findings(again, self._totals(again.shorts)) if f.arm != "size"]
        if remaining:  # cannot happen by construction; never send what the guard still sees
            guard_stopped(remaining)
            raise ContextLeak(remaining)
        return redacted, again.shorts

    def _log(self, findings: Sequence[Finding]) -> None:
        _LOGGER.warning(
            event_line(findings, self.policy),
            extra={"event": EVENT, "findings": [f.to_dict() for f in findings], "policy": self.policy},
        )

    # -- accounting ------------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts only: artifacts, protected bytes, fingerprints, index bytes, segments, k, w; the piece arm's
        fingerprints and index bytes (0 when it is off)."""
        pieces = self._pieces
        return {
            "artifacts": self._index.artifact_count,
            "protected_bytes": self._index.protected_bytes,
            "fingerprints": self._index.fingerprint_count,
            "index_bytes": self._index.nbytes,
            "segments": self._index.segment_count,
            "k": self.params.k,
            "w": self.params.w,
            "piece_fingerprints": 0 if pieces is None else pieces.fingerprint_count,
            "piece_index_bytes": 0 if pieces is None else pieces.nbytes,
        }

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"LeakGuard(min_match={self.min_match}, size_threshold={self.size_threshold}, policy={self.policy!r}, "
            f"piece_min={self.piece_min}, piece_limit={self.piece_limit}, "
            f"artifacts={s['artifacts']}, protected_bytes={s['protected_bytes']}, "
            f"fingerprints={s['fingerprints']}, index_bytes={s['index_bytes']})"
        )

    def __reduce__(self) -> Any:
        raise InvalidType("a LeakGuard cannot be pickled")


def _recipient(request: object) -> str:
    """``model:<name>`` from the request's ``model`` field (a mapping's key or an attribute), else ``model:unknown``."""
    model = request.get("model") if isinstance(request, Mapping) else getattr(request, "model", None)
    if not isinstance(model, str) or not model:
        return _UNKNOWN_MODEL
    try:
        return check_recipient("model:" + model)
    except InvalidArgument:  # a name the policy's patterns could not be meant for
        return _UNKNOWN_MODEL


def _checked(artifact_id: str, data: bytes | str) -> bytes:
    if not isinstance(artifact_id, str) or not artifact_id:
        raise InvalidArgument("artifact_id must be a non-empty string")
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidArgument("protected data must be bytes or str")


def _text_digest(value: str | bytes) -> bytes:
    """The digest :meth:`LeakGuard.exempt_disclosed` keys a text by (its UTF-8 bytes)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16, person=b"refvault-shown").digest()
