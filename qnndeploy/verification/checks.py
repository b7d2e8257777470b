"""`bundle verify`: every check on a bundle folder or archive, all problems reported at once."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import compat, socs
from qnndeploy.base.errors import CheckFailed, MissingTool, QnnDeployError
from qnndeploy.base.fileio import JSON, ByteProgress, read_limited
from qnndeploy.base.htparch import HtpArch
from qnndeploy.base.names import (
    FORMAT_VERSION,
    GENERATION_SINCE,
    KV8_SINCE,
    LICENCES_DIR,
    LICENCES_SINCE,
    MANIFEST,
    MAVEN_RUNTIME,
    ON_DEVICE_SINCE,
    SHARED_SINCE,
    path_problem,
)
from qnndeploy.base.pool import Pool
from qnndeploy.base.socs import upper
from qnndeploy.decide.decision import qnn_libraries, soc_tables
from qnndeploy.formats import archive, elf
from qnndeploy.formats.manifest import (
    BundleFile,
    FileFormat,
    LibRole,
    Manifest,
    Provider,
    Qairt,
    RuntimeMode,
    Target,
    Tensor,
    accepted_reason,
    external_data_path,
    graph_signature,
    graph_validations,
    parse_json,
    read_json,
    schema_errors,
    worst_metric,
)
from qnndeploy.model import decode, loadplan, tasks
from qnndeploy.model.metrics import rejudge, thresholds_for, thresholds_text
from qnndeploy.model.onnxio import load_model
from qnndeploy.qnn import contextcheck, epcontext, ondevice, qnnsystem
from qnndeploy.qnn.markers import FileFacts, build_version, scan_file
from qnndeploy.qnn.qnnsystem import ContextInfo
from qnndeploy.verification import emulated

if TYPE_CHECKING:
    import onnx


Steps = Callable[[str], None]  # told of each long step, in words, as it starts


@dataclass
class Problem:
    path: str  # the file (or manifest field) the problem is about
    message: str


@dataclass
class VerifyReport:
    bundle: str
    ok: bool = False
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    name: str | None = None
    version: str | None = None
    qairt: str | None = None
    targets: list[str] = field(default_factory=list)
    runtime: str | None = None
    accepted: list[JSON] = field(default_factory=list)  # failed graphs shipped with a reason (accepted_failures)
    deep: str | None = None  # what loading the binaries on the host emulator did; None: not asked (--shallow)
    licences: list[str] = field(default_factory=list)  # per origin of its Qualcomm files: its terms files or unknown
    unchecked: list[str] = field(default_factory=list)  # context binaries no libQnnSystem could read here


def _walk(root: Path) -> tuple[set[str], list[Problem]]:
    """Regular files under root as POSIX paths, and a problem for every symlink, special file or folder nested
    deeper than archives may be (archive.MAX_DEPTH), walked with a stack of its own: os.walk recurses, and a tree a
    thousand folders deep would end in a RecursionError."""
    files, problems = set(), []
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                full = Path(entry.path)
                rel = full.relative_to(root).as_posix()
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    problems.append(Problem(rel, "is a symlink; bundles hold regular files only"))
                elif stat.S_ISREG(mode):
                    files.add(rel)
                elif not stat.S_ISDIR(mode):
                    problems.append(Problem(rel, "is a device file, FIFO or socket; bundles hold regular files only"))
                elif depth + 1 >= archive.MAX_DEPTH:
                    problems.append(Problem(rel[:200] + "…", f"is nested {depth + 1} folders deep; a bundle's "
                                                             f"folders are at most {archive.MAX_DEPTH} deep"))
                else:
                    stack.append((full, depth + 1))
    return files, problems


@contextmanager
def opened(path: Path, progress: ByteProgress | None = None, jobs: int | None = None, *, deep: bool = False,
           allow_unchecked: bool = False, steps: Steps | None = None) -> Iterator[tuple[Path, VerifyReport]]:
    """(bundle root, its verify report) for a bundle folder or a .tar.gz/.zip of one; an archive stays extracted
    while the caller uses it. Raises QnnDeployError only for unusable input. `steps` is told of each long step
    (extracting, hashing, reading the binaries, each emulator run) as it starts."""
    path = Path(path)
    if not path.exists():
        raise QnnDeployError(f"{path} does not exist")
    if path.is_dir():
        yield path, verify_folder(path, progress, jobs, deep=deep, allow_unchecked=allow_unchecked, steps=steps)
        return
    if steps is not None:
        steps(f"extracting {path.name}")
    with archive.extracted(path) as (root, refused):
        report = (VerifyReport(str(path), problems=[Problem(name, why) for name, why in refused]) if refused
                  else verify_folder(root, progress, jobs, deep=deep, allow_unchecked=allow_unchecked, steps=steps))
        report.bundle = str(path)
        yield root, report


@contextmanager
def bundle_folder(path: Path) -> Iterator[Path]:
    """A bundle folder as it is, or a .tar.gz/.zip of one extracted while the caller reads it, its files not
    verified: for the commands that only read what a bundle declares (device info --bundle). An error about a file
    of the extraction names the archive the user gave, not the temporary folder."""
    path = Path(path)
    if path.is_dir() or not path.exists():
        yield path
        return
    with archive.extracted(path) as (root, refused):
        if refused:
            name, why = refused[0]
            raise QnnDeployError(f"{path} is not a safe bundle archive: {name}: {why}")
        try:
            yield root
        except QnnDeployError as e:
            raise e.reworded(str(e).replace(str(root), f"{path}:{root.name}")) from None


def verify_bundle(path: Path, progress: ByteProgress | None = None, jobs: int | None = None, *, deep: bool = False,
                  allow_unchecked: bool = False, steps: Steps | None = None) -> VerifyReport:
    """Verify a bundle folder or a .tar.gz/.zip of one."""
    with opened(path, progress, jobs, deep=deep, allow_unchecked=allow_unchecked, steps=steps) as (_, report):
        return report


def verify_folder(root: Path, progress: ByteProgress | None = None, jobs: int | None = None, *, deep: bool = False,
                  allow_unchecked: bool = False, steps: Steps | None = None) -> VerifyReport:
    """Every rule of the bundle format, and with `deep` each context binary loaded and run on the host emulator
    against its CPU model (emulated.check_bundle). Binaries no libQnnSystem can read are a problem unless
    `allow_unchecked`."""
    report = VerifyReport(str(root))
    try:
        raw = read_json(root)
    except QnnDeployError as e:
        report.problems.append(Problem(MANIFEST, str(e)))
        return report
    errors = schema_errors(raw)
    if errors:
        # a control character is said once, plainly, not again as a schema mismatch of that field or its parent
        texts = text_problems(raw)
        fields = [p.message.split(": ", 1)[0] + "/" for p in texts]
        report.problems += texts + [Problem(MANIFEST, f"schema: {e}") for e in errors
                                    if not any(f.startswith(e.split(": ", 1)[0] + "/") for f in fields)]
        return report

    report.problems += text_problems(raw)
    manifest = Manifest.parse(raw)
    tree, walked = _walk(root)
    report.problems += walked
    entries = manifest.files()
    # Sizes first, from the file system: a file whose size is not the listed one is a problem found without reading
    # it (a sparse 1 TiB member would otherwise be hashed whole), and nothing else is read from it.
    sizes = {x.path: (root / x.path).lstat().st_size for _, x in entries if x.path in tree}
    listed: dict[str, set[int]] = {}
    for _, entry in entries:
        listed.setdefault(entry.path, set()).add(entry.size)
    unread = {p: n for p, n in sizes.items() if n not in listed[p]}
    present = [(kind, x) for kind, x in entries if x.path in sizes and x.path not in unread]
    say = steps or (lambda _text: None)
    say(f"hashing {len(present)} file(s), {sum(sizes[x.path] for _, x in present) / 1e6:.1f} MB")
    with Pool(max_workers=jobs or os.cpu_count() or 1) as pool:  # hashlib releases the GIL
        scanned = pool.map(lambda ke: scan_file(root / ke[1].path, ke[0] not in ("cpu", "record", "loop", "licence"),
                                                progress), present)
        facts = {e.path: f for (_, e), f in zip(present, scanned, strict=True)}
    # the binaries that are what the manifest says (another is already a problem): read by their own metadata
    binaries = {x.path: x.sha256 for kind, x in present if kind.startswith("npu:")
                and x.format == FileFormat.QNN_CONTEXT_BINARY and facts[x.path].sha256 == x.sha256}
    if binaries:
        say(f"reading {len(binaries)} context binar{'y' if len(binaries) == 1 else 'ies'} with libQnnSystem")
    contexts, missing = read_contexts(root, binaries)
    report.problems += check_manifest(manifest, facts, tree, root, unread, contexts)
    report.problems += _record_problems(root, manifest, facts)
    report.warnings += check_warnings(manifest, facts, contexts)
    if missing and binaries:
        report.unchecked = sorted(binaries)
        if allow_unchecked:
            report.warnings.append(Problem(MANIFEST, f"{len(binaries)} context binaries unchecked (--allow-unchecked):"
                                                     f" their markers only were read, {missing}"))
        else:
            report.problems.append(Problem(MANIFEST, f"no libQnnSystem here to read the context binaries ({missing}):"
                                                     " install onnxruntime-qnn, or pass --allow-unchecked to accept "
                                                     "them unchecked (the report lists them)"))
    if deep and not report.problems and not report.unchecked:
        found = emulated.check_bundle(root, manifest, {p: [g.name for g in c.graphs] for p, c in contexts.items()
                                                  if isinstance(c, ContextInfo)}, steps)
        report.problems += [Problem(path, why) for path, why in found.problems]
        report.warnings += [Problem(path, why) for path, why in found.warnings]
        report.deep = found.done
    elif deep:
        report.deep = "not done: the bundle has problems" if report.problems else "not done: binaries unchecked"
    _summarize(report, manifest, facts)
    report.files += len(unread)
    report.bytes += sum(unread.values())
    return report


# C0 and C1 control characters (a trailing newline included), which no name, version or coordinate may hold
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def require_ok(bundle: Path, report: VerifyReport, doing: str) -> None:
    """Refuse to build anything on a bundle that fails `bundle verify` (exit 1), in refusal's one wording: what a
    room does when it is called with a bundle not verified yet (the API refuses one before a room sees it)."""
    if not report.ok:
        raise CheckFailed(refusal(bundle, report, doing))


def refusal(bundle: Path, report: VerifyReport, doing: str) -> str:
    """The one-line refusal of a command that builds on a bundle that fails verification ("scaffolding from it",
    "packaging it", "reaching from it"): one wording for all of them."""
    return f"{bundle} fails bundle verify ({len(report.problems)} problem(s)); not {doing}: fix or rebuild the bundle"


def require_bundle(given: Path, root: Path, result: VerifyReport) -> None:
    """The one rule for a bundle argument: a path that is not a bundle at all (no manifest.json, or one that is
    not readable JSON, not a qnndeploy manifest, or of a format version this qnndeploy does not read) is bad input,
    exit 2, in bundle verify, device verify, scaffold and device info --bundle alike; a bundle whose manifest reads
    but whose contents fail verification keeps its report (exit 1).

    given: the path the user gave; root: the bundle folder verified (inside the extracted archive for an archive).
    """
    if result.ok or result.name is not None or any(p.path != MANIFEST for p in result.problems):
        return  # verification got past the manifest, or an archive's members were refused: a report to show
    try:
        read_json(root)
    except QnnDeployError as e:  # not a bundle: the one-line error, naming what the user gave, not a temp folder
        raise e.reworded(str(e) if root == given else str(e).replace(str(root), f"{given}:{root.name}")) from None
    # the manifest reads, so the report's problems are schema errors: a bundle with problems, shown as a report


def text_problems(data: JSON) -> list[Problem]:
    """Names the app shows, matches or logs must be plain text: a control character (a trailing newline too, which a
    pattern ending in '$' lets through in Python) is a problem naming the manifest field. `data`: manifest.json's
    JSON as read, before or after the schema check (a control character is said plainly when the schema fails)."""
    fields: list[tuple[str, object]] = [("name", data.get("name")), ("version", data.get("version"))]
    targets = data.get("targets")
    if isinstance(targets, list):
        fields += [(f"targets/{i}/soc", t.get("soc")) for i, t in enumerate(targets) if isinstance(t, dict)]
        fields += [(f"targets/{i}/validation/graphs/{g}/accepted/reason", accepted_reason(s))
                   for i, t in enumerate(targets) if isinstance(t, dict)
                   for g, s in graph_validations(t.get("validation")).items()]
    graphs = data.get("graphs")
    if isinstance(graphs, list):
        fields += [(f"graphs/{i}/name", g.get("name")) for i, g in enumerate(graphs) if isinstance(g, dict)]
    runtime = data.get("runtime")
    if isinstance(runtime, dict):
        fields.append(("runtime/maven", runtime.get("maven")))
    return [Problem(MANIFEST, f"{where}: {value!r} holds a control character (a newline, tab, NUL…); names, "
                              "versions and coordinates must be plain text")
            for where, value in fields if isinstance(value, str) and CONTROL.search(value)]


def _summarize(report: VerifyReport, manifest: Manifest, facts: dict[str, FileFacts]) -> None:
    report.ok = not report.problems
    report.files, report.bytes = len(facts), sum(f.size for f in facts.values())
    report.name, report.version = manifest.name, manifest.version
    report.qairt = manifest.qairt.shown
    report.targets = [f"{t.soc} ({t.dsp_arch})" for t in manifest.targets]
    rt = manifest.runtime
    report.runtime = f"{len(rt.libs)} libraries" if rt.bundled else rt.maven + " (external)"
    report.accepted = accepted_failures(manifest)
    report.licences = [o.summary for o in manifest.licences.origins] if manifest.licences else []


def accepted_failures(manifest: Manifest) -> list[JSON]:
    """Every graph that failed validation and was shipped with a reason: SoC, graph, how it failed, the reason, who
    accepted it, and where the app runs that target (its accepted_on; "npu" when absent)."""
    return [{"soc": t.soc, "graph": g, "failure": worst_metric(s), "reason": reason,
             "by": s["accepted"].get("by"),
             "runs_on": Provider.CPU if t.accepted_on == Provider.CPU else Provider.NPU}
            for t in manifest.targets for g, s in t.validations.items()
            if s.get("passed") is False and (reason := accepted_reason(s)) is not None]


def _validation_problems(target: Target) -> list[Problem]:
    """A graph that failed validation needs an accepted reason (bundle --accept writes it; a hand-edited manifest
    may lack it), a reason needs a failure, and accepted_on needs an accepted failure to apply to."""
    soc, problems, accepted = target.soc, [], False
    for g, s in target.validations.items():
        reason, passed = accepted_reason(s), s.get("passed")
        if passed is False and reason is None:
            problems.append(Problem(MANIFEST, f"target {soc}: graph '{g}' failed validation ({worst_metric(s)}) and "
                                              "no reason accepts it: fix the graph, or bundle again with --accept "
                                              f"{g}@{soc}=\"REASON\""))
        elif reason is not None and passed is not False:
            problems.append(Problem(MANIFEST, f"target {soc}: graph '{g}' has an accepted failure, but its "
                                              f"validation did not fail (passed: {passed!r}): the reason is false; "
                                              "bundle again"))
        accepted |= passed is False and reason is not None
    if target.accepted_on is not None and not accepted:
        problems.append(Problem(MANIFEST, f"target {soc}: accepted_on {target.accepted_on!r} but no graph of it "
                                          "has an accepted validation failure; bundle again"))
    return problems


Contexts = dict[str, "ContextInfo | str"]  # context binary path -> what libQnnSystem read, or why it could not


# What libQnnSystem read of a binary, by (library, sha256): the same bytes read again (a bundle verified after it
# was built, scaffold's verify, the same binaries in several targets or bundles) cost nothing.
_READ: dict[tuple[str, str], ContextInfo | str] = {}


MAX_RECORD_BYTES = 4 << 20  # a compile record with its log paths and graph I/O is a few KB


def _record_problems(root: Path, manifest: Manifest, facts: dict[str, FileFacts]) -> list[Problem]:
    """Each context binary must be the one its compile and validation records name (their outputs' and binary's
    sha256), when the bundle holds them: a bundle that mixes the binary of one build with the records of another
    vouches for numbers that were measured on other bytes."""
    claims: list[tuple[str, set[str], set[str], str]] = []  # (soc, graphs, binaries' sha256, record path)
    for e in manifest.records:
        if e.path not in facts or facts[e.path].sha256 != e.sha256:
            continue  # missing or changed: already a problem
        try:
            data = parse_json(read_limited(root / e.path, MAX_RECORD_BYTES, "record"), root / e.path)
        except QnnDeployError:
            continue  # a record is kept as it was written; only what it says of the binaries is checked
        if not isinstance(data, dict) or not isinstance(data.get("soc"), str):
            continue
        if data.get("record") == "qnndeploy-compile" and data.get("status", "ok") == "ok":
            members = [m for m in data.get("members") or [] if isinstance(m, dict)]
            graphs = [data.get("graph"), *(m.get("graph") for m in members)]
            named = [o for o in data.get("outputs") or [] if isinstance(o, dict)
                     and o.get("format") == FileFormat.QNN_CONTEXT_BINARY and not o.get("twin")]
        elif data.get("record") == "qnndeploy-validation" and isinstance(data.get("binary"), dict):
            graphs, named = [data.get("graph")], [data["binary"]]
        else:
            continue
        shas = {o["sha256"] for o in named if isinstance(o.get("sha256"), str)}
        if shas:
            claims.append((data["soc"], {g for g in graphs if isinstance(g, str)}, shas, e.path))
    problems = []
    for t in manifest.targets:
        for a in t.artifacts:
            if a.format != FileFormat.QNN_CONTEXT_BINARY:
                continue
            wrong = next((c for c in claims if c[0] == t.soc and c[1] & set(a.served) and a.sha256 not in c[2]),
                         None)
            if wrong is not None:
                problems.append(Problem(a.path, f"is not the binary its record {wrong[3]} names (sha256 "
                                                f"{a.sha256[:12]}…, the record's "
                                                f"{', '.join(sorted(w[:12] + '…' for w in wrong[2]))}): the "
                                                "bundle mixes builds; bundle it again from one build"))
    return problems


def read_contexts(root: Path, binaries: dict[str, str]) -> tuple[Contexts, str | None]:
    """Each context binary's metadata (bundle path -> its sha256 in, path -> ContextInfo out), read by libQnnSystem
    in a child process (qnnsystem.read_contexts: a damaged binary crashes that child, not this process); a binary
    it refuses maps to the reason. Also the reason when the library is missing or does not load (then: no
    entries). Binaries read before, by their sha256, are not read again."""
    try:
        library = qnnsystem.library_path()
    except QnnDeployError as e:
        return {}, str(e)
    todo = list(dict.fromkeys(p for p, sha in binaries.items() if (str(library), sha) not in _READ))
    missing = None
    for path, answer in zip(todo, qnnsystem.read_contexts([root / p for p in todo], library), strict=True):
        if isinstance(answer, MissingTool):
            missing = missing or str(answer)
        else:
            _READ[(str(library), binaries[path])] = answer if isinstance(answer, ContextInfo) else str(answer)
    if missing is not None:
        return {}, missing
    return {p: _READ[(str(library), sha)] for p, sha in binaries.items()}, None


def check_manifest(manifest: Manifest, facts: dict[str, FileFacts], tree: set[str], root: Path,
                   unread: dict[str, int] | None = None, contexts: Contexts | None = None) -> list[Problem]:
    """Every rule of the bundle format that can fail, group by group. `facts` holds the files that were read;
    `unread` the present files left unread because their size is not the listed one (path -> size); `contexts` what
    libQnnSystem read of the context binaries (a binary not in it is judged by its markers)."""
    need, stated = _min_runtime(manifest.qairt)
    return [*_listing_problems(manifest, facts, tree, unread or {}), *_graph_problems(manifest),
            *_cpu_problems(manifest, facts, root), *_target_problems(manifest, facts, root, contexts or {}, need),
            *stated, *_runtime_problems(manifest, facts, root, need), *_on_device_problems(manifest, facts, root),
            *_loop_problems(manifest, facts, root), *_generation_problems(manifest),
            *_tokenizer_problems(manifest, facts, root), *_licence_problems(manifest)]


def _licence_problems(manifest: Manifest) -> list[Problem]:
    """Format 6's licences: every Qualcomm file of the bundle (a bundled runtime library, a context binary) listed
    once, with the sha256 the manifest lists it with and a declared origin; each origin once, its terms files in its
    own folder licences/<id>/ (their presence and sha256 are checked with every listed file)."""
    licences = manifest.licences
    if licences is None:  # older formats: check_warnings says so; format 6's schema requires it
        return [Problem(MANIFEST, "has no licences section")] if manifest.format_number >= LICENCES_SINCE else []
    qualcomm = {a.path: a.sha256 for t in manifest.targets for a in t.artifacts  # an .onnx listed so: its own problem
                if a.format == FileFormat.QNN_CONTEXT_BINARY and not a.path.endswith(".onnx")}
    qualcomm |= {lib.path: lib.sha256 for lib in manifest.runtime.libs if manifest.runtime.bundled}
    ids = [o.id for o in licences.origins]
    problems = [Problem(MANIFEST, f"licences declares origin '{i}' {ids.count(i)} times")
                for i in dict.fromkeys(ids) if ids.count(i) > 1]
    problems += [Problem(t.path, f"is a licence file of origin '{o.id}' outside its folder {LICENCES_DIR}/{o.id}/")
                 for o in licences.origins for t in o.terms or () if not t.path.startswith(f"{LICENCES_DIR}/{o.id}/")]
    seen: set[str] = set()
    for f in licences.files:
        if f.path in seen:
            problems.append(Problem(f.path, "is listed twice in licences"))
        seen.add(f.path)
        if f.path not in qualcomm:
            problems.append(Problem(f.path, "is in licences, but the manifest lists no runtime library or context "
                                            "binary there"))
        elif f.sha256 != qualcomm[f.path]:
            problems.append(Problem(f.path, f"licences gives it sha256 {f.sha256[:12]}…, the manifest "
                                            f"{qualcomm[f.path][:12]}…: its licence entry is of other bytes"))
        if f.origin not in ids:
            problems.append(Problem(f.path, f"licences names its origin '{f.origin}', which it does not declare"))
    return problems + [Problem(p, "is a Qualcomm file with no licences entry: where it came from and under which "
                                  "terms is not recorded; bundle it again") for p in sorted(set(qualcomm) - seen)]


def _loop_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path) -> list[Problem]:
    """Format 5's loop: its encoder and decoder (or their parts, chained by tensor name) are graphs the NPU runs,
    every tensor it names is an input or output of the graph it says, it feeds every decoder input (the app could
    not run the decoder otherwise), the caches have one length, and the tokenizer reads as one."""
    if manifest.loop is None:
        return []
    loop, problems = manifest.loop.loop, []
    graphs = {g.name: g for g in manifest.graphs if not g.cpu_only}
    for role, names in (("encoder", loop.encoders), ("decoder", loop.decoders)):
        problems += [Problem(MANIFEST, f"loop names {role} '{name}', which is not a graph the NPU runs")
                     for name in names if name not in graphs]
    if problems:
        return problems

    def chain(names: tuple[str, ...]) -> tuple[dict[str, Tensor], set[str]]:
        """What the graphs, run in order, read from the loop (the first reader's signature) and make."""
        reads: dict[str, Tensor] = {}
        made: set[str] = set()
        for name in names:
            reads.update((t.name, t) for t in graphs[name].inputs if t.name not in made and t.name not in reads)
            made.update(t.name for t in graphs[name].outputs)
        return reads, made

    (encoder_ins, encoder_outs), (ins, outs) = chain(loop.encoders), chain(loop.decoders)
    wanted = [(loop.encoder, "input", loop.encoder_input, set(encoder_ins)),
              *((loop.decoder, "input", n, set(ins)) for n in (loop.token, loop.position, loop.mask) if n is not None),
              (loop.decoder, "output", loop.logits, outs),
              *((loop.decoder, "input", i, set(ins)) for i, _ in (*loop.cross, *loop.cache)),
              *((loop.encoder, "output", o, encoder_outs) for _, o in loop.cross),
              *((loop.decoder, "output", o, outs) for _, o in loop.cache)]
    problems += [Problem(MANIFEST, f"loop names {kind} '{name}' of graph '{graph}', which has no such {kind}")
                 for graph, kind, name, there in wanted if name not in there]
    fed = {loop.token, loop.position, loop.mask, *(i for i, _ in (*loop.cross, *loop.cache))}
    if unfed := [n for n in ins if n not in fed]:
        problems.append(Problem(MANIFEST, f"loop feeds no value to decoder input(s) {', '.join(unfed)}: the app "
                                          "could not run the decoder"))
    lengths = {ins[i].shape[1] for i, _ in loop.cache if i in ins and len(ins[i].shape) == 3}
    if len(lengths) > 1 or any(not isinstance(n, int) for n in lengths):
        problems.append(Problem(MANIFEST, "the loop's cache inputs have no one static length "
                                          f"({', '.join(sorted(map(str, lengths)))})"))
    return problems


def _tokenizer_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path) -> list[Problem]:
    """The loop's or the generation's tokenizer reads as one (its bytes are checked with every listed file)."""
    problems = []
    for tokenizer in (*manifest.loop_files, *manifest.generation_files):
        if tokenizer.path in facts and facts[tokenizer.path].sha256 == tokenizer.sha256:
            try:
                decode.Detokenizer(root / tokenizer.path)
            except QnnDeployError as e:
                problems.append(Problem(tokenizer.path, f"is not a tokenizer the app can read: {e}"))
    return problems


