"""The long run: 200 medium tool results, a scripted model that keeps going back to earlier ones.

Measures what the context working set (:class:`refvault.context.WorkingSet`) does to a long run,
against the same run without it: the tokens of every model request (peak and total), how many
requests would not fit the model's context, how often the model brought back a cleared result, and
the thrash events. Everything is real (Toolbox with ``keep_results=True``, the vault, the read tools);
only the model's decisions are scripted, from the seed:

* each step calls ``fetch`` once, whose result is 2-40 KB of text;
* at about one step in three the model needs an earlier result (half the time one of three "hot"
  results, else any); if the request it received shows that result as a stub, it brings the result
  back with ``read_artifact`` (a reload), and the eval checks the reloaded text is exactly what the
  tool returned (``lossless``).

Figures are reported, never asserted; they depend on the seed alone.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from refvault.context import WorkingSet
from refvault.model import Scope
from refvault.toolbox.toolbox import Toolbox

__all__ = ["CALLS", "MODEL_CONTEXT_TOKENS", "run"]

CALLS = 200
MODEL_CONTEXT_TOKENS = 128_000
NEED = 0.35  # the share of steps at which the model needs an earlier result
HOT = 3  # results the model keeps going back to
WORDS = ("incident", "region", "latency", "error", "retry", "upstream", "p99", "timeout", "node", "queue")


async def run(vault: Any, scope: Scope, seed: int) -> dict[str, Any]:
    """Both runs (without and with the working set, the latter in ``scope``): their figures, side by side."""
    pages = _pages(random.Random(f"refvault-eval-long:{seed}"))
    return {
        "calls": CALLS,
        "model_context_tokens": MODEL_CONTEXT_TOKENS,
        "result_bytes": {"min": min(len(p) for p in pages), "max": max(len(p) for p in pages)},
        "without": await _run(vault, scope, pages, seed, False),
        "with": await _run(vault, scope, pages, seed, True),
    }


def _pages(rng: random.Random) -> list[str]:
    vocabulary = [f"{word}-{rng.randrange(10_000)}" for word in WORDS for _ in range(50)]
    corpus = " ".join(rng.choices(vocabulary, k=20_000))  # about 220 KB; pages are slices of it
    pages = []
    for n in range(CALLS):
        size = rng.randint(2_000, 40_000)
        start = rng.randrange(len(corpus) - size)
        pages.append(f"page {n}\n" + corpus[start : start + size - 8])
    return pages


async def _run(vault: Any, scope: Scope, pages: Sequence[str], seed: int, working: bool) -> dict[str, Any]:
    rng = random.Random(f"refvault-eval-long-model:{seed}")  # the same decisions in both runs
    box = Toolbox(vault, keep_results=True, guard=None)

    @box.tool
    def fetch(n: int) -> str:
        """Fetch page n of the incident log."""
        return pages[n]

    ws = WorkingSet(vault, scope, model_context_tokens=MODEL_CONTEXT_TOKENS, toolbox=box, run_id="long-run")
    counter = ws  # counts the run without it the same way
    ws_or_none = ws if working else None
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You investigate incidents with the tools you have."},
        {"role": "user", "content": "Read the incident log page by page and keep track of what matters."},
    ]
    result_of: dict[int, str] = {}  # page -> the tool_call_id of its fetch
    hot = rng.sample(range(20), HOT)
    tokens: list[int] = []
    reloads = lossless = 0
    calls = 0

    async def call(tool: str, arguments: Mapping[str, Any]) -> str:
        nonlocal calls
        call_id = f"call_{calls}"
        calls += 1
        text = json.dumps(arguments)
        tool_call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": text}}
        history.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
        if working:
            content = (await box.call(tool, text, scope=scope, run_id="long-run", tool_call_id=call_id)).content
        else:  # without the working set nothing is ever cleared or reloaded: the model gets the page as is
            content = fetch(**arguments)
        history.append({"role": "tool", "tool_call_id": call_id, "content": content})
        return content

    for step in range(CALLS):
        request = ws_or_none.apply(history) if ws_or_none is not None else history
        tokens.append(ws.stats.tokens_after if ws_or_none is not None else counter.tokens(history))
        if step and rng.random() < NEED:
            earlier = [p for p in hot if p < step] if rng.random() < 0.5 else []
            page = rng.choice(earlier) if earlier else rng.randrange(step)
            shown = next(m for m in request if m.get("tool_call_id") == result_of[page])
            if str(shown.get("content", "")).startswith('{"cleared"'):
                cleared = json.loads(shown["content"])["cleared"]
                artifact_id = cleared["artifacts"][0]["artifact_id"]
                answer = json.loads(await call("read_artifact", {"artifact_id": artifact_id, "max_chars": 200_000}))
                reloads += 1
                lossless += answer.get("text") == pages[page]
                if ws_or_none is not None:
                    ws_or_none.apply(history)  # the model's next request: the reload is seen by the working set
                    tokens.append(ws.stats.tokens_after)
        result_of[step] = f"call_{calls}"
        await call("fetch", {"n": step})
    figures: dict[str, Any] = {
        "requests": len(tokens),
        "peak_request_tokens": max(tokens),
        "total_request_tokens": sum(tokens),
        "requests_over_context": sum(t > MODEL_CONTEXT_TOKENS for t in tokens),
        "reloads": reloads,
        "reloads_lossless": lossless,
    }
    if ws_or_none is not None:
        figures |= {
            "budget_tokens": ws.budget,
            "thrash_events": len(ws.events),
            "restored": ws.stats.restored,
            "over_budget_requests": sum(t > ws.budget for t in tokens),
        }
    return figures
