"""refvault in Google ADK, offline: a scripted model, a Ref tool, an offloaded result, and the leak guard.

Run: python examples/adk_quickstart.py   (needs the adk extra: pip install '.[adk]' from a clone)
"""

import asyncio
import json
import logging
import re
import secrets
import tempfile

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from refvault import ContextLeak, Ref, Toolbox, Vault
from refvault.integrations.adk import RefvaultArtifactService, guard_callback, scope_for, tools

ID = re.compile(r"art_[a-z2-7]+")
logging.getLogger("google_adk").setLevel(logging.CRITICAL)  # ADK logs the stopped run's traceback; we print it


class ScriptedModel(BaseLlm):
    """Stands in for Gemini: "<tool> [art_…]" calls that tool; an offloaded preview is read back selectively."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request, stream=False):
        last = llm_request.contents[-1].parts[0]
        answer = last.function_response
        if answer and answer.name == "full_report":  # saw a preview and an id: read three lines of it
            artifact_id = ID.search(str(answer.response)).group()
            call = types.FunctionCall(name="read_artifact", args={"artifact_id": artifact_id, "lines": [0, 3]})
            part = types.Part(function_call=call)
        elif answer:
            result = (answer.response or {}).get("result", answer.response)
            shown = json.loads(result)["text"] if answer.name == "read_artifact" else result
            part = types.Part(text=f"{answer.name} said: {shown!r}")
        else:
            tool, *rest = last.text.split()
            part = types.Part(function_call=types.FunctionCall(name=tool, args={"doc": rest[0]} if rest else {}))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


async def main() -> None:
    with tempfile.TemporaryDirectory() as store, Vault.open(store) as vault:
        box = Toolbox(vault, offload_tokens=1000)

        @box.tool
        def count_words(doc: Ref) -> int:
            """Count the words of a document (the tool gets its bytes; the model only the id)."""
            return len(doc.text().split())

        @box.tool
        def echo(doc: Ref) -> str:
            """A misbehaving tool: returns the document itself."""
            return doc.text()

        @box.tool
        def full_report() -> str:
            """A result too big for the context window: refvault offloads it and shows a preview."""
            return "\n".join(f"row {i}: value {i * i}" for i in range(2000))  # about 40,000 characters

        artifacts, sessions = RefvaultArtifactService(vault), InMemorySessionService()
        agent = LlmAgent(
            name="analyst", model=ScriptedModel(), tools=tools(box), before_model_callback=guard_callback(box)
        )
        runner = Runner(agent=agent, app_name="demo", session_service=sessions, artifact_service=artifacts)
        session = (await sessions.create_session(app_name="demo", user_id="ana")).id

        async def ask(text: str) -> None:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in runner.run_async(user_id="ana", session_id=session, new_message=message):
                for part in (event.content.parts if event.content else None) or []:
                    if part.function_response:
                        sent = len(str(part.function_response.response))
                        print(f"  {part.function_response.name} answered ({sent} characters)")
                    elif part.text:
                        print("  model:", part.text)

        doc = types.Part(text="refvault keeps tool outputs out of the context window " * 3)
        await artifacts.save_artifact(
            app_name="demo", user_id="ana", session_id=session, filename="doc.txt", artifact=doc
        )
        info = await artifacts.get_artifact_version(
            app_name="demo", user_id="ana", session_id=session, filename="doc.txt"
        )
        doc_id = info.canonical_uri.removeprefix("refvault://")
        print(f"1. ADK artifact doc.txt v{info.version} is {doc_id}; count_words gets it by reference:")
        await ask(f"count_words {doc_id}")

        print("2. An oversized result is offloaded; the model sees a preview and an id:")
        await ask("full_report")

        secret_text = "SECRET-" + secrets.token_hex(40)  # a sealed document: usable by reference only
        secret = vault.put(scope_for("demo", "ana", session), secret_text.encode(), disclosure="sealed")
        print("3. A tool that echoes a sealed document is stopped before the model sees it:")
        try:
            await ask(f"echo {secret.artifact_id}")
        except ContextLeak as leak:
            print(f"  ContextLeak stopped the request: {leak}")


if __name__ == "__main__":
    asyncio.run(main())