def _generation_problems(manifest: Manifest) -> list[Problem]:
    """Format 7's generation: parts numbered 1.. in order, each naming a prompt and a decode graph the NPU runs and
    covering the next layers; every part's graph reads only the loop's inputs, its own layers' caches and what the
    parts before it make; each layer's past input has context - s entries and its present output s (s: the graph's
    tokens, prompt_tokens or 1); the last part makes the logits. What the app's loop relies on, or it cannot run."""
    gen = manifest.generation
    if gen is None:
        return []
    problems: list[Problem] = []
    graphs = {g.name: g for g in manifest.graphs if not g.cpu_only}
    if [p.index for p in gen.parts] != list(range(1, len(gen.parts) + 1)):
        problems.append(Problem(MANIFEST, "generation's parts are not numbered 1, 2, ... in running order"))
    covered = [layer for p in gen.parts for layer in range(p.layers[0], p.layers[-1] + 1)] if all(
        len(p.layers) == 2 for p in gen.parts) else []
    if covered != [k.layer for k in gen.kv] or [k.layer for k in gen.kv] != list(range(len(gen.kv))):
        problems.append(Problem(MANIFEST, "generation's parts do not cover its layers 0.. in order, each once"))
    for p in gen.parts:
        problems += [Problem(MANIFEST, f"generation part {p.index} names {role} graph '{name}', which is not a "
                                       "graph the NPU runs")
                     for role, name in (("prompt", p.prompt), ("decode", p.decode)) if name not in graphs]
    if problems:
        return problems
    loop_inputs = {name for _, name in gen.inputs}
    for role, seq in (("prompt", gen.prompt_tokens), ("decode", 1)):
        made: set[str] = set()
        for p in gen.parts:
            graph = graphs[p.prompt if role == "prompt" else p.decode]
            own = [k for k in gen.kv if k.part == p.index]
            caches = {k.key[0]: k for k in own} | {k.value[0]: k for k in own}
            for t in graph.inputs:
                k = caches.get(t.name)
                if k is not None:
                    if list(t.shape) != [1, k.heads, gen.context_tokens - seq, k.head_dim]:
                        problems.append(Problem(MANIFEST, f"graph '{graph.name}' input {t.name} is "
                                        f"{list(t.shape)}; the {role} graph's cache past is [1, {k.heads}, "
                                        f"{gen.context_tokens - seq}, {k.head_dim}]"))
                elif t.name not in loop_inputs and t.name not in made:
                    problems.append(Problem(MANIFEST, f"graph '{graph.name}' reads {t.name}, which neither the loop "
                                                      "nor an earlier part gives: the app could not run it"))
            outs = {t.name: t for t in graph.outputs}
            for k in own:
                for name in (k.key[1], k.value[1]):
                    shape = list(outs[name].shape) if name in outs else None
                    if shape != [1, k.heads, seq, k.head_dim]:
                        problems.append(Problem(MANIFEST, f"graph '{graph.name}' does not output {name} as "
                                                          f"[1, {k.heads}, {seq}, {k.head_dim}] (its layer's new "
                                                          f"entries): {shape or 'no such output'}"))
            made.update(outs)
        if gen.logits not in made:
            problems.append(Problem(MANIFEST, f"no {role} graph of the generation outputs {gen.logits}"))
    return problems


