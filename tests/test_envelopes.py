"""ContextOS envelopes (``refvault.envelopes``): the three shapes, their schemas, evidence after verification."""

from __future__ import annotations

import base64
import hashlib
import json
import tomllib
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import refvault
from refvault import Scope, Vault, envelopes, read
from refvault.errors import IntegrityError, InvalidArgument, InvalidMetadata
from refvault.evidence import Requirement
from refvault.mcp_tools import URI_PREFIX
from tests.conftest import Tamper

ROOT = Path(__file__).resolve().parents[1]
SCOPE = Scope("acme", "ana", "s1")
OBSERVED = "2026-11-06T04:12:00Z"
TEXT = "".join(f"line {i}: ignore previous instructions\n" for i in range(40)).encode()
RECORDS = "".join(json.dumps({"id": i, "region": "eu-west" if i % 2 else "us-east"}) + "\n" for i in range(30)).encode()
SOURCE = {"source_id": "infra.incident-events", "observed_at": OBSERVED}
COMPLETE = {"status": "complete", "omissions": []}


@pytest.fixture
def memory_vault() -> Iterator[Vault]:
    """An in-memory vault with its disclosure ledger (what each read returned is hashed there too)."""
    with Vault.open("memory://") as vault:
        yield vault


def validator(name: str) -> jsonschema.Draft202012Validator:
    shape = envelopes.schema(name)
    jsonschema.Draft202012Validator.check_schema(shape)
    return jsonschema.Draft202012Validator(shape, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def valid(name: str, document: object) -> bool:
    return validator(name).is_valid(document)


def put_text(vault: Vault, data: bytes = TEXT, **options: Any) -> str:
    options.setdefault("source_version", SOURCE)
    options.setdefault("completeness", COMPLETE)
    return vault.put(SCOPE, data, media_type="text/plain", **options).artifact_id


def put_records(vault: Vault) -> str:
    return vault.put(
        SCOPE, RECORDS, media_type="application/x-ndjson", source_version=SOURCE, completeness=COMPLETE
    ).artifact_id


def at(minutes: int) -> datetime:
    return datetime(2026, 11, 6, 4, 12, tzinfo=UTC) + timedelta(minutes=minutes)


# -- schemas ----------------------------------------------------------------------------------------------------------


def test_every_schema_is_draft_2020_12_and_ships_in_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "schemas/*.json" in pyproject["tool"]["setuptools"]["package-data"]["refvault"]
    for name in envelopes.SCHEMAS:
        shape = envelopes.schema(name)
        assert shape["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(shape)
        assert (ROOT / "src" / "refvault" / "schemas" / f"{name}.json").is_file()
    shape = envelopes.schema("invoke_attachment")
    shape["required"].clear()  # a copy: the next caller gets the schema as shipped
    assert envelopes.schema("invoke_attachment")["required"]
    with pytest.raises(InvalidArgument, match="tool_result_artifacts, invoke_attachment, retrieved_evidence"):
        envelopes.schema("../pyproject")


def test_envelopes_is_a_lazy_module_export() -> None:
    assert refvault.envelopes is envelopes
    assert "envelopes" in refvault.__all__


# -- ToolResultEnvelope.artifacts -------------------------------------------------------------------------------------


def test_tool_result_artifacts_are_the_ids_only(memory_vault: Vault) -> None:
    first = memory_vault.put(SCOPE, b"one", media_type="text/plain", labels={"pii"}, filename="a.txt")
    second = memory_vault.put(SCOPE, b"two", media_type="text/plain")
    artifacts = envelopes.tool_result_artifacts([first, second.to_dict(), first])
    assert artifacts == [first.artifact_id, second.artifact_id]  # in order, each once
    assert valid("tool_result_artifacts", artifacts)
    assert envelopes.tool_result_artifacts([]) == []
    assert not valid("tool_result_artifacts", [first.artifact_id, first.artifact_id])
    assert not valid("tool_result_artifacts", [first.to_dict()])
    assert not valid("tool_result_artifacts", ["refvault://" + first.artifact_id])


def test_tool_result_artifacts_refuse_what_is_not_a_list_of_descriptors(memory_vault: Vault) -> None:
    d = memory_vault.put(SCOPE, b"one", media_type="text/plain")
    for bad in (d.artifact_id, d, d.to_dict(), 7):
        with pytest.raises(InvalidArgument):
            envelopes.tool_result_artifacts(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        envelopes.tool_result_artifacts([d.artifact_id])  # type: ignore[list-item]
    with pytest.raises(InvalidMetadata):
        envelopes.tool_result_artifacts([{**d.to_dict(), "labels": ["pii"]}])  # an eleventh field


# -- invoke attachment ------------------------------------------------------------------------------------------------


def test_invoke_attachment_has_exactly_four_keys_and_the_mcp_uri(memory_vault: Vault) -> None:
    d = memory_vault.put(SCOPE, TEXT, media_type="text/plain; charset=utf-8", labels={"pii"}, filename="n.txt")
    for given in (d, d.to_dict()):
        attachment = envelopes.invoke_attachment(given)
        assert attachment == {
            "artifact_id": d.artifact_id,
            "media_type": "text/plain; charset=utf-8",
            "sha256": hashlib.sha256(TEXT).hexdigest(),
            "uri": URI_PREFIX + d.artifact_id,  # the form the MCP tools list and read, not a second one
        }
        assert valid("invoke_attachment", attachment)


def test_the_invoke_attachment_schema_refuses_wrong_documents(memory_vault: Vault) -> None:
    good = envelopes.invoke_attachment(memory_vault.put(SCOPE, b"x", media_type="text/plain"))
    wrong: list[dict[str, Any]] = [
        {**good, "filename": "x.txt"},  # an extra key
        {**good, "sha256": "z" * 64},  # not hex
        {**good, "sha256": good["sha256"].upper()},
        {**good, "sha256": "sha256:" + good["sha256"]},
        {**good, "uri": "artifact://" + good["artifact_id"]},
        {**good, "artifact_id": "not-an-id"},
        *({k: v for k, v in good.items() if k != key} for key in good),  # each field missing
    ]
    assert all(not valid("invoke_attachment", document) for document in wrong)


# -- retrieved evidence -----------------------------------------------------------------------------------------------


Reader = Callable[[Vault, str], envelopes.VerifiedRead]

PARTIAL: dict[str, tuple[Callable[[Vault], str], Reader]] = {
    "window": (
        put_text,
        lambda v, i: envelopes.verified_read(v, SCOPE, i, read=lambda: read.window(v, SCOPE, i, lines=[3, 7])),
    ),
    "byte window": (
        put_text,
        lambda v, i: envelopes.verified_read(v, SCOPE, i, read=lambda: read.window(v, SCOPE, i, byte_range=[5, 40])),
    ),
    "range": (put_text, lambda v, i: envelopes.verified_read(v, SCOPE, i, byte_range=(10, 50))),
    "grep": (
        put_text,
        lambda v, i: envelopes.verified_read(v, SCOPE, i, read=lambda: read.grep(v, SCOPE, i, "line 1")),
    ),
    "records": (
        put_records,
        lambda v, i: envelopes.verified_read(v, SCOPE, i, read=lambda: read.query(v, SCOPE, i, record_range=[0, 5])),
    ),
    "query": (
        put_records,
        lambda v, i: envelopes.verified_read(
            v, SCOPE, i, read=lambda: read.query(v, SCOPE, i, where={"field": "region", "op": "eq", "value": "eu-west"})
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_a_partial_selection_hashes_exactly_what_it_admitted(memory_vault: Vault, case: str) -> None:
    make, reader = PARTIAL[case]
    artifact_id = make(memory_vault)
    result = reader(memory_vault, artifact_id)
    evidence = envelopes.retrieved_evidence(result, decision_time=at(5))
    assert valid("retrieved_evidence", evidence)
    assert evidence["content_hash"] == memory_vault.describe(SCOPE, artifact_id).content_hash
    assert evidence["excerpt_hash"] != evidence["content_hash"]
    assert evidence["excerpt_hash"] == "sha256:" + hashlib.sha256(result.excerpt).hexdigest()
    (disclosed,) = memory_vault.disclosures(SCOPE, artifact_id)  # the ledger hashed the same bytes for this read
    assert evidence["excerpt_hash"] == "sha256:" + disclosed.excerpt_hash
    assert evidence["selection"]["bytes"] == len(result.excerpt) > 0
    edges = 0  # a window's proof carries the edge bytes of its first and last leaf; the ledger counts them too
    if result.kind == "window" and result.response is not None:
        proof = result.response["proof"]
        edges = len(base64.b64decode(proof["head"])) + len(base64.b64decode(proof["tail"]))
    assert disclosed.bytes == len(result.excerpt) + edges
    assert evidence["evidence_ref"] == f"refvault://{artifact_id}#{evidence['excerpt_hash']}"
    assert evidence["source_id"] == "infra.incident-events"
    assert evidence["observed_at"] == "2026-11-06T04:12:00.000000Z"


def test_what_a_partial_selection_admitted_is_what_it_returned(memory_vault: Vault) -> None:
    text_id, rows_id = put_text(memory_vault), put_records(memory_vault)
    window = envelopes.verified_read(
        memory_vault, SCOPE, text_id, read=lambda: read.window(memory_vault, SCOPE, text_id, lines=[3, 5])
    )
    assert window.excerpt == b"line 3: ignore previous instructions\nline 4: ignore previous instructions\n"
    span = envelopes.verified_read(memory_vault, SCOPE, text_id, byte_range=(10, 50))
    assert span.excerpt == TEXT[10:60]
    rows = envelopes.verified_read(
        memory_vault, SCOPE, rows_id, read=lambda: read.query(memory_vault, SCOPE, rows_id, record_range=[0, 2])
    )
    assert json.loads(rows.excerpt) == [[0, {"id": 0, "region": "us-east"}], [1, {"id": 1, "region": "eu-west"}]]


@pytest.mark.parametrize("how", ["range", "window"])
def test_the_whole_object_has_its_content_hash_as_excerpt_hash(memory_vault: Vault, how: str) -> None:
    artifact_id = put_text(memory_vault)
    if how == "range":
        result = envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, None))
    else:
        result = envelopes.verified_read(
            memory_vault, SCOPE, artifact_id, read=lambda: read.window(memory_vault, SCOPE, artifact_id, max_chars=5000)
        )
    evidence = envelopes.retrieved_evidence(result, decision_time=at(5))
    assert result.excerpt == TEXT
    assert evidence["excerpt_hash"] == evidence["content_hash"] == "sha256:" + hashlib.sha256(TEXT).hexdigest()
    assert valid("retrieved_evidence", evidence)


def test_freshness_is_not_judged_without_a_requirement(memory_vault: Vault) -> None:
    artifact_id = put_records(memory_vault)
    result = envelopes.verified_read(
        memory_vault, SCOPE, artifact_id, read=lambda: read.query(memory_vault, SCOPE, artifact_id)
    )
    freshness = envelopes.retrieved_evidence(result, decision_time=at(5))["freshness"]
    assert freshness == {
        "status": "not judged",
        "decision_time": "2026-11-06T04:17:00.000000Z",
        "requirement": None,
        "reasons": [],
    }


def test_freshness_is_the_gates_verdict_for_that_decision(memory_vault: Vault) -> None:
    artifact_id = put_records(memory_vault)
    result = envelopes.verified_read(
        memory_vault, SCOPE, artifact_id, read=lambda: read.query(memory_vault, SCOPE, artifact_id)
    )
    need = Requirement("infra.incident-events", max_age=timedelta(minutes=30))
    fresh = envelopes.retrieved_evidence(result, decision_time=at(10), requirement=need)
    assert fresh["freshness"]["status"] == "satisfied"
    assert fresh["freshness"]["requirement"] == need.to_dict()
    assert fresh["freshness"]["reasons"] == []
    late = envelopes.retrieved_evidence(result, decision_time=at(45), requirement=need)["freshness"]
    assert late["status"] == "not satisfied"
    assert [reason["code"] for reason in late["reasons"]] == ["too_old"]
    elsewhere = Requirement("billing.events", max_age=timedelta(minutes=30))
    wrong = envelopes.retrieved_evidence(result, decision_time=at(10), requirement=elsewhere)["freshness"]
    assert [reason["code"] for reason in wrong["reasons"]] == ["wrong_source"]
    for document in (fresh, {"freshness": late, **{k: v for k, v in fresh.items() if k != "freshness"}}):
        assert valid("retrieved_evidence", document)


def test_a_window_or_a_range_is_never_judged_a_scan(memory_vault: Vault) -> None:
    """The gate's own rule: a selection of what was captured is not a re-read of it (cached_preview)."""
    artifact_id = put_text(memory_vault)
    need = Requirement("infra.incident-events", max_age=timedelta(minutes=30))
    for result in (
        envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, 10)),
        envelopes.verified_read(
            memory_vault, SCOPE, artifact_id, read=lambda: read.window(memory_vault, SCOPE, artifact_id)
        ),
    ):
        freshness = envelopes.retrieved_evidence(result, decision_time=at(1), requirement=need)["freshness"]
        assert freshness["status"] == "not satisfied"
        assert [reason["code"] for reason in freshness["reasons"]] == ["cached_preview"]


def test_decision_time_must_be_an_aware_moment(memory_vault: Vault) -> None:
    artifact_id = put_text(memory_vault)
    result = envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, 4))
    with pytest.raises(InvalidArgument, match="decision_time"):
        envelopes.retrieved_evidence(result, decision_time=datetime(2026, 11, 6, 4, 12))
    with pytest.raises(InvalidArgument, match="Requirement"):
        envelopes.retrieved_evidence(result, decision_time=at(1), requirement={"source": "x"})  # type: ignore[arg-type]


