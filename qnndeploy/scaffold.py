"""`scaffold`: the app side of a verified bundle, rendered from templates/ (cookiecutter's layout) in Jinja's sandbox.

Output (DIR, meant to live inside the app module): Kotlin glue in src/ (the runtime selector, the Android adapter,
one engine: ONNX Runtime or sherpa-onnx), qnndeploy.gradle, AndroidManifest-snippet.xml, README.md, and the bundle
itself in the layout Gradle wants (bundle/assets/qnndeploy/..., bundle/jniLibs/arm64-v8a/*.so). With app=True, DIR
is a complete one-screen Android app with that glue in app/qnndeploy/ (android-sample/ is made this way).

With play (a `package play` output folder), the NPU files travel in a Google Play AI pack instead: the base assets
keep manifest.json, play.json and the CPU models, and the glue gains PlayPack.kt (locating and fetching the pack).

The glue is plain Kotlin (templates/glue/kotlin: common/, one folder per engine, play/), and so is the sample app's
screen (templates/app/kotlin), each copied as it is but for its package line and its imports of the glue; what
differs from bundle to bundle is data, written into one generated file, Generated.kt
(templates/glue/Generated.kt.j2), every value through codegen's escaping.
"""

from __future__ import annotations

import json
import os
import shlex
import string
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from qnndeploy import __version__
from qnndeploy.base import codegen, compat, socs
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import (
    Expected,
    check_apart,
    check_replaceable,
    check_writable,
    copy_verified,
    staging_dir,
    writing,
)
from qnndeploy.base.kinds import choices
from qnndeploy.base.names import APP_ASSETS, FORMAT, FORMAT_VERSION, MANIFEST
from qnndeploy.decide.decision import (
    BACKEND_LIB,
    REASONS,
    SYSTEM_LIB,
    VENDOR_DSP_FOLDERS,
    arch_min_qairt,
    soc_tables,
    template_fields,
)
from qnndeploy.decide.reach import Engine
from qnndeploy.formats import playplan
from qnndeploy.formats.manifest import (
    DEFAULT_COMPILE_BUDGET_S,
    FileFormat,
    Manifest,
    read_manifest,
    schema,
    verified_bytes,
)
from qnndeploy.qnn import epcontext
from qnndeploy.verification.checks import VerifyReport, require_ok, verify_folder

GLUE_PACKAGE = "com.example.qnnsample"  # the templates' Kotlin package: the sample app's (the glue's is its .qnndeploy)
APP_SOURCES = "kotlin"  # templates/app/kotlin: the sample app's screen, plain Kotlin copied as the glue is
APP_SOURCES_DIR = "app/src/main/java"  # where the app's sources go, one folder per package segment below it
GLUE_COMMON = "common"  # templates/glue/kotlin/common: copied always; then the engine's folder (named as the engine)
GLUE_PLAY = "play"  # copied only with play: the AI pack's plan, rules and access (PlayPack.kt)
GENERATED = "Generated.kt"  # the glue's one generated file: the bundle's data, the catalog, reasons, switches
ASSETS = APP_ASSETS  # the bundle's folder in the APK's assets: QnnRuntime.ASSETS in the Kotlin
APP_GLUE_DIR = "qnndeploy"  # where the glue goes inside the sample app's module
# the sample app's screen, its ViewModel and their coroutines (data/maven.json's keys)
APP_LIBRARIES = ("activity_ktx", "lifecycle_runtime_ktx", "lifecycle_viewmodel_ktx", "coroutines_android")
MAX_PACKAGE_SEGMENTS = 64  # folders of the package's sources; archives allow 64 in all (a real package has 3 to 6)
PATH_MAX = 4096  # Linux's, in bytes with the terminating NUL
MARKER = ".qnndeploy-scaffold"  # rendered into every output's top folder: what marks a folder --force may replace