def _on_device_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path) -> list[Problem]:
    """Format 4's on_device: one entry per graph that is not CPU-only, its model an ONNX of that graph the manifest
    lists, and each arch it names as validated one that bundle build could have validated (a catalog arch the
    bundle's QAIRT is measured to compile the graph's precision for, ondevice.arch_socs) and backed by its record:
    for that graph, arch and a catalog SoC of it, with the same EP options and the bundle's QAIRT, passed, and its
    outputs' figures passing again by the precision's thresholds (a record's verdict alone is not evidence)."""
    od = manifest.on_device
    if od is None:
        return []
    if manifest.format_number < ON_DEVICE_SINCE:
        return [Problem(MANIFEST, f"has on_device, which bundle format {ON_DEVICE_SINCE} introduced, in a manifest "
                                  f"of version {manifest.format_number}")]
    npu_graphs, named = [g.name for g in manifest.graphs if not g.cpu_only], [g.graph for g in od.graphs]
    problems = [Problem(MANIFEST, f"on_device must name graph '{g}' once (it names it {named.count(g)} times)")
                for g in npu_graphs if named.count(g) != 1]
    problems += [Problem(MANIFEST, f"on_device names graph '{g}', which is not a graph the NPU runs")
                 for g in dict.fromkeys(named) if g not in npu_graphs]
    problems += [Problem(a.path, f"belongs to graph '{a.graph}', which the manifest does not declare")
                 for a in od.artifacts if a.graph not in npu_graphs]
    models = {a.path: a for a in (*manifest.cpu, *od.artifacts) if a.format == FileFormat.ONNX}
    records = {r.path: r for r in manifest.records}
    for g in od.graphs:
        if g.path not in models or models[g.path].graph != g.graph:
            problems.append(Problem(g.path, f"is on_device's model of graph '{g.graph}', but the manifest lists no "
                                            "ONNX model of that graph there"))
        if list(g.validated) != sorted(set(g.validated), key=HtpArch.parse):
            problems.append(Problem(MANIFEST, f"on_device's validated arches of graph '{g.graph}' must be unique "
                                              f"and ascending, not {list(g.validated)}"))
        precision = ondevice.precision_of(g.ep_options)
        problems += _arch_problems(g.graph, g.validated, manifest.qairt.version, precision)
        for arch in g.validated:
            rel = f"records/{g.graph}-on-device-{arch}.json"
            if rel not in records:
                problems.append(Problem(MANIFEST, f"on_device says graph '{g.graph}' was validated for {arch}, but "
                                                  f"the bundle has no {rel}"))
                continue
            if rel not in facts or facts[rel].sha256 != records[rel].sha256:
                continue  # missing or changed: already a problem
            try:
                data = parse_json(read_limited(root / rel, MAX_RECORD_BYTES, "record"), root / rel)
            except QnnDeployError as e:
                problems.append(Problem(rel, str(e)))
                continue
            said = {k: data.get(k) for k in ("graph", "arch", "passed", "ep_options", "qairt")} \
                if isinstance(data, dict) else {}
            if said != {"graph": g.graph, "arch": arch, "passed": True, "ep_options": dict(g.ep_options),
                        "qairt": manifest.qairt.version}:
                problems.append(Problem(rel, f"does not show graph '{g.graph}' passing on {arch} with on_device's "
                                             f"EP options and QAIRT {manifest.qairt.version}: bundle it again"))
            elif (why := _record_figures_problem(data, arch, precision, root / g.path)) is not None:
                problems.append(Problem(rel, f"says graph '{g.graph}' passed on {arch}, but {why}: bundle it again"))
    return problems


