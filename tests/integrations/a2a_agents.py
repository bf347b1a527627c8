"""The remote agents of ``tests/integrations/test_a2a_agents.py``: real A2A SDK servers, scripted models.

Usage: ``python -m tests.integrations.a2a_agents CONFIG_JSON`` (a file). The config names the ``role``, the
``port`` and, for the inspector, the store to open, its scope, the trusted ``refvault serve`` URL and the files it
writes for the test to check:

* **camera** returns one task with two artifacts carrying their bytes inline, as A2A does natively: a PNG
  screenshot and a JSON Lines export of :data:`EXPORT_RECORDS` incidents (about 20 MB). This is the first hop.
* **inspector** receives capability links, fetches and stores them in its own tenant
  (``A2AOptions(trusted_links=...)``), lets its scripted model query the export by reference with the
  Toolbox's ``query_artifact``, and answers; its reply passes :func:`~refvault.integrations.a2a.check_outgoing`
  first, so when its model pastes the sealed notes the inspector holds, the reply is stopped. It logs every
  model request it sends (``requests``), every byte of its A2A traffic in both directions (``traffic``) and the
  link URLs it received (``links``).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

EXPORT_RECORDS = 100_000
SERVICES = ("api", "billing", "search", "auth", "mail")
SEVERITIES = ("low", "medium", "high", "critical")
EXPORT_CANARY = "EXPORTcanary"  # in a field no query selects: it must never appear after the first hop
NOTES_CANARY = "NOTEScanary-7f3e"  # in the inspector's sealed notes


def export_bytes() -> bytes:
    """The camera's incident export: deterministic, about 20 MB of JSON Lines."""
    rng = random.Random(20261204)
    lines = []
    for index in range(EXPORT_RECORDS):
        record = {
            "id": f"inc-{index:06d}",
            "service": SERVICES[index % len(SERVICES)],
            "severity": rng.choices(SEVERITIES, weights=(50, 30, 15, 5))[0],
            "latency_ms": rng.randrange(5, 5000),
            "note": f"{EXPORT_CANARY}-{index:06d} " + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=120)),
        }
        lines.append(json.dumps(record, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def slowest_critical(data: bytes) -> dict[str, Any]:
    """The critical incident with the highest latency (the first such record on a tie): what the inspector finds."""
    records = [json.loads(line) for line in data.splitlines()]
    critical = [(r["latency_ms"], -index, r) for index, r in enumerate(records) if r["severity"] == "critical"]
    return max(critical, key=lambda item: item[:2])[2]  # type: ignore[no-any-return]


def screenshot_bytes() -> bytes:
    from tests.media import png_bytes

    return png_bytes(96, 64)


NOTES = (
    f"Inspector's private notes ({NOTES_CANARY}): the on-call rotation for the payments cluster is shared through "
    "the vendor portal; the staging database password rotates on Fridays and the runbook for failover lives in the "
    "restricted wiki space. None of this may leave the inspector."
).encode()


class Recorder:
    """ASGI middleware: append every request and response body byte to ``path``."""

    def __init__(self, app: Any, path: Path) -> None:
        self.app, self.path = app, path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def received() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                self._write(message.get("body", b""))
            return message

        async def sent(message: Any) -> None:
            if message["type"] == "http.response.body":
                self._write(message.get("body", b""))
            await send(message)

        await self.app(scope, received, sent)

    def _write(self, body: bytes) -> None:
        with self.path.open("ab") as out:
            out.write(body)


def _camera() -> Any:
    from a2a.server.agent_execution import AgentExecutor
    from a2a.types import Part

    class Camera(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            updater = await _started(context, event_queue)
            await updater.add_artifact(
                [Part(raw=screenshot_bytes(), media_type="image/png", filename="dashboard.png")], name="screenshot"
            )
            await updater.add_artifact(
                [Part(raw=export_bytes(), media_type="application/x-ndjson", filename="incidents.jsonl")],
                name="export",
            )
            await updater.complete(updater.new_agent_message([Part(text="the screenshot and the incident export")]))

        async def cancel(self, context: Any, event_queue: Any) -> None:
            raise NotImplementedError

    return Camera()


async def _started(context: Any, event_queue: Any) -> Any:
    from a2a.helpers.proto_helpers import new_task
    from a2a.server.tasks import TaskUpdater
    from a2a.types import TaskState

    task = new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=[context.message])
    await event_queue.enqueue_event(task)
    updater = TaskUpdater(event_queue, context.task_id, context.context_id)
    await updater.start_work()
    return updater


def _inspector(config: dict[str, Any]) -> Any:
    from a2a.server.agent_execution import AgentExecutor
    from a2a.types import Part

    from refvault import Scope, Toolbox, Vault
    from refvault.content import Limits
    from refvault.errors import ContextLeak, LinkRefused
    from refvault.guard import LeakGuard
    from refvault.integrations.a2a import A2AOptions, check_outgoing, materialize
    from refvault.scripted import ScriptedRun, Seen, answer, call

    store = config["store"]
    vault = Vault.open(store["target"], **store.get("options", {}))
    scope = Scope(*config["scope"])
    notes = vault.put(scope, NOTES, media_type="text/plain", filename="notes.txt", disclosure="sealed")
    guard = LeakGuard()
    guard.protect_scope(vault, scope)
    options = A2AOptions(
        trusted_links=(config["trusted"],), limits=Limits(per_part=64 << 20), binary_disclosure="model"
    )
    requests_log, links_log = Path(config["requests"]), Path(config["links"])
    runs = 0

    def query_the_export(seen: Seen) -> Any:
        export = next(line for line in seen.last_user().splitlines() if "application/x-ndjson" in line)
        return _calls(
            call(
                "query_artifact",
                artifact_id=export.split("refvault://", 1)[1].split()[0],
                where={"field": "severity", "op": "eq", "value": "critical"},
                fields=["id", "service", "latency_ms"],
                order=[{"field": "latency_ms", "direction": "desc"}],
                limit=1,
            )
        )

    def report(seen: Seen) -> Any:
        result = seen.result()
        (found,) = [entry["record"] for entry in result["records"]]
        return answer(
            f"The slowest critical incident is {found['id']} on {found['service']} ({found['latency_ms']} ms); "
            f"{result['scanned_records']} records scanned, scan complete: {result['scan_complete']}."
        )

    def paste_notes(seen: Seen) -> Any:
        return answer("Here are my notes, verbatim: " + NOTES.decode())

    class Inspector(AgentExecutor):
        async def execute(self, context: Any, event_queue: Any) -> None:
            nonlocal runs
            runs += 1
            updater = await _started(context, event_queue)
            with links_log.open("a") as out:
                for part in context.message.parts:
                    if part.url:
                        out.write(part.url + "\n")
            try:
                received = await materialize(vault, scope, context.message, agent="analyst", options=options)
            except LinkRefused as refused:
                await updater.failed(updater.new_agent_message([Part(text=f"refused: {refused}")]))
                return
            lines = [part.text for part in received.parts if part.text]
            lines += [f"{part.url} {part.media_type} {part.filename}" for part in received.parts if part.url]
            box = Toolbox(vault, guard=guard, model="inspector")
            run = ScriptedRun(box, scope, run_id=f"inspect-{runs}", model="inspector")
            question = "\n".join(lines)
            decisions = [paste_notes] if "notes" in question else [query_the_export, report]
            turns = await run.converse(question, decisions)
            with requests_log.open("a") as out:
                for request in run.requests:
                    out.write(json.dumps(request) + "\n")
            reply = updater.new_agent_message([Part(text=turns[-1].reply.content or "")])
            try:
                reply = check_outgoing(guard, reply, recipient="tool:analyst")
            except ContextLeak as leak:
                ids = sorted({str(finding.artifact_id) for finding in leak.findings})
                stopped = f"refvault guard stopped this reply: it carried protected artifact {', '.join(ids)}"
                await updater.failed(updater.new_agent_message([Part(text=stopped)]))
                return
            await updater.complete(reply)

        async def cancel(self, context: Any, event_queue: Any) -> None:
            raise NotImplementedError

    print(json.dumps({"notes": notes.artifact_id}), flush=True)
    return Inspector()


def _calls(*tool_calls: Any) -> Any:
    from refvault.scripted import calls

    return calls(*tool_calls)


def main(config_path: str) -> None:
    import uvicorn
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from starlette.applications import Starlette

    config = json.loads(Path(config_path).read_text())
    role, port = config["role"], config["port"]
    executor = _camera() if role == "camera" else _inspector(config)
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name=role,
        description=f"the {role} agent of refvault's A2A test",
        version="1",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=role, name=role, description=role, tags=[role])],
    )
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    app: Any = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    if config.get("traffic"):
        app = Recorder(app, Path(config["traffic"]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1])