def templates_dir() -> Path:
    """The templates: in a source checkout, templates/ beside the package (first, so that another checkout's
    editable install never lends its templates), else the installed package qnndeploy.templates (built from the
    top-level templates/ by pyproject's package-dir, so git holds one copy)."""
    try:
        installed = Path(str(resources.files("qnndeploy.templates")))
    except ModuleNotFoundError:
        installed = None
    for folder in (Path(__file__).resolve().parents[1] / "templates", installed):
        if folder is not None and (folder / "glue").is_dir():
            return folder
    raise QnnDeployError("the scaffold templates are missing (neither the package qnndeploy.templates nor a "
                         "templates/ folder beside qnndeploy/): reinstall qnndeploy")


@dataclass
class ScaffoldResult:
    path: Path
    package: str
    engine: Engine
    app: bool
    glue: Path  # the glue folder: path itself, or path/app/qnndeploy for an app
    kotlin: list[str] = field(default_factory=list)  # generated Kotlin files, relative to path
    bundle_files: int = 0  # files copied from the bundle
    bundle_bytes: int = 0
    targets: list[str] = field(default_factory=list)
    runtime: str = ""
    lines: list[str] = field(default_factory=list)  # what to add to the app (empty for an app: it has them)
    ort_aar: str | None = None  # engine ort: the ONNX Runtime AAR pinned, with its versions
    runtime_set: str | None = None  # engine ort: one plain line, the set the app will use and whether it is validated
    warnings: list[str] = field(default_factory=list)  # what the pinned versions cannot promise
    play: str | None = None  # with play: the AI pack and its delivery, e.g. "qnndeploy_npu (fast-follow)"
    license: str | None = None  # the model's licence, as the bundle says it (None: not given)


def check_request(package: str, out: Path, *, engine: str, app: bool, force: bool, ort_aar: str | None = None,
                  play: bool = False) -> None:
    """The checks that need no bundle, done before the bundle is hashed."""
    codegen.check_package(package)
    _check_package_path(package, Path(out))
    if engine not in choices(Engine):
        raise QnnDeployError(f"unknown engine '{engine}'; use one of {', '.join(choices(Engine))}")
    if ort_aar is not None and ort_aar not in choices(compat.Aar):
        raise QnnDeployError(f"unknown ONNX Runtime AAR '{ort_aar}'; use one of {', '.join(choices(compat.Aar))}")
    if app and engine != Engine.ORT:
        raise QnnDeployError("--app makes the sample app, which runs any model with ONNX Runtime: use --engine ort")
    if app and play:
        raise QnnDeployError("--app does not take --play yet: scaffold the glue with --play into your app module "
                             "(its README lists the lines to add)")
    check_writable(Path(out))  # a name too long, a symlink, a read-only place: refused before anything is read
    check_replaceable(Path(out), force, MARKER, "scaffold")
    templates_dir()  # missing templates are found before any work


def _check_package_path(package: str, out: Path) -> None:
    """A valid package can still be too deep for the folders its sources go in: each segment is one (Kotlin's
    src/com/example/app/), and the file system and Python's folder making have limits a user should hear in one
    line before anything is read."""
    segments = package.count(".") + 1
    if segments > MAX_PACKAGE_SEGMENTS:
        raise BadInput(f"--package has {segments:,} segments, over the limit of {MAX_PACKAGE_SEGMENTS}: its sources go "
                       "one folder per segment; use a short package such as com.example.app")
    deepest = Path(out).absolute() / "app" / APP_GLUE_DIR / "src" / package.replace(".", "/") / "qnndeploy" / (
        "x" * 40 + ".kt")
    size = len(os.fsencode(str(deepest)))
    if size >= PATH_MAX:
        raise BadInput(f"--package makes the glue's source paths {size:,} bytes long, over the {PATH_MAX:,} a path "
                       "may have: use a shorter package or -o folder")