def _arch_problems(graph: str, validated: tuple[str, ...], qairt: str, precision: str) -> list[Problem]:
    """The arches bundle build could never have validated: not an HTP arch of the catalog, or one the bundle's QAIRT
    is not measured to compile `precision` for from v69 up (ondevice.arch_socs: v68 has no fp16)."""
    catalog = {s.dsp_arch for s in socs.catalog()}
    can = [s.dsp_arch for s in ondevice.arch_socs(qairt, precision)]
    problems = []
    for arch in validated:
        if arch not in catalog:
            problems.append(Problem(MANIFEST, f"on_device says graph '{graph}' was validated for {arch}, which is "
                                              "not an HTP arch of the SoC catalog"))
        elif arch not in can:
            problems.append(Problem(MANIFEST, f"on_device says graph '{graph}' was validated for {arch}, which "
                                              f"QAIRT {qairt} is not measured to compile {precision} for (bundle "
                                              f"build validates {', '.join(can) or 'no arch'})"))
    return problems


def _record_figures_problem(data: JSON, arch: str, precision: str, model: Path) -> str | None:
    """Why an on-device record that says passed does not show it: its SoC is not one of the arch's in the catalog,
    its task verdict's figures fail when judged again (tasks.rejudge), or an output the task does not decide fails
    the precision's thresholds when judged again (metrics.rejudge). A record without a task verdict (written before
    records held one) gets a classifier's allowance: its scores pass when every label agrees."""
    soc = next((s for s in socs.catalog() if s.model == data.get("soc")), None)
    if soc is None or soc.dsp_arch != arch or data.get("soc_id") != soc.soc_id:
        return f"its SoC {data.get('soc')!r} is not a catalog SoC of {arch}"
    outputs = data.get("outputs")
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, dict) for o in outputs):
        return "it holds no output figures"
    limits = thresholds_for(precision)
    task = data.get("task") if isinstance(data.get("task"), dict) else None
    if task is not None and task.get("kind", "tensor") != "tensor" and (why := tasks.rejudge(task, limits)):
        return f"its task verdict fails: {why}"
    classified: set[str] = set()
    if task is None:
        try:
            found = tasks.detect(model)
            classified = found.outputs if found.kind == tasks.TaskKind.CLASSIFY else set()
        except (QnnDeployError, OSError):
            pass
    decided, least = tasks.decided(task), tasks.limit(limits, "min_top1")
    for o in outputs:
        name, top1 = str(o.get("name")), o.get("argmax_agreement")
        labels = top1 if isinstance(top1, (int, float)) and not isinstance(top1, bool) else None
        if labels is not None and labels < least and (name in classified or (
                name in decided and (task or {}).get("kind") == "classify")):
            return f"its output {name!r} fails: top-1 agreement {labels:g} (needs >= {least:g})"
        if name in decided or (name in classified and labels is not None):
            continue  # its task's figures decide (judged above; a classifier's labels too), or its labels all agree
        if (why := rejudge(o, limits)) is not None:
            return f"its output {o.get('name')!r} fails: {why}"
    return None


