"""A text read of a binary artifact is refused with a message naming its media type, never its content."""

from __future__ import annotations

import json

import pytest

from refvault import Scope, Toolbox, Vault
from refvault.errors import UnsupportedRead
from refvault.read import windows

CONTENT = b"\x00\x01 secret-looking payload \xff"


@pytest.mark.parametrize("media_type", ["application/octet-stream", "image/png"])
def test_a_window_of_a_binary_artifact_names_its_media_type(memory_vault: Vault, scope: Scope, media_type: str) -> None:
    artifact_id = memory_vault.put(scope, CONTENT, media_type=media_type).artifact_id
    with pytest.raises(UnsupportedRead) as refused:
        windows.window(memory_vault, scope, artifact_id)
    message = str(refused.value)
    assert f"its media type {media_type} is not text" in message
    assert artifact_id in message
    assert "payload" not in message


def test_the_read_tool_refusal_names_the_media_type_and_no_content(memory_vault: Vault, scope: Scope) -> None:
    artifact_id = memory_vault.put(scope, CONTENT, media_type="application/octet-stream").artifact_id
    observation = Toolbox(memory_vault).call_sync("read_artifact", {"artifact_id": artifact_id}, scope=scope)
    assert observation.is_error
    assert "application/octet-stream" in observation.content
    assert "Ref" in observation.content  # how a binary artifact is used instead
    assert "payload" not in observation.content + json.dumps(observation.parts)
