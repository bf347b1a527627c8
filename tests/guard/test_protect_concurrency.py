"""Protecting the same bytes from several threads at once never returns before they are protected.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

import threading

from refvault.guard import LeakGuard
from tests.guard.protected import ART, EXCERPT, SECRET, _ids, _tool

# -- 4. protect() returns before the bytes are protected when another thread protects them --------------------------


def test_leak_concurrent_protect_of_the_same_bytes_returns_early() -> None:
    g = LeakGuard()
    entered, release = threading.Event(), threading.Event()
    real_add = g._index.add

    def slow_add(items: list[tuple[str, bytes]]) -> int:
        if items:  # the first caller's batch: hashing a large artifact takes a while
            entered.set()
            release.wait(10)
        return real_add(items)

    g._index.add = slow_add  # type: ignore[method-assign]
    first = threading.Thread(target=g.protect, args=(ART, SECRET))
    first.start()
    try:
        assert entered.wait(10)
        threading.Timer(0.3, release.set).start()  # the first caller finishes a moment later
        g.protect(ART, SECRET)  # the second caller must wait for it, not return at once trusting it
        findings = g.scan(_tool(EXCERPT))  # ...and the tool's output is checked right away
    finally:
        release.set()
        first.join(10)
    assert _ids(findings) == {ART}