def _listing_problems(manifest: Manifest, facts: dict[str, FileFacts], tree: set[str],
                      unread: dict[str, int]) -> list[Problem]:
    """Paths, sizes and hashes: each listed file once, portably named, present, of its size and sha256; every file
    of the bundle listed."""
    problems, seen = [], set()
    for _, e in manifest.files():
        p = e.path
        if p in seen or p == MANIFEST:
            problems.append(Problem(p, "is listed twice in the manifest"))
        seen.add(p)
        if (why := path_problem(p)) is not None:
            problems.append(Problem(p.encode("unicode_escape").decode("ascii"), why))
        size = unread[p] if p in unread else facts[p].size if p in facts else None
        if p not in tree:
            problems.append(Problem(p, "is listed in the manifest but missing from the bundle"))
        elif size is not None and size != e.size:
            problems.append(Problem(p, f"has {size} bytes, the manifest says {e.size} (truncated or replaced)"))
        elif p in facts and facts[p].sha256 != e.sha256:
            problems.append(Problem(p, "sha256 differs from the manifest (the file changed after bundling)"))
    return problems + [Problem(p, "is not listed in the manifest") for p in sorted(tree - seen - {MANIFEST})]


def _graph_problems(manifest: Manifest) -> list[Problem]:
    """The graphs: unique names, a CPU fallback model each, and a pipeline that names each once (needed when a
    graph runs on the CPU only)."""
    graphs = [g.name for g in manifest.graphs]
    problems = [Problem(MANIFEST, "graph names are not unique")] if len(set(graphs)) != len(graphs) else []
    cpu_graphs = [a.graph for a in manifest.cpu if a.format == FileFormat.ONNX]
    problems += [Problem(MANIFEST, f"graph '{g}' has no CPU fallback model") for g in graphs if g not in cpu_graphs]
    pipeline = list(manifest.pipeline_order)
    if pipeline and sorted(pipeline) != sorted(graphs):
        problems.append(Problem(MANIFEST, f"pipeline {pipeline} must name every graph once ({', '.join(graphs)}): "
                                          "the app runs them in that order"))
    elif not pipeline and manifest.cpu_only:
        problems.append(Problem(MANIFEST, "a CPU-only graph (a split model's part) needs the pipeline the app runs "
                                          "the graphs in"))
    return problems


Signatures = dict[str, tuple[list[JSON], list[JSON]]]  # graph -> its inputs and outputs as manifest.json writes them


def _signatures(manifest: Manifest) -> Signatures:
    return {g.name: ([t.to_json() for t in g.inputs], [t.to_json() for t in g.outputs]) for g in manifest.graphs}


def _npu_signatures(manifest: Manifest) -> Signatures:
    """The signatures the NPU files must have: the CPU model's, but a generation's cache tensors of the element type
    its NPU graphs keep them in (format 8's npu_dtype)."""
    changed = {name: k.npu_dtype for k in (manifest.generation.kv if manifest.generation else ()) if k.npu_dtype
               for name in (*k.key, *k.value)}

    def typed(tensors: list[JSON]) -> list[JSON]:
        return [{**t, "dtype": changed.get(t["name"], t["dtype"])} for t in tensors]

    return {g: (typed(inputs), typed(outputs)) for g, (inputs, outputs) in _signatures(manifest).items()}


def _cpu_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path) -> list[Problem]:
    """The CPU fallback: each file of a declared graph; each model naming only its graph's listed data files beside
    it, every listed data file named, and the model with its graph's signature."""
    graphs, signatures = {g.name for g in manifest.graphs}, _signatures(manifest)
    data = {a.path: a for a in manifest.cpu if a.format == FileFormat.ONNX_EXTERNAL_DATA}
    problems: list[Problem] = []
    named: set[str] = set()  # listed data files that a CPU model names
    read: set[str] = set()  # graphs whose CPU model told which data files it names
    for a in manifest.cpu:
        if not graphs.issuperset(a.served):
            problems.append(Problem(a.path, f"belongs to graph '{next(g for g in a.served if g not in graphs)}', "
                                            "which the manifest does not declare"))
        elif a.graphs and manifest.format_number < GENERATION_SINCE:
            problems.append(Problem(a.path, f"is a data file several CPU models share, which bundle format "
                                            f"{GENERATION_SINCE} introduced, but the manifest says format "
                                            f"{manifest.format_version}"))
        elif a.format == FileFormat.ONNX and a.path in facts:
            refs, found = _external_data_problems(root, a, data)
            problems += found
            if refs is not None:
                read.add(a.graph)
                named |= refs
            if refs is not None and not found and all(r in facts and facts[r].size == data[r].size for r in refs):
                problems += _signature_problems(root, a.path, signatures[a.graph], a.graph)
    return problems + [Problem(p, f"is listed as external data of graph '{a.served[0]}', but its CPU model does not "
                                  "name it") for p, a in data.items() if p not in named and read.issuperset(a.served)]