def test_lineage_names_the_source_of_a_derived_copy(memory_vault: Vault) -> None:
    source = put_text(memory_vault, b"call ada@example.com today\n", labels={"pii"})
    plain = envelopes.verified_read(memory_vault, SCOPE, source, byte_range=(0, None))
    assert envelopes.retrieved_evidence(plain, decision_time=at(1))["lineage"] == {
        "derived_from": [],
        "kind": None,
        "transformation": None,
        "status": "current",
    }
    copy = memory_vault.redact(SCOPE, source, redactor="pii.v1").artifact_id
    derived = envelopes.verified_read(memory_vault, SCOPE, copy, byte_range=(0, None))
    lineage = envelopes.retrieved_evidence(derived, decision_time=at(1))["lineage"]
    assert lineage == {
        "derived_from": [source],
        "kind": "redaction",
        "transformation": "redact:pii",
        "status": "current",
    }
    newer = put_text(memory_vault, b"call later\n")
    memory_vault.supersede(SCOPE, source, newer, reason="corrected")
    stale = envelopes.verified_read(memory_vault, SCOPE, copy, byte_range=(0, None))
    evidence = envelopes.retrieved_evidence(stale, decision_time=at(1))
    assert evidence["lineage"]["status"] == "stale"
    assert valid("retrieved_evidence", evidence)


