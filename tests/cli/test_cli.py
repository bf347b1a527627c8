"""The ``refvault`` command line: every command, its JSON output, exit codes and error messages."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refvault.cli import main
from refvault.model import DESCRIPTOR_FIELDS, Scope, parse_time
from refvault.vault.core import Vault

LARGE = 48 * 1024  # above the 32 KiB inline limit, so the bytes live in a blob file
MISSING_ID = "art_" + "a" * 26


def not_found(artifact_id: str, scope: str = "local/local/local") -> str:
    """The CLI's "not found": the scope the command used and how to choose another."""
    return (
        f"artifact {artifact_id} not found in scope {scope} (choose the scope with --tenant/--user/--session"
        " or $REFVAULT_TENANT/$REFVAULT_USER/$REFVAULT_SESSION)"
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


class Cli:
    """Runs ``refvault --store <store> ...`` in-process."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.runner = CliRunner()

    def __call__(self, *args: str, input: bytes | None = None) -> Result:
        return self.runner.invoke(main, ["--store", str(self.store), *args], input=input, catch_exceptions=False)

    def json(self, *args: str, input: bytes | None = None) -> Any:
        result = self(*args, "--json", input=input)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def put(self, path: Path, *args: str) -> dict[str, Any]:
        descriptor: dict[str, Any] = self.json("put", str(path), *args)
        return descriptor

    def init(self) -> None:
        """Create an empty store (only put and demo create one from the command line)."""
        Vault.open(self.store).close()


@pytest.fixture
def cli(store: Path) -> Cli:
    return Cli(store)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def payload(size: int, marker: bytes = b"") -> bytes:
    """Deterministic incompressible bytes, optionally starting with a recognisable marker."""
    out = bytearray(marker)
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


def blob_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "blobs").glob("*/*/*") if p.is_file())


def assert_descriptor(data: dict[str, Any]) -> None:
    assert set(data) == set(DESCRIPTOR_FIELDS)
    assert data["artifact_id"].startswith("art_")
    assert data["content_hash"].startswith("sha256:")


# -- put ---------------------------------------------------------------------------


def test_put_file_prints_descriptor_json(cli: Cli, tmp_path: Path) -> None:
    data = b'{"incident": 1}\n'
    d = cli.put(write(tmp_path, "report.json", data))
    assert_descriptor(d)
    assert d["content_hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert d["retrieval"]["media_type"] == "application/json"
    assert d["retrieval"]["filename"] == "report.json"
    assert d["retrieval"]["size"] == len(data)
    assert d["retrieval"]["disclosure"] == "model"
    assert d["scope"] == {"tenant": "local", "user": "local", "session": "local", "run_id": None}
    assert d["expires_at"] is None


def test_put_human_output_is_a_descriptor_panel(cli: Cli, tmp_path: Path) -> None:
    result = cli("put", str(write(tmp_path, "notes.txt", b"hello\n")))
    assert result.exit_code == 0, result.output
    assert "captured" in result.stdout
    assert "art_" in result.stdout
    assert "text/plain" in result.stdout
    assert "notes.txt" in result.stdout


def test_put_from_stdin(cli: Cli) -> None:
    data = bytes(range(256)) * 4
    d = cli.json("put", "-", input=data)
    assert_descriptor(d)
    assert d["retrieval"]["media_type"] == "application/octet-stream"
    assert d["retrieval"]["filename"] is None
    assert d["retrieval"]["size"] == len(data)
    assert cli("cat", d["artifact_id"]).stdout_bytes == data


def test_put_stdin_with_media_type_and_filename(cli: Cli) -> None:
    d = cli.json("put", "-", "--media-type", "Text/Plain; Charset=UTF-8", "--filename", "log.txt", input=b"a\n")
    assert d["retrieval"]["media_type"] == "text/plain; charset=UTF-8"
    assert d["retrieval"]["filename"] == "log.txt"


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("events.jsonl", "application/x-ndjson"),
        ("table.csv", "text/csv"),
        ("photo.png", "image/png"),
        ("dump.json.gz", "application/gzip"),
        ("no-suffix", "application/octet-stream"),
        ("weird.zzzunknown", "application/octet-stream"),
    ],
)
def test_put_guesses_media_type_from_filename(cli: Cli, tmp_path: Path, name: str, media_type: str) -> None:
    # Bytes that are neither text nor a known binary format: only the name can say what they are.
    assert cli.put(write(tmp_path, name, b"x\x00\xff"))["retrieval"]["media_type"] == media_type


def test_put_sealed_with_provenance(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "secret.txt", b"token"), "--sealed", "--tool-call-id", "call_42")
    assert d["retrieval"]["disclosure"] == "sealed"
    assert d["tool_call_id"] == "call_42"
    listed = cli("ls")
    assert "sealed" in listed.stdout


def test_put_idempotency_key_returns_the_same_id(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", b"same bytes")
    first = cli.put(path, "--idempotency-key", "call_1:0")
    again = cli.put(path, "--idempotency-key", "call_1:0")
    other = cli.put(path)
    assert again["artifact_id"] == first["artifact_id"]
    assert other["artifact_id"] != first["artifact_id"]
    assert other["content_hash"] == first["content_hash"]


def test_put_idempotency_conflict_exits_1(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "a.txt", b"one"), "--idempotency-key", "k")
    result = cli("put", str(write(tmp_path, "b.txt", b"two")), "--idempotency-key", "k")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: idempotency key already used")


@pytest.mark.parametrize(("text", "delta"), [("30s", 30), ("15m", 900), ("2h", 7200), ("7d", 7 * 86400)])
def test_put_expires_in(cli: Cli, tmp_path: Path, text: str, delta: int) -> None:
    before = datetime.now(UTC)
    d = cli.put(write(tmp_path, "a.txt", b"x"), "--expires-in", text)
    expires = parse_time(d["expires_at"])
    assert before + timedelta(seconds=delta) <= expires <= datetime.now(UTC) + timedelta(seconds=delta)


@pytest.mark.parametrize("text", ["5x", "h", "1.5h", "-1h", "0s", "10", "2 hours", "", "99999999999d"])
def test_put_bad_expires_in_is_a_usage_error(cli: Cli, tmp_path: Path, text: str) -> None:
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--expires-in", text)
    assert result.exit_code == 2
    assert "Invalid value for '--expires-in'" in result.stderr
    assert result.stdout == ""
    assert not blob_files(cli.store)


def test_put_bad_media_type_exits_2(cli: Cli, tmp_path: Path) -> None:
    cli.init()  # a put into a new store also says "created a new store at ..." on stderr
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--media-type", "not a type")
    assert result.exit_code == 2
    assert result.stderr == "error: media type must look like 'type/subtype', e.g. 'application/json'\n"


def test_put_bad_tenant_exits_2(cli: Cli, tmp_path: Path) -> None:
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--tenant", "../etc")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: invalid tenant")


def test_put_missing_file_is_clicks_error(cli: Cli, tmp_path: Path) -> None:
    result = cli("put", str(tmp_path / "absent.txt"))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_filename_markup_is_shown_literally(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "[bold]x.txt", b"x"))
    assert "[bold]x.txt" in cli("ls").stdout


# -- show, cat, ls, rm -------------------------------------------------------------


def test_show(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "a.csv", b"a,b\n1,2\n"))
    assert cli.json("show", d["artifact_id"]) == d
    human = cli("show", d["artifact_id"])
    assert human.exit_code == 0
    assert d["artifact_id"] in human.stdout
    assert "text/csv" in human.stdout


@pytest.mark.parametrize("size", [0, 10, LARGE, 2 * 1024 * 1024 + 5])
def test_cat_returns_the_exact_bytes(cli: Cli, tmp_path: Path, size: int) -> None:
    data = payload(size)
    d = cli.put(write(tmp_path, "blob.bin", data))
    result = cli("cat", d["artifact_id"])
    assert result.exit_code == 0
    assert result.stdout_bytes == data


@pytest.mark.parametrize("size", [0, 1, 2, 3, 2 * 1024 * 1024 + 1])
def test_cat_json_is_base64(cli: Cli, tmp_path: Path, size: int) -> None:
    data = payload(size)
    d = cli.put(write(tmp_path, "blob.bin", data))
    out = cli.json("cat", d["artifact_id"])
    assert out["artifact_id"] == d["artifact_id"]
    assert out["content_hash"] == d["content_hash"]
    assert out["size"] == size
    assert out["encoding"] == "base64"
    assert base64.b64decode(out["content"], validate=True) == data


def test_ls_newest_first(cli: Cli, tmp_path: Path) -> None:
    ids = [cli.put(write(tmp_path, f"f{i}.txt", b"%d" % i))["artifact_id"] for i in range(3)]
    listed = cli.json("ls")
    assert [d["artifact_id"] for d in listed] == ids[::-1]
    for d in listed:
        assert_descriptor(d)
    human = cli("ls").stdout
    assert [line.split()[0] for line in human.splitlines()[1:]] == ids[::-1]
    header = human.splitlines()[0].split()
    assert header == ["id", "created", "size", "media", "type", "disclosure", "filename"]
    assert "f2.txt" in human


def test_ls_is_scoped(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "a.txt", b"x"), "--session", "s1")
    assert len(cli.json("ls", "--session", "s1")) == 1
    assert cli.json("ls") == []
    assert "no artifacts" in cli("ls").stdout


def test_rm(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "a.txt", b"x"))
    assert cli.json("rm", d["artifact_id"]) == {"artifact_id": d["artifact_id"], "deleted": True}
    assert cli.json("ls") == []
    again = cli("rm", d["artifact_id"])
    assert again.exit_code == 1
    assert "not found" in again.stderr


@pytest.mark.parametrize("command", ["show", "cat", "rm"])
def test_unknown_id_exits_1_not_found(cli: Cli, command: str) -> None:
    cli.init()
    result = cli(command, MISSING_ID)
    assert result.exit_code == 1
    assert result.stderr == f"error: {not_found(MISSING_ID)}\n"
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["show", "cat", "rm"])
@pytest.mark.parametrize("bad_id", ["nope", "art_SHORT", "../../etc/passwd", "sha256:" + "0" * 64])
def test_malformed_id_exits_2(cli: Cli, command: str, bad_id: str) -> None:
    result = cli(command, bad_id)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: not a refvault artifact id")
    assert bad_id not in result.stderr


@pytest.mark.parametrize("option", ["--tenant", "--user", "--session"])
def test_other_scope_gets_not_found(cli: Cli, tmp_path: Path, option: str) -> None:
    d = cli.put(write(tmp_path, "a.txt", b"private"))
    for command in ("show", "cat", "rm"):
        result = cli(command, d["artifact_id"], option, "intruder")
        assert result.exit_code == 1
        scope = {"--tenant": "intruder/local/local", "--user": "local/intruder/local"}.get(
            option, "local/local/intruder"
        )
        assert result.stderr == f"error: {not_found(d['artifact_id'], scope)}\n"
        assert b"private" not in result.stdout_bytes
    assert cli.json("show", d["artifact_id"]) == d


def test_scope_defaults_from_environment(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFVAULT_TENANT", "acme")
    monkeypatch.setenv("REFVAULT_USER", "ana")
    monkeypatch.setenv("REFVAULT_SESSION", "s9")
    d = cli.put(write(tmp_path, "a.txt", b"x"))
    assert d["scope"] == {"tenant": "acme", "user": "ana", "session": "s9", "run_id": None}
    monkeypatch.delenv("REFVAULT_TENANT")
    assert cli("show", d["artifact_id"]).exit_code == 1
    assert cli("show", d["artifact_id"], "--tenant", "acme").exit_code == 0


def test_store_defaults_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "env-store"
    monkeypatch.setenv("REFVAULT_STORE", str(store))
    runner = CliRunner()
    result = runner.invoke(main, ["put", "-", "--json"], input=payload(LARGE))
    assert result.exit_code == 0, result.output
    assert (store / "catalog.db").exists()
    assert len(blob_files(store)) == 1
    assert len(json.loads(runner.invoke(main, ["ls", "--json"]).stdout)) == 1


def test_expired_artifact_exits_1(cli: Cli, store: Path) -> None:
    past = datetime.now(UTC) - timedelta(days=2)
    with Vault.open(store, clock=lambda: past) as vault:
        d = vault.put(Scope("local", "local", "local"), b"old", expires_at=past + timedelta(hours=1))
    result = cli("show", d.artifact_id)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: artifact {d.artifact_id} expired at ")
    assert cli.json("ls") == []


# -- verify ------------------------------------------------------------------------


def test_verify_good_store(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    cli.put(write(tmp_path, "small.txt", b"small"))
    report = cli.json("verify")
    assert report == {
        "ok": True,
        "blobs_checked": 2,
        "bytes_checked": LARGE + 5,
        "artifacts": 2,
        "unreferenced": 0,
        "unreferenced_in_grace": 0,
        "grace_seconds": 3600.0,
        "collectable_after": None,
        "problems": [],
    }
    human = cli("verify")
    assert human.exit_code == 0
    assert human.stdout.startswith("ok: 2 blobs")


def test_verify_empty_store(cli: Cli) -> None:
    cli.init()
    assert cli.json("verify")["ok"] is True


def test_verify_reports_corrupt_blob(cli: Cli, tmp_path: Path) -> None:
    marker = b"SECRET-MARKER-" * 4
    data = payload(LARGE, marker)
    d1 = cli.put(write(tmp_path, "big.bin", data))
    d2 = cli.put(write(tmp_path, "again.bin", data))
    [blob] = blob_files(cli.store)
    blob.chmod(0o640)
    with blob.open("r+b") as f:
        f.seek(LARGE // 2)
        f.write(b"\x00" if data[LARGE // 2] else b"\x01")

    result = cli("verify", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["kind"] == "corrupt"
    assert problem["digest"] == d1["content_hash"].removeprefix("sha256:")
    assert sorted(problem["artifact_ids"]) == sorted([d1["artifact_id"], d2["artifact_id"]])

    human = cli("verify")
    assert human.exit_code == 1
    assert d1["artifact_id"] in human.stdout
    assert "corrupt" in human.stdout

    read = cli("cat", d1["artifact_id"])
    assert read.exit_code == 1
    assert "failed verification" in read.stderr
    assert read.stdout_bytes == b""
    for output in (result.output, human.output, read.output):
        assert marker.decode() not in output


def test_verify_reports_missing_blob(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    [blob] = blob_files(cli.store)
    blob.unlink()
    result = cli("verify", "--json")
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["kind"] == "missing"
    assert problem["artifact_ids"] == [d["artifact_id"]]


# -- gc ----------------------------------------------------------------------------


def test_gc_dry_run_then_gc(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    cli.json("rm", d["artifact_id"])
    assert len(blob_files(cli.store)) == 1

    assert cli.json("gc")["blobs_removed"] == 0  # default grace (1 h) protects young blobs
    dry = cli.json("gc", "--grace", "0", "--dry-run")
    assert dry == {
        "dry_run": True,
        "expired": [],
        "blobs_removed": 1,
        "temporaries_removed": 0,
        "failures": 0,
        "blobs_kept": 0,
        "grace_seconds": 0.0,
    }
    assert len(blob_files(cli.store)) == 1

    done = cli.json("gc", "--grace", "0")
    assert done == {**dry, "dry_run": False}
    assert blob_files(cli.store) == []
    assert cli.json("gc", "--grace", "0")["blobs_removed"] == 0


def test_gc_removes_expired(cli: Cli, store: Path) -> None:
    past = datetime.now(UTC) - timedelta(days=2)
    with Vault.open(store, clock=lambda: past) as vault:
        old = vault.put(Scope("local", "local", "local"), b"old", expires_at=past + timedelta(hours=1))
    keep = cli.json("put", "-", input=b"fresh")

    human = cli("gc", "--dry-run", "--grace", "0")
    assert human.exit_code == 0
    assert "would remove 1 expired artifact\n" in human.stdout
    assert old.artifact_id in human.stdout

    report = cli.json("gc", "--grace", "0")
    assert report["expired"] == [old.artifact_id]
    assert cli.json("gc", "--grace", "0")["expired"] == []
    assert [d["artifact_id"] for d in cli.json("ls")] == [keep["artifact_id"]]
    assert "removed 0 expired artifacts" in cli("gc").stdout


def test_gc_negative_grace_is_a_usage_error(cli: Cli) -> None:
    result = cli("gc", "--grace", "-1")
    assert result.exit_code == 2
    assert "--grace" in result.stderr


# -- choosing the store ------------------------------------------------------------


def run(*args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> Result:
    """``refvault <args>`` without an implicit --store."""
    return CliRunner(env=env).invoke(main, list(args), input=input, catch_exceptions=False)


def no_store_message(location: str | Path) -> str:
    return f"error: no refvault store at {location} (run 'refvault put' to create one, or pass --store)\n"


def test_store_option_after_the_command(store: Path) -> None:
    put = run("put", "-", "--store", str(store), "--json", input=b"hello")
    assert put.exit_code == 0, put.output
    d = json.loads(put.stdout)
    assert (store / "catalog.db").exists()
    assert [x["artifact_id"] for x in json.loads(run("ls", "--store", str(store), "--json").stdout)] == [
        d["artifact_id"]
    ]
    assert run("--store", str(store), "ls", "--json").stdout == run("ls", "--json", "--store", str(store)).stdout
    assert run("cat", d["artifact_id"], "--store", str(store)).stdout_bytes == b"hello"
    assert json.loads(run("show", "--store", str(store), d["artifact_id"], "--json").stdout) == d
    assert json.loads(run("verify", "--store", str(store), "--json").stdout)["ok"] is True
    assert json.loads(run("gc", "--store", str(store), "--json").stdout)["dry_run"] is False
    assert json.loads(run("rm", d["artifact_id"], "--store", str(store), "--json").stdout)["deleted"] is True


def test_command_store_wins_over_group_store(tmp_path: Path) -> None:
    group, command = tmp_path / "group", tmp_path / "command"
    result = run("--store", str(group), "put", "-", "--store", str(command), "--json", input=b"x")
    assert result.exit_code == 0, result.output
    assert (command / "catalog.db").exists()
    assert not group.exists()
    d = json.loads(result.stdout)
    assert run("--store", str(group), "show", d["artifact_id"], "--store", str(command)).exit_code == 0
    assert run("--store", str(command), "show", d["artifact_id"], "--store", str(group)).exit_code == 1


def test_command_store_wins_over_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFVAULT_STORE", str(tmp_path / "env"))
    assert run("put", "-", "--store", str(tmp_path / "explicit"), input=b"x").exit_code == 0
    assert (tmp_path / "explicit" / "catalog.db").exists()
    assert not (tmp_path / "env").exists()


def test_demo_accepts_store_after_the_command(store: Path) -> None:
    result = run("demo", "--store", str(store), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["store"] == str(store)
    assert (store / "catalog.db").exists()


@pytest.mark.parametrize("command", ["put", "show", "cat", "ls", "rm", "verify", "gc", "demo"])
def test_every_command_documents_store(command: str) -> None:
    assert "--store PATH" in run(command, "--help").stdout


def test_store_option_rejects_a_file(tmp_path: Path) -> None:
    result = run("ls", "--store", str(write(tmp_path, "file", b"")))
    assert result.exit_code == 2
    assert "is a file" in result.stderr


# -- read-only commands never create a store ---------------------------------------

READ_ONLY = [
    ("ls",),
    ("show", MISSING_ID),
    ("cat", MISSING_ID),
    ("rm", MISSING_ID),
    ("verify",),
    ("gc",),
    ("gc", "--dry-run"),
]


@pytest.mark.parametrize("args", READ_ONLY)
def test_read_only_command_needs_an_existing_store(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.exit_code == 1
    assert result.stderr == no_store_message(cli.store)
    assert result.stdout == ""
    assert not cli.store.exists()


@pytest.mark.parametrize("args", READ_ONLY)
def test_read_only_command_leaves_a_plain_directory_alone(tmp_path: Path, args: tuple[str, ...]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    result = run("--store", str(plain), *args)
    assert result.exit_code == 1
    assert result.stderr == no_store_message(plain)
    assert list(plain.iterdir()) == []


@pytest.mark.parametrize("value", [None, ""])
def test_missing_default_store_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    if value is not None:
        monkeypatch.setenv("REFVAULT_STORE", value)  # empty counts as unset
    result = run("ls")
    assert result.exit_code == 1
    assert result.stderr == no_store_message("./.refvault")
    assert not (tmp_path / ".refvault").exists()
    assert run("put", "-", input=b"x").exit_code == 0
    assert (tmp_path / ".refvault" / "catalog.db").exists()
    assert "no artifacts" not in run("ls").stdout


def test_missing_environment_store_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    location = tmp_path / "env-store"
    monkeypatch.setenv("REFVAULT_STORE", str(location))
    result = run("verify")
    assert result.exit_code == 1
    assert result.stderr == no_store_message(location)
    assert not location.exists()


def test_put_and_demo_create_the_store(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "a.txt", b"x"))
    assert (cli.store / "catalog.db").exists()
    kept = tmp_path / "demo-store"
    assert run("demo", "--store", str(kept)).exit_code == 0
    assert (kept / "catalog.db").exists()


def test_bad_id_is_reported_before_a_missing_store(cli: Cli) -> None:
    result = cli("show", "nope")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: not a refvault artifact id")
    assert not cli.store.exists()


# -- opening errors name the store -------------------------------------------------


def test_open_failure_names_the_store(tmp_path: Path) -> None:
    location = write(tmp_path, "a-file", b"") / "store"  # a directory cannot be made under a file
    result = run("put", "-", "--store", str(location), input=b"x")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot open store {location}: ")
    assert "[Errno" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_damaged_catalog_names_the_store(cli: Cli) -> None:
    cli.store.mkdir()
    (cli.store / "catalog.db").write_bytes(b"this is not a database" * 100)
    result = cli("ls")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot open store {cli.store}: ")


def test_unsupported_store_location_exits_2_and_names_it() -> None:
    result = run("--store", "s3://bucket", "put", "-", input=b"x")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot open store s3://bucket: unsupported store location")


# -- errors under --json -----------------------------------------------------------


def json_error(result: Result) -> dict[str, str]:
    out = json.loads(result.stdout)
    assert list(out) == ["error"]
    assert list(out["error"]) == ["type", "message"]
    error: dict[str, str] = out["error"]
    assert result.stderr == f"error: {error['message']}\n"  # the human line stays on stderr
    return error


@pytest.mark.parametrize("command", ["show", "cat", "rm"])
def test_json_not_found_error(cli: Cli, command: str) -> None:
    cli.init()
    result = cli(command, MISSING_ID, "--json")
    assert result.exit_code == 1
    assert json_error(result) == {"type": "NotFound", "message": not_found(MISSING_ID)}


@pytest.mark.parametrize("command", ["show", "cat", "rm"])
def test_json_bad_id_error_exits_2(cli: Cli, command: str) -> None:
    result = cli(command, "../../etc/passwd", "--json")
    assert result.exit_code == 2
    error = json_error(result)
    assert error["type"] == "InvalidId"
    assert error["message"].startswith("not a refvault artifact id")
    assert "passwd" not in result.output


def test_json_bad_input_error_exits_2(cli: Cli, tmp_path: Path) -> None:
    cli.init()
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--media-type", "not a type", "--json")
    assert result.exit_code == 2
    assert json_error(result)["type"] == "InvalidMetadata"


def test_json_conflict_error(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "a.txt", b"one"), "--idempotency-key", "k")
    result = cli("put", str(write(tmp_path, "b.txt", b"two")), "--idempotency-key", "k", "--json")
    assert result.exit_code == 1
    assert json_error(result)["type"] == "IdempotencyConflict"


@pytest.mark.parametrize("args", READ_ONLY)
def test_json_missing_store_error(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args, "--json")
    assert result.exit_code == 1
    assert json_error(result) == {"type": "StoreNotFound", "message": no_store_message(cli.store)[7:-1]}


def test_json_open_error(tmp_path: Path) -> None:
    location = write(tmp_path, "a-file", b"") / "store"
    result = run("put", "-", "--store", str(location), "--json", input=b"x")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "StorageError"
    assert error["message"].startswith(f"cannot open store {location}: ")


def test_json_usage_error(cli: Cli, tmp_path: Path) -> None:
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--json", "--expires-in", "soon")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["type"] == "UsageError"
    assert "Invalid value for '--expires-in'" in json.loads(result.stdout)["error"]["message"]
    assert "Usage:" in result.stderr  # click's own report is unchanged
    early = cli("put", str(write(tmp_path, "b.txt", b"x")), "--expires-in", "soon", "--json")  # flag not yet read
    assert early.exit_code == 2
    assert json.loads(early.stdout)["error"]["type"] == "UsageError"


def test_json_error_for_damaged_artifact_is_the_only_output(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    [blob] = blob_files(cli.store)
    blob.chmod(0o640)
    blob.write_bytes(b"\x00" + blob.read_bytes()[1:])
    result = cli("cat", d["artifact_id"], "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["type"] == "IntegrityError"


def test_without_json_errors_stay_off_stdout(cli: Cli) -> None:
    result = cli("ls")
    assert result.exit_code == 1
    assert result.stdout == ""


# -- JSON shape --------------------------------------------------------------------


def test_descriptor_json_is_identical_from_put_show_and_ls(cli: Cli, tmp_path: Path) -> None:
    put = cli("put", str(write(tmp_path, "a.json", b"{}")), "--json")
    assert put.exit_code == 0
    d = json.loads(put.stdout)
    show = cli("show", d["artifact_id"], "--json")
    assert show.stdout == put.stdout  # byte for byte, nested key order included
    [listed] = json.loads(cli("ls", "--json").stdout)
    assert json.dumps(listed, indent=2) + "\n" == put.stdout


def test_descriptor_json_order(cli: Cli, store: Path) -> None:
    with Vault.open(store) as vault:
        stored = vault.put(
            Scope("local", "local", "local"),
            b"x",
            completeness={"status": "partial", "records": 3, "omissions": [{"why": "cap", "at": 3}]},
            source_version={"z": 1, "a": {"y": 2, "b": 3}},
        )
    [listed] = cli.json("ls")
    shown = cli.json("show", stored.artifact_id)
    for d in (listed, shown):
        assert list(d) == list(DESCRIPTOR_FIELDS)  # the ten fields in their defined order
        assert list(d["completeness"]) == ["omissions", "records", "status"]
        assert list(d["completeness"]["omissions"][0]) == ["at", "why"]
        assert list(d["source_version"]) == ["a", "z"]
        assert list(d["source_version"]["a"]) == ["b", "y"]
        assert list(d["scope"]) == sorted(d["scope"])
        assert list(d["retrieval"]) == sorted(d["retrieval"])


def test_report_json_keeps_its_field_order(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "a.txt", b"x"))
    assert list(cli.json("verify")) == [
        "ok",
        "blobs_checked",
        "bytes_checked",
        "artifacts",
        "unreferenced",
        "unreferenced_in_grace",
        "grace_seconds",
        "collectable_after",
        "problems",
    ]
    assert list(cli.json("gc")) == [
        "dry_run",
        "expired",
        "blobs_removed",
        "temporaries_removed",
        "failures",
        "blobs_kept",
        "grace_seconds",
    ]


# -- wording -----------------------------------------------------------------------


def test_verify_counts_are_singular_for_one(cli: Cli, tmp_path: Path) -> None:
    cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    assert cli("verify").stdout.startswith("ok: 1 blob (48.0 KiB) checked for 1 artifact; 0 unreferenced\n")
    [blob] = blob_files(cli.store)
    blob.unlink()
    damaged = cli("verify")
    assert damaged.exit_code == 1
    headline = damaged.stdout.splitlines()[0]
    assert headline.startswith("1 damaged blob: 1 blob (")
    assert headline.endswith(") checked for 1 artifact; 0 unreferenced")


def test_gc_counts_are_singular_for_one(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "big.bin", payload(LARGE)))
    cli.json("rm", d["artifact_id"])
    out = cli("gc", "--grace", "0").stdout
    assert "removed 0 expired artifacts\n" in out
    assert "removed 1 unreferenced blob\n" in out
    assert "removed 0 temporaries\n" in out


def test_panel_size_is_singular_for_one_byte(cli: Cli, tmp_path: Path) -> None:
    out = cli("put", str(write(tmp_path, "a.txt", b"x"))).stdout
    assert "1 byte (1 B)" in out


@pytest.mark.parametrize("text", ["99999999d", "99999999999999999999d", "9999999999999s"])
def test_expires_in_too_far(cli: Cli, tmp_path: Path, text: str) -> None:
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--expires-in", text)
    assert result.exit_code == 2
    assert (
        f"Invalid value for '--expires-in': {text} is too far in the future "
        "(the deadline must be before year 10000)" in result.stderr
    )


def test_expires_in_zero_wording(cli: Cli, tmp_path: Path) -> None:
    result = cli("put", str(write(tmp_path, "a.txt", b"x")), "--expires-in", "000h")
    assert result.exit_code == 2
    assert "Invalid value for '--expires-in': 000h must be longer than zero" in result.stderr


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_demo_help_lists_all_six_steps() -> None:
    help_text = run("demo", "--help").stdout
    steps = ["1. capture", "2. absence", "3. pinned", "4. screenshot", "5. runbook", "6. restart"]
    positions = [help_text.index(step) for step in steps]
    assert positions == sorted(positions)
    assert "unless --store is given (kept)" in one_line(help_text)
    assert "pip install 'refvault[mcp]'" in one_line(help_text)


def test_sealed_help_wording() -> None:
    help_text = one_line(run("put", "--help").stdout)
    assert (
        "Store as sealed: for use by reference only (by tools); model-facing read tools refuse sealed artifacts."
        in help_text
    )
    assert "model-facing reads refuse it" not in help_text
    assert "Sealed artifacts are written too: the CLI is an operator tool." in one_line(run("cat", "--help").stdout)


def test_cat_reads_sealed_artifacts(cli: Cli, tmp_path: Path) -> None:
    d = cli.put(write(tmp_path, "secret.txt", b"token"), "--sealed")
    assert d["retrieval"]["disclosure"] == "sealed"
    result = cli("cat", d["artifact_id"])
    assert result.exit_code == 0
    assert result.stdout_bytes == b"token"
    assert base64.b64decode(cli.json("cat", d["artifact_id"])["content"]) == b"token"


# -- the descriptor panel ----------------------------------------------------------

HASH_LINE = re.compile(r"content hash\s+sha256:[0-9a-f]{64}\s")


@pytest.mark.parametrize("columns", [None, "91"])
def test_demo_human_output(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    if columns is not None:
        monkeypatch.setenv("COLUMNS", columns)
    result = run("demo")
    assert result.exit_code == 0, result.output
    out = result.stdout
    hashes = re.findall(r"^ +sha256:[0-9a-f]{64}$", out, re.MULTILINE)
    assert len(hashes) == 5  # every artifact's content hash on one line of the evidence report
    assert max(len(line) for line in out.splitlines()) <= int(columns or 200)
    assert "demo passed: all 6 step checks hold (temporary store removed)" in out
    assert "(s)" not in out
    assert "1 finding of art_" in one_line(out)


def test_panel_keeps_the_hash_whole_beside_long_values(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    d = cli.put(write(tmp_path, "x" * 150 + ".txt", b"x"))
    out = cli("show", d["artifact_id"]).stdout
    assert HASH_LINE.search(out), out
    assert d["content_hash"] in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_narrow_panel_folds_the_hash(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    d = cli.put(write(tmp_path, "a.txt", b"x"))
    out = cli("show", d["artifact_id"]).stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    assert d["content_hash"][:40] in out  # folded, not cut


# -- demo, help, packaging ---------------------------------------------------------


def test_demo_json(cli: Cli) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["demo", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is True
    assert out["store"] is None
    assert [s["name"] for s in out["steps"]] == ["capture", "absence", "pinned", "screenshot", "runbook", "restart"]
    assert all(s["ok"] for s in out["steps"])
    for artifact in out["evidence"]["artifacts"]:
        d = artifact["descriptor"]
        assert_descriptor(d)
        assert list(d) == list(DESCRIPTOR_FIELDS)  # the same order as put, show and ls print
        for value in d.values():
            if isinstance(value, dict):
                assert list(value) == sorted(value)


def test_demo_with_store_keeps_it(cli: Cli) -> None:
    first = cli("demo")
    assert first.exit_code == 0, first.output
    assert f"demo passed: all 6 step checks hold (store kept at {cli.store})" in first.stdout
    assert (cli.store / "catalog.db").exists()
    again = cli.json("demo")  # a second run on the same store still passes
    assert again["store"] == str(cli.store)
    assert again["ok"] is True
    owner = ("--tenant", "acme", "--user", "oncall", "--session", "incident-20261106")
    assert len(cli.json("ls", *owner)) == 10  # five artifacts per run: two snapshots, a screenshot, a runbook, evidence


@pytest.mark.parametrize("command", ["put", "show", "cat", "ls", "rm", "verify", "gc", "demo"])
def test_help(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert "--json" in result.stdout


def test_import_is_light() -> None:
    code = "import sys, refvault.cli; print(sorted(m for m in sys.modules if m.startswith(('rich', 'sqlalchemy'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_console_script_round_trips_binary(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "refvault"
    assert script.exists()
    env = {**os.environ, "REFVAULT_STORE": str(tmp_path / "store")}
    for name in ("REFVAULT_TENANT", "REFVAULT_USER", "REFVAULT_SESSION"):
        env.pop(name, None)
    data = bytes(range(256)) * 300 + b"\r\n\x00\x1b[31m"
    source = write(tmp_path, "data.bin", data)

    put = subprocess.run([script, "put", str(source), "--json"], capture_output=True, check=True, env=env)
    descriptor = json.loads(put.stdout)
    assert descriptor["content_hash"] == "sha256:" + hashlib.sha256(data).hexdigest()

    cat = subprocess.run([script, "cat", descriptor["artifact_id"]], capture_output=True, check=True, env=env)
    assert cat.stdout == data

    piped = subprocess.run([script, "put", "-", "--json"], input=data, capture_output=True, check=True, env=env)
    assert json.loads(piped.stdout)["content_hash"] == descriptor["content_hash"]

    missing = subprocess.run([script, "cat", MISSING_ID], capture_output=True, env=env)
    assert missing.returncode == 1
    assert missing.stderr == f"error: {not_found(MISSING_ID)}\n".encode()


def test_cat_json_prints_only_the_error_when_a_later_chunk_is_damaged(cli: Cli, tmp_path: Path) -> None:
    data = payload(3 * (1 << 20))
    d = cli.put(write(tmp_path, "big.bin", data))
    with Vault.open(cli.store) as vault:  # a range read records chunk digests, so damage shows up late
        vault.read_range(Scope("local", "local", "local"), d["artifact_id"], 0, 1)
    digest = d["content_hash"].removeprefix("sha256:")
    [blob] = cli.store.glob(f"blobs/*/{digest[:2]}/{digest}")
    blob.chmod(0o640)
    damaged = bytearray(data)
    damaged[2 * (1 << 20) + 5] ^= 1
    blob.write_bytes(bytes(damaged))
    result = cli("cat", d["artifact_id"], "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["type"] == "IntegrityError"


def test_gc_reports_blobs_it_could_not_remove_and_exits_1(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from refvault.blobs.filesystem import FilesystemBlobStore
    from refvault.errors import StorageError

    d = cli.put(write(tmp_path, "big.bin", payload(100_000)))
    assert cli("rm", d["artifact_id"]).exit_code == 0

    def refuse(self: FilesystemBlobStore, key: object) -> None:
        raise StorageError(13, "deleting a blob failed: Permission denied")

    monkeypatch.setattr(FilesystemBlobStore, "delete", refuse)
    result = cli("gc", "--grace", "0", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["failures"] == 1
    assert cli("gc", "--grace", "inf").exit_code == 2
