"""Derived copies from the command line: redact, receipt, lineage, supersede, revoke-artifact, refresh, hold,
release, holds, replay-status, replay-packet and delete (with the deletion report).

Each command is the :class:`~refvault.Vault` method of the same name (:mod:`refvault.vault.copies`) in the
command's scope (``--tenant/--user/--session``). Those that change something (``redact``, ``supersede``,
``revoke-artifact``, ``refresh``, ``hold``, ``release``, ``delete``) act on the scope's own artifacts and open
the store for writing; the others only read. ``receipt`` always prints JSON; the others print one line per
fact, and their value as JSON with ``--json``. ``delete`` is ``rm`` with a report: what went (with
``--cascade``, every copy of the artifact the scope owns too), what was kept and why (a hold), the grants
revoked and the disclosures no deletion can take back.
"""

from __future__ import annotations

from typing import Any

import click

from refvault.cli.console import descriptor_json, human_size, make_console, opened, print_json, text
from refvault.cli.options import json_option, main_store_option, reader_options, scope_options
from refvault.copies import DeletionReport, Hold
from refvault.ids import check_artifact_id
from refvault.model import Descriptor, Scope

__all__ = [
    "delete",
    "hold",
    "holds",
    "lineage",
    "receipt",
    "redact",
    "refresh",
    "release",
    "replay_packet",
    "replay_status",
    "revoke_artifact",
    "supersede",
]

REDACTORS = ("pii.v1", "secrets.v1")
_REASON = click.option("--reason", required=True, help="Why (the audit keeps its SHA-256, not the text).")


def _echo(lines: list[str]) -> None:
    console = make_console()
    for line in lines:
        console.print(text(line), soft_wrap=True)


