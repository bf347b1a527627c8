"""The core loop under a leak guard, in every adapter: a tool's big result is offloaded (the model sees a preview and
an id), the model reads it with a read tool, then passes the id to a tool as a ``Ref``; the next model request is sent.

The Ref read protects the artifact, and the preview and the read tool's answer are already in the conversation: they
are what refvault itself disclosed of a model-disclosed artifact, so they are not leaks. A tool that pastes the Ref'd
content into its own result still is.
"""

from __future__ import annotations

import re

import pytest
from agents import set_tracing_disabled

from refvault import Ref, Toolbox, Vault
from refvault.errors import ContextLeak
from tests.integrations.scripted import FRAMEWORKS, SCOPE, Call, drive

set_tracing_disabled(True)  # nothing may try to export traces over the network

LOG = "\n".join(f"api line {i} status=500 upstream reset by peer ERROR" for i in range(4000))


def _box() -> Toolbox:
    box = Toolbox(Vault.open("memory://"))

    @box.tool
    def fetch_logs(service: str) -> str:
        """Fetch a service's log (big: offloaded)."""
        return LOG.replace("api", service)

    @box.tool
    def count_errors(logs: Ref) -> int:
        """Count the ERROR lines of a log."""
        return logs.text().count("ERROR")

    @box.tool
    def echo_head(logs: Ref) -> str:
        """A misbehaving tool: pastes the first lines of what it read into its result."""
        return logs.text()[:400]

    return box


def _id(text: str) -> str:
    found = re.search(r"art_[a-z2-7]{26}(?:[a-z2-7]{2})?", text)
    assert found is not None, "the preview names the artifact"
    return found.group()


def _plan(last_tool: str, reader: str = "read_artifact") -> object:
    def plan(results: list[str]) -> list[Call] | None:
        if not results:
            return [("fetch_logs", {"service": "api"})]
        if len(results) == 1 and reader == "load_artifacts":
            return [("load_artifacts", {"artifact_ids": [_id(results[0])]})]
        if len(results) == 1:
            return [("read_artifact", {"artifact_id": _id(results[0]), "lines": [0, 20]})]
        if len(results) == 2:
            return [(last_tool, {"logs": _id(results[0])})]
        return None

    return plan


@pytest.mark.parametrize("reader", ["read_artifact", "load_artifacts"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_preview_read_and_ref_of_one_artifact_are_sent(framework: str, reader: str) -> None:
    box = _box()
    run = drive(framework, box, SCOPE, _plan("count_errors", reader))  # type: ignore[arg-type]
    assert run.error is None, f"{framework}: {run.error}"
    assert '"offloaded"' in run.results[0]
    assert "api line 0 status=500" in run.results[0]
    assert "api line 3 status=500" in run.results[1]  # the read tool's answer shows content
    assert run.results[2] == "4000"
    assert run.output is not None  # the request after the Ref call went out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_tool_pasting_what_it_read_by_ref_is_still_stopped(framework: str) -> None:
    box = _box()
    run = drive(framework, box, SCOPE, _plan("echo_head"))  # type: ignore[arg-type]
    assert isinstance(run.error, ContextLeak), f"{framework}: {run.error!r}"
    assert run.output is None
