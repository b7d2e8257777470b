"""Names are data, not code: hostile output-folder names, package names, bundle file names and a hostile current
folder, each case run as a user would (one process, tests/cli/test_fuzz.py's invariant: no traceback, a documented
exit code, nothing left in HOME or TMPDIR), and none may evaluate a template, write a line of code that is not
the template's, change qnndeploy's installed templates, or import a module from the current folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from qnndeploy.scaffold import templates_dir
from tests.support import bundles, fuzz

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.needs_qnn]

PWNED = "PWNED"
FOLDER_NAMES = [
    "glue{{7*7}}", "glue{% raw %}", "{% if true %}x{% endif %}", "{# c #}x", "}}{{", "{{",
    "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
    "{{ lipsum.__globals__['os'].popen('touch PWNED').read() }}",
    "{{ self.__init__.__globals__.__builtins__.open('PWNED','w') }}",
    "x\n}\nthrow new GradleException('injected')\n//", "x\r\ny", "it's \"q\" $HOME ${x} \\ `t`",
    "\u202etxt.kt", "\x1b[2Jclear", "a" * 255, "a" * 256,
]
PACKAGES = ["com.example.kws\n", "kotlin.foo", "java.lang.x", "com.example.fun", "com.{{7*7}}.x", "com.ex ample.x",
            "com.example.x;import", "com.example.\u202ex", "com." + "b" * 300, "", "."]
MARKER_PACKAGES = ("qnndeploy", "onnx", "numpy", "onnxruntime", "jinja2", "click")


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            digest.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("names")
    return bundles.build(root / "bundles", bundles.compile_inputs(root / "inputs", targets=("SM8750",),
                                                                  graphs=("det",)))


def _with_bundle(good: Path):
    def setup(folder: Path) -> None:
        shutil.copytree(good, folder / good.name)
    return setup


def _renamed_npu_file(good: Path, name: str):
    """The bundle with its context binary renamed to `name` (manifest and wrapper follow): the name is all that is
    wrong with it."""
    import onnx

    def setup(folder: Path) -> None:
        dest = folder / good.name
        shutil.copytree(good, dest)
        (dest / "npu/SM8750/det.bin").rename(dest / "npu/SM8750" / name)
        wrapper = onnx.load(str(dest / "npu/SM8750/det_ctx.onnx"))
        for node in wrapper.graph.node:
            for attr in node.attribute:
                if attr.name == "ep_cache_context":
                    attr.s = name.encode()
        onnx.save(wrapper, str(dest / "npu/SM8750/det_ctx.onnx"))
        manifest = json.loads((dest / "manifest.json").read_text())
        for a in manifest["targets"][0]["artifacts"]:
            if a["path"] == "npu/SM8750/det_ctx.onnx":
                data = (dest / a["path"]).read_bytes()
                a["sha256"], a["size"] = hashlib.sha256(data).hexdigest(), len(data)
            elif a["path"] == "npu/SM8750/det.bin":
                a["path"] = f"npu/SM8750/{name}"
        (dest / "manifest.json").write_text(json.dumps(manifest))
    return setup


def _hostile_cwd(inner):
    """The case's folder also holds packages named like qnndeploy's and its dependencies, each of which would
    write PWNED when imported."""
    def setup(folder: Path) -> None:
        inner(folder)
        for name in MARKER_PACKAGES:
            (folder / name).mkdir()
            (folder / name / "__init__.py").write_text(f"open({str(folder / PWNED)!r}, 'w').write({name!r})\n")
    return setup


def cases(good: Path) -> list[fuzz.Case]:
    found = []
    for i, name in enumerate(FOLDER_NAMES):
        found.append(fuzz.Case(f"scaffold -o #{i}", ("scaffold", good.name, "--package", "com.example.x", "-o", name),
                               _with_bundle(good), broken=False))
    for i, package in enumerate(PACKAGES):
        found.append(fuzz.Case(f"scaffold --package #{i}", ("scaffold", good.name, "--package", package, "-o", "g"),
                               _with_bundle(good)))
    for i, name in enumerate(["de\nt.bin", "det\".bin", "det$(id).bin", "de t.bin", "-det.bin", "\u202edet.bin"]):
        found.append(fuzz.Case(f"bundle verify, binary named #{i}", ("bundle", "verify", good.name),
                               _renamed_npu_file(good, name)))
        found.append(fuzz.Case(f"scaffold, binary named #{i}", ("scaffold", good.name, "--package", "com.example.x",
                                                                "-o", "g"), _renamed_npu_file(good, name)))
    return found


HOSTILE_CWD_COMMANDS = [("bundle", "verify", "B"), ("inspect", "B"), ("scaffold", "B", "--package", "com.example.x",
                                                                       "-o", "g"), ("socs", "SM8750"), ("doctor",)]


@pytest.mark.parametrize("command", HOSTILE_CWD_COMMANDS, ids=[c[0] for c in HOSTILE_CWD_COMMANDS])
def test_a_hostile_current_folder_is_never_imported(good, tmp_path, command):
    """The installed `qnndeploy` run where a qnndeploy/, onnx/, numpy/… folder lies: neither it nor any child it
    starts (libQnnSystem reader, emulator, compile workers) imports them."""
    _hostile_cwd(_with_bundle(good))(tmp_path)
    args = [good.name if a == "B" else a for a in command]
    done = subprocess.run(["qnndeploy", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode in (0, 3), done.stderr  # doctor: 3 when an optional tool is missing
    assert "Traceback" not in done.stderr
    assert not (tmp_path / PWNED).exists(), (tmp_path / PWNED).read_text()


def test_names_never_become_code(good, tmp_path):
    templates = templates_dir()
    before = _tree_hash(templates)
    plain = tmp_path / "plain"
    assert subprocess.run(["qnndeploy", "scaffold", str(good), "--package", "com.example.x", "-o", str(plain)],
                          capture_output=True, check=False).returncode == 0
    lines = {p.relative_to(plain): len(p.read_text().splitlines()) for p in plain.rglob("*")
             if p.is_file() and "bundle" not in p.relative_to(plain).parts}
    all_cases = cases(good)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: fuzz.run_case(ic[1], tmp_path / str(ic[0])), enumerate(all_cases)))
    broken = [f"{c.name}: {why}" for c, why in zip(all_cases, results, strict=True) if why]
    for i, case in enumerate(all_cases):
        folder = tmp_path / str(i)
        if any(folder.rglob(PWNED)) or (tmp_path / PWNED).exists():
            broken.append(f"{case.name}: code ran (a template was evaluated or a module imported from the folder)")
        out = next((folder / a for a in case.args[case.args.index("-o") + 1:][:1]), None) if "-o" in case.args else None
        if out is not None and os.path.isdir(out):  # noqa: PTH112 a name over 255 bytes is no folder, not an error
            for rel, count in lines.items():
                got = out / rel
                if not got.is_file() or len(got.read_text().splitlines()) != count:
                    broken.append(f"{case.name}: {rel} is not the template's lines")
                    break
    assert _tree_hash(templates) == before, "the installed templates changed"
    assert broken == [], f"{len(broken)} of {len(all_cases)} cases:\n" + "\n".join(broken)