def _copy_line(verb: str, source: str, descriptor: Descriptor) -> str:
    return f"{verb} {source} as {descriptor.artifact_id} ({human_size(descriptor.size)}, {descriptor.content_hash})" + (
        f" labels {','.join(sorted(descriptor.labels))}" if descriptor.labels else ""
    )


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option(
    "--redactor", type=click.Choice(REDACTORS), default="pii.v1", show_default=True, help="The redactor to apply."
)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="PATH",
    help="A dotted JSON path whose values are redacted instead of detecting, e.g. user.email (repeatable; JSON and"
    " JSON Lines only).",
)
@scope_options
@main_store_option
@json_option
@click.pass_context
def redact(
    ctx: click.Context,
    artifact_id: str,
    redactor: str,
    fields: tuple[str, ...],
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Make (or reuse) a redacted copy of artifact ID and print it: a new artifact, derived from ID."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        descriptor = vault.redact(scope, artifact_id, redactor=redactor, fields=list(fields) or None)
    if as_json:
        print_json(descriptor_json(descriptor))
    else:
        _echo([_copy_line(f"redacted ({redactor})", artifact_id, descriptor)])


@click.command()
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def receipt(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Print the receipt of derived artifact ID as JSON: how it was made, from which exact bytes, what changed."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        found = vault.receipt(scope, artifact_id)
    print_json(found.to_dict())


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option("--up", "direction", flag_value="up", help="Only its ancestors.")
@click.option("--down", "direction", flag_value="down", help="Only what derives from it.")
@click.option("--depth", type=click.IntRange(min=0), metavar="N", help="Levels to walk each way (default: all).")
@scope_options
@main_store_option
@json_option
@click.pass_context
def lineage(
    ctx: click.Context,
    artifact_id: str,
    direction: str | None,
    depth: int | None,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Print the lineage of artifact ID as a tree: ancestors (^) above it, its copies (└) below, each marked
    [stale] or [revoked] unless current (--json: the whole graph)."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        graph = vault.lineage(scope, artifact_id, direction=direction or "both", depth=depth)
    if as_json:
        print_json(graph.to_dict())
    else:
        _echo(graph.tree().splitlines())


@click.command()
@click.argument("old_id", metavar="OLD")
@click.argument("new_id", metavar="NEW")
@_REASON
@scope_options
@main_store_option
@json_option
@click.pass_context
def supersede(
    ctx: click.Context, old_id: str, new_id: str, reason: str, tenant: str, user: str, session: str, as_json: bool
) -> None:
    """Mark artifact OLD superseded by NEW: OLD and every copy of it report stale from now on."""
    scope = Scope(tenant, user, session)
    check_artifact_id(old_id)
    check_artifact_id(new_id)
    with opened(ctx, scope=scope) as vault:
        vault.supersede(scope, old_id, new_id, reason=reason)
    if as_json:
        print_json({"artifact_id": old_id, "superseded_by": new_id})
    else:
        _echo([f"superseded {old_id} by {new_id}: it and its copies report stale"])


@click.command(name="revoke-artifact")
@click.argument("artifact_id", metavar="ID")
@_REASON
@scope_options
@main_store_option
@json_option
@click.pass_context
def revoke_artifact(
    ctx: click.Context, artifact_id: str, reason: str, tenant: str, user: str, session: str, as_json: bool
) -> None:
    """Mark artifact ID revoked (its source is no longer valid): it and every copy of it report revoked.

    (`refvault revoke` revokes a sharing grant.)
    """
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        vault.revoke_artifact(scope, artifact_id, reason=reason)
    if as_json:
        print_json({"artifact_id": artifact_id, "revoked": True})
    else:
        _echo([f"revoked {artifact_id}: it and its copies report revoked"])


@click.command()
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def refresh(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """Recompute stale redaction ID from the artifact that superseded its source, and print the fresh copy."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        descriptor = vault.refresh(scope, artifact_id)
    if as_json:
        print_json(descriptor_json(descriptor))
    elif descriptor.artifact_id == artifact_id:
        _echo([f"{artifact_id} is current: nothing to refresh"])
    else:
        _echo([_copy_line("refreshed", artifact_id, descriptor)])


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option("--reason", required=True, help="Why it must be kept (kept with the hold).")
@scope_options
@main_store_option
@json_option
@click.pass_context
def hold(
    ctx: click.Context, artifact_id: str, reason: str, tenant: str, user: str, session: str, as_json: bool
) -> None:
    """Put a hold on artifact ID: until released, it cannot be deleted and does not expire. Prints the hold id."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        made = vault.hold(scope, artifact_id, reason=reason)
    if as_json:
        print_json(made.to_dict())
    else:
        _echo([_hold_line(made)])


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.argument("hold_id", metavar="HOLD_ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def release(
    ctx: click.Context, artifact_id: str, hold_id: str, tenant: str, user: str, session: str, as_json: bool
) -> None:
    """Release hold HOLD_ID (hold_...) on artifact ID."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        vault.release(scope, artifact_id, hold_id)
        left = len(vault.holds(scope, artifact_id))
    if as_json:
        print_json({"artifact_id": artifact_id, "hold_id": hold_id, "released": True, "holds_left": left})
    else:
        _echo([f"released {hold_id} on {artifact_id}; {left} hold{'s' * (left != 1)} left"])


@click.command()
@click.argument("artifact_id", metavar="ID")
@scope_options
@main_store_option
@json_option
@click.pass_context
def holds(ctx: click.Context, artifact_id: str, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List the holds on artifact ID, oldest first."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, read_only=True, scope=scope) as vault:
        found = vault.holds(scope, artifact_id)
    if as_json:
        print_json({"holds": [h.to_dict() for h in found]})
    else:
        _echo([_hold_line(h) for h in found] or ["no holds"])


def _hold_line(h: Hold) -> str:
    entry = h.to_dict()
    return (
        f"{entry['hold_id']}  {entry['artifact_id']}  since {entry['at']}  by {entry['user']}  reason {entry['reason']}"
    )


@click.command(name="replay-status")
@click.argument("artifact_ids", metavar="ID...", nargs=-1, required=True)
@reader_options
@scope_options
@main_store_option
@json_option
@click.pass_context
def replay_status(
    ctx: click.Context,
    artifact_ids: tuple[str, ...],
    purpose: str,
    recipient: str,
    tenant: str,
    user: str,
    session: str,
    as_json: bool,
) -> None:
    """Say for each ID whether a replay could read it now (for --purpose, to --recipient): available (current,
    stale or revoked; allowed or denied by a policy rule), expired or deleted."""
    scope = Scope(tenant, user, session)
    for artifact_id in artifact_ids:
        check_artifact_id(artifact_id)
    with opened(ctx, read_only=True) as vault:
        found = vault.replay_status(scope, list(artifact_ids), purpose=purpose, recipient=recipient)
    if as_json:
        print_json(found)
    else:
        _echo([_replay_line(artifact_id, entry) for artifact_id, entry in found.items()])


@click.command(name="replay-packet")
@click.option("--run", "run", metavar="SESSION", help="The run to replay (a session of this user; default: --session).")
@scope_options
@main_store_option
@json_option
@click.pass_context
def replay_packet(ctx: click.Context, run: str | None, tenant: str, user: str, session: str, as_json: bool) -> None:
    """List every evidence reference the decisions of a run used, each once with its availability now
    (available, expired, deleted, revoked; denied by a policy rule), then every record: uses, substitutions
    (old id -> new id, why, what it charged) and refused reacquisitions."""
    scope = Scope(tenant, user, session)
    with opened(ctx, read_only=True) as vault:
        packet = vault.replay_packet(scope, run or session)
    if as_json:
        print_json(packet.to_dict())
        return
    lines = [f"run {packet.session}: {len(packet.evidence)} evidence reference(s), {len(packet.records)} record(s)"]
    for entry in packet.evidence:
        line = _replay_line(entry.artifact_id, dict(entry.now))
        lines.append(line + f"  used by {', '.join(entry.decisions) or '-'}")
        if entry.replaced_by:
            lines.append(f"  replaced by {entry.replaced_by}")
    for record in packet.records:
        what = f"{record.kind:<11} {record.artifact_id}  decision {record.decision}  at {record.decided_at.isoformat()}"
        if record.replaces:
            what += f"  replaces {record.replaces}"
        if record.reasons:
            what += f"  ({', '.join(record.reasons)})"
        lines.append(what)
        if record.kind != "used" and record.explanation:
            lines.append(f"  {record.explanation}")
    _echo(lines)


def _replay_line(artifact_id: str, entry: dict[str, Any]) -> str:
    parts = [artifact_id, str(entry.get("state"))]
    if entry.get("status") is not None:
        parts.append(str(entry["status"]))
    if entry.get("allowed") is False:
        parts.append(f"denied by policy rule {entry.get('rule_id')}")
    elif entry.get("rule"):
        parts.append(f"by {entry['rule']}")
    if entry.get("at"):
        parts.append(f"at {entry['at']}")
    return "  ".join(parts)


@click.command()
@click.argument("artifact_id", metavar="ID")
@click.option("--cascade", is_flag=True, help="Also delete every copy derived from it that this scope owns.")
@scope_options
@main_store_option
@json_option
@click.pass_context
def delete(
    ctx: click.Context, artifact_id: str, cascade: bool, tenant: str, user: str, session: str, as_json: bool
) -> None:
    """Delete artifact ID (with --cascade, its copies too) and report what went, what was kept and why, and which
    disclosures no deletion can take back (--json: the whole report). Bytes go at a later gc."""
    scope = Scope(tenant, user, session)
    check_artifact_id(artifact_id)
    with opened(ctx, scope=scope) as vault:
        report = vault.delete(scope, artifact_id, cascade=cascade)
    if as_json:
        print_json(report.to_dict())
    else:
        _echo(report_lines(report))


def report_lines(report: DeletionReport) -> list[str]:
    """A deletion report for people: one line per artifact deleted or kept, grant revoked, disclosure made."""
    lines = [f"deleted {len(report.deleted)}, kept {len(report.kept)}"]
    lines += [f"deleted  {d['id']} ({d['kind']}, {human_size(int(d.get('bytes') or 0))})" for d in report.deleted]
    lines += [f"kept     {k['id']} ({k['kind']}): {k['reason']}" for k in report.kept]
    lines += [f"revoked  grant {g}" for g in report.grants_revoked]
    if report.not_erasable:
        lines.append(f"not erasable: {len(report.not_erasable)} disclosure(s) already made, kept in the audit chain")
        lines += [f"  {n['artifact_id']} to {n['recipient']} at {n['at']}" for n in report.not_erasable]
    return lines
