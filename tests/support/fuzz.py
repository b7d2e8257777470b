"""Generators of hostile and broken inputs for the fuzz tier (tests/cli/test_fuzz.py): each yields cases that set up
their files in a fresh folder and run one command on them. No stored blobs: every input is made here, from a small
valid bundle and small valid models, by one mutation each.

A case's invariant: the command ends by itself in under 10 s, with a documented exit code (never a signal), no
traceback, nothing left in its TMPDIR or HOME, and, when `broken` is set, not with exit 0 (a broken bundle never
verifies clean, a bad input is never accepted).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from qnndeploy.base.names import FORMAT_VERSION

Setup = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # the qnndeploy command line, run in the case's folder
    setup: Setup
    broken: bool = True  # exit 0 would be wrong
    unchanged: bool = False  # the command must leave the case's folder exactly as setup made it (nothing written)


# --- bundles ------------------------------------------------------------------------------------------

BAD_STRINGS = ["", "x\n", "a\x00b", "\u202eevil", "../x", "/etc/passwd", "x" * 5000, "\udc80"]
BAD_NUMBERS: list[object] = ["1", 1.5, -1, True, None, 10**30]


def _walk(value: object, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, (*path, i))


def _set(data: object, path: tuple, value: object) -> None:
    for key in path[:-1]:
        data = data[key]  # type: ignore[index]
    data[path[-1]] = value  # type: ignore[index]


def _copy_bundle(good: Path) -> Callable[[Path], Path]:
    def copy_to(folder: Path) -> Path:
        dest = folder / good.name
        shutil.copytree(good, dest, symlinks=True)
        return dest
    return copy_to


PER_LEAF = 1  # bad values tried on each manifest leaf, in rotation: every bad value still reaches many leaves


def manifest_cases(good: Path) -> Iterator[Case]:
    """Every leaf of a valid manifest set to values of the wrong kind; the manifest is rewritten as it is. Each
    leaf gets PER_LEAF of the bad values of its kind, the next ones in turn (leaf i: values i*PER_LEAF, ...), so
    every bad value is tried on about PER_LEAF/len(values) of the leaves: all values on all leaves would be some
    500 processes that take the same refusal path (the schema) again and again."""
    manifest = json.loads((good / "manifest.json").read_text())
    copy_to = _copy_bundle(good)
    turn = {id(BAD_NUMBERS): 0, id(BAD_STRINGS): 0}
    for path, value in _walk(manifest):
        if not path or isinstance(value, (dict, list)) or path[-1] in ("created_by", "license", "commit", "model",
                                                                                 "found_in"):
            continue  # free text and containers: mutations of those are not errors
        if path[0] == "graphs" or (path[0] == "targets" and "validation" in path):
            continue  # signatures are checked against the files; validation summaries are informative
        candidates = BAD_NUMBERS if isinstance(value, (int, float)) and not isinstance(value, bool) else BAD_STRINGS
        start = turn[id(candidates)]
        turn[id(candidates)] += PER_LEAF
        for bad in (candidates[(start + k) % len(candidates)] for k in range(PER_LEAF)):
            if bad == value:
                continue

            def setup(folder: Path, path: tuple = path, bad: object = bad) -> None:
                dest = copy_to(folder)
                data = copy.deepcopy(manifest)
                _set(data, path, bad)
                (dest / "manifest.json").write_text(json.dumps(data), encoding="utf-8", errors="surrogatepass")

            label = "/".join(str(p) for p in path)
            yield Case(f"manifest {label}={bad!r:.20}", ("bundle", "verify", good.name, "--json"), setup)


def raw_manifest_cases(good: Path) -> Iterator[Case]:
    """Manifests that are not JSON a tool would write: deep, huge, binary, empty."""
    copy_to = _copy_bundle(good)
    manifest, version = (good / "manifest.json").read_text(), f'"format_version": {FORMAT_VERSION}'
    assert version in manifest  # the cases below change it: a manifest without it would test nothing
    texts = {
        "deep": "[" * 100_000 + "]" * 100_000,
        "huge-int": (good / "manifest.json").read_text().replace('"size": ', '"size": 1' + "0" * 5000, 1),
        "empty": "",
        "binary": "\x00\xff\xfe" * 100,
        "whitespace": " " * 5_000_000,
        "array": "[]",
        "format-1.0": manifest.replace(version, '"format_version": 1.0'),
        "format-true": manifest.replace(version, '"format_version": true'),
    }
    for label, text in texts.items():
        def setup(folder: Path, text: str = text) -> None:
            (copy_to(folder) / "manifest.json").write_text(text, encoding="utf-8", errors="surrogateescape")
        yield Case(f"raw manifest {label}", ("bundle", "verify", good.name), setup)


def file_cases(good: Path) -> Iterator[Case]:
    """Every file of a valid bundle flipped, truncated, grown, removed, or replaced by a link or a FIFO: the CPU
    files and the first target's; the other targets' files are of the same kinds, checked by the same code."""
    copy_to = _copy_bundle(good)
    first = min(p.name for p in (good / "npu").iterdir())
    every = (p.relative_to(good).as_posix() for p in good.rglob("*") if p.is_file() and p.name != "manifest.json")
    files = sorted(rel for rel in every if not rel.startswith("npu/") or rel.startswith(f"npu/{first}/"))

    def mutations(path: Path) -> dict[str, Callable[[], object]]:
        def flip() -> None:
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))

        def symlink() -> None:
            path.unlink()
            path.symlink_to("/dev/zero")

        def fifo() -> None:
            path.unlink()
            os.mkfifo(path)

        return {"flip": flip, "empty": lambda: path.write_bytes(b""),
                "half": lambda: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
                "grow": lambda: path.write_bytes(path.read_bytes() + b"\0"), "gone": path.unlink,
                "symlink": symlink, "fifo": fifo}

    for rel in files:
        for label in ("flip", "empty", "half", "grow", "gone", "symlink", "fifo"):
            def setup(folder: Path, rel: str = rel, label: str = label) -> None:
                mutations(copy_to(folder) / rel)[label]()
            yield Case(f"file {rel} {label}", ("bundle", "verify", good.name), setup)
    # an unlisted file, and the EPContext wrapper copied over the CPU model
    def extra(folder: Path) -> None:
        (copy_to(folder) / "cpu" / "stray.onnx").write_bytes(b"x")
    yield Case("file unlisted extra", ("bundle", "verify", good.name), extra)


def archive_cases(good: Path) -> Iterator[Case]:
    """Archives of the bundle with one hostile member, and paths that are no archive."""
    def tar_with(extra: Callable[[tarfile.TarFile], None], name: str = "b.tar.gz") -> Setup:
        def setup(folder: Path) -> None:
            with tarfile.open(folder / name, "w:gz") as t:
                t.add(good, arcname=good.name)
                extra(t)
        return setup

    def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Callable[[tarfile.TarFile], None]:
        def add(t: tarfile.TarFile) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            t.addfile(info)
        return add

    hostile = {"dotdot": member("../evil"), "absolute": member("/tmp/evil"),
               "symlink": member(f"{good.name}/cpu/link", tarfile.SYMTYPE, "/etc/passwd"),
               "hardlink": member(f"{good.name}/cpu/hard", tarfile.LNKTYPE, "/etc/passwd"),
               "device": member(f"{good.name}/cpu/dev", tarfile.CHRTYPE),
               "fifo": member(f"{good.name}/cpu/fifo", tarfile.FIFOTYPE),
               "deep": member(good.name + "/d" * 1100)}
    for label, extra in hostile.items():
        yield Case(f"tar {label}", ("bundle", "verify", "b.tar.gz"), tar_with(extra))

    def zipped(extra: Callable[[zipfile.ZipFile], None]) -> Setup:
        def setup(folder: Path) -> None:
            with zipfile.ZipFile(folder / "b.zip", "w", zipfile.ZIP_DEFLATED) as z:
                for p in sorted(good.rglob("*")):
                    if p.is_file():
                        z.write(p, f"{good.name}/{p.relative_to(good).as_posix()}")
                extra(z)
        return setup

    def bomb(z: zipfile.ZipFile) -> None:
        with z.open(f"{good.name}/cpu/bomb.bin", "w", force_zip64=True) as f:
            block = b"\0" * (1 << 20)
            for _ in range(512):  # 512 MiB of zeros (over MEMORY_LIMIT_MB if read into memory), 0.5 MB compressed
                f.write(block)

    def encrypted(z: zipfile.ZipFile) -> None:
        info = zipfile.ZipInfo(f"{good.name}/cpu/secret.bin")
        info.flag_bits |= 0x1
        z.writestr(info, b"x" * 64)

    def many(z: zipfile.ZipFile) -> None:
        for i in range(20_000):
            z.writestr(f"{good.name}/many/{i}", b"")

    hostile_zip = {"dotdot": lambda z: z.writestr("../evil", b"x"), "absolute": lambda z: z.writestr("/evil", b"x"),
                   "bomb": bomb, "encrypted": encrypted, "many": many}
    for label, extra in hostile_zip.items():
        yield Case(f"zip {label}", ("bundle", "verify", "b.zip"), zipped(extra))

    def not_archive(kind: str) -> Setup:
        def setup(folder: Path) -> None:
            target = folder / "x.zip"
            if kind == "fifo":
                os.mkfifo(target)
            elif kind == "urandom":
                target.symlink_to("/dev/urandom")
            elif kind == "random":
                target.write_bytes(os.urandom(4096))
            else:
                target.write_bytes(b"")
        return setup

    for kind in ("fifo", "urandom", "random", "empty"):
        yield Case(f"not an archive: {kind}", ("bundle", "verify", "x.zip"), not_archive(kind))


# --- models -------------------------------------------------------------------------------------------

def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _relu(shape: list) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])


def _writes(make: Callable[[], bytes | onnx.ModelProto], name: str = "m.onnx") -> Setup:
    def setup(folder: Path) -> None:
        content = make()
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.SerializeToString())
    return setup


def model_cases() -> Iterator[Case]:
    """check and prepare on models that are damaged, absurd or hostile."""
    good = _relu([1, 16]).SerializeToString()
    broken: dict[str, Callable[[], bytes | onnx.ModelProto]] = {
        "empty": lambda: b"", "random": lambda: os.urandom(2048), "json": lambda: b'{"graph": {}}',
        "huge-dims": lambda: _relu([1 << 40, 16]), "neg-dims": lambda: _relu([-5, 16]),
        "elem-type-72": lambda: _with_elem_type(72),
        "constant-of-shape-2^62": lambda: _constant_of_shape(1 << 62),
        "non-utf8-op": _non_utf8_op,
        "external-outside": lambda: _external_location("../../etc/passwd"),
        "external-absolute": lambda: _external_location("/etc/passwd"),
        "external-long": lambda: _external_location("x" * 5000),
    }

    def truncated(k: int) -> Callable[[], bytes]:
        return lambda: good[:k]

    broken.update({f"truncated-{k}": truncated(k) for k in (1, 2, 5, 10, 17, 30, 45, len(good) - 1)})
    for label, make in broken.items():
        for command in (("check", "m.onnx", "--no-measure"), ("check", "m.onnx"),
                        ("prepare", "m.onnx", "-o", "out/m.npu.onnx")):
            yield Case(f"{command[0]} {label} {' '.join(command[2:3])}".rstrip(), command, _writes(make))
    yield Case("check a folder", ("check", "."), lambda folder: None)
    yield Case("check /dev/null", ("check", "/dev/null"), lambda folder: None)


def _with_elem_type(elem: int) -> onnx.ModelProto:
    model = _relu([1, 16])
    model.graph.input[0].type.tensor_type.elem_type = elem
    return model


def _constant_of_shape(n: int) -> onnx.ModelProto:
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [n])
    return _model([helper.make_node("ConstantOfShape", ["shape"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [shape])


def _non_utf8_op() -> bytes:
    data = _relu([1, 16]).SerializeToString()
    return data.replace(b"Relu", b"R\xffl\xfe", 1)


def _external_location(location: str) -> onnx.ModelProto:
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                   [helper.make_tensor("w", TensorProto.FLOAT, [1, 4], [1.0, 2.0, 3.0, 4.0])])
    w = model.graph.initializer[0]
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    w.external_data.add(key="length", value="16")
    return model


BAD_SHAPES = ["x=²,16", "x=1e11,16", "x=-1,16", "x=0,16", "x=", "x=1,,16", "x=" + "1" * 40 + ",16",
              "x=100000000000,16", "x=1x16x", "=1,16", "nope=1,16", "x=1,16,3",
              "x=\u0661,16"]  # ARABIC-INDIC DIGIT ONE: int() takes it, a --shape must not
BAD_OPTIONS = [("--freeze", "x=1"), ("--freeze", "x="), ("--tolerance", "nan"), ("--tolerance", "-1"),
               ("--inputs", "/dev/null"), ("--inputs", "missing")]


def option_cases() -> Iterator[Case]:
    """prepare with option values a person could mistype, on a model with a dynamic batch."""
    setup = _writes(lambda: _relu(["N", 16]))
    for shape in BAD_SHAPES:
        yield Case(f"prepare --shape {shape[:24]}", ("prepare", "m.onnx", "-o", "o.onnx", "--shape", shape), setup)
    for option, value in BAD_OPTIONS:
        yield Case(f"prepare {option} {value}", ("prepare", "m.onnx", "-o", "o.onnx", "--shape", "x=1,16", option,
                                                 value), setup)
    for soc in ("", "43x", "sm 8750", "\u202eSM8750", "SM8750 X"):
        yield Case(f"check --soc {soc!r}", ("check", "m.onnx", "--soc", soc), _writes(lambda: _relu([1, 16])))


# --- outputs ------------------------------------------------------------------------------------------

def output_cases(good: Path) -> Iterator[Case]:
    """package play, bundle build and demo told to write where they must not or cannot: into or over the bundle they
    read, through a symlink, under a file, with names over the file system's limits. Each works on its own copy of
    the bundle (b/NAME) and must refuse in one line, leaving the case's folder as it was."""
    copy_to = _copy_bundle(good)
    name = good.name
    bundle = f"b/{name}"
    manifest = json.loads((good / "manifest.json").read_text())

    def with_bundle(*extras: Callable[[Path], None] | None) -> Setup:
        def setup(folder: Path) -> None:
            (folder / "b").mkdir()
            copy_to(folder / "b")
            for extra in extras:
                if extra is not None:
                    extra(folder)
        return setup

    def link(name: str, target: str, make: str | None = None) -> Callable[[Path], None]:
        def extra(folder: Path) -> None:
            if make:
                (folder / make).mkdir(parents=True, exist_ok=True)
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).symlink_to(target)
        return extra

    def marker(folder: Path) -> None:  # b/ looks like an earlier play output: --force may replace it
        (folder / "b" / ".qnndeploy-play").write_text("x\n")

    def file_at(name: str) -> Callable[[Path], None]:
        def extra(folder: Path) -> None:
            (folder / name).write_text("a file, not a folder\n")
        return extra

    long_paths = {"name-256": "n" * 256, "name-over-staging-room": "n" * 240,
                  "segment-300": "s" * 300 + "/out", "path-5000": "/".join(["p" * 200] * 25),
                  "under-a-file": f"{bundle}/manifest.json/out", "proc": "/proc/self/out", "dev-null": "/dev/null"}
    play = {
        "inside the bundle": (f"{bundle}/play", None), "the bundle itself": (bundle, None),
        "holding the bundle --force": ("b", marker),
        "symlink to an empty folder": ("link", link("link", "empty", "empty")),
        "symlink to nothing": ("link", link("link", "nowhere")),
        "through a link into the bundle": ("into/play", link("into", f"{bundle}/npu")),
        **{k: (v, None) for k, v in long_paths.items()},
    }
    for label, (out, extra) in play.items():
        yield Case(f"play -o {label}", ("package", "play", bundle, "-o", out, "--force"), with_bundle(extra),
                   unchanged=True)
    yield Case("play --pack of 300 characters", ("package", "play", bundle, "-o", "out", "--pack", "p" * 300),
               with_bundle(), unchanged=True)

    cpu = [f"--cpu={a['graph']}={bundle}/{a['path']}" for a in manifest["cpu"] if a["format"] == "onnx"]
    npu = [f"--npu={t['soc']}:{a['graph']}={bundle}/{a['path']}" for t in manifest["targets"] for a in t["artifacts"]]
    base = ("bundle", "build", "--name", manifest["name"], "--version", manifest["version"], *cpu, *npu)
    build = {
        "holding its inputs --force": (("-o", "b", "--force"), None),
        "its name a symlink --force": (("-o", "out", "--force"), link(f"out/{name}", "../empty", "empty")),
        "archive name a symlink --force": (("-o", "out", "--archive", "zip", "--force"),
                                           (link(f"out/{name}.zip", "../victim", "out"), file_at("victim"))),
        **{k: (("-o", v), None) for k, v in long_paths.items() if k not in ("name-256", "name-over-staging-room")},
    }
    for label, (opts, setups) in build.items():
        extras = setups if isinstance(setups, tuple) else (setups,)
        yield Case(f"bundle build -o {label}", (*base, *opts), with_bundle(*extras), unchanged=True)

    for label, out in {"symlink to an empty folder": "link", **long_paths}.items():
        extra = link("link", "empty", "empty") if out == "link" else None
        yield Case(f"demo -o {label}", ("demo", "-o", out), with_bundle(extra), unchanged=True)


