"""The leak guard: no protected bytes leave in an LLM request, a log line or a span.

::

    from refvault.guard import LeakGuard
    guard = LeakGuard(min_match=64, size_threshold=128 * 1024)
    guard.protect(artifact_id, data)        # or guard.protect_scope(vault, scope): every sealed artifact
    findings = guard.scan(request)          # OpenAI chat / responses, Anthropic messages, Gemini contents, dict, str
    guard.check(request)                    # raises ContextLeak(findings) if any (policy "redact": a redacted copy)

Invariants, how each is enforced, and where it is tested (``tests/guard/test_guard.py``):

Content arm: every verbatim span of at least ``min_match`` protected bytes is found.
    Winnowed k-gram fingerprints with ``w = min_match // 2`` and ``k = min_match - w + 1``,
    so the guarantee threshold ``w + k - 1`` is ``min_match`` (64 → k = 33, w = 32); see
    :mod:`refvault.guard.fingerprints` for the argument. The only exceptions: spans whose every
    33-byte window repeats with a period dividing 12 (runs of one byte, ``"ababab"``) or is at
    least half separators (indentation, rules), which carry no secret. Sites: plain text, tool
    results, tool-call arguments, dict keys, after decoding JSON string escapes (two levels), data
    URLs, base64 fields and base64 runs inside text. A finding's ``matched`` is at least
    ``min_match`` and at most the span + 2(w - 1); nothing under ``k`` verified bytes is ever
    reported (spans of ``k`` to ``min_match - 1`` bytes may be). A finding names the artifact; an
    excerpt made only of boilerplate held more than 64 times is named after 64 of its holders.
    Tested by planting random excerpts in every site kind of every request format (recall 1.0), at
    ``min_match`` and ``min_match - 1``, and by 100 MB of unrelated prose and JSON (no finding).
Content arm, through trivial transforms: the same holds for a copy that was case-changed, had its
    word separators swapped (space, ``_ - . / \\ , : ; | + ~``, tab, line breaks: one for one), had
    zero-width or other format characters sprinkled in, was written in full-width or other NFKC
    compatibility forms, percent-encoded, hex-encoded, or base64/hex-encoded inside one another up
    to three deep. Both sides go through one normalisation: text (runs of 16 or more text bytes) is
    folded byte for byte (:data:`~refvault.guard.fingerprints.FOLD`: lower case, separators to a
    space), and text that NFKC, case folding and dropping ignorable characters change
    (:func:`~refvault.guard.requests.normalize_text`) is indexed, and scanned, in that form too;
    decodings (percent, hex, base64) apply to outgoing text only, whose decoded text is then
    normalised like any other. Tested in ``tests/security/test_guard_transforms.py``.
Piece arm: pieces too short for the content arm add up over a run. Pieces of ``piece_min`` (20)
    bytes or more of the most recently protected ``piece_budget`` bytes are found (winnowed 16-byte
    k-grams, ``w = piece_min - 15``; only k-grams the protected set holds once count); the bytes
    they verify are remembered per artifact for what :meth:`LeakGuard.check` lets through, and a
    request is refused once the pieces sent would cover ``piece_limit`` (96) bytes of some
    ``2 * min_match`` stretch of one artifact. Tested in ``tests/security/test_guard_transforms.py``
    (a passage sent 20 bytes per request is stopped by the sixth; clean traffic adds up to nothing).
Scan cost is linear in the request and independent of how much is protected.
    Each selected request k-gram costs one filter probe and, for about 1 in 8, a directory probe
    per index segment (O(log n) segments). Measured by ``bench/guard.py``.
Protecting is safe: the index holds keyed fingerprints and artifact ids, never bytes.
    About 0.85 bytes of index per protected byte at ``min_match = 64`` (and the piece arm about
    4.6 per byte of its budget); ``repr`` and
    :meth:`LeakGuard.stats` show counts only; findings, :class:`~refvault.errors.ContextLeak`
    messages and ``llm.context_leak`` log records carry sites, ids, sizes and arms only.
Size arm (the peer's check, kept): tool output, tool-call arguments and data payloads of
    ``size_threshold`` bytes or more are flagged; conversation text is exempt. Tested at the
    threshold and one byte under. ``exempt_payload(payload)`` lets one exact base64 payload past this arm
    (never past the content arm): the Toolbox admits each image ``load_artifacts`` loads, which the
    model asked for (``tests/toolbox/test_guard_protection.py::test_images_load_artifacts_loads_*``).
Policies: ``raise`` (default) raises ``ContextLeak``; ``redact`` returns a deep copy with each
    protected span replaced by ``[refvault:<artifact_id>]`` (a binary payload as a whole; an
    oversized payload by ``[refvault:omitted N bytes]``), re-scanned before it is returned. Both
    log one WARNING line on the ``refvault.guard`` logger (``refvault guard: request blocked as intended:
    it carried protected artifact art_... (site); nothing was sent``: ids and sites only), with the fields
    ``event`` (``llm.context_leak``), ``findings`` and ``policy`` for log pipelines.
Thread-safe: ``protect`` may run while other threads scan; a scan sees a consistent snapshot.

The hooks (:class:`GuardedTransport`, :class:`LogRedactor`, :class:`GuardSpanProcessor`,
:class:`GuardedSpanExporter`) live in :mod:`refvault.guard.hooks`; what the Toolbox and the hooks need of
a guard (:class:`~refvault.guard.contract.Guard`) and how a hook finds its guard
(:func:`~refvault.guard.contract.resolve_guard`) in :mod:`refvault.guard.contract`. Every name here is
imported on first use, so importing the contract does not compile the guard's kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refvault.errors import ContextLeak
from refvault.lazy import lazy_exports

if TYPE_CHECKING:
    from refvault.guard.contract import Guard, GuardHolder, RequestChecker, resolve_guard
    from refvault.guard.guard import EVENT, Finding, LeakGuard, Policy, marker
    from refvault.guard.hooks import (
        AsyncGuardedTransport,
        GuardedSpanExporter,
        GuardedTransport,
        GuardSpanProcessor,
        LogRedactor,
    )

__all__ = [
    "EVENT",
    "AsyncGuardedTransport",
    "ContextLeak",
    "Finding",
    "Guard",
    "GuardHolder",
    "GuardSpanProcessor",
    "GuardedSpanExporter",
    "GuardedTransport",
    "LeakGuard",
    "LogRedactor",
    "Policy",
    "RequestChecker",
    "marker",
    "resolve_guard",
]

_EXPORTS = {
    "EVENT": "refvault.guard.guard",
    "Finding": "refvault.guard.guard",
    "LeakGuard": "refvault.guard.guard",
    "Policy": "refvault.guard.guard",
    "marker": "refvault.guard.guard",
    "Guard": "refvault.guard.contract",
    "GuardHolder": "refvault.guard.contract",
    "RequestChecker": "refvault.guard.contract",
    "resolve_guard": "refvault.guard.contract",
    "GuardedTransport": "refvault.guard.hooks",
    "AsyncGuardedTransport": "refvault.guard.hooks",
    "LogRedactor": "refvault.guard.hooks",
    "GuardSpanProcessor": "refvault.guard.hooks",
    "GuardedSpanExporter": "refvault.guard.hooks",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
