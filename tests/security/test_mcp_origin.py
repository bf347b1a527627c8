"""DNS rebinding against ``/mcp`` of a live ``refvault serve``: a foreign ``Host`` or ``Origin`` is refused.

A page on ``http://rebind.attacker.test:PORT`` whose name is made to resolve to 127.0.0.1 talks to the
server as the same origin: its requests arrive on loopback but carry the attacker's name in ``Host`` (and,
from a browser, in ``Origin``). ``/mcp`` answers only the names it was told about (421 otherwise), and
only the browser origins it was told about (403 otherwise), before it looks at the API key. Clients that
name the server by a loopback name or by the address they connect to, and clients that send no
``Origin`` (every non-browser MCP client), are served as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from refvault import Vault
from refvault.cli.serve import serve as serve_command
from refvault.keys import create_key
from refvault.server.app import ALLOWED_HOSTS_ENVVAR, ALLOWED_ORIGINS_ENVVAR, app_from_env, create_app
from tests.servers import LiveServer, serve

ATTACKER = "rebind.attacker.test"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    store = tmp_path_factory.mktemp("origin") / "store"
    with serve(store, "--allowed-host", "api.example.test", "--allowed-origin", "https://app.example.test") as server:
        yield server


def port_of(live: LiveServer) -> int:
    return int(live.url.rsplit(":", 1)[1])


def call(live: LiveServer, token: str | None = None, **headers: str) -> httpx.Response:
    """POST a tools/list to ``/mcp`` over loopback with these (HTTP-cased by ``_``→``-``) headers."""
    sent = {"Accept": "application/json, text/event-stream", "Refvault-Session": "s1"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update({name.replace("_", "-"): value for name, value in headers.items()})
    return httpx.post(live.url + "/mcp", json=LIST_TOOLS, headers=sent, timeout=30)


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:refvault:problem:{slug}"
    assert body["status"] == status
    assert ATTACKER not in response.text  # the header's value is never echoed
    return body


def test_a_rebound_name_is_refused_before_the_key_is_looked_at(live: LiveServer) -> None:
    port = port_of(live)
    for token in (live.token, None, "rvk_not_a_key"):
        assert_problem(call(live, token, Host=f"{ATTACKER}:{port}"), 421, "misdirected-request")
        assert_problem(call(live, token, Host=ATTACKER), 421, "misdirected-request")
    both = call(live, live.token, Host=f"{ATTACKER}:{port}", Origin=f"http://{ATTACKER}:{port}")
    assert_problem(both, 421, "misdirected-request")
    lookalike = call(live, live.token, Host=f"localhost.{ATTACKER}:{port}")  # a prefix of an allowed name
    assert_problem(lookalike, 421, "misdirected-request")


def test_a_foreign_browser_origin_is_refused_even_with_a_valid_key(live: LiveServer) -> None:
    port = port_of(live)
    for origin in (f"http://{ATTACKER}:{port}", f"http://{ATTACKER}", "null", "https://localhost.evil.test"):
        assert_problem(call(live, live.token, Origin=origin), 403, "origin-not-allowed")
    assert_problem(call(live, None, Origin=f"http://{ATTACKER}"), 403, "origin-not-allowed")


def test_loopback_names_the_arrival_address_and_configured_names_are_served(live: LiveServer) -> None:
    port = port_of(live)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:9", "api.example.test"):
        answer = call(live, live.token, Host=host)
        assert answer.status_code == 200, (host, answer.text)
        assert "describe_artifact" in answer.text
    for origin in (f"http://127.0.0.1:{port}", "http://localhost:6274", "https://app.example.test"):
        assert call(live, live.token, Origin=origin).status_code == 200, origin
    assert call(live, live.token).status_code == 200  # no Origin: not a browser
    assert_problem(call(live, None), 401, "unauthenticated")  # a good name still needs a key


def test_the_arrival_address_is_accepted_in_process_too(tmp_path: Path) -> None:
    """In-process (TestClient names the server ``testserver``), the name the request came in on passes."""
    with Vault.open(tmp_path / "store") as vault:
        token = create_key(vault, "acme", "ana")[1]
        headers = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1", "Accept": "application/json"}
        with TestClient(create_app(vault), raise_server_exceptions=False) as client:
            assert client.post("/mcp", json=LIST_TOOLS, headers=headers).status_code == 200
            refused = client.post("/mcp", json=LIST_TOOLS, headers={**headers, "Host": f"{ATTACKER}"})
            assert refused.status_code == 421
            refused = client.post("/mcp/", json=LIST_TOOLS, headers={**headers, "Origin": f"http://{ATTACKER}"})
            assert refused.status_code == 403


def test_app_from_env_reads_the_allow_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFVAULT_STORE", str(tmp_path / "store"))
    monkeypatch.setenv(ALLOWED_HOSTS_ENVVAR, "api.example.test, other.example.test:*")
    monkeypatch.setenv(ALLOWED_ORIGINS_ENVVAR, "https://app.example.test")
    app = app_from_env()
    token = create_key(app.state.vault, "acme", "ana")[1]
    headers = {"Authorization": f"Bearer {token}", "Refvault-Session": "s1", "Accept": "application/json"}
    with TestClient(app, raise_server_exceptions=False) as client:
        for host, status in [("api.example.test", 200), ("other.example.test:8443", 200), (ATTACKER, 421)]:
            assert client.post("/mcp", json=LIST_TOOLS, headers={**headers, "Host": host}).status_code == status
        for origin, status in [("https://app.example.test", 200), ("http://app.example.test", 403)]:
            assert client.post("/mcp", json=LIST_TOOLS, headers={**headers, "Origin": origin}).status_code == status
    monkeypatch.setenv(ALLOWED_HOSTS_ENVVAR, "http://api.example.test/")  # not a host: refused at startup
    with pytest.raises(Exception, match="allowed host"):
        app_from_env()


@pytest.mark.parametrize(
    "option",
    [
        ("--allowed-host", "http://example.test"),
        ("--allowed-host", "*"),
        ("--allowed-host", "a.test,b.test"),
        ("--allowed-origin", "example.test"),
        ("--allowed-origin", "https://example.test/path"),
    ],
)
def test_serve_refuses_an_entry_that_could_never_match(option: tuple[str, str], tmp_path: Path) -> None:
    result = CliRunner().invoke(serve_command, ["--store", str(tmp_path / "store"), *option])
    assert result.exit_code == 2, result.output
    assert "must look like" in result.output
    assert not (tmp_path / "store").exists()  # refused before anything was opened or served