def all_cases(good_bundle: Path) -> list[Case]:
    return [*manifest_cases(good_bundle), *raw_manifest_cases(good_bundle), *file_cases(good_bundle),
            *archive_cases(good_bundle), *model_cases(), *option_cases(), *output_cases(good_bundle)]


# --- write failures (tests/base/test_write_failures.py runs them, each in a process of its own) ------------------

# The one-line error of each technique names the cause in these words (fileio.CAUSES, fileio.check_writable).
CAUSE_WORDS = {"full": "no space left on the device", "read-only": "read-only file system",
               "fsize": "file size limit", "denied": "permission denied"}


@dataclass(frozen=True)
class WriteCase:
    """One command whose output place cannot take its output. `args` runs in the case's folder, MNT standing for
    the place: a tmpfs of its own (`mount`) for "full" and "read-only". `fill`: what is in the place first, "earlier"
    (what a successful run of the same command left there: --force must keep it when it fails) or "zeros" (a file
    filling the place up). Unless the command succeeds, which only a case that `fits` may (and then `complete`, a
    path under MNT, must exist), it must leave the place as it found it."""

    name: str
    technique: str  # full (ENOSPC), read-only (EROFS), fsize (EFBIG), denied (EACCES)
    command: str  # play, bundle, demo, diagnose
    args: tuple[str, ...]
    mount: str | None = None  # tmpfs options, e.g. size=64k
    fill: str | None = None
    remount_ro: bool = False  # read-only after the fill
    fsize: int | None = None  # RLIMIT_FSIZE of the command
    fits: bool = False
    complete: str = ""