def scaffold(bundle: Path, package: str, out: Path, *, engine: str = "ort", app: bool = False, force: bool = False,
             report: VerifyReport | None = None, ort_aar: str | None = None, play: Path | None = None
             ) -> ScaffoldResult:
    """Render the glue (or the sample app) for a bundle folder; refuses a bundle that fails `bundle verify`.

    report: the bundle's verify report when the caller already has it (the command line shows it in full).
    ort_aar: engine ort's ONNX Runtime, Microsoft's onnxruntime-android-qnn or Qualcomm's plugin AAR (compat.Aar);
    None: the newest validated set of either that loads the bundle's binaries (compat.app_set).
    play: a `qnndeploy package play` output folder made from this bundle: its AI pack carries the NPU files.
    """
    bundle, out = Path(bundle), Path(out)
    check_request(package, out, engine=engine, app=app, force=force, ort_aar=ort_aar, play=play is not None)
    check_apart(out, [("bundle", bundle)])  # it would write into what it reads
    report = report if report is not None else verify_folder(bundle, deep=True)
    require_ok(bundle, report, "scaffolding from it")
    manifest = read_manifest(bundle)  # verify has checked it against the schema
    kind = Engine(engine)
    _check_engine(manifest, bundle, kind)
    plan = playplan.read_plan_of(play, bundle) if play is not None else None
    check_apart(out, [("--play folder", play)])

    templates = templates_dir()
    glue_name = APP_GLUE_DIR if app else out.name
    pins = runtime_set(manifest, ort_aar) if kind == Engine.ORT else None
    context = _context(manifest, package, glue_name, kind, pins)
    if plan is not None and play is not None:
        context["data"]["play"].update(enabled=True, pack=plan.pack, delivery=plan.delivery.value,
                                       dir=Path(play).as_posix())
    if out.exists() and out.is_dir() and not any(out.iterdir()):
        out.rmdir()  # an empty folder is as good as none: staging_dir renames the result into its place
    with writing(out), staging_dir(out, force) as tmp:  # a full disk: the one-line error, nothing left behind
        glue = tmp / "app" / APP_GLUE_DIR if app else tmp
        if app:
            _render(templates / "app", {**context, "glue_dir": APP_GLUE_DIR, "app_dir": shlex.quote(out.name)}, tmp)
            _copy_kotlin(sorted((templates / "app" / APP_SOURCES).glob("*.kt")), package, "",
                         tmp / APP_SOURCES_DIR / context["package_path"])
        _render(templates / "glue", context, glue)
        folders = [GLUE_COMMON, kind.value] + ([GLUE_PLAY] if plan is not None else [])
        _write_glue(templates / "glue", folders, package, context["data"],
                    glue / "src" / context["package_path"] / "qnndeploy")
        in_packs = frozenset(f.path for c in plan.cpu_packs for f in c.files) if plan is not None else frozenset()
        copied, nbytes = _copy_bundle(bundle, manifest, glue / "bundle", play, in_packs)
        kotlin = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*.kt"))

    rt = manifest.runtime
    pinned = f"{rt.maven.rpartition(':')[0]}:{pins.qnn_runtime}" if pins and not rt.bundled else None
    lines = [] if app else [
        f'app build.gradle.kts:  apply(from = "{out.name}/qnndeploy.gradle")',
        ('AndroidManifest.xml, in <application>:  <uses-native-library android:name="libcdsprpc.so" '
         'android:required="false"/>'),
        f"code:  val models = {package}.qnndeploy.OrtModels.open(context)" if kind == Engine.ORT else
        (f"code:  val engine = {package}.qnndeploy.SherpaOnnxQnn.create(context) {{ s -> /* your config with "
         "provider(s), model(s, graph), qnnConfig(s) */ }"),
    ]
    if plan is not None and play is not None:
        lines += _play_lines(play, plan)
    return ScaffoldResult(
        path=out, package=package, engine=kind, app=app, glue=out / "app" / APP_GLUE_DIR if app else out,
        kotlin=kotlin, bundle_files=copied, bundle_bytes=nbytes, license=manifest.source.license,
        targets=[f"{t.soc} ({t.dsp_arch})" for t in manifest.targets],
        runtime=f"bundled: {len(rt.libs)} libraries in jniLibs/arm64-v8a" if rt.bundled
        else f"external: {pinned or rt.maven} (Maven, pinned)",
        lines=lines,
        ort_aar=pins.describe if pins else None,
        runtime_set=pins.line() if pins else None,
        warnings=[*pins.warnings, *_ir_warnings(manifest, bundle, pins)] if pins else [],
        play=f"{plan.pack} ({plan.delivery})" if plan is not None else None,
    )


