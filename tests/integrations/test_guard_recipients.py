"""Every framework adapter hands the guard the model a request goes to, so the tenant's disclosure policy decides per
model: the same request carrying a ``pii`` artifact's text is stopped on its way to a denied model (naming the rule)
and sent to an allowed one. Real framework packages; scripted models (no network)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from uuid import uuid4

import pytest
from agents import Agent, set_tracing_disabled
from agents.run import CallModelData, ModelInputData
from google.adk.models.llm_request import LlmRequest
from google.genai import types as genai
from langchain_core.messages import HumanMessage
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refvault.errors import ContextLeak
from refvault.guard import LeakGuard
from refvault.integrations import langchain as rv_langchain
from refvault.integrations import openai_agents as rv_openai
from refvault.integrations import pydantic_ai as rv_pydantic
from refvault.integrations.adk import guard_callback
from refvault.policy import Policy, Rule

set_tracing_disabled(True)

PII_ID = "art_" + "p" * 26
PII_TEXT = (
    "customer record: Jane Roe, jane.roe@example.com, phone 555-0100, lives at 42 Birch Lane, Springfield; "
    "account opened 2019, last contact about the overdue invoice number 7781, flagged for follow-up"
)
POLICY = Policy([Rule(id="no-pii-to-gpt", labels={"pii"}, recipients=("model:gpt-*",), action="deny")])
DENIED, ALLOWED = "gpt-4.1", "claude-sonnet-4"


def _guard() -> LeakGuard:
    guard = LeakGuard(disclosure=POLICY)
    guard.watch(PII_ID, PII_TEXT, {"pii"})  # what refvault showed a model of a pii artifact
    return guard


def _langchain(model: str) -> None:
    callback = rv_langchain.LeakGuardCallback(_guard())
    callback.on_chat_model_start({}, [[HumanMessage(PII_TEXT)]], run_id=uuid4(), invocation_params={"model": model})


def _openai_agents(model: str) -> None:
    check = rv_openai.guard_model_input(_guard())
    data = CallModelData(
        model_data=ModelInputData(input=[{"role": "user", "content": PII_TEXT}], instructions=None),
        agent=Agent(name="analyst", model=model),
        context=None,
    )
    asyncio.run(check(data))  # type: ignore[arg-type]


def _pydantic_ai(model: str) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")])

    agent = PydanticAgent(rv_pydantic.GuardedModel(FunctionModel(answer, model_name=model), _guard()))
    agent.run_sync(PII_TEXT)


def _adk(model: str) -> None:
    request = LlmRequest(model=model, contents=[genai.Content(role="user", parts=[genai.Part(text=PII_TEXT)])])
    guard_callback(_guard())(None, request)  # type: ignore[arg-type]


ADAPTERS: dict[str, Callable[[str], None]] = {
    "langchain": _langchain,
    "openai_agents": _openai_agents,
    "pydantic_ai": _pydantic_ai,
    "adk": _adk,
}


@pytest.mark.parametrize("framework", sorted(ADAPTERS))
def test_the_adapter_passes_the_model_name_so_the_policy_stops_a_denied_model_only(framework: str) -> None:
    send = ADAPTERS[framework]
    with pytest.raises(ContextLeak) as caught:
        send(DENIED)
    assert {(f.artifact_id, f.rule_id) for f in caught.value.findings} == {(PII_ID, "no-pii-to-gpt")}
    assert "no-pii-to-gpt" in str(caught.value)
    send(ALLOWED)  # the same request to an allowed model goes out
