"""refvault with LangChain, offline: a Ref tool, an offloaded result read back, and the leak guard.

Run it: ``python examples/langchain_quickstart.py`` (needs the ``langchain`` extra:
``pip install '.[langchain]'`` from a clone).
A scripted chat model stands in for ChatOpenAI & co.: it decides each step from the messages it receives.
"""

import json
import re
import secrets
import tempfile
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from refvault import ContextLeak, Ref, Scope, Toolbox, Vault
from refvault.integrations.langchain import LeakGuardCallback, tools


class ScriptedModel(BaseChatModel):
    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        prompt = str(messages[0].content)
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        ids = re.findall(r"art_[a-z2-7]+", prompt + " ".join(results))  # ids it was given or shown
        plan = [("count_lines", {"log": ids[0]}), ("grep_errors", {"log": ids[0]}),
                ("read_artifact", {"artifact_id": ids[-1], "lines": [0, 2]})]  # fmt: skip
        if "secret" in prompt:
            plan = [("echo", {"doc": ids[0]})]
        if len(results) < len(plan):
            name, args = plan[len(results)]
            reply = AIMessage("", tool_calls=[tool_call(name=name, args=args, id=f"call_{len(results)}")])
        else:
            first = json.loads(results[-1])["text"].splitlines()[0]  # the window read from the offloaded result
            reply = AIMessage(f"the log has {results[0]} lines; the first error is line {first!r}")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kw: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kw)


def run(model: Any, lc_tools: list[Any], prompt: str) -> list[BaseMessage]:
    by_name = {t.name: t for t in lc_tools}
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    while True:
        reply = model.invoke(messages)  # LeakGuardCallback checks this request before it is sent
        messages += [reply, *(by_name[call["name"]].invoke(call) for call in reply.tool_calls)]
        if not reply.tool_calls:
            return messages


with tempfile.TemporaryDirectory() as store, Vault.open(store) as vault:
    scope = Scope("acme", "ana", "s1")
    log = "\n".join(f"{i:04d} {'ERROR disk full' if i % 7 == 0 else 'ok'}" for i in range(3000))
    log_id = vault.put(scope, log.encode(), media_type="text/plain").artifact_id
    secret = f"api_key=sk-{secrets.token_hex(32)}".encode()
    key_id = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id  # by reference only
    box = Toolbox(vault, offload_tokens=1000)  # results above ~1000 tokens are stored; the model gets a preview

    @box.tool
    def count_lines(log: Ref) -> int:
        """Count the lines of a log (pass its artifact id)."""
        return len(log.text().splitlines())

    @box.tool
    def grep_errors(log: Ref) -> str:
        """The ERROR lines of a log."""
        return "\n".join(line for line in log.text().splitlines() if "ERROR" in line)

    @box.tool
    def echo(doc: Ref) -> str:
        """A misbehaving tool: it returns what it read."""
        return doc.text()

    lc_tools = tools(box, scope=scope)  # StructuredTools: yours and the five read tools
    model = ScriptedModel().bind_tools(lc_tools).with_config(callbacks=[LeakGuardCallback(box)])
    messages = run(model, lc_tools, f"How many lines, and which errors, in {log_id}?")
    grep = next(m for m in messages if isinstance(m, ToolMessage) and m.name == "grep_errors")
    (stored,) = grep.artifact  # captured artifacts ride on ToolMessage.artifact
    print(f"grep_errors: {stored['size']} bytes stored as {stored['artifact_id']}; the model got a preview")
    print("model answered:", messages[-1].content)
    try:
        run(model, lc_tools, f"Show me the secret {key_id}")
    except ContextLeak as leak:
        print("stopped before sending: ContextLeak", [(f.site, f.artifact_id) for f in leak.findings])
