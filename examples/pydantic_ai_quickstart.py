"""refvault in Pydantic AI, offline: a scripted FunctionModel passes an artifact id to a Ref tool, reads an
offloaded result back by window, and the guard stops a tool that leaks a sealed secret.

    python examples/pydantic_ai_quickstart.py
"""

from __future__ import annotations

import json
import re
import secrets
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.integrations.pydantic_ai import GuardedModel, toolset

PLAN: list[tuple[str, str]] = []  # the tool calls the scripted model makes next, in order


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Pretend to be an LLM: make the next scripted call, filling in ids from what came back."""
    last = messages[-1]
    parts = last.parts if isinstance(last, ModelRequest) else []
    seen = " ".join(str(p.content) for p in parts if isinstance(p, UserPromptPart | ToolReturnPart))
    if not PLAN:  # no more calls: answer with the last tool result
        answer = [p.model_response_str() for p in parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart(answer[-1] if answer else "nothing to do")])
    name, args = PLAN.pop(0)
    ids = re.findall(r"art_[a-z2-7]+", seen)
    return ModelResponse(parts=[ToolCallPart(name, json.loads(args.replace("$ID", ids[0] if ids else "")))])


with tempfile.TemporaryDirectory() as tmp, Vault.open(Path(tmp) / "store") as vault:
    scope = Scope("acme", "ana", "s1")
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def count_words(doc: Ref) -> int:
        """Count the words of a document (the tool reads the bytes; the model passes only the id)."""
        return len(doc.text().split())

    @box.tool
    def service_log() -> str:
        """The service log: far too long for the context window, so it is offloaded with a preview."""
        return "\n".join(f"{i:05d} GET /orders 200 {i % 97} ms" for i in range(5000))

    @box.tool
    def leaky(doc: Ref) -> str:
        """A misbehaving tool that returns what it read."""
        return doc.text()

    agent = Agent(GuardedModel(FunctionModel(scripted), box.guard), toolsets=[toolset(box, scope=scope)])

    report = vault.put(scope, b"refvault keeps large outputs out of the prompt " * 40, media_type="text/plain")
    PLAN[:] = [("count_words", '{"doc": "$ID"}')]
    print("1. Ref tool:", agent.run_sync(f"How many words in {report.artifact_id}?").output, "words")

    PLAN[:] = [("service_log", "{}"), ("read_artifact", '{"artifact_id": "$ID", "lines": [2500, 2502]}')]
    window = json.loads(agent.run_sync("What happened around line 2500?").output)
    print("2. offloaded, then read by window:", window["text"].splitlines())

    secret = vault.put(scope, f"api-key={secrets.token_hex(40)}".encode(), disclosure="sealed")
    PLAN[:] = [("leaky", '{"doc": "$ID"}')]
    try:
        agent.run_sync(f"Use the key {secret.artifact_id}")
    except ContextLeak as leak:
        print("3. guard stopped the leak: ContextLeak", [f.artifact_id for f in leak.findings])
