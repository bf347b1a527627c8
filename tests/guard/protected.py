"""The protected text, its excerpt and carriers shared by the guard's review tests."""

from __future__ import annotations

import base64
import random

ART = "art_review"


def _text(size: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(size))


SECRET = _text(4000, seed=61)
EXCERPT = SECRET[1000:1200]  # 200 bytes: far above min_match


def _tool(content: str) -> dict[str, object]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "c1", "content": content},
        ],
    }


def _ids(findings: list[object]) -> set[str | None]:
    return {getattr(f, "artifact_id", None) for f in findings if getattr(f, "arm", None) == "content"}


B64 = base64.b64encode(EXCERPT.encode()).decode()
