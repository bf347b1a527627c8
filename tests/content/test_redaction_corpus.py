"""Recall on a labelled corpus of planted PII and secrets, and false positives on a clean corpus.

The corpus is ``tests/data/redaction/`` (written by its ``generate.py``, which the first test re-runs): support
tickets, logs, config snippets and JSON Lines records with 400+ planted fake values, each listed with its kind in
``annotations.json``. A planted value counts as found when it no longer appears in the redactor's output (nor its
JSON-escaped spelling, nor, for a private key, any line of its body).
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from refvault.content.redactors import REDACTORS, redact_bytes

CORPUS = Path(__file__).resolve().parents[1] / "data" / "redaction"
MEDIA_TYPES = {".txt": "text/plain", ".log": "text/plain", ".jsonl": "application/x-ndjson"}
RECALL = 0.99
# The clean corpus holds about 1,000 items built to look like what the redactors find (dates, times, 4-part
# versions, 16-digit transaction references, coordinates, MAC addresses, masked and templated passwords, keys
# that name secrets but hold none). Some are undecidable from the text alone: a 16-digit reference that starts
# like a card and passes Luhn (about 1 in 10 of those starting with 4) is a card number to any validator. The
# bound allows about 1 % of the items per redactor; the count is printed on every run.
FALSE_POSITIVES = 10


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("redaction_corpus", CORPUS / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def annotations() -> list[dict[str, str]]:
    return json.loads((CORPUS / "annotations.json").read_text(encoding="utf-8"))


def redacted(name: str, redactor: str) -> str:
    data = (CORPUS / name).read_bytes()
    return redact_bytes(data, media_type=MEDIA_TYPES[Path(name).suffix], redactor=redactor).data.decode()


def gone(value: str, output: str) -> bool:
    if value in output or json.dumps(value)[1:-1] in output:
        return False
    return all(line not in output for line in value.splitlines() if len(line) >= 16)


def test_the_corpus_is_what_the_generator_writes() -> None:
    for name, text in generator().build().items():
        assert (CORPUS / name).read_text(encoding="utf-8") == text, f"run tests/data/redaction/generate.py ({name})"


def test_the_corpus_plants_enough_values_of_every_kind() -> None:
    planted = annotations()
    assert len(planted) >= 300
    kinds = Counter((a["redactor"], a["kind"]) for a in planted)
    for name, spec in REDACTORS.items():
        for kind in spec.kinds:
            assert kinds[name, kind] >= 10, (name, kind)


@pytest.mark.parametrize("redactor", sorted(REDACTORS))
def test_recall(redactor: str) -> None:
    planted = [a for a in annotations() if a["redactor"] == redactor]
    outputs = {name: redacted(name, redactor) for name in {a["file"] for a in planted}}
    missed = [a for a in planted if not gone(a["value"], outputs[a["file"]])]
    found = Counter(a["kind"] for a in planted if a not in missed)
    recall = 1 - len(missed) / len(planted)
    print(f"\n{redactor}: recall {recall:.4f} ({len(planted) - len(missed)}/{len(planted)}); by kind {dict(found)}")
    for a in missed:
        print(f"  missed {a['kind']} in {a['file']}")
    assert recall >= RECALL
    assert set(found) == set(REDACTORS[redactor].kinds)


@pytest.mark.parametrize("redactor", sorted(REDACTORS))
def test_false_positives_on_the_clean_corpus(redactor: str) -> None:
    found: Counter[str] = Counter()
    for name in ("clean.txt", "clean.jsonl"):
        data = (CORPUS / name).read_bytes()
        outcome = redact_bytes(data, media_type=MEDIA_TYPES[Path(name).suffix], redactor=redactor)
        found.update(outcome.matches)
        for before, after in zip(data.decode().splitlines(), outcome.data.decode().splitlines(), strict=True):
            if before != after:
                print(f"\n  {name}: {before[:160]!r}\n  -> {after[:160]!r}")
    print(f"\n{redactor}: {sum(found.values())} false positives on the clean corpus {dict(found)}")
    assert sum(found.values()) <= FALSE_POSITIVES
