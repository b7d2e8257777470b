"""`qnndeploy cache list | size | clear`: the compile cache."""

from __future__ import annotations

from pathlib import Path

import click

from qnndeploy.api import CacheListing, ClearResult, EntryState, clear_cache, scan_cache
from qnndeploy.cli._common import (
    CONTEXT_SETTINGS,
    Group,
    cache_dir_option,
    emit_json,
    handles_errors,
    json_option,
    report,
)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def _render_list(listing: CacheListing) -> None:
    if not listing.entries:
        click.echo(f"{listing.path}: empty")
    else:
        click.echo(f"{'key':<12}  {'graph':<16} {'SoC':<9} {'backend':<7} {'precision':<9} {'QAIRT':<8} "
                   f"{'size':>10}  created                    model")
    for e in listing.entries:
        if e.status != EntryState.OK:
            click.echo(f"{e.key[:12]:<12}  {e.status} ({e.files} files, {_mb(e.bytes)}): `qnndeploy cache clear` "
                       "removes it")
            continue
        click.echo(f"{e.key[:12]:<12}  {e.graph or '-':<16} {e.soc or '-':<9} {e.backend or '-':<7} "
                   f"{e.precision or '-':<9} {e.qairt_version or '-':<8} {_mb(e.bytes):>10}  "
                   f"{e.created or '-':<26} {e.model or '-'}")
    if listing.entries:
        click.echo(f"{len(listing.entries)} entries, {_mb(listing.bytes)} in {listing.path}")
    for name in listing.other:
        click.echo(f"  not a cache entry (kept): {name}")


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
def cache() -> None:
    """The compile cache: list, size, clear.

    What `qnndeploy compile` keeps so that an unchanged job is never compiled twice.
    The cache never shrinks by itself; `cache clear` empties it.
    """


@cache.command("list")
@cache_dir_option
@json_option
@handles_errors
def cache_list(cache_dir: Path | None, as_json: bool) -> None:
    """Each cached compile, with its size.

    Graph, SoC, backend, precision, QAIRT version, size, date and the model it was compiled from.
    """
    listing = scan_cache(cache_dir)
    if as_json:
        emit_json(listing)
    else:
        _render_list(listing)


@cache.command("size")
@cache_dir_option
@json_option
@handles_errors
def cache_size(cache_dir: Path | None, as_json: bool) -> None:
    """Entries in the cache and the bytes they take."""
    listing = scan_cache(cache_dir)
    if as_json:
        emit_json({"path": listing.path, "entries": len(listing.entries), "bytes": listing.bytes})
    else:
        click.echo(f"{len(listing.entries)} entries, {_mb(listing.bytes)} in {listing.path}")


def _render_clear(result: ClearResult) -> None:
    click.echo(f"removed {result.removed} entries ({_mb(result.bytes)}) from {result.path}")
    for name in result.kept:
        click.echo(f"  not a cache entry (kept): {name}")
    for key in result.failed:
        click.echo(f"  could not remove {key}: check its permissions")


@cache.command("clear")
@cache_dir_option
@json_option
@handles_errors
def cache_clear(cache_dir: Path | None, as_json: bool) -> None:
    """Remove every cache entry.

    The next compile of each job compiles again.
    Only what the cache layout recognises is removed; a folder that does not look like a qnndeploy compile
    cache is refused (exit 2). Exit 1 when an entry could not be removed.
    """
    report(clear_cache(cache_dir), as_json, _render_clear)