def _ir_warnings(manifest: Manifest, bundle: Path, pins: compat.AppSet) -> list[str]:
    """Models of an ONNX IR version newer than the pinned ONNX Runtime reads (measured, runtime.json onnx_ir) fail
    to load on the phone: an EPContext wrapper made by an older qnndeploy (IR 14), or a CPU model exported so."""
    ort = pins.ort_android or pins.aar_version
    limit = compat.max_ir(ort)
    if limit is None:
        return [(f"no measurement says which ONNX IR versions ONNX Runtime {ort} reads "
                 "(docs/decision-and-runtime.md, Runtime compatibility)")]
    files = [a.path for t in manifest.targets for a in t.artifacts if a.format == FileFormat.ORT_EPCONTEXT]
    files += [a.path for a in manifest.cpu if a.format == FileFormat.ONNX]
    newer = [f"{p} (IR {v})" for p in files if (v := epcontext.ir_version(bundle / p)) > limit]
    if not newer:
        return []
    shown = ", ".join(newer[:3]) + (" …" if len(newer) > 3 else "")
    why = (f"ONNX Runtime {ort} reads ONNX IR version {limit} at most (measured) and these are newer, so they fail "
           f"to load on the phone: {shown}; rebuild the bundle with this qnndeploy (it writes EPContext wrappers at "
           f"IR {compat.portable_ir()}), or re-export the CPU model at a lower IR version")
    return [why]


def _play_lines(play: Path, plan: playplan.PlayPlan) -> list[str]:
    """What the app's build needs for the AI packs: package play's Gradle snippet, the pack modules, the API flag."""
    return [
        f'app build.gradle.kts, after the line above:  apply(from = "{(play / "play.gradle").as_posix()}")',
        *(f'settings.gradle.kts:  include(":{name}"); project(":{name}").projectDir = '
          f'file("{(play / name).as_posix()}")' for name in plan.modules),
        "gradle.properties:  android.experimental.enableDeviceTargetingConfigApi=true",
    ]


def runtime_set(manifest: Manifest, aar: str | None = None) -> compat.AppSet:
    """The ONNX Runtime set engine ort's glue pins for the bundle's binaries (compat.app_set): the newest validated
    set whose qnn-runtime loads them, of `aar` or (None) of either AAR; when none does, a known AAR release with the
    qnn-runtime the bundle requires, and a warning that says so. `demo` and `bundle verify` say the same set."""
    qairt, rt = manifest.qairt, manifest.runtime
    return compat.app_set(qairt.version, qairt.min_runtime, None if rt.bundled else rt.maven.rpartition(":")[2], aar)


def _check_engine(manifest: Manifest, bundle: Path, engine: Engine) -> None:
    """Every target must hold what the engine loads, or the app would silently never use the NPU there."""
    fmt = engine.npu_format
    hint = " or use --engine sherpa-onnx, which loads the context binaries" if engine == Engine.ORT else ""
    cpu_only = manifest.cpu_only
    looped = manifest.loop.loop if manifest.loop is not None else None
    if looped is not None and len(looped.graphs) > 2 and engine != Engine.ORT:
        raise QnnDeployError(f"the decode loop runs {', '.join(looped.graphs)} (a split encoder or decoder), which "
                             f"engine {engine} (one encoder and one decoder) cannot: use --engine ort")
    if cpu_only and engine != Engine.ORT:
        raise QnnDeployError(f"graph(s) {', '.join(cpu_only)} of this split model run on the CPU, which engine "
                             f"{engine} (context binaries only) cannot: use --engine ort")
    for t in manifest.targets:
        for g in manifest.graphs:
            if g.cpu_only:
                continue
            if not any(a.serves(g.name) and a.format == fmt for a in t.artifacts):
                raise QnnDeployError(f"engine {engine} loads {fmt} files, but target {t.soc} has none for graph "
                                     f"'{g.name}': rebuild the bundle with them{hint}")
        shared = next((a for a in t.artifacts if len(a.served) > 1), None)
        if shared is not None and engine != Engine.ORT:
            raise QnnDeployError(f"{shared.path} is one context binary for graphs {', '.join(shared.graphs)} "
                                 f"(compile --share), but engine {engine} runs the first graph of a context binary "
                                 "only: use --engine ort, whose sessions share it (ep.share_ep_contexts)")