def _kib(n: int) -> int:
    return max(4, -(-n // 4096) * 4)  # whole pages, at least one


def write_commands(demo: Path) -> dict[str, tuple[tuple[str, ...], str]]:
    """command -> (its command line writing under MNT, a path a complete output has), reading the `qnndeploy demo`
    output `demo` (its bundle, build folder and job folder)."""
    bundle = next((demo / "bundle").iterdir())
    return {
        "play": (("package", "play", str(bundle), "-o", "MNT/a/b/play", "--force"), "MNT/a/b/play/play.json"),
        "bundle": (("bundle", "build", "--name", "kws", "--version", "1.0.0", "--from-build", str(demo / "build"),
                    "-o", "MNT/a/out", "--archive", "zip", "--force"), "MNT/a/out/kws-1.0.0.zip"),
        "demo": (("demo", "-o", "MNT/a/demo", "--force"), "MNT/a/demo/bundle/kws-demo-1.0.0/manifest.json"),
        "diagnose": (("diagnose", str(demo / "build" / "kws_demo" / "SM8750"), "--plot", "MNT/curve.png"),
                     "MNT/curve.png"),
    }


def write_cases(demo: Path, measured: dict[str, tuple[int, int]]) -> Iterator[WriteCase]:
    """Each command's output place made unwritable each way: a full tmpfs swept from one page to just under what the
    output needs (measured: command -> (its bytes in whole pages, its largest file)) and one with room; the same
    over an earlier output (--force); read-only, new and over an earlier output; a file size limit of 1 byte and
    of half the largest file; a folder the command may not write in. A run never needs less than its finished
    output, so every share under 1 must fail."""
    # demo (seconds per run): 0.1 fills up in prepare, 0.45 in compile (whose worker dies: demo tells the disk);
    # its bundle stage is bundle build's code, swept above
    sweeps = {"play": (0.0, 0.5, 0.9), "bundle": (0.0, 0.5, 0.9), "demo": (0.1, 0.45)}
    for command, (args, complete) in write_commands(demo).items():
        need, largest = measured.get(command, (0, 0))
        cases: list[tuple[str, str, dict[str, object]]] = []  # (label, technique, options)
        if command == "diagnose":  # the plot is written after the run: a full place, and the checks before it
            cases.append(("full", "full", {"mount": "size=4k", "fill": "zeros"}))
        for share in sweeps.get(command, ()):
            size = _kib(int(need * share))
            cases.append((f"full at {size} KiB", "full", {"mount": f"size={size}k"}))
        if command in ("play", "bundle"):  # the sweep is not empty: with room, the same run succeeds
            cases.append(("with room", "full", {"mount": f"size={_kib(2 * need)}k", "fits": True}))
        if command in ("play", "bundle"):
            size = _kib(need + int(need * 0.7))  # the earlier output takes `need` of the place
            cases.append((f"--force over an earlier output, full at {size} KiB", "full",
                          {"mount": f"size={size}k", "fill": "earlier"}))
            cases.append(("--force over an earlier output, read-only", "read-only",
                          {"mount": f"size={_kib(3 * need)}k", "fill": "earlier", "remount_ro": True}))
        cases.append(("read-only", "read-only", {"mount": "size=64k", "remount_ro": True}))
        # 1 byte: the first write fails; then half the largest file. demo and diagnose: 1 byte only (diagnose
        # writes its probe models before the plot; demo's first file is bigger than any limit that lets it start)
        limits = [1] if command in ("demo", "diagnose") else [1, max(largest // 2, 1)]
        cases += [(f"file size limit {limit}", "fsize", {"fsize": limit}) for limit in limits]
        cases.append(("in a folder it may not write", "denied", {}))
        for label, technique, options in cases:
            yield WriteCase(f"{command} {label}", technique, command, args, complete=complete,
                            **options)  # type: ignore[arg-type]


# --- running a case as a user would, under the invariant ------------------------------------------------------

DOCUMENTED_EXITS = {0, 1, 2, 3, 10, 11}
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 300
# Runs the command as its child and writes the child's peak RSS (kB): a process forked straight from this test
# process would count the test's own memory in its peak. A signal that ends the child ends this launcher too. It
# runs with -S: it needs nothing from site-packages, and skipping them saves 50 ms of each case.
MEASURE = """import os, resource, signal, subprocess, sys
code = subprocess.run(sys.argv[2:], check=False).returncode
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def run_case(case: Case, folder: Path) -> str | None:
    """None when the case keeps the invariant, else what broke it."""
    home, tmp = folder / "home", folder / "tmp"
    for d in (home, tmp):
        d.mkdir(parents=True)
    case.setup(folder)
    before = snapshot(folder) if case.unchanged else None
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache")}
    with (folder / "stdout").open("w") as out, (folder / "stderr").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-S", "-c", MEASURE, str(folder / "rss"), sys.executable, "-m",
                                 "qnndeploy", *case.args], cwd=folder, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"hangs (over {TIME_LIMIT_S:.0f} s)"
    stderr = (folder / "stderr").read_text(errors="replace")
    peak_mb = int((folder / "rss").read_text()) / 1024
    for name in ("stdout", "stderr", "rss"):
        (folder / name).unlink()
    if peak_mb > MEMORY_LIMIT_MB:
        return f"used {peak_mb:.0f} MB"
    done = subprocess.CompletedProcess(case.args, proc.returncode, "", stderr)
    if done.returncode < 0:
        return f"killed by signal {-done.returncode}: {done.stderr[-300:]}"
    if "Traceback" in done.stderr:
        return f"traceback: {done.stderr.strip().splitlines()[-1]}"
    if done.returncode not in DOCUMENTED_EXITS:
        return f"undocumented exit {done.returncode}"
    if case.broken and done.returncode == 0:
        return "accepted (exit 0)"
    if done.returncode == 2 and len(done.stderr.strip().splitlines()) != 1:
        return f"bad input but not a one-line error: {done.stderr[:300]!r}"
    left = [p.relative_to(folder).as_posix() for d in (home, tmp) for p in d.rglob("*")]
    if left:
        return f"left files behind: {left[:5]}"
    if before is not None and snapshot(folder) != before:
        after = snapshot(folder)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        return f"wrote or changed files: {changed[:5]}"
    return None


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under a case's folder: a file's sha256, 'dir', or a symlink's target (never followed)."""
    out = {}
    for top, dirs, files in os.walk(folder):  # not into symlinked folders
        for name in dirs + files:
            p = Path(top, name)
            out[p.relative_to(folder).as_posix()] = (f"-> {p.readlink()}" if p.is_symlink() else "dir" if p.is_dir()
                                                     else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


# --- a lying phone: the figures its tools print and its services say ---------------------------------------------
# What `device bench` and `device verify --ort-runner` read from the emulated phone (tests/support/device_emulator)
# when its onnxruntime_perf_test lies: each case a name and the figure lines replaced in the stand-in's output, by the
# line's start. The invariant (tests/device/test_device_lying.py, tests/cli/test_fuzz.py): a documented exit code, no
# traceback, a record that strict JSON parsing accepts, and each lie said in a note rather than recorded.
PERF_LIES: dict[str, dict[str, str]] = {
    "p50 1.2.3 s": {"P50 Latency:": "P50 Latency: 1.2.3 s"},
    "requests 400 digits": {"Total inference requests:": "Total inference requests: " + "9" * 400},
    "requests 5000 digits": {"Total inference requests:": "Total inference requests: " + "9" * 5000},
    "negative latencies": {"P50 Latency:": "P50 Latency: -0.5 s", "Min Latency:": "Min Latency: -1 s",
                           "Average inference time cost total:": "Average inference time cost total: -3 ms"},
    "subnormal average": {"Average inference time cost total:": "Average inference time cost total: 5e-324 ms"},
    "overflowing figures": {"P50 Latency:": "P50 Latency: 1e307 s", "P90 Latency:": "P90 Latency: 1e400 s",
                            "Session creation time cost:": "Session creation time cost: 1e308 s"},
    "nan and inf": {"P99 Latency:": "P99 Latency: nan s", "Max Latency:": "Max Latency: inf s",
                    "First inference time cost:": "First inference time cost: Infinity ms"},
    "wrong units": {"P50 Latency:": "P50 Latency: 12 ms", "Average inference time cost total:":
                    "Average inference time cost total: 0.5 s"},
    "superscript digits": {"Total inference requests:": "Total inference requests: ²³",
                           "P50 Latency:": "P50 Latency: ١٢ s"},
    "5000-digit decimal": {"P50 Latency:": "P50 Latency: 0." + "1" * 5000 + " s"},
}
# dumpsys thermalservice's "Thermal Status: N" line, lying
THERMAL_LIES = {"5000 digits": "9" * 5000, "negative": "-3", "not a number": "1.5", "huge": "99999999999999999999"}


def lying_perf_test(path: Path, real: Path, lines: dict[str, str]) -> Path:
    """An onnxruntime_perf_test for the emulated phone that runs the stand-in `real` and prints its output with
    each line that starts with a key of `lines` replaced by that key's value: a lying tool (shell builtins only)."""
    cases = "".join(f"    {shlex.quote(start)}*) printf '%s\\n' {shlex.quote(text)} ;;\n"
                    for start, text in lines.items())
    path.write_text("#!/bin/sh\n# A LYING onnxruntime_perf_test: the stand-in's output with figure lines replaced\n"
                    f'out=$({shlex.quote(str(real))} "$@" 2>&1); rc=$?\n'
                    "printf '%s\\n' \"$out\" | while IFS= read -r line; do\n  case \"$line\" in\n"
                    f"{cases}    *) printf '%s\\n' \"$line\" ;;\n  esac\ndone\nexit $rc\n")
    path.chmod(0o755)
    return path


def strict_json(text: str) -> object:
    """`text` parsed as strict JSON: NaN, Infinity and -Infinity (which Python's json takes) are refused."""
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def deep_json(levels: int = 100_000) -> str:
    return "[" * levels + "]" * levels
