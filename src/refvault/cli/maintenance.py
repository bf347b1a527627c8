"""``refvault verify``, ``gc``, ``migrate``, ``export``, ``import`` and ``manifest-key``: check the store, collect
unreferenced bytes, bring its catalog up to date or move its content to another store, rotate its key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from refvault.cli.console import human_size, is_new_store, make_console, opened, plural, print_json, text
from refvault.cli.options import json_option, main_store_option, store_location
from refvault.model import format_time, pick

if TYPE_CHECKING:
    from rich.console import RenderableType

    from refvault.vault import GcReport, Vault, VerifyReport

__all__ = ["export", "gc", "import_command", "manifest_key", "migrate", "verify"]


@click.command()
@main_store_option
@json_option
@click.pass_context
def verify(ctx: click.Context, as_json: bool) -> None:
    """Check every manifest row's MAC and re-hash every blob; exit 1 on any problem.

    Problems: a row that fails its MAC (manifest), a row whose blob key is in
    another tenant's namespace (misplaced), a blob that is missing or corrupt.
    """
    with opened(ctx, read_only=True) as vault, _progress_bar("verifying") as progress:
        report = vault.verify(progress=progress)
    if as_json:
        print_json(_verify_dict(report))
    else:
        make_console().print(_verify_summary(report))
    if not report.ok:
        ctx.exit(1)


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback drawing a bar on stderr where someone watches (a terminal), else None.

    Pipes and logs get no control codes or stray lines, and do not load rich's progress machinery.
    """
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(label), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress


def _verify_dict(report: VerifyReport) -> dict[str, Any]:
    return {
        **pick(report, ("ok", "blobs_checked", "bytes_checked", "artifacts", "unreferenced", "unreferenced_in_grace")),
        "grace_seconds": report.grace,
        "collectable_after": None if report.collectable_after is None else format_time(report.collectable_after),
        "problems": [
            {"kind": p.kind, "digest": p.digest, "detail": p.detail, "artifact_ids": list(p.artifact_ids)}
            for p in report.problems
        ],
    }


def _verify_summary(report: VerifyReport) -> RenderableType:
    from rich.console import Group
    from rich.table import Table

    counts = (
        f"{plural(report.blobs_checked, 'blob')} ({human_size(report.bytes_checked)}) checked for "
        f"{plural(report.artifacts, 'artifact')}; {_unreferenced(report)}"
    )
    if report.ok:
        return text(f"ok: {counts}", "green")
    table = Table(header_style="bold")
    table.add_column("kind", style="red")
    table.add_column("blob", no_wrap=True)
    table.add_column("artifacts", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for p in report.problems:
        table.add_row(text(p.kind), text(p.digest[:16]), text("\n".join(p.artifact_ids)), text(p.detail))
    damaged = sum(p.kind in ("missing", "corrupt") for p in report.problems)
    altered = len(report.problems) - damaged
    found = [plural(damaged, "damaged blob")] if damaged else []
    found += [plural(altered, "altered manifest row")] if altered else []
    headline = text(f"{', '.join(found)}: {counts}", "bold red")
    return Group(headline, table)


def grace_text(seconds: float) -> str:
    """``1 h``, ``90 min``, ``30 s``, ``2 d``: a grace period for people."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


def _unreferenced(report: VerifyReport) -> str:
    """The unreferenced blobs, and when gc removes them (it keeps those younger than its grace period)."""
    total, young = report.unreferenced, report.unreferenced_in_grace
    if not total:
        return "0 unreferenced"
    blobs = plural(total, "unreferenced blob")
    if not young:
        return f"{blobs} (gc removes {'it' if total == 1 else 'them'})"
    # young > 0, so verify found when the youngest passes the grace period
    when = "" if report.collectable_after is None else f" after {_clock(report.collectable_after)}"
    grace = f"younger than gc's {grace_text(report.grace)} grace period"
    if young == total:
        return f"{blobs} ({grace}: gc removes {'it' if total == 1 else 'them'}{when})"
    return f"{blobs} (gc removes {total - young:,} now; {young:,} {grace}: removable{when})"


def _clock(moment: datetime) -> str:
    return format_time(moment)[:19].replace("T", " ") + "Z"


# -- the manifest key ---------------------------------------------------------------


@click.group(name="manifest-key", context_settings={"help_option_names": ["-h", "--help"]})
def manifest_key() -> None:
    """The key every manifest row is MAC'd with, kept outside the catalog.

    \b
    An embedded store keeps it in manifest-keys.json (0600) in the store directory.
    A postgresql:// store reads it from $REFVAULT_MANIFEST_KEY_FILE (a file made by
    'refvault manifest-key new') or $REFVAULT_MANIFEST_KEY (its text); every process
    of the store must use the same one.
    """


@manifest_key.command("new")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def manifest_key_new(path: Path, as_json: bool) -> None:
    """Create a key file (0600) for a scale-out store; refuses to overwrite one."""
    from refvault.catalog.macs import ENV_KEY_FILE, ManifestKeys

    keys = ManifestKeys.create_file(path)
    if as_json:
        print_json({"path": str(path), "key_id": keys.current_id})
        return
    make_console().print(
        text(f"created {path} (key {keys.current_id}): set ${ENV_KEY_FILE}={path} for every process of the store")
    )


@manifest_key.command("show")
@main_store_option
@json_option
@click.pass_context
def manifest_key_show(ctx: click.Context, as_json: bool) -> None:
    """Where the store's manifest key ring comes from, and its key ids (never a secret)."""
    with opened(ctx, read_only=True) as vault:
        keys = vault.catalog.manifest_keys
        info = {
            "source": keys.source,
            "current": keys.current_id,
            "retired": sorted(set(keys.key_ids) - {keys.current_id}),
        }
    if as_json:
        print_json(info)
        return
    retired = ", ".join(info["retired"]) or "none"
    make_console().print(text(f"{info['source']}: current key {info['current']}; retired: {retired}"))


