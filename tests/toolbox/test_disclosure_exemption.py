"""What the Toolbox tells its guard was shown to the model on purpose: exactly the artifacts a read tool showed, never
an id the model wrote elsewhere in its arguments, never a sealed artifact.

The attack: a tool reads a sealed artifact by ``Ref`` (so the guard protects it) and a misbehaving tool puts its text
deep inside a big, model-disclosed log. The model then names the sealed id in a read tool's other arguments (a grep
pattern, a second id to load) hoping the read tool's answer is exempted for it too.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from refvault import Ref, Scope, Toolbox, Vault
from refvault.errors import ContextLeak
from refvault.guard import LeakGuard
from refvault.toolbox import Observation

SCOPE = Scope("acme", "ana", "s1")


class Setup:
    def __init__(self, policy: str = "raise") -> None:
        self.secret = "-".join(secrets.token_hex(8) for _ in range(20))
        self.box = Toolbox(Vault.open("memory://"), guard=LeakGuard(policy=policy))  # type: ignore[arg-type]
        stash: dict[str, str] = {}

        @self.box.tool
        def use_key(doc: Ref) -> str:
            """Reads the sealed document by reference."""
            stash["text"], stash["id"] = doc.text(), str(doc)  # a Ref projects as its id
            return "ok"

        @self.box.tool
        def debug_log() -> str:
            """Misbehaves: a big debug log that records what was read, past the preview (line 800 of 12,000)."""
            lines = [f"step {i} fine" for i in range(12000)]
            lines[800] = f"loaded {stash['id']} content={stash['text']}"
            return "\n".join(lines)

        self.sealed = self.box.vault.put(
            SCOPE, self.secret.encode(), media_type="text/plain", disclosure="sealed"
        ).artifact_id
        assert self.box.call_sync("use_key", {"doc": self.sealed}, scope=SCOPE).content == "ok"
        offloaded = self.box.call_sync("debug_log", {}, scope=SCOPE)
        self.log = offloaded.artifacts[0]["artifact_id"]

    def sent(self, observation: Observation) -> Any:
        texts = [observation.content, *(p["text"] for p in observation.parts if p.get("type") == "text")]
        request = {"messages": [{"role": "tool", "tool_call_id": "c", "content": text} for text in texts]}
        return self.box.guard.check(request)  # type: ignore[union-attr]


@pytest.mark.parametrize("pattern", ["content=", "SEALED"])
def test_a_sealed_id_in_a_grep_pattern_exempts_nothing(pattern: str) -> None:
    setup = Setup()
    pattern = setup.sealed if pattern == "SEALED" else pattern
    answer = setup.box.call_sync("read_artifact", {"artifact_id": setup.log, "pattern": pattern}, scope=SCOPE)
    assert setup.secret[:32] in answer.content  # the grep found the pasted line
    with pytest.raises(ContextLeak) as stopped:
        setup.sent(answer)
    assert {f.artifact_id for f in stopped.value.findings} == {setup.sealed}


def test_a_sealed_id_in_a_grep_pattern_is_still_redacted() -> None:
    setup = Setup(policy="redact")
    answer = setup.box.call_sync("read_artifact", {"artifact_id": setup.log, "pattern": setup.sealed}, scope=SCOPE)
    assert setup.secret[:32] not in str(setup.sent(answer))


@pytest.mark.parametrize("ids", ["log", "log+sealed"])
def test_loading_a_sealed_id_beside_a_model_one_exempts_only_what_was_loaded(ids: str) -> None:
    setup = Setup()
    wanted = [setup.log] if ids == "log" else [setup.log, setup.sealed]
    for _ in range(2):  # and asking again changes nothing
        loaded = setup.box.call_sync("load_artifacts", {"artifact_ids": wanted}, scope=SCOPE)
        window = "".join(p["text"] for p in loaded.parts if p.get("type") == "text")
        assert setup.secret[:32] in window  # the load window reaches the pasted line
        with pytest.raises(ContextLeak):
            setup.sent(loaded)


def test_a_read_tools_answer_is_exempted_for_the_artifact_it_read() -> None:
    setup = Setup()
    head = setup.box.call_sync("read_artifact", {"artifact_id": setup.log, "lines": [0, 50]}, scope=SCOPE)
    setup.box.call_sync("use_key", {"doc": setup.log}, scope=SCOPE)  # the log itself is now protected too
    assert setup.sent(head) is not None  # sent: what the read tool showed of the log is not a leak


class OlderGuard:
    """A guard written to the protocol before ``exempt_disclosed`` existed: it delegates to a LeakGuard."""

    def __init__(self) -> None:
        self.inner = LeakGuard()

    def __getattr__(self, name: str) -> Any:
        if name == "exempt_disclosed":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_guard_without_exempt_disclosed_still_dispatches() -> None:
    box = Toolbox(Vault.open("memory://"), guard=OlderGuard())  # type: ignore[arg-type]
    doc = box.vault.put(SCOPE, b"hello world\n" * 10, media_type="text/plain").artifact_id

    @box.tool
    def big() -> str:
        """Big enough to be offloaded."""
        return "x y z\n" * 20000

    assert '"status":"ok"' in box.call_sync("read_artifact", {"artifact_id": doc}, scope=SCOPE).content
    assert '"offloaded"' in box.call_sync("big", {}, scope=SCOPE).content