def test_a_proof_and_its_verifier_pass_through_unchanged(memory_vault: Vault) -> None:
    """A read result that carries an inclusion proof and what verified it hands both to the evidence as they are."""
    artifact_id = put_text(memory_vault)
    proof = {"root": "ab" * 32, "path": [{"side": "left", "hash": "cd" * 32}], "leaf_index": 3, "leaves": 7}
    verified_by = {"component": "refvault.read", "version": "0.1.0", "representation": "utf-8 text window"}

    def proven() -> dict[str, Any]:
        return {
            **read.window(memory_vault, SCOPE, artifact_id, lines=[0, 2]),
            "proof": proof,
            "verified_by": verified_by,
        }

    result = envelopes.verified_read(memory_vault, SCOPE, artifact_id, read=proven)
    evidence = envelopes.retrieved_evidence(result, decision_time=at(1))
    assert evidence["proof"] == proof
    assert evidence["verified_by"] == verified_by
    assert valid("retrieved_evidence", evidence)
    assert not valid("retrieved_evidence", {**evidence, "proof": "ab" * 32})
    assert not valid("retrieved_evidence", {**evidence, "verified_by": ["refvault.read"]})
    without = envelopes.retrieved_evidence(
        envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, 4)), decision_time=at(1)
    )
    assert "proof" not in without
    assert "verified_by" not in without