@manifest_key.command("rotate")
@click.option("--drop-retired", is_flag=True, help="Then remove the retired keys (rows still MAC'd with one fail).")
@main_store_option
@json_option
@click.pass_context
def manifest_key_rotate(ctx: click.Context, drop_retired: bool, as_json: bool) -> None:
    """Make a fresh key current and MAC every authentic row again with it.

    Old keys keep verifying unless --drop-retired. Rows that fail their MAC are left
    as they are (see 'refvault verify'); exit 1 if there are any, or if a retired key
    could not be dropped because a row still uses it.
    """
    with opened(ctx) as vault:
        done = vault.rotate_manifest_key(drop_retired=drop_retired)
    dropped = None if done.dropped is None else list(done.dropped)
    if as_json:
        print_json({"key_id": done.key_id, "remacd": done.remacd, "failing": done.failing, "dropped": dropped})
    else:
        console = make_console()
        console.print(text(f"current key {done.key_id}: {plural(done.remacd, 'row')} MAC'd again", "bold"))
        if drop_retired:
            console.print(
                text(
                    f"dropped: {', '.join(dropped) or 'none'}"
                    if dropped is not None
                    else "retired keys kept: a row still uses one (run again)"
                )
            )
        if done.failing:
            console.print(
                text(f"{plural(done.failing, 'row')} fail their MAC and were left: run 'refvault verify'", "bold red")
            )
    if done.failing or dropped is None:
        ctx.exit(1)


