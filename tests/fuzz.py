"""Generators of hostile and broken inputs for the fuzz tier (tests/test_fuzz.py): each yields cases that set up
their files in a fresh folder and run one command on them. No stored blobs: every input is made here, from a small
valid bundle and small valid models, by one mutation each.

A case's invariant: the command ends by itself in under 10 s, with a documented exit code (never a signal), no
traceback, nothing left in its TMPDIR or HOME, and, when `broken` is set, not with exit 0 (a broken bundle never
verifies clean, a bad input is never accepted).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from qnndeploy.formats import FORMAT_VERSION

Setup = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # the qnndeploy command line, run in the case's folder
    setup: Setup
    broken: bool = True  # exit 0 would be wrong


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


def manifest_cases(good: Path) -> Iterator[Case]:
    """Every leaf of a valid manifest set to values of the wrong kind; the manifest is rewritten as it is."""
    manifest = json.loads((good / "manifest.json").read_text())
    copy_to = _copy_bundle(good)
    for path, value in _walk(manifest):
        if not path or isinstance(value, (dict, list)) or path[-1] in ("created_by", "license", "commit", "model"):
            continue  # free text and containers: mutations of those are not errors
        if path[0] == "graphs" or (path[0] == "targets" and "validation" in path):
            continue  # signatures are checked against the files; validation summaries are informative
        candidates = BAD_NUMBERS if isinstance(value, (int, float)) and not isinstance(value, bool) else BAD_STRINGS
        for bad in candidates:
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
    """Every file of a valid bundle flipped, truncated, grown, removed, or replaced by a link or a FIFO."""
    copy_to = _copy_bundle(good)
    files = sorted(p.relative_to(good).as_posix() for p in good.rglob("*") if p.is_file() and p.name != "manifest.json")

    def mutations(path: Path) -> dict[str, Callable[[], None]]:
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
            for _ in range(2048):  # 2 GiB of zeros, a few MB compressed
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
    broken.update({f"truncated-{k}": (lambda k=k: good[:k]) for k in (1, 2, 5, 10, 17, 30, 45, len(good) - 1)})
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


def all_cases(good_bundle: Path) -> list[Case]:
    return [*manifest_cases(good_bundle), *raw_manifest_cases(good_bundle), *file_cases(good_bundle),
            *archive_cases(good_bundle), *model_cases(), *option_cases()]
