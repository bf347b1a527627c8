"""Every python and sh block of README.md and docs/*.md runs as written; a block that fails says where it is.

How each block runs (its directive, working directory, environment) is in ``blocks.py`` and ``run.py``. A
chain (a block and the ``continue`` blocks after it) runs once; each of its blocks is its own test, named
``file:line`` of its fence. Blocks marked ``server`` run against one ``refvault serve`` for the session, with
``REFVAULT_URL`` and ``REFVAULT_API_KEY`` set (a key of tenant ``acme``, user ``ana``, every session), and
``REFVAULT_ADMIN_KEY`` (an admin key of ``acme``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.blocks import ROOT, Block, doc_files, parse_paths
from tests.docs.run import BLOCK_SECONDS, Outcome, run_chain
from tests.servers import serve

MAX_SKIPS = 8
PARSED = parse_paths(doc_files())
OUTCOMES: dict[tuple[Path, int], list[Outcome]] = {}  # by chain: each chain runs once per session


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a ``server`` block: a live ``refvault serve``, an API key for acme/ana and an admin key
    of acme (``REFVAULT_ADMIN_KEY``, user ``root``)."""
    from refvault import Vault
    from refvault.keys import create_key

    store = tmp_path_factory.mktemp("docs-server") / "store"
    with Vault.open(store) as vault:
        _, admin = create_key(vault, "acme", "root", admin=True)
    with serve(store) as live:
        yield {"REFVAULT_URL": live.url, "REFVAULT_API_KEY": live.token, "REFVAULT_ADMIN_KEY": admin}


def _cases() -> list[Any]:
    """One case per block that runs or is wrong (a wrong block fails its test); skipped blocks are not tests."""
    return [
        pytest.param(
            block,
            id=block.where,
            marks=pytest.mark.timeout(BLOCK_SECONDS * len(PARSED.chain_of(block)) + 180),
        )
        for block in PARSED.blocks
        if block.runs or block.error
    ]


@pytest.mark.parametrize("block", _cases())
def test_code_block_runs_as_written(
    block: Block, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert block.error is None, f"{block.where}: {block.error}"
    chain = PARSED.chain_of(block)
    key = (block.path, block.chain)
    if key not in OUTCOMES:
        server_env = request.getfixturevalue("docs_server") if any(b.server for b in chain) else {}
        base = tmp_path_factory.mktemp("block")
        OUTCOMES[key] = run_chain(chain, base / "work", base / "harness", server_env)
    outcome = OUTCOMES[key][chain.index(block)]
    assert outcome.ok, f"{block.where} failed:\n{outcome.detail}"


def test_readme_has_blocks_that_run() -> None:
    assert [b for b in PARSED.blocks if b.path == ROOT / "README.md" and b.runs]


def test_every_skipped_block_says_why_and_skips_are_few() -> None:
    skipped = [b for b in PARSED.blocks if b.skipped]
    assert [b.where for b in skipped if not b.reason] == [], 'each skip needs reason="..."'
    assert len(skipped) <= MAX_SKIPS, f"{len(skipped)} skipped blocks: {[b.where for b in skipped]}"


def test_run_directives_sit_right_above_a_block_that_runs() -> None:
    assert PARSED.problems == []
