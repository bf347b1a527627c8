"""refvault in the OpenAI Agents SDK, offline: a scripted model stands in for the LLM.

Shows a tool taking an artifact by reference (the model passes an id, the tool
gets the bytes), an oversized result offloaded and read back selectively, and
the leak guard stopping a request that would carry a sealed secret.

    python examples/openai_agents_quickstart.py
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from refvault import ContextLeak, Ref, Scope, Toolbox, Vault
from refvault.integrations.openai_agents import guard_model_input, tools


class ScriptedModel(Model):
    """Plays a fixed plan: each step sees the conversation so far and returns tool calls or an answer."""

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        seen = json.dumps(input, default=str)
        if isinstance(input, list) and input[-1].get("type") == "function_call_output":
            shown = str(input[-1]["output"])
            print("  model sees:", shown if len(shown) <= 100 else shown[:100] + "...")
        name, arguments = self.steps.pop(0)(seen)
        if name is None:  # a final answer
            text = ResponseOutputText(type="output_text", text=arguments, annotations=[])
            item: Any = ResponseOutputMessage(
                type="message", id="m", role="assistant", status="completed", content=[text]
            )
        else:
            item = ResponseFunctionToolCall(type="function_call", call_id=f"call_{len(self.steps)}", name=name,
                                            arguments=json.dumps(arguments))  # fmt: skip
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def last_id(seen: str) -> str:
    return re.findall(r"art_[a-z0-9]+", seen)[-1]


async def main(store: Path) -> None:
    set_tracing_disabled(True)
    vault, scope = Vault.open(store), Scope("acme", "ana", "s1")
    box = Toolbox(vault, offload_tokens=1000)

    @box.tool
    def count_words(doc: Ref) -> int:
        """Count the words of a document (the tool reads the bytes; the model never does)."""
        return len(doc.text().split())

    @box.tool
    def fetch_log() -> str:
        """Fetch a big log (offloaded: the model gets a preview and an id)."""
        return "\n".join(f"line {i}: GET /items/{i} took {i % 90} ms" for i in range(800))

    @box.tool
    def leaky(doc: Ref) -> str:
        """A buggy tool that returns what it read."""
        return doc.text()

    report = vault.put(scope, b"quarterly numbers look fine " * 50, media_type="text/plain").artifact_id
    secret = vault.put(scope, f"api_key={'CANARY-' + secrets.token_hex(40)}".encode(), disclosure="sealed").artifact_id
    config = RunConfig(call_model_input_filter=guard_model_input(box.guard))  # checks every model request

    model = ScriptedModel(
        lambda seen: ("count_words", {"doc": report}),
        lambda seen: ("fetch_log", {}),
        lambda seen: ("read_artifact", {"artifact_id": last_id(seen), "lines": [400, 403]}),
        lambda seen: (None, "The report has 200 words; the log shows lines 400-402."),
    )
    agent = Agent(name="analyst", instructions="Use the tools.", model=model, tools=tools(box, scope=scope))
    result = await Runner.run(agent, "Summarise the report and the log.", run_config=config)
    print("answer:", result.final_output)

    model = ScriptedModel(lambda seen: ("leaky", {"doc": secret}), lambda seen: (None, "never reached"))
    agent = Agent(name="analyst", instructions="Use the tools.", model=model, tools=tools(box, scope=scope))
    try:
        await Runner.run(agent, "Show me the key.", run_config=config)
    except ContextLeak as leak:
        print(f"guard stopped the leak: ContextLeak naming {[f.artifact_id for f in leak.findings]}")
    vault.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp) / "store"))
