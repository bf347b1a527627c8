"""Pydantic AI: retry prompts that echo arguments are checked, and toolbox refusals spend no retries.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

from agents import set_tracing_disabled

from refvault import Toolbox, Vault
from tests.integrations.scripted import (
    SCOPE,
    Call,
    canary,
    drive,
    leaky_box,
    once,
    sealed,
    steps,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


# -- Pydantic AI: retries ---------------------------------------------------------------------------------------------


def test_pydantic_ai_retry_prompts_that_echo_arguments_are_checked(vault: Vault) -> None:
    """Unparseable arguments make Pydantic AI echo them back in a retry prompt: with the value protected, stopped."""
    secret = canary()
    doc = sealed(vault, SCOPE, secret)
    box = leaky_box(vault)
    box.guard.protect_scope(vault, SCOPE)
    raw = f'{{"doc": "{doc}", "guess": "{secret}"'  # not JSON: the closing brace is missing
    run = drive("pydantic_ai", box, SCOPE, once(("compare", raw)))

    assert run.leak is not None, run.error
    assert len(run.seen) == 1


def test_pydantic_ai_toolbox_refusals_spend_no_retries(vault: Vault) -> None:
    """Five refused calls in a row (bad ids, bad types, unknown fields): the run goes on, each a failed return."""
    box = Toolbox(vault)
    doc = vault.put(SCOPE, b"alpha beta", media_type="text/plain").artifact_id
    bad: list[Call] = [
        ("read_artifact", {"artifact_id": "art_" + "b" * 26}),
        ("read_artifact", {"artifact_id": doc, "lines": "all"}),
        ("read_artifact", {"artifact_id": doc, "nonsense": 1}),
        ("load_artifacts", {"artifact_ids": []}),
        ("describe_artifact", {}),
    ]
    run = drive(
        "pydantic_ai", box, SCOPE, steps([[call] for call in bad] + [[("read_artifact", {"artifact_id": doc})]])
    )

    assert run.error is None, run.error
    assert run.output == "done"
    assert ["error: " in r for r in run.results] == [True] * 5 + [False]
    assert "alpha beta" in run.results[-1]
