"""Tool declarations: Gemini's declarations stay inside its schema subset."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from refvault import Ref, Toolbox, Vault


def test_gemini_declarations_stay_inside_geminis_schema_subset(vault: Vault) -> None:
    box = Toolbox(vault)

    @box.tool
    def pair(docs: tuple[Ref, Ref], level: Literal[1, 2, 3] = 1) -> str:
        return "ok"

    @box.tool
    def nothing() -> str:
        return "ok"

    declarations = {d["name"]: d for d in box.schemas("gemini")}
    params = declarations["pair"]["parameters"]
    assert params["properties"]["docs"]["items"]["type"] == "string"
    assert "enum" not in params["properties"]["level"]
    assert "One of: 1, 2, 3" in params["properties"]["level"]["description"]
    assert "parameters" not in declarations["nothing"]

    loose = Toolbox(vault)

    @loose.tool
    def anything(value: Any) -> str:
        return "ok"

    with pytest.raises(ValueError, match="Gemini needs a type"):
        loose.schemas("gemini")
