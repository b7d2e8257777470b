"""The options `device bench` takes for per-op profiles (device/opprofile.py), defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from qnndeploy.api import ProfileLevel as Level

profile_option = click.option(
    "--profile", "profile_level", type=click.Choice([str(v) for v in Level]), default=None,
    callback=lambda _ctx, _param, value: Level(value) if value else None,
    help="Also profile each graph on the NPU with qnn-net-run's profiling level: basic (graph times), detailed "
         "(per op), optrace (detailed with the HTP op trace on); the record gets a per-op table and a Chrome "
         "trace beside it.")
profile_viewer_option = click.option(
    "--profile-viewer", type=click.Path(path_type=Path, dir_okay=False), metavar="PATH",
    help="qnn-profile-viewer built for Android (the SDK's bin/aarch64-android/qnn-profile-viewer, the default with "
         "--qnn-sdk-root) to read the profile on the phone.")


def profile_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--profile and --profile-viewer."""
    return profile_option(profile_viewer_option(fn))
