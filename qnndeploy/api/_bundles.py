"""The one rule for a bundle a command builds on, and the API functions that take a bundle and build on it: scaffold,
package play, reach (the device commands' are in _phones.py).

A bundle argument is a folder or a .tar.gz/.zip (extracted while it is used); a path that is not a bundle at all is
bad input (exit code 2, verification.checks.require_bundle); a bundle that fails `bundle verify` is refused as
Unverified (exit code 1), its message verification.checks.refusal's one wording, its report kept for the CLI to show."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from qnndeploy.api._errors import Unverified
from qnndeploy.base.compat import Aar
from qnndeploy.base.fileio import ByteProgress as Progress
from qnndeploy.decide.reach import Engine, Reach
from qnndeploy.formats.manifest import read_manifest
from qnndeploy.formats.playplan import Delivery
from qnndeploy.package import play as playroom
from qnndeploy.package.play import PlayPackage
from qnndeploy.reach import DOING as _REACHING
from qnndeploy.reach import check_request as _check_reach
from qnndeploy.reach import reach_bundle
from qnndeploy.scaffold import ScaffoldResult, runtime_set
from qnndeploy.scaffold import check_request as _check_scaffold
from qnndeploy.scaffold import scaffold as _scaffold
from qnndeploy.verification.checks import Steps, VerifyReport, opened, refusal, require_bundle


@contextmanager
def verified(bundle: Path, doing: str, *, deep: bool = False, allow_unchecked: bool = False,
             progress: Progress | None = None, steps: Steps | None = None) -> Iterator[tuple[Path, VerifyReport]]:
    """(bundle folder, report) of a bundle that passes `bundle verify`, an archive staying extracted while the
    caller uses it. Not a bundle: BadInput; one that fails: Unverified, saying it is not `doing` ("scaffolding from
    it", "pushing it"). Every command that builds on a bundle takes it through here."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked, steps=steps) as (root, report):
        require_bundle(Path(bundle), root, report)
        if not report.ok:
            raise Unverified(refusal(Path(bundle), report, doing), report)
        yield root, report


def verify_bundle(bundle: Path, *, deep: bool = True, allow_unchecked: bool = False,
                  progress: Progress | None = None, steps: Steps | None = None) -> VerifyReport:
    """`qnndeploy bundle verify`: the report of a bundle folder or archive (`ok` False is the CLI's exit 1); a path
    that is not a bundle at all raises (exit code 2). `deep=False` is --shallow; `steps` hears each long step."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked, steps=steps) as (root, report):
        require_bundle(Path(bundle), root, report)
    return report


def verify_with_runtime(bundle: Path, *, deep: bool = True, allow_unchecked: bool = False,
                        progress: Progress | None = None, steps: Steps | None = None
                        ) -> tuple[VerifyReport, str | None]:
    """verify_bundle's report, and for a sound bundle the line saying what `scaffold --engine ort` pins for it (the
    command prints it; read while an archive is still extracted)."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked, steps=steps) as (root, report):
        require_bundle(Path(bundle), root, report)
        return report, runtime_set(read_manifest(root)).line() if report.ok else None


@dataclass(frozen=True, kw_only=True)
class ScaffoldRequest:
    """What `qnndeploy scaffold` is asked, its options one field each (the command builds it from them)."""

    bundle: Path  # a folder or archive that passes `bundle verify`
    package: str  # the app's Java/Kotlin package; the glue goes in PACKAGE.qnndeploy
    out: Path  # the folder to create, new or empty (or an earlier scaffold output, with force)
    engine: Engine = Engine.ORT
    ort_aar: Aar | None = None  # None: the newest validated set that loads the bundle
    app: bool = False  # a whole one-screen sample app around the glue
    play: Path | None = None  # a package play output: the NPU files come from its AI pack
    force: bool = False
    shallow: bool = False  # the bundle verified without the host emulator
    allow_unchecked: bool = False


def scaffold(request: ScaffoldRequest, *, progress: Progress | None = None) -> ScaffoldResult:
    """`qnndeploy scaffold`: the Kotlin glue (with `app`, the sample app) for a bundle that passes `bundle verify`.
    The request is checked before the bundle is hashed."""
    r = request
    _check_scaffold(r.package, Path(r.out), engine=r.engine, app=r.app, force=r.force, ort_aar=r.ort_aar,
                    play=r.play is not None)
    with verified(r.bundle, "scaffolding from it", deep=not r.shallow, allow_unchecked=r.allow_unchecked,
                  progress=progress) as (root, report):
        return _scaffold(root, r.package, Path(r.out), engine=r.engine, app=r.app, force=r.force, report=report,
                         ort_aar=r.ort_aar, play=r.play)


@dataclass(frozen=True, kw_only=True)
class PlayRequest:
    """What `qnndeploy package play` is asked, its options one field each (the command builds it from them)."""

    bundle: Path  # a folder or archive that passes `bundle verify`
    out: Path  # the folder to create, new or empty (or an earlier package play output, with force)
    delivery: Delivery = Delivery.FAST_FOLLOW
    pack: str = playroom.DEFAULT_PACK  # the AI pack's name and Gradle module
    force: bool = False
    shallow: bool = False  # the bundle verified without the host emulator
    allow_unchecked: bool = False


def package_play(request: PlayRequest, *, progress: Progress | None = None) -> PlayPackage:
    """`qnndeploy package play`: a Google Play AI pack of a bundle that passes `bundle verify`, one device group per
    SoC; `progress` hears the bytes verified, then hashed and deflated."""
    r = request
    playroom.check_request(Path(r.out), pack=r.pack, delivery=r.delivery, force=r.force, bundle=Path(r.bundle))
    with verified(r.bundle, "packaging it", deep=not r.shallow, allow_unchecked=r.allow_unchecked,
                  progress=progress) as (root, report):
        return playroom.package_play(root, Path(r.out), pack=r.pack, delivery=r.delivery, force=r.force,
                                     report=report, progress=progress)


def reach(bundle: Path, *, engine: str = "ort", worlds: Sequence[str] = (), allow_unchecked: bool = False,
          progress: Progress | None = None) -> Reach:
    """`qnndeploy reach`: for every chipset of Qualcomm's table and the SoC catalog, under every name phones report,
    the path the app's decision takes with a bundle folder or archive that passes `bundle verify` (checked without
    the host emulator); `engine` "ort" or "sherpa-onnx", `worlds` only those of Qualcomm's table."""
    _check_reach(engine, worlds)
    with verified(bundle, _REACHING, allow_unchecked=allow_unchecked, progress=progress) as (root, report):
        return reach_bundle(root, Engine(engine), worlds, report=report)