@click.command()
@click.option(
    "--grace",
    type=click.FloatRange(min=0, max=100 * 365 * 86400),
    default=None,
    metavar="SECONDS",
    help="Keep unreferenced bytes younger than this (default: the vault's grace period, 3600 = 1 h).",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@main_store_option
@json_option
@click.pass_context
def gc(ctx: click.Context, grace: float | None, dry_run: bool, as_json: bool) -> None:
    """Remove expired artifacts, then bytes and temporaries nothing references.

    Exits 1 if any unreferenced blob could not be removed.
    """
    with opened(ctx, read_only=dry_run) as vault:
        report = vault.gc(grace=grace, dry_run=dry_run)
    if as_json:
        print_json(_gc_dict(report))
    else:
        make_console().print(_gc_summary(report))
    if report.failures:
        ctx.exit(1)


def _gc_dict(report: GcReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "expired": list(report.expired),
        "blobs_removed": report.blobs_removed,
        "temporaries_removed": report.temporaries_removed,
        "failures": report.failures,
        "blobs_kept": report.blobs_kept,
        "grace_seconds": report.grace,
    }


def _gc_summary(report: GcReport) -> RenderableType:
    from rich.console import Group

    verb = "would remove" if report.dry_run else "removed"
    lines: list[RenderableType] = [
        text(f"{verb} {plural(len(report.expired), 'expired artifact')}", "bold"),
        *(text(f"  {artifact_id}") for artifact_id in report.expired),
        text(f"{verb} {plural(report.blobs_removed, 'unreferenced blob')}"),
        text(f"{verb} {plural(report.temporaries_removed, 'temporary', 'temporaries')}"),
    ]
    if report.blobs_kept:
        kept = "kept" if not report.dry_run else "would keep"
        lines.append(
            text(
                f"{kept} {plural(report.blobs_kept, 'unreferenced blob')} within the {grace_text(report.grace)} grace "
                f"period (a gc after that removes {'it' if report.blobs_kept == 1 else 'them'}; --grace SECONDS sets "
                "the period)"
            )
        )
    if report.failures:
        lines.append(text(f"could not remove {plural(report.failures, 'blob')} (see permissions)", "bold red"))
    return Group(*lines)


def _store_options(side: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--from``/``--to`` (an embedded store's directory) or ``--SIDE-catalog``/``--SIDE-blobs``/``--SIDE-s3-endpoint``
    (a scale-out store) and ``--SIDE-manifest-key-file``."""
    other = "source" if side == "from" else "destination"

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        options = (
            click.option(
                f"--{side}", f"{side}_path", metavar="PATH", help=f"The {other}: an embedded store's directory."
            ),
            click.option(f"--{side}-catalog", metavar="URL", help=f"The {other}'s catalog (postgresql://...)."),
            click.option(
                f"--{side}-blobs", metavar="URL", help=f"The {other}'s blobs (s3://bucket/prefix or a directory)."
            ),
            click.option(f"--{side}-s3-endpoint", metavar="URL", help=f"The {other}'s S3 endpoint."),
            click.option(
                f"--{side}-manifest-key-file",
                type=click.Path(dir_okay=False, path_type=Path),
                metavar="FILE",
                help=f"The {other}'s manifest key (default: $REFVAULT_MANIFEST_KEY_FILE or $REFVAULT_MANIFEST_KEY).",
            ),
        )
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _open_side(side: str, given: dict[str, Any], *, source: bool) -> Vault:
    """Open the ``--from`` (read-only) or ``--to`` store (created if needed, with no audit log of its own)."""
    from refvault.catalog.macs import ManifestKeys
    from refvault.vault import Vault

    path, catalog = given[f"{side}_path"], given[f"{side}_catalog"]
    blobs, endpoint, key_file = given[f"{side}_blobs"], given[f"{side}_s3_endpoint"], given[f"{side}_manifest_key_file"]
    if (path is None) == (catalog is None):
        raise click.UsageError(f"give --{side} PATH or --{side}-catalog URL (with --{side}-blobs), not both")
    if path is not None and (blobs or endpoint):
        raise click.UsageError(f"--{side}-blobs and --{side}-s3-endpoint go with --{side}-catalog, not --{side}")
    keys = None if key_file is None else ManifestKeys.from_file(key_file)
    where = path if path is not None else catalog
    if source and path is not None and is_new_store(path):
        raise click.UsageError(f"no refvault store at {path}")
    return Vault.open(where, blobs=blobs, s3_endpoint=endpoint, manifest_keys=keys, read_only=source, audit=False)


@click.command()
@_store_options("from")
@_store_options("to")
@click.option("--tenant", metavar="NAME", help="Move only this tenant (and no store-wide key ring).")
@main_store_option
@json_option
@click.pass_context
def migrate(ctx: click.Context, /, as_json: bool, tenant: str | None, **given: Any) -> None:
    """Bring the store's catalog up to this refvault's schema (creating the store if there is none); or, with
    --from and --to, copy one store's content into another.

    Every command that writes does this as it opens the store; the commands that
    only read (ls, show, cat, read, verify, ...) never write, and refuse a catalog
    written by an older refvault until it has been migrated.

    \b
    With a source and a destination (each an embedded store's directory, --from/--to,
    or a scale-out store: --from-catalog URL --from-blobs URL [--from-s3-endpoint URL]):
    every artifact (same ids), its bytes (re-verified as they stream), derived data,
    grants, marks, holds, API keys, policies, key rings and audit chains. The
    destination re-MACs every row with its own manifest key. Run it again after an
    interruption: what is already there is skipped. Exit 1 if a blob fails its hash.
    """
    if any(value is not None for value in given.values()):
        _migrate_between(ctx, given, tenant, as_json)
        return
    if tenant is not None:
        raise click.UsageError("--tenant goes with --from and --to")
    from refvault.catalog.schema import MIGRATIONS

    location = store_location(ctx)
    created = is_new_store(location)
    with opened(ctx, create=True):
        pass
    version = max(number for number, _ in MIGRATIONS)
    if as_json:
        print_json({"store": location, "created": created, "schema_version": version})
    else:
        make_console().print(text(f"{location}: catalog at schema version {version} (this refvault's)"))


def _migrate_between(ctx: click.Context, given: dict[str, Any], tenant: str | None, as_json: bool) -> None:
    from refvault.vault.transfer import migrate_store

    source = _open_side("from", given, source=True)
    try:
        destination = _open_side("to", given, source=False)
        try:
            with _progress_bar("migrating") as progress:
                report = migrate_store(source, destination, tenant=tenant, progress=progress)
        finally:
            destination.close()
    finally:
        source.close()
    _print_transfer(report.to_dict(), as_json, "migrated")


def _print_transfer(info: dict[str, Any], as_json: bool, verb: str) -> None:
    if as_json:
        print_json(info)
        return
    present = info["artifacts_present"]
    make_console().print(
        text(
            f"{verb} {plural(info['artifacts_copied'], 'artifact')} ({human_size(info['bytes_copied'])})"
            + (f", {present:,} already there" if present else "")
            + f"; {plural(info['derivations_copied'], 'derivation')}, {plural(info['grants_copied'], 'grant')}, "
            f"{plural(info['api_keys_copied'], 'API key')}, "
            f"{plural(info['audit_entries_copied'], 'audit entry', 'audit entries')}",
            "bold",
        )
    )


@click.command()
@click.option("--tenant", required=True, metavar="NAME", help="The tenant to export.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@main_store_option
@json_option
@click.pass_context
def export(ctx: click.Context, tenant: str, file: Path, as_json: bool) -> None:
    """Write one tenant (artifacts, bytes, derived data, grants, keys, policy, audit chain) to a bundle FILE.

    Every blob is re-verified as it is written; the file appears only when complete.
    """
    from refvault.vault.bundles import export_tenant

    with opened(ctx, read_only=True) as vault, _progress_bar("exporting") as progress:
        report = export_tenant(vault, tenant, file, progress=progress)
    _print_transfer({**report.to_dict(), "artifacts_present": 0, "file": str(file)}, as_json, "exported")


@click.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@main_store_option
@json_option
@click.pass_context
def import_command(ctx: click.Context, file: Path, as_json: bool) -> None:
    """Import a bundle FILE made by 'refvault export': verified whole before anything is published.

    A damaged or edited bundle is refused (exit 1) and nothing of it is imported; what the store
    already holds is skipped, and other tenants are never touched.
    """
    from refvault.vault.bundles import import_bundle

    with opened(ctx, create=True, audit=False) as vault, _progress_bar("importing") as progress:
        report = import_bundle(vault, file, progress=progress)
    _print_transfer(report.to_dict(), as_json, "imported")
