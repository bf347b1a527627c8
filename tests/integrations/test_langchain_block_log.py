"""LangChain: an intended block by LeakGuardCallback is logged once, by the guard, with no "Error in
LeakGuardCallback" warning from LangChain; other callbacks' errors are still reported by LangChain."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage

from refvault import Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.integrations import langchain as rv_langchain
from tests.integrations.scripted import LangChainScripted, Run, canary, once

PROTECTED = "art_" + "q" * 26


def _guarded(*handlers: Any) -> tuple[Any, str]:
    box = Toolbox(Vault.open("memory://"))
    secret = canary()
    box.guard.protect(PROTECTED, secret.encode())
    model = LangChainScripted(plan=once(), run=Run(), callbacks=[rv_langchain.LeakGuardCallback(box), *handlers])
    return model, secret


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_intended_block_is_logged_once_without_a_callback_error(how: str, caplog: pytest.LogCaptureFixture) -> None:
    model, secret = _guarded()
    messages = [HumanMessage(f"say {secret}")]
    with caplog.at_level(logging.DEBUG), pytest.raises(ContextLeak):
        model.invoke(messages) if how == "invoke" else asyncio.run(model.ainvoke(messages))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == [
        f"refvault guard: request blocked as intended: it carried protected artifact {PROTECTED}"
        " (messages[0][0].content); nothing was sent"
    ]
    assert secret not in caplog.text


class _Broken(BaseCallbackHandler):
    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in another callback")


def test_other_callback_errors_are_still_reported_by_langchain(caplog: pytest.LogCaptureFixture) -> None:
    model, _ = _guarded(_Broken())
    with caplog.at_level(logging.WARNING):
        model.invoke([HumanMessage("hello")])
    assert any("Error in _Broken.on_chat_model_start callback" in r.getMessage() for r in caplog.records)