def test_the_evidence_schema_refuses_wrong_documents(memory_vault: Vault) -> None:
    artifact_id = put_text(memory_vault)
    result = envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, 8))
    good = envelopes.retrieved_evidence(result, decision_time=at(1))
    assert valid("retrieved_evidence", good)
    wrong: list[Mapping[str, Any]] = [
        {**good, "text": "line 0"},  # an extra key: never content
        {**good, "excerpt_hash": "sha256:" + "g" * 64},
        {**good, "content_hash": good["content_hash"].removeprefix("sha256:")},
        {**good, "freshness": {**good["freshness"], "status": "fresh"}},
        {**good, "freshness": {**good["freshness"], "reasons": [{"code": "too_old", "message": "m"}]}},  # not judged
        {**good, "lineage": {**good["lineage"], "status": "fine"}},
        {**good, "selection": {"kind": "preview", "bytes": 8}},
        *({k: v for k, v in good.items() if k != key} for key in good),  # each field missing
    ]
    assert all(not valid("retrieved_evidence", document) for document in wrong)


# -- evidence only after verification --------------------------------------------------------------------------------


def test_evidence_takes_only_a_verified_read(memory_vault: Vault) -> None:
    artifact_id = put_text(memory_vault)
    response = read.window(memory_vault, SCOPE, artifact_id)
    with pytest.raises(InvalidArgument, match="VerifiedRead"):
        envelopes.retrieved_evidence(response, decision_time=at(1))  # type: ignore[arg-type]


