"""Child process for ``tests/security/test_crash.py``: capture artifacts until killed.

Usage: ``python crash_writer.py STORE SEED [--broken]``; the test forks it from a forkserver
(:func:`forked_main`).

Opens the embedded store at STORE, prints ``ready``, then runs two threads
that loop forever over puts (fresh, shared and idempotent content, inline- and
file-sized), with the occasional delete and ``gc``. Every line is flushed
before the next action, so whatever the parent reads after a SIGKILL is
exactly what was acknowledged:

* ``ack <id> <tenant> <user> <session> <content_hash> <key or -> <tag>``
  once ``put`` has returned;
* ``del <id> <tenant> <user> <session>`` *before* a delete starts (the parent
  then no longer requires that artifact to exist);
* ``gc <blobs removed> <temporaries removed>`` after a ``gc``;
* ``err <put|gc> <exception type>`` for a put or gc that failed cleanly.

Content is a pure function of its tag (:func:`content_of`), and the tag is
stored in each artifact's ``source_version``, so the checker can recompute the
exact bytes of every listed artifact, acknowledged or not.

``--broken`` installs a deliberately wrong publish order (see
:func:`install_manifest_first`): it commits the manifest, pauses, and only
then renames the blob into place, so a kill during the pause leaves a
published reference to missing bytes. The parent uses it to prove that the
checker catches such bugs.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
import time
import traceback
from typing import Any

KIB = 1024
MIB = 1024 * KIB
TENANTS = ("t0", "t1")
USER = "u"
SESSIONS = ("s0", "s1", "s2")
POOL = 48  # shared and idempotent content comes from a bounded pool: dedup, replay, and bounded disk use
EDGE_SIZES = (0, 1, 32 * KIB, 32 * KIB + 1, MIB, MIB + 1, 2 * MIB + 5)
BROKEN_PAUSE = 0.3
THREADS = 2  # concurrent puts in one process share publish transactions (group commit)


def size_of(tag: str) -> int:
    """A size derived from the tag: mostly inline-sized or small files, a few multi-chunk files."""
    rng = random.Random("size:" + tag)
    roll = rng.random()
    if roll < 0.03:
        return rng.choice(EDGE_SIZES)
    if roll < 0.5:
        return rng.randint(100, 30 * KIB)
    if roll < 0.97:
        return rng.randint(40 * KIB, 160 * KIB)
    return rng.randint(MIB, 3 * MIB)


def content_of(tag: str) -> bytes:
    """The exact bytes captured under ``tag`` (deterministic in every process)."""
    return random.Random("data:" + tag).randbytes(size_of(tag))


def content_hash_of(tag: str) -> str:
    return "sha256:" + hashlib.sha256(content_of(tag)).hexdigest()


def all_scopes() -> list[tuple[str, str, str]]:
    return [(tenant, USER, session) for tenant in TENANTS for session in SESSIONS]


def install_manifest_first() -> None:
    """Break "publish after durable": commit the manifest first, make the blob visible later."""
    from refvault.catalog.sql import SqlCatalog

    original = SqlCatalog.publish

    def manifest_first(self: SqlCatalog, items: Any, make_visible: Any) -> Any:
        results = original(self, items, lambda: None)  # manifest rows commit; the blob is still in tmp/
        time.sleep(BROKEN_PAUSE)
        make_visible()
        return results

    SqlCatalog.publish = manifest_first  # type: ignore[method-assign]


_say_lock = threading.Lock()


def say(line: str) -> None:
    with _say_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def capture_forever(vault: Any, seed: int) -> None:
    """One writer thread: puts, some deletes of its own artifacts, the odd gc."""
    import refvault
    from refvault.errors import StorageError

    rng = random.Random(seed)
    mine: list[tuple[str, tuple[str, str, str]]] = []  # own non-idempotent artifacts, candidates for delete
    for n in range(10**9):
        roll = rng.random()
        if roll < 0.01:
            try:
                report = vault.gc(grace=rng.choice((0.5, 5.0)))
                say(f"gc {report.blobs_removed} {report.temporaries_removed}")
            except StorageError as exc:
                say(f"err gc {type(exc).__name__}")
            continue
        if roll < 0.04 and mine:
            artifact_id, where = mine.pop(rng.randrange(len(mine)))
            say(f"del {artifact_id} {' '.join(where)}")
            vault.delete(refvault.Scope(*where), artifact_id)
            continue
        where = rng.choice(all_scopes())
        key = None
        if roll < 0.25:
            pick = rng.randrange(POOL)
            key, tag = f"idem-{pick}", f"pool-{pick}"
        elif roll < 0.6:
            tag = f"pool-{rng.randrange(POOL)}"
        else:
            tag = f"fresh-{seed}-{n}"
        try:
            descriptor = vault.put(
                refvault.Scope(*where),
                content_of(tag),
                source_version={"tag": tag},
                idempotency_key=key,
                run_id=None if key else f"seed-{seed}",  # a retry must be the same capture, run id included
            )
        except StorageError as exc:  # a storage failure is a clean, reported failure: nothing published
            say(f"err put {type(exc).__name__}")
            continue
        say(f"ack {descriptor.artifact_id} {' '.join(where)} {descriptor.content_hash} {key or '-'} {tag}")
        if key is None:
            mine.append((descriptor.artifact_id, where))


def main(argv: list[str]) -> None:
    store, seed = argv[0], int(argv[1])
    if "--broken" in argv[2:]:
        install_manifest_first()

    import refvault

    vault = refvault.Vault.open(store)
    say("ready")

    def run(thread_seed: int) -> None:
        try:
            capture_forever(vault, thread_seed)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)  # an unexpected error must end the child, so the parent sees it

    threads = [threading.Thread(target=run, args=(seed * THREADS + i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def forked_main(argv: list[str], out: str, err: str) -> None:
    """:func:`main` in a process forked by the test (not started from a command line): stdout to ``out``, stderr to
    ``err``."""
    sys.stdout = open(out, "w", buffering=1)  # noqa: SIM115 - the process's stdout until it is killed
    sys.stderr = open(err, "w", buffering=1)  # noqa: SIM115
    os.dup2(sys.stderr.fileno(), 2)  # what the interpreter itself writes (a fatal error) goes there too
    main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