def _target_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path, contexts: Contexts,
                     need: str) -> list[Problem]:
    """Each target: a SoC of the catalog, once, matching its soc_id, arch and precision; its validation; a file for
    every graph that needs one; each of its files (_artifact_problems); the bundled runtime libraries its arch needs."""
    models, _ = soc_tables()  # the decision's table: how the app matches a phone's SoC to a target
    targets_seen: set[str] = set()
    problems: list[Problem] = []
    for t in manifest.targets:
        model = models.get(upper(t.soc))
        if model is None:
            problems.append(Problem(MANIFEST, f"target {t.soc}: '{t.soc}' is not a SoC model of the catalog (e.g. "
                                              "SM8750): the app matches targets by model name, so no phone would "
                                              "ever use this one"))
            continue
        if model in targets_seen:
            problems.append(Problem(MANIFEST, f"SoC {t.soc} has two targets"))
        targets_seen.add(model)
        problems += _soc_problems(t, model)
        problems += _validation_problems(t)
        problems += _coverage_problems(manifest, t)
        for a in t.artifacts:
            problems += _artifact_problems(manifest, t, a, facts, root, contexts, need, model)
        problems += _kv8_problems(manifest, t, contexts)
        if manifest.runtime.bundled:
            problems += _runtime_completeness(t, manifest.runtime.libs)
    return problems


def _kv8_problems(manifest: Manifest, t: Target, contexts: Contexts) -> list[Problem]:
    """A generation cache the NPU keeps in uint8: the app appends a graph's new entries to it byte for byte, so its
    past input and its present output have one encoding in every graph of the target (prompt and decode), as the
    binaries say; and only format 8 has it."""
    kv = [k for k in (manifest.generation.kv if manifest.generation else ()) if k.npu_dtype]
    if kv and manifest.format_number < KV8_SINCE:
        return [Problem(MANIFEST, f"generation gives its cache an npu_dtype, which bundle format {KV8_SINCE} "
                                  f"introduced, but the manifest says format {manifest.format_version}")]
    seen: dict[str, set[tuple[float | None, int | None]]] = {}
    for a in t.artifacts:
        info = contexts.get(a.path)
        for g in info.graphs if isinstance(info, ContextInfo) else ():
            for tensor in (*g.inputs, *g.outputs):
                q = tensor.quantization
                seen.setdefault(tensor.name, set()).add((q.scale, q.offset) if q else (None, None))
    problems = []
    for k in (k for k in kv if k.npu_dtype == "uint8"):
        for past, present in (k.key, k.value):
            codes = seen.get(past, set()) | seen.get(present, set())
            if len(codes) > 1 or (None, None) in codes:
                shown = ", ".join(f"scale {sc:.6g} offset {off}" if sc is not None else "none"
                                  for sc, off in sorted(codes, key=str))
                problems.append(Problem(MANIFEST, f"target {t.soc}: the binaries encode layer {k.layer}'s cache "
                                        f"{past} -> {present} in several ways ({shown}): the app copies the new "
                                        "entries' bytes into the cache, so they need one; compile again with "
                                        "--kv-bits 8"))
    return problems


def _soc_problems(t: Target, model: str) -> list[Problem]:
    """The target's soc_id and arch are the catalog's for its SoC, and fp16 is there when it asks for it."""
    try:
        soc = socs.find(model)
    except QnnDeployError as e:
        return [Problem(MANIFEST, f"target {t.soc}: {e}")]
    problems = []
    if (soc.soc_id, soc.dsp_arch) != (t.soc_id, t.dsp_arch):
        problems.append(Problem(MANIFEST, f"target {t.soc} says soc_id {t.soc_id}/{t.dsp_arch}, the catalog says "
                                          f"{soc.soc_id}/{soc.dsp_arch}: its binaries were compiled for another "
                                          f"chip; compile them again for {t.soc} and rebuild the bundle"))
    if t.precision == "fp16" and soc.fp16 is False:
        problems.append(Problem(MANIFEST, f"target {t.soc} is fp16 but {t.soc} has no fp16 on its HTP"))
    return problems


def _coverage_problems(manifest: Manifest, t: Target) -> list[Problem]:
    """A context binary for every graph but the CPU-only ones, which have no files in a target."""
    binary_of = _binaries(t)
    problems = []
    for g in (g.name for g in manifest.graphs):
        if g not in binary_of and g not in manifest.cpu_only:
            problems.append(Problem(MANIFEST, f"target {t.soc} has no context binary for graph '{g}'"))
        if g in manifest.cpu_only and any(a.serves(g) for a in t.artifacts):
            problems.append(Problem(MANIFEST, f"target {t.soc} has files for graph '{g}', which runs on the CPU only"))
    return problems


def _binaries(t: Target) -> dict[str, str]:
    """graph -> the bundle path of its context binary in this target."""
    return {g: a.path for a in t.artifacts if a.format == FileFormat.QNN_CONTEXT_BINARY for g in a.served}


def _artifact_problems(manifest: Manifest, t: Target, a: BundleFile, facts: dict[str, FileFacts], root: Path,
                       contexts: Contexts, need: str, model: str) -> list[Problem]:
    """One file of a target: of declared graphs, shared only from format 3; a wrapper loading its graph's binary
    with its graph's signature; a binary that is one, read by libQnnSystem (or else by its markers) for this SoC,
    arch, graphs and QAIRT."""
    graphs, signatures = {g.name for g in manifest.graphs}, _npu_signatures(manifest)
    problems = [Problem(a.path, f"belongs to graph '{g}', which the manifest does not declare")
                for g in a.served if g not in graphs]
    if a.graphs and manifest.format_number < SHARED_SINCE:
        problems.append(Problem(a.path, f"is shared by several graphs, which bundle format {SHARED_SINCE} introduced, "
                                        f"but the manifest says format {manifest.format_version}"))
    f = facts.get(a.path)
    if f is not None and a.format == FileFormat.ORT_EPCONTEXT:
        problems += _epcontext_problems(root, a.path, {x.path for x in t.artifacts}, _binaries(t).get(a.graph))
        if a.graph in signatures:
            problems += _signature_problems(root, a.path, signatures[a.graph], a.graph)
    if f is None or a.format != FileFormat.QNN_CONTEXT_BINARY:
        return problems
    not_binary = _not_a_context_binary(root, a.path, f)
    if not_binary:
        return [*problems, Problem(a.path, not_binary)]
    info = contexts.get(a.path)
    if isinstance(info, str):
        return [*problems, Problem(a.path, f"libQnnSystem cannot read it: {info}")]
    if info is not None:  # its own metadata: what the phone's QNN will read
        problems += [Problem(a.path, m) for m in _context_problems(root, info, a, t, signatures, need)]
        return problems + _version_problems(a.path, f, manifest.qairt)
    models, _ = soc_tables()
    wrong = sorted({f"{s} ({HtpArch(x)})" for s, x in f.context_targets if HtpArch(x) != HtpArch.parse(t.dsp_arch)})
    if wrong:
        problems.append(Problem(a.path, f"was compiled for {', '.join(wrong)}, but target {t.soc} is {t.dsp_arch}"))
    other = sorted({s for s, x in f.context_targets if models.get(upper(s), model) != model})
    if other and not wrong:
        problems.append(Problem(a.path, f"was compiled for {', '.join(other)}, but target {t.soc} is {model}: "
                                        "recompile it for this SoC"))
    return problems + _version_problems(a.path, f, manifest.qairt)


def _runtime_problems(manifest: Manifest, facts: dict[str, FileFacts], root: Path, need: str) -> list[Problem]:
    """The runtime: an external one pinned to a qnn-runtime release that loads the binaries; bundled libraries of a
    QAIRT that loads them, each a usable library where it belongs."""
    runtime, qairt = manifest.runtime, manifest.qairt
    if runtime.bundled:
        problems = [] if compat.satisfies(qairt.version, need) else [Problem(
            MANIFEST, f"the bundled runtime libraries are QAIRT {qairt.version}, older than qairt/min_runtime "
                      f"{need}: they cannot load the bundle's context binaries")]
        return problems + [p for lib in runtime.libs for p in _library_problems(lib, facts.get(lib.path), root, qairt)]
    maven, pinned = runtime.maven, runtime.maven.rsplit(":", 1)[1]
    if not maven.startswith(MAVEN_RUNTIME + ":"):
        why = f"external runtime must be {MAVEN_RUNTIME}:<version>, not {maven}"
    elif not compat.is_release(pinned):
        why = f"external runtime {maven}: '{pinned}' is not a release version X.Y.Z"
    elif (pin := compat.pin_problem(pinned, qairt.version)) is not None:
        why = f"external runtime {maven}: {pin}"
    elif not compat.satisfies(pinned, need):
        why = (f"external runtime {maven}: qnn-runtime {pinned} is older than qairt/min_runtime {need}, the oldest "
               "runtime the manifest says loads its context binaries")
    else:
        return []
    return [Problem(MANIFEST, why)]