def _context(manifest: Manifest, package: str, glue_name: str, engine: Engine, pins: compat.AppSet | None
             ) -> dict[str, Any]:
    models, codenames = soc_tables()
    rt = manifest.runtime
    module, _, version = rt.maven.rpartition(":")
    if pins is not None and not rt.bundled:
        version = pins.qnn_runtime  # the validated set's qnn-runtime (at least min_runtime), else the bundle's
    data = {
        "soc_models": models,
        "codenames": codenames,
        "soc_archs": {s.model: s.dsp_arch for s in socs.catalog()},
        "soc_ids": {s.model: s.soc_id for s in socs.catalog()},
        "arch_min_qairt": arch_min_qairt(),
        "on_device_budget_s": repr(float(DEFAULT_COMPILE_BUDGET_S)),
        "vendor_dsp_folders": list(VENDOR_DSP_FOLDERS),
        "reasons": kotlin_reasons(),
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "file_formats": [{"name": f.upper().replace("-", "_"), "id": f}
                         for f in schema()["$defs"]["artifact"]["properties"]["format"]["enum"]],
        "backend_lib": BACKEND_LIB,
        "system_lib": SYSTEM_LIB,
        "graphs": [g.name for g in manifest.graphs],
        "loop": list(manifest.loop.loop.graphs) if manifest.loop else [],  # encoder, decoder (or their parts)
        "generation": _generation(manifest),
        "targets": [f"{t.soc} ({t.dsp_arch})" for t in manifest.targets] or ["none"],
        "qairt": manifest.qairt.version,
        "runtime_mode": rt.mode.value,
        "maven_module": module,
        "maven_version": version,
        "jni_libs": [lib.path.rsplit("/", 1)[-1] for lib in rt.libs],
        # the licence manifest: per origin of the Qualcomm files, its terms files (in the assets) or unknown
        "licences": [o.summary for o in manifest.licences.origins] if manifest.licences else [],
        "ort_version": pins.aar_version if pins else "",
        "ort_aar": pins.aar.value if pins else "",
        "ort_maven": compat.aar_maven(pins.aar) if pins else "",
        "ort_android_module": compat.ORT_ANDROID,
        "ort_android_version": (pins.ort_android or "") if pins else "",
        "ort_pins": pins.describe if pins else "",
        "ort_source": pins.validated.source.url if pins and pins.validated else "",
        # Qualcomm's plugin AAR: the library OrtModels registers and the EP name of its devices (runtime.json)
        "qnn_ep_library": compat.qnn_plugin().library if pins and pins.aar == compat.Aar.QUALCOMM else "",
        "qnn_ep_name": compat.qnn_plugin().ep_name if pins and pins.aar == compat.Aar.QUALCOMM else "",
        "qnndeploy_version": __version__,
        # the sample app's plugins (data/maven.json, each with its source)
        "agp_version": compat.gradle_library("android_gradle_plugin").version.rpartition(":")[2],
        "kotlin_plugin_version": compat.gradle_library("kotlin_android_plugin").version.rpartition(":")[2],
        "app_libraries": [compat.gradle_library(k).version for k in APP_LIBRARIES],
        # PlayPack.kt's constants come from playplan; scaffold() fills pack, delivery and dir with --play
        "play": {"enabled": False, "pack": "", "delivery": "", "dir": "", "format": playplan.PLAN_FORMAT,
                 "plan": playplan.PLAN, "folder": playplan.FOLDER, "group_file": playplan.GROUP_FILE,
                 "default_group": playplan.DEFAULT_GROUP, "since_sdk": playplan.SOC_TARGETING_SINCE_SDK},
    }
    return {"dir_name": glue_name, "package": package, "package_path": package.replace(".", "/"),
            "engine": engine.value, "data": data}


