"""The one rule for a bundle a command builds on, and the API functions that take a bundle and build on it: scaffold,
package play, reach (the device commands' are in _phones.py).

A bundle argument is a folder or a .tar.gz/.zip (extracted while it is used); a path that is not a bundle at all is
bad input (exit code 2, verification.checks.require_bundle); a bundle that fails `bundle verify` is refused as
Unverified (exit code 1), its message verification.checks.refusal's one wording, its report kept for the CLI to show."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from qnndeploy.api._errors import Unverified
from qnndeploy.base.fileio import ByteProgress as Progress
from qnndeploy.decide.reach import Engine, Reach
from qnndeploy.formats.manifest import read_manifest
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
    return verify_with_runtime(bundle, deep=deep, allow_unchecked=allow_unchecked, progress=progress,
                               steps=steps)[0]


def verify_with_runtime(bundle: Path, *, deep: bool = True, allow_unchecked: bool = False,
                        progress: Progress | None = None, steps: Steps | None = None
                        ) -> tuple[VerifyReport, str | None]:
    """verify_bundle's report, and for a sound bundle the line saying what `scaffold --engine ort` pins for it (the
    command prints it; read while an archive is still extracted)."""
    with opened(Path(bundle), progress, deep=deep, allow_unchecked=allow_unchecked, steps=steps) as (root, report):
        require_bundle(Path(bundle), root, report)
        return report, runtime_set(read_manifest(root)).line() if report.ok else None


def scaffold(bundle: Path, package: str, out: Path, *, engine: str = "ort", ort_aar: str | None = "microsoft",
             app: bool = False, play: Path | None = None, force: bool = False, deep: bool = True,
             allow_unchecked: bool = False, progress: Progress | None = None) -> ScaffoldResult:
    """`qnndeploy scaffold`: the Kotlin glue (with `app`, the sample app) for a bundle folder or archive that passes
    `bundle verify`; `play` is a package play output; `ort_aar` None picks the newest validated set that loads the
    bundle. The request is checked before the bundle is hashed."""
    _check_scaffold(package, Path(out), engine=engine, app=app, force=force, ort_aar=ort_aar, play=play is not None)
    with verified(bundle, "scaffolding from it", deep=deep, allow_unchecked=allow_unchecked,
                  progress=progress) as (root, report):
        return _scaffold(root, package, Path(out), engine=engine, app=app, force=force, report=report,
                         ort_aar=ort_aar, play=play)


def package_play(bundle: Path, out: Path, *, pack: str = playroom.DEFAULT_PACK, delivery: str = "fast-follow",
                 force: bool = False, deep: bool = True, allow_unchecked: bool = False,
                 progress: Progress | None = None) -> PlayPackage:
    """`qnndeploy package play`: a Google Play AI pack of a bundle folder or archive that passes `bundle verify`,
    one device group per SoC; `delivery` is install-time, fast-follow or on-demand."""
    playroom.check_request(Path(out), pack=pack, delivery=delivery, force=force, bundle=Path(bundle))
    with verified(bundle, "packaging it", deep=deep, allow_unchecked=allow_unchecked, progress=progress) as (root, r):
        return playroom.package_play(root, Path(out), pack=pack, delivery=delivery, force=force, report=r,
                                     progress=progress)


def reach(bundle: Path, *, engine: str = "ort", worlds: Sequence[str] = (), allow_unchecked: bool = False,
          progress: Progress | None = None) -> Reach:
    """`qnndeploy reach`: for every chipset of Qualcomm's table and the SoC catalog, under every name phones report,
    the path the app's decision takes with a bundle folder or archive that passes `bundle verify` (checked without
    the host emulator); `engine` "ort" or "sherpa-onnx", `worlds` only those of Qualcomm's table."""
    _check_reach(engine, worlds)
    with verified(bundle, _REACHING, allow_unchecked=allow_unchecked, progress=progress) as (root, report):
        return reach_bundle(root, Engine(engine), worlds, report=report)