def _in_bundle(e: QnnDeployError, root: Path, path: str) -> str:
    """A model reader's message about `path`, with the file called "this file" and other files by bundle path."""
    return re.sub(re.escape(str(root / path)) + r"(?![\w.-])", "this file", str(e)).replace(f"{root}/", "")


def _signature_problems(root: Path, path: str, expected: tuple[list[JSON], list[JSON]], graph: str) -> list[Problem]:
    """A model file must have its graph's inputs and outputs: another graph's binary would misbehave on the phone."""
    try:
        sig = graph_signature(root / path)
    except QnnDeployError as e:
        return [Problem(path, _in_bundle(e, root, path))]
    if (sig.inputs, sig.outputs) == expected:
        return []
    def show(tensors: list[JSON]) -> str:
        return ", ".join(f"{t['name']} {t['dtype']}{t['shape']}" for t in tensors)
    return [Problem(path, f"has inputs ({show(sig.inputs)}) -> outputs ({show(sig.outputs)}), but graph '{graph}' "
                          f"is ({show(expected[0])}) -> ({show(expected[1])}): is it another graph's file?")]


def _external_data_problems(root: Path, model: BundleFile, data: dict[str, BundleFile]
                            ) -> tuple[set[str] | None, list[Problem]]:
    """(the listed data files a CPU model names, or None when it is unreadable; a problem per location that is not
    a listed data file of its graph beside it). ONNX Runtime reads these files wherever the model points."""
    import onnx

    path = model.path
    try:
        proto = load_model(root / path, check_external=False, weights=False)
    except QnnDeployError as e:
        return None, [Problem(path, _in_bundle(e, root, path))]
    refs: set[str] = set()
    problems = [Problem(path, f"holds {n} EPContext node(s): it is an NPU wrapper, not a CPU model; on a phone "
                              "without the NPU the CPU fallback would fail too. Put the original model in cpu/")
                for n in [sum(node.op_type == "EPContext" for node in _all_nodes(proto))] if n]
    locations = {e.value for t in _all_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL
                 for e in t.external_data if e.key == "location"}
    for location in sorted(locations):
        rel = external_data_path(path, location)
        if rel is None:
            problems.append(Problem(path, f"keeps its weights in '{location}', which is not a plain relative path "
                                          "inside its folder (absolute or '..'): ONNX Runtime would read it from "
                                          "outside the bundle's cpu/"))
        elif rel not in data or not data[rel].serves(model.graph):
            problems.append(Problem(path, f"keeps its weights in {rel}, which the manifest does not list as "
                                          f"external data of graph '{model.graph}'"))
        else:
            refs.add(rel)
    return refs, problems


def _graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto | onnx.FunctionProto]:
    """The main graph, every subgraph and every function of a model (iteratively: depth is the file's to choose)."""
    stack: list[onnx.GraphProto | onnx.FunctionProto] = [model.graph, *model.functions]
    for info in model.training_info:
        stack += [info.initialization, info.algorithm]
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def _all_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    for graph in _graphs(model):
        yield from graph.node