# The names the generation's loop inputs take when the manifest gives none (the Kotlin GenerationInputs' defaults).
_GENERATION_INPUTS = {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids"}


def _generation(manifest: Manifest) -> dict[str, Any] | None:
    """The manifest's generation as Generated.kt.j2 writes it (GENERATION), None when the bundle has none."""
    if manifest.generation is None:
        return None
    data = manifest.generation.to_json()
    return {**data, "inputs": {**_GENERATION_INPUTS, **data["inputs"]},
            "kv": [{"npu_dtype": None, **k} for k in data["kv"]]}


_REASON_GROUPS = {
    "decide": "The decision's reasons: QnnSelector.decide (and qnndeploy's decision.decide) give them.",
    "app": "Reasons the glue gives after deciding, when the chosen NPU cannot be used.",
}


def kotlin_reasons() -> list[dict[str, Any]]:
    """data/reasons.json as the generated Kotlin object Reasons has it: per group, one function per reason, named in
    camel case after its key, whose String parameters are the template's fields and whose body is a Kotlin string
    template of the same text."""
    groups = []
    for group, templates in REASONS.items():
        reasons = [{"key": key, "function": _camel(key), "params": [_camel(f) for f in template_fields(template)],
                    "text": _kotlin_string(template)} for key, template in templates.items()]
        groups.append({"about": _REASON_GROUPS[group], "reasons": reasons})
    return groups


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _kotlin_string(template: str) -> str:
    """The inside of a Kotlin string literal for a reason template: {field} becomes ${field} in camel case, and the
    literal text is escaped (backslash, quote, dollar; anything but printable ASCII as \\uXXXX UTF-16 units)."""
    out: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(codegen.kotlin_string(literal))
        if name is not None:
            out.append("${" + _camel(name) + "}")
    return "".join(out)


def _write_glue(template: Path, folders: list[str], package: str, data: dict[str, Any], dest: Path) -> None:
    """The glue's sources: the Kotlin of the given folders of template/kotlin in package's .qnndeploy, and
    Generated.kt rendered from the data."""
    for folder in folders:
        _copy_kotlin(sorted((template / "kotlin" / folder).glob("*.kt")), package, ".qnndeploy", dest)
    generated = _environment().from_string((template / f"{GENERATED}.j2").read_text(encoding="utf-8"))
    (dest / GENERATED).write_text(generated.render({**data, "package": package}), encoding="utf-8")


def _copy_kotlin(sources: list[Path], package: str, sub: str, dest: Path) -> None:
    """Plain Kotlin of the templates, whose package is GLUE_PACKAGE + sub, written into dest as package + sub: the
    package line and the imports of GLUE_PACKAGE's classes (an activity's of the glue) are the only lines changed, so
    the templates compile as they are and android-sample/ links to them. package is checked (codegen.check_package)."""
    dest.mkdir(parents=True, exist_ok=True)
    line = f"package {GLUE_PACKAGE}{sub}\n"
    ours = f"import {GLUE_PACKAGE}."
    for src in sources:
        head, sep, rest = src.read_text(encoding="utf-8").partition("\n")
        if head + sep != line:
            raise QnnDeployError(f"template {src.name} does not start with '{line.strip()}': reinstall qnndeploy")
        body = "\n".join(f"import {package}.{text.removeprefix(ours)}" if text.startswith(ours) else text
                         for text in rest.split("\n"))
        (dest / src.name).write_text(f"package {package}{sub}\n{body}", encoding="utf-8")


def _environment() -> Any:
    """Jinja's sandbox with the escaping filters of generated files (see _render)."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(keep_trailing_newline=True, undefined=StrictUndefined, autoescape=False,
                               finalize=codegen.plain)
    env.filters.update(kt=codegen.kotlin_string, groovy=codegen.groovy_string, comment=codegen.line_comment,
                       ident=codegen.identifier)
    return env


def _render(template: Path, values: dict[str, Any], dest: Path) -> None:
    """Render one template (cookiecutter's layout: cookiecutter.json and one top folder) into dest, in Jinja's
    sandbox: a value is data, never template code (the sandbox refuses attribute walks such as
    cycler.__init__.__globals__), each path segment and each file is rendered once, and a value reaches a file only
    through the escaping filter of its place (kt, groovy, comment; codegen.plain refuses one that is not). The top
    folder's own name is never rendered: the output folder is whatever the caller made `dest`."""
    env = _environment()
    defaults = json.loads((template / "cookiecutter.json").read_text(encoding="utf-8"))
    context = {"cookiecutter": {**defaults, **values}}
    (top,) = [p for p in template.iterdir() if p.is_dir() and p.name.startswith("{{")]
    for src in sorted(top.rglob("*")):
        parts: list[str] = []
        for segment in src.relative_to(top).parts:
            rendered = env.from_string(segment).render(context) if "{" in segment else segment
            parts += rendered.split("/")  # package_path: com/example/app
        if any(not p or p in (".", "..") or p.startswith("{") for p in parts):
            raise QnnDeployError(f"template path {src.relative_to(top)} renders to {'/'.join(parts)!r}")
        target = dest.joinpath(*parts)
        if src.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(env.from_string(src.read_text(encoding="utf-8")).render(context), encoding="utf-8")


def _copy_bundle(bundle: Path, manifest: Manifest, dest: Path, play: Path | None = None,
                 in_packs: frozenset[str] = frozenset()) -> tuple[int, int]:
    """The bundle in Gradle's layout: manifest and models as assets, runtime libraries flat in jniLibs/arm64-v8a.

    The Skel goes beside the Android libraries, as in every QNN app: installed in nativeLibraryDir, the folder that
    the selector puts first in ADSP_LIBRARY_PATH. With play, the NPU files are in the AI pack, not here: the assets
    hold manifest.json, play.json, the CPU models (every phone needs them, also while the pack downloads) and the
    on-device models (format 4: what a phone whose SoC has no target compiles), except those the plan puts in
    install-time CPU packs (in_packs: the app gets them at the same asset paths from the pack).

    The bytes written are the ones verified: each file is copied through fileio.copy_verified (O_NOFOLLOW, below the
    bundle folder, with the manifest's sha256 and size); manifest.json is written from the bytes that parse to the
    verified manifest.
    """
    assets = dest / "assets" / ASSETS
    assets.mkdir(parents=True)
    raw = verified_bytes(bundle, manifest)
    (assets / MANIFEST).write_bytes(raw)
    # with play, the base module keeps the CPU models and the on-device ones: a phone without a target compiles them;
    # the licence files go in the app's own assets either way, beside the runtime it ships or fetches
    files = [*manifest.cpu, *manifest.on_device_files] if play is not None else manifest.model_files
    files = [f for f in files if f.path not in in_packs]
    files += manifest.licences.terms if manifest.licences else ()
    copies = [(bundle / a.path, assets / a.path, a) for a in files]
    if manifest.runtime.bundled:
        copies += [(bundle / lib.path, dest / "jniLibs" / "arm64-v8a" / lib.path.rsplit("/", 1)[-1], lib)
                   for lib in manifest.runtime.libs]
    nbytes = len(raw)
    for src, dst, entry in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        nbytes += copy_verified(src, dst, expect=Expected(entry.sha256, entry.size), beneath=bundle,
                                what="bundle file").size
    if play is not None:  # the plan read_plan_of checked against this bundle
        nbytes += copy_verified(Path(play) / playplan.PLAN, assets / playplan.PLAN, beneath=Path(play),
                                what="Play plan").size
    return len(copies) + 1 + (play is not None), nbytes