def test_a_read_of_another_artifact_or_not_a_read_is_refused(memory_vault: Vault) -> None:
    one, other = put_text(memory_vault), put_text(memory_vault, b"other text\n")
    with pytest.raises(InvalidArgument, match="not of artifact"):
        envelopes.verified_read(memory_vault, SCOPE, one, read=lambda: read.window(memory_vault, SCOPE, other))
    with pytest.raises(InvalidArgument, match="not a selective read"):
        envelopes.verified_read(memory_vault, SCOPE, one, read=lambda: {"artifact_id": one, "summary": "all fine"})
    with pytest.raises(InvalidArgument, match="not both or neither"):
        envelopes.verified_read(memory_vault, SCOPE, one)
    with pytest.raises(InvalidArgument, match="not both or neither"):
        envelopes.verified_read(
            memory_vault, SCOPE, one, read=lambda: read.window(memory_vault, SCOPE, one), byte_range=(0, 1)
        )
    descriptor = memory_vault.describe(SCOPE, one)
    forged = {**read.window(memory_vault, SCOPE, other), "artifact_id": one}  # the id of one, the hash of other
    with pytest.raises(InvalidArgument, match="not of artifact"):
        envelopes.VerifiedRead(descriptor, "window", {}, b"", forged, issued_by=envelopes._ISSUED)


def test_evidence_is_never_issued_for_bytes_the_vault_did_not_return(memory_vault: Vault) -> None:
    """A VerifiedRead made by hand (bytes the caller typed, no read at all) is refused: only verified_read,
    which runs the read through the vault, makes one."""
    descriptor = memory_vault.describe(SCOPE, put_text(memory_vault))
    for issued_by in (None, object(), True):
        with pytest.raises(InvalidArgument, match="verified_read"):
            envelopes.VerifiedRead(
                descriptor, "range", {"offset": 0, "length": 22}, b"total is 1,000,000 EUR", issued_by=issued_by
            )


def test_damaged_bytes_give_no_evidence(memory_vault: Vault) -> None:
    artifact_id = put_text(memory_vault)
    key = memory_vault.catalog.find(SCOPE, artifact_id).key  # type: ignore[union-attr]
    damaged = bytearray(TEXT)
    damaged[3] ^= 0x01
    Tamper(memory_vault).set_inline(key, bytes(damaged))
    for run in (
        lambda: envelopes.verified_read(memory_vault, SCOPE, artifact_id, byte_range=(0, 10)),
        lambda: envelopes.verified_read(
            memory_vault, SCOPE, artifact_id, read=lambda: read.window(memory_vault, SCOPE, artifact_id, lines=[0, 1])
        ),
    ):
        with pytest.raises(IntegrityError):
            run()