def _all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor ONNX Runtime may read external data for: initializers (sparse ones too) and tensors held in node
    attributes, in every graph, subgraph and function."""
    import onnx

    for graph in _graphs(model):
        sparse: list[onnx.SparseTensorProto] = []
        if isinstance(graph, onnx.GraphProto):
            yield from graph.initializer
            sparse += list(graph.sparse_initializer)
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    sparse.append(a.sparse_tensor)
                sparse += list(a.sparse_tensors)
        for st in sparse:
            yield st.values
            yield st.indices


# Smallest plausible QNN context binary: its header and metadata alone fill the first 4 KiB page.
MIN_CONTEXT_BINARY = 4096
# The header QAIRT 2.x context binaries start with (seen in every binary onnxruntime-qnn writes): two big-endian
# format numbers, then at byte 24 and 32 the little-endian lengths of the metadata page and of the graph blob, which
# together are the file's size. A file with this start and another size is truncated or padded.
_HEADER = b"\x00\x00\x00\x02\x00\x00\x00\x03"


def _not_a_context_binary(root: Path, path: str, f: FileFacts) -> str | None:
    """Why a file listed as a QNN context binary is not one, or None. Until binaries are read through libQnnSystem
    (issue 12's inspect), this is the marker scan made strict: the QAIRT build string and the soc_type/arch marker
    present, a plausible size, and when the known header is there, the size it declares."""
    if path.endswith(".onnx"):
        return ("is an ONNX file (an EPContext wrapper?) listed as a qnn-context-binary: list it as ort-epcontext "
                "and list its .bin as the context binary")
    if f.size < MIN_CONTEXT_BINARY:
        return (f"has {f.size} bytes, too few for a QNN context binary (at least {MIN_CONTEXT_BINARY}): it is empty, "
                "truncated or another file; recompile it or copy it again")
    missing = [what for what, found in (("QAIRT build string", f.builds), ("soc_type/arch marker", f.context_targets))
               if not found]
    if missing:
        return (f"has no {' and no '.join(missing)}: it is not a QNN context binary (damaged, truncated or another "
                "file); recompile it or copy it again")
    try:
        with (root / path).open("rb") as fh:
            head = fh.read(40)
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    if len(head) == 40 and head.startswith(_HEADER):
        declared = int.from_bytes(head[24:32], "little") + int.from_bytes(head[32:40], "little")
        if declared != f.size:
            return (f"has {f.size} bytes, but its QNN header says {declared}: it is truncated or padded; recompile "
                    "it or copy it again")
    return None


def _min_runtime(qairt: Qairt) -> tuple[str, list[Problem]]:
    """The oldest runtime the bundle's binaries need: what their QAIRT needs, or the manifest's min_runtime when it
    is later. A min_runtime below what the QAIRT needs is a problem: the app trusts it to choose the NPU."""
    need = compat.min_runtime_for_qairt(qairt.version)
    stated = qairt.min_runtime
    if stated is None or compat.satisfies(stated, need):
        return stated or need, []
    return need, [Problem(MANIFEST, f"qairt/min_runtime {stated} is older than {need}, the oldest runtime that loads "
                                    f"QAIRT {qairt.version} context binaries: the app would trust a runtime that "
                                    "cannot load them; rebuild the bundle")]


def _context_problems(root: Path, info: ContextInfo, artifact: BundleFile, target: Target, signatures: Signatures,
                      min_runtime: str) -> list[str]:
    """A binary read by libQnnSystem: its SoC and arch, its graphs (found by the QNN graph name each graph's
    EPContext wrapper runs), their signatures, and the runtime its blob needs."""
    soc = socs.find(target.soc)
    wrappers = {g: next((root / x.path for x in target.artifacts if x.format == FileFormat.ORT_EPCONTEXT
                         and x.graph == g), None) for g in artifact.served}
    problems = contextcheck.graph_problems(info, wrappers, signatures)
    problems += contextcheck.target_problems(info, soc)
    if (why := contextcheck.runtime_problem(info, min_runtime)) is not None:
        problems.append(why)
    return problems


def _epcontext_problems(root: Path, path: str, listed: set[str], binary: str | None) -> list[Problem]:
    """An EPContext wrapper must load, by a UTF-8 name relative to itself, the context binary listed for its graph
    in its target (`binary`)."""
    try:
        refs = epcontext.context_refs(root / path)
    except QnnDeployError as e:
        return [Problem(path, _in_bundle(e, root, path))]
    except UnicodeDecodeError:
        return [Problem(path, "names its context binary in ep_cache_context with bytes that are not UTF-8: ONNX "
                              "Runtime cannot open it on the phone; re-export the wrapper")]
    if not refs:
        return [Problem(path, "has no EPContext node that loads a context binary of the bundle")]
    folder = path.rsplit("/", 1)[0]
    problems = []
    for ref in refs:
        if f"{folder}/{ref}" not in listed:
            problems.append(Problem(path, f"loads its context binary from {ref!r}, which is not in the bundle beside "
                                          "it: ONNX Runtime would fail on the phone"))
        elif f"{folder}/{ref}" != binary:
            want = f"'{binary.rsplit('/', 1)[-1]}'" if binary else "none (its graph has no context binary here)"
            problems.append(Problem(path, f"loads {ref!r}, but its graph's context binary in this target is {want}: "
                                          "ONNX Runtime would load the wrong file"))
    return problems


def _version_problems(path: str, f: FileFacts, qairt: Qairt) -> list[Problem]:
    other = sorted(b for b in f.builds if build_version(b) != qairt.version
                   or (qairt.build is not None and b != qairt.build))
    if not other:
        return []
    want = qairt.build or qairt.version
    return [Problem(path, f"was built with QAIRT {', '.join(other)}, the bundle is QAIRT {want}: "
                          "compile and runtime libraries must come from one QAIRT version")]


def _library_problems(lib: BundleFile, f: FileFacts | None, root: Path, qairt: Qairt) -> list[Problem]:
    path = lib.path
    name = path.rsplit("/", 1)[-1]
    problems: list[Problem] = []

    def add(msg: str) -> None:
        problems.append(Problem(path, msg))

    if not path.startswith(f"lib/{lib.abi}/"):
        add(f"an {lib.abi} library must live in lib/{lib.abi}/")
    if f is None:
        return problems
    try:
        info = elf.read_elf(root / path)
    except (elf.NotElf, OSError) as e:
        add(f"is not a usable library: {e}")
        return problems
    if lib.role == LibRole.SKEL:
        if (info.bits, info.machine) != (32, elf.EM_QDSP6):
            add(f"a Skel library must be ELF32 Hexagon (e_machine {elf.EM_QDSP6}), "
                f"this is ELF{info.bits} e_machine {info.machine}")
        else:
            if info.hexagon_arch != lib.dsp_arch:
                add(f"is a Hexagon {info.hexagon_arch} library, the manifest says {lib.dsp_arch}")
            if lib.abi != f"hexagon-{info.hexagon_arch}":
                add(f"is a Hexagon {info.hexagon_arch} library in the {lib.abi} folder")
            if (info.min_load_align or 0) < elf.MIN_ANDROID_ALIGN:  # the app packs it in lib/arm64-v8a/
                add(f"PT_LOAD alignment is {info.min_load_align}: the app packs Skels in lib/arm64-v8a/, where Google "
                    f"Play's 16 KB check needs >= {elf.MIN_ANDROID_ALIGN} (bundle build --align-16k raises it)")
        problems += _version_problems(path, f, qairt)
    else:
        if (info.bits, info.machine) != (64, elf.EM_AARCH64):
            add(f"an Android library must be ELF64 AArch64 (e_machine {elf.EM_AARCH64}), "
                f"this is ELF{info.bits} e_machine {info.machine}")
        elif (info.min_load_align or 0) < elf.MIN_ANDROID_ALIGN:
            add(f"PT_LOAD alignment is {info.min_load_align}, Android 15+ needs >= {elf.MIN_ANDROID_ALIGN} "
                "(link with -Wl,-z,max-page-size=16384)")
        arch = lib.dsp_arch
        if lib.role == LibRole.STUB and (arch is None or name != qnn_libraries(arch)[2]):
            add(f"a Stub library's name must be libQnnHtpV<arch>Stub.so matching its dsp_arch ({arch})")
    return problems


def _runtime_completeness(target: Target, libs: tuple[BundleFile, ...]) -> list[Problem]:
    arch = target.dsp_arch
    have = {(lib.role, lib.dsp_arch or arch) for lib in libs}
    roles = ("htp", "system", "stub", "skel")
    missing = [name for role, name in zip(roles, qnn_libraries(arch), strict=True) if (role, arch) not in have]
    if not missing:
        return []
    return [Problem(MANIFEST, f"target {target.soc} ({arch}) needs {', '.join(missing)} in the bundle's runtime")]


def _evidence_warnings(manifest: Manifest) -> list[Problem]:
    """A graph judged on other inputs on some targets than on others (real files on one SoC, random values on the
    rest): its verdicts do not rest on the same evidence, and the bundle says so."""
    found = []
    for graph in (g.name for g in manifest.graphs):
        said: dict[str, list[str]] = {}
        for t in manifest.targets:
            inputs = t.validations.get(graph, {}).get("inputs")
            if isinstance(inputs, str):
                said.setdefault(inputs, []).append(t.soc)
        if len(said) > 1:
            found.append(Problem(MANIFEST, f"graph '{graph}' was judged on different inputs per target ("
                                           + "; ".join(f"{', '.join(soc)}: {what}" for what, soc in said.items())
                                           + "): validate every target with the same --inputs"))
    return found


def _load_warnings(manifest: Manifest) -> list[Problem]:
    """A context binary larger than one part's load budget on its arch (data/load_budget.json): not wrong, but it may
    fail to load on the phone (err 1002); the budget is a sourced figure, not a measured limit."""
    found = []
    for t in manifest.targets:
        with contextlib.suppress(QnnDeployError, ValueError):  # an arch the catalog does not know: said elsewhere
            budget = loadplan.budget_for(t.dsp_arch)
            found += [Problem(a.path, f"{a.size / 1e6:,.0f} MB, above the {budget.bytes / 1e6:,.0f} MB one part is "
                                      f"planned to load on {budget.arch} ({budget.status.value}: {budget.label}): "
                                      "it may fail to load (err 1002); cut it into more parts (qnndeploy check "
                                      "says how many)")
                      for a in t.artifacts if a.format == FileFormat.QNN_CONTEXT_BINARY and a.size > budget.bytes]
    return found


def check_warnings(manifest: Manifest, facts: dict[str, FileFacts], contexts: Contexts | None = None) -> list[Problem]:
    """What cannot be confirmed, without being wrong: failed graphs shipped with a reason (bundle --accept), Skel
    libraries whose build string was not found (a context binary without its markers is a problem: see
    _not_a_context_binary), an external runtime in no validated set; and what will cost on the phone: a graph compiled
    for more VTCM than its SoC has."""
    warnings = [Problem(MANIFEST, f"target {a['soc']}: graph '{a['graph']}' FAILED validation ({a['failure']}), "
                                  f"accepted: {a['reason']}; the app uses the {a['runs_on'].upper()} on {a['soc']}")
                for a in accepted_failures(manifest)]
    warnings += [Problem(MANIFEST, f"target {t.soc}: graph '{g}' was judged with a looser threshold "
                                   f"({thresholds_text(s.get('thresholds') or {})}): {s['threshold_reason']}")
                 for t in manifest.targets for g, s in t.validations.items()
                 if isinstance(s.get("threshold_reason"), str)]
    warnings += _evidence_warnings(manifest)
    warnings += _load_warnings(manifest)
    for t in manifest.targets:
        for a in t.artifacts:
            info = (contexts or {}).get(a.path)
            if info is not None and not isinstance(info, str):
                with contextlib.suppress(QnnDeployError):  # an unknown SoC is a problem of its own
                    soc = socs.find(t.soc)
                    warnings += [Problem(a.path, w) for w in contextcheck.resource_warnings(
                        info, soc, a.graph or ",".join(a.graphs))]
    if manifest.licences is None and manifest.format_number < LICENCES_SINCE:
        warnings.append(Problem(MANIFEST, f"bundle format {manifest.format_number} has no licence manifest: where its "
                                          "Qualcomm files came from and under which terms is not recorded; build it "
                                          f"again with this qnndeploy (format {FORMAT_VERSION})"))
    rt = manifest.runtime
    for lib in rt.libs if rt.bundled else ():
        f = facts.get(lib.path)
        if f and lib.role == LibRole.SKEL and not f.builds:
            warnings.append(Problem(lib.path, "no QAIRT build string found: its version cannot be confirmed"))
    pin = rt.maven.rsplit(":", 1)[1] if rt.mode == RuntimeMode.EXTERNAL else ""
    if rt.mode == RuntimeMode.EXTERNAL and rt.maven.startswith(MAVEN_RUNTIME + ":") and compat.is_release(pin):
        warnings += [Problem(MANIFEST, w) for w in compat.pin_warnings(pin, manifest.qairt.version)]
    return warnings
