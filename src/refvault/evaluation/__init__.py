"""``refvault eval``: run the safety properties against the current build and count the outcomes.

::

    from refvault.evaluation import run_eval
    report = run_eval(seed=20261106, trials=2)     # store=None: a fresh temporary store, removed after
    report.properties()                            # counts per property
    report.exit_code                               # 1 if anything release-blocking happened
    report.to_dict()                               # what ``refvault eval --json`` prints

Everything is real (vault, reads, cursors, Toolbox dispatch, leak guard,
evidence gate) on the embedded default (files + SQLite); only the model's
decisions are scripted. The battery, per trial:

* **identity substitution** (:mod:`.identity`): a second capture under the
  same filename, a read of one artifact presented as evidence for another, a
  relabelled read, a cursor replayed on another artifact or selection, an
  idempotency key reused for other bytes, stored bytes flipped / swapped /
  truncated (each read path), a damaged record derivative, a tool handed a
  Ref to damaged bytes. Each must be *detected*.
* **unauthorised disclosure** (:mod:`.disclosure`, :mod:`.edge`): every read
  path as another tenant, user and session (the same ``NotFound`` as an
  absent id, to the character), sealed content through model-facing reads,
  forged, tampered, expired (injected clock) and foreign cursors, Refs to
  another scope's ids, and leaks at the LLM edge driven by a scripted model
  in OpenAI chat format whose every request passes ``box.guard.check``.
  Each must be *blocked*; a *disclosure* is canary material (planted in every
  secret) reaching any sink: a request that passed the edge, an observation,
  a response, an error message, a tool event, an audit record or a log
  record (after the host's ``LogRedactor``).
* **false absence** and **omissions** (:mod:`.absence`): zero-match answers
  from scans cut by budgets and from partial captures must never claim
  completeness while matches exist where they were not looked for; every
  response about a partial capture must carry its omissions. Controls check
  that true absences are still concluded.
* **evidence gate** (:mod:`.gate`): unfit evidence of every kind must be
  refused with the right reason; an *unsupported commit* is a decision
  committed on evidence built to be unfit. Controls check that fit evidence
  (and evidence re-acquired after a refusal) still commits.

Once per run, the **long run** (:mod:`.long_run`) measures the context working set: 200 tool
calls of 2-40 KB with a scripted model that goes back to earlier results, with and without
:class:`refvault.context.WorkingSet` (figures only).

Once per run, not per trial, the **mis-copy run** (:mod:`.miscopy`): 1,000 ids
with one or two characters changed, dropped, doubled or swapped, resolved by
the vault; the share detected as mis-copied, the share given the original id
as the suggestion, and unknown ids wrongly called mis-copied (a figure,
reported, never asserted: the vault mints the ids).

Invariants (tested in ``tests/evaluation/test_eval.py``):

* **Deterministic counts.** Data and attempts derive from ``seed`` and the
  trial number; the vault's clock is injected and only moved on purpose, so
  counts depend on (seed, trials) alone. Figures (latency by
  ``time.perf_counter``, tokens, records scanned, bytes) are reported, never
  asserted.
* **Release-blocking.** ``exit_code`` is 1 if any disclosure, unsupported
  commit or false absence conclusion occurred, else 0 (other failures are
  counted and listed, not blocking). Broken builds in the tests prove each
  turns the code to 1.
* **Content-free report.** Attempts record outcomes (error types, reason
  codes), never content; an unexpected exception fails its attempt by type
  name only.
* **Stores are left intact.** The eval works in tenants of its own (a random
  nonce per run), restores every blob it damages, and by default runs on a
  temporary store it removes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refvault.evaluation.command import eval_command
from refvault.lazy import lazy_exports

__all__ = ["Attempt", "EvalReport", "eval_command", "run_eval"]

_LAZY = {
    "run_eval": "refvault.evaluation.run",
    "EvalReport": "refvault.evaluation.report",
    "Attempt": "refvault.evaluation.world",
}

if TYPE_CHECKING:
    from refvault.evaluation.report import EvalReport
    from refvault.evaluation.run import run_eval
    from refvault.evaluation.world import Attempt

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
