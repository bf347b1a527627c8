"""LangChain with the guard: however the callback is attached, ToolMessage artifacts carry ids only, sync invoke
inside a running loop.

Every test drives a real framework (OpenAI Agents SDK, LangChain, Pydantic AI, Google ADK, the MCP SDK) with a
scripted model: no network, no API key.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import set_tracing_disabled
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call

from refvault import Ref, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.integrations import langchain as rv_langchain
from tests.integrations.scripted import (
    SCOPE,
    LangChainScripted,
    Run,
    canary,
    forms,
    once,
    rich_secret,
    sealed,
)

set_tracing_disabled(True)  # nothing may try to export traces over the network


# -- LangChain: how the guard is attached, ToolMessage.artifact, the sync path ----------------------------------------


def _lc_attempt(model: Any, how: str, prompt: str) -> bool:
    """Whether the guard stopped ``how`` (invoke, stream, batch or ainvoke) of ``prompt``."""
    messages = [HumanMessage(prompt)]
    try:
        if how == "invoke":
            model.invoke(messages)
        elif how == "stream":
            list(model.stream(messages))
        elif how == "batch":
            model.batch([[HumanMessage("hello")], messages])
        else:
            asyncio.run(model.ainvoke(messages))
    except ContextLeak:
        return True
    return False


@pytest.mark.parametrize("how", ["invoke", "stream", "batch", "ainvoke"])
def test_langchain_guard_survives_how_it_is_attached(how: str) -> None:
    """The three ways that keep the callback stop the request; the one that does not is a LangChain pitfall
    (``with_config`` before ``bind_tools``), documented in the adapter: this pins it."""
    box = Toolbox(Vault.open("memory://"))
    secret = canary()
    box.guard.protect("art_" + "q" * 26, secret.encode())
    guard = rv_langchain.LeakGuardCallback(box)
    run = Run()
    lc_tools = rv_langchain.tools(box, scope=SCOPE)
    kept = {
        "bind_tools_then_with_config": LangChainScripted(plan=once(), run=run)
        .bind_tools(lc_tools)
        .with_config(callbacks=[guard]),
        "callbacks_field": LangChainScripted(plan=once(), run=run, callbacks=[guard]).bind_tools(lc_tools),
        "with_config_of_the_field_model": LangChainScripted(plan=once(), run=run, callbacks=[guard])
        .with_config(tags=["x"])
        .bind_tools(lc_tools),
    }
    for name, model in kept.items():
        assert _lc_attempt(model, how, f"say {secret}"), name
    assert not any(secret in seen for seen in run.seen)

    dropped = LangChainScripted(plan=once(), run=run).with_config(callbacks=[guard]).bind_tools(lc_tools)
    assert not _lc_attempt(dropped, how, f"say {secret}")  # the pitfall: the callback never ran
    assert any(secret in seen for seen in run.seen)


def test_langchain_tool_message_artifact_carries_ids_only(vault: Vault) -> None:
    """``ToolMessage.artifact`` (never sent) holds the captured artifacts' summaries: ids and metadata, no content."""
    secret = rich_secret()
    doc = sealed(vault, SCOPE, secret)
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def expand(doc: Ref) -> str:
        """A large text derived from the document (offloaded)."""
        return "\n".join(f"{i}: {doc.text()}" for i in range(200))

    @box.tool
    def render(doc: Ref) -> bytes:
        """Bytes derived from the document (captured)."""
        return doc.read()

    by_name = {tool.name: tool for tool in rv_langchain.tools(box, scope=SCOPE)}
    for name in ("expand", "render"):
        message = by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id=f"call_{name}"))
        assert isinstance(message, ToolMessage)
        assert message.status == "success"
        (summary,) = message.artifact
        assert set(summary) == {"artifact_id", "media_type", "size", "content_hash", "disclosure"}
        assert summary["disclosure"] == "sealed"
        assert summary["artifact_id"] in str(message.content)
        dumped = message.model_dump_json()
        for form in forms(secret):
            assert form not in dumped


def test_langchain_sync_invoke_inside_a_running_loop(vault: Vault) -> None:
    """``tool.invoke`` (sync) from code that runs inside an event loop, as in a notebook cell.

    Found in review: an async Toolbox tool raised ``RuntimeError: asyncio.run() cannot be called from a
    running event loop`` out of ``invoke`` (LangChain does not handle it) and left a coroutine never awaited."""
    doc = vault.put(SCOPE, b"one two three four", media_type="text/plain").artifact_id
    box = Toolbox(vault)

    @box.tool
    async def count_words_async(doc: Ref) -> int:
        """Count the words of a document (async)."""
        await asyncio.sleep(0)
        return len(doc.text().split())

    @box.tool
    def count_words(doc: Ref) -> int:
        """Count the words of a document."""
        return len(doc.text().split())

    by_name = {tool.name: tool for tool in rv_langchain.tools(box, scope=SCOPE)}

    async def notebook_cell() -> list[Any]:
        return [
            by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id=f"c_{name}"))
            for name in by_name
            if name.startswith("count")
        ]

    outside = [
        by_name[name].invoke(tool_call(name=name, args={"doc": doc}, id="c"))
        for name in ("count_words_async", "count_words")
    ]
    inside = asyncio.run(notebook_cell())
    assert [message.content for message in [*outside, *inside]] == ["4"] * 4
    assert all(message.status == "success" for message in inside)
