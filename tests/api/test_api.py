"""qnndeploy.api, the public Python API: the whole demo driven through it (check -> prepare -> compile -> validate ->
bundle build -> bundle verify -> inspect -> scaffold) with the real onnxruntime-qnn compiler and HTP emulator, its
errors the CLI's, and `__all__` what docs/api.md documents, every name typed."""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import json
import re
import shutil
from importlib import resources
from pathlib import Path

import click
import onnx
import pytest

from qnndeploy import api
from qnndeploy.base.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED
from qnndeploy.cli._common import jsonable
from qnndeploy.qnn import htp
from tests.support import REPO, synth_models
from tests.support.cli import run
from tests.support.host import require

pytest_plugins = ["tests.support.device_emulator.fixtures"]  # emulated phones behind the real adb server

DOCS = REPO / "docs" / "api.md"
SOC = "SM8750"
MODEL = "kws_demo"


@dataclasses.dataclass
class Demo:
    model: Path
    before: api.CheckReport
    prepared: api.PrepareResult
    after: api.CheckReport
    compiled: api.CompileSummary
    validated: api.ValidationSummary
    bundled: api.BundleResult
    verified: api.VerifyReport
    inspected: api.InspectResult
    glue: api.ScaffoldResult


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    """The demo's stages (qnndeploy/demo.py) called as a script would, for one SoC, the bundle as a .tar.gz too."""
    require(htp.available(), "onnxruntime-qnn")
    work = tmp_path_factory.mktemp("api")
    model = work / f"{MODEL}.onnx"
    model.write_bytes(resources.files("qnndeploy").joinpath("data/demo.onnx").read_bytes())
    before = api.check_model(model, soc=SOC)
    prepared = api.prepare_model(model, work / f"{MODEL}.npu.onnx",
                                api.PrepareOptions(shapes={"features": [1, 1, 49, 10]}))
    after = api.check_model(Path(prepared.output), soc=SOC)
    compiled = api.compile_models({MODEL: Path(prepared.output)}, [SOC], work / "build")
    validated = api.validate_build(work / "build", api.ValidateOptions(random=2))
    spec = dataclasses.replace(api.spec_from_build(work / "build", "kws-demo", "1.0.0"), source_model=MODEL,
                               source_path=model, license="Apache-2.0")
    bundled = api.build_bundle(spec, work / "bundle", archive_fmt="tar.gz")
    verified = api.verify_bundle(bundled.path)
    inspected = api.inspect(bundled.path, deep=False)
    assert bundled.archive is not None
    glue = api.scaffold(api.ScaffoldRequest(bundle=bundled.archive, package="com.example.kws", out=work / "glue",
                                            shallow=True))  # the archive, as the CLI takes it
    return Demo(model, before, prepared, after, compiled, validated, bundled, verified, inspected, glue)


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_check_and_prepare_make_the_demo_model_ready(demo):
    assert (demo.before.verdict, demo.before.exit_code) == ("fixable", 10)
    assert any(t.dynamic for t in demo.before.inputs) and demo.before.prepare_command
    out = Path(demo.prepared.output)
    assert out.is_file() and Path(demo.prepared.record).is_file()
    assert demo.prepared.equivalence and all(d.ok for d in demo.prepared.equivalence)
    assert [t.shape_text() for t in demo.prepared.inputs] == ["[1, 1, 49, 10]"]
    assert (demo.after.verdict, demo.after.exit_code) == ("ready", 0)
    assert demo.after.htp.measured and demo.after.htp.cpu_partitions == 0 and demo.after.htp.soc == SOC


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_compile_and_validate_give_a_passing_context_binary(demo):
    assert demo.compiled.ok and [(j.graph, j.soc) for j in demo.compiled.jobs] == [(MODEL, SOC)]
    job = demo.compiled.jobs[0]
    assert job.status in ("ok", "cached") and (job.folder / f"{MODEL}.bin").is_file()
    assert (job.folder / "compile.json").is_file()
    assert demo.validated.ok and [(t.graph, t.soc, t.status) for t in demo.validated.targets] == [
        (MODEL, SOC, "passed")]
    target = demo.validated.targets[0]
    assert target.samples == 2 and target.outputs and all(o.passed for o in target.outputs)
    assert target.record is not None and json.loads(target.record.read_text())["passed"] is True


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_the_bundle_verifies_inspects_and_scaffolds(demo):
    b = demo.bundled
    assert (b.name, b.version, b.targets) == ("kws-demo", "1.0.0", [f"{SOC} ({api.find_soc(SOC).dsp_arch})"])
    assert b.runtime.startswith("external: ")
    manifest = json.loads((b.path / "manifest.json").read_text())
    assert manifest["source"]["license"] == "Apache-2.0" and manifest["source"]["model"] == MODEL
    assert b.archive is not None and b.archive.is_file()
    assert demo.verified.ok and demo.verified.problems == [] and demo.verified.name == "kws-demo"
    assert demo.verified.deep and demo.verified.deep.startswith("1 context binary loaded and run")
    archived = api.verify_bundle(b.archive, deep=False)  # an archive verifies as its folder does
    assert archived.ok and archived.bundle == str(b.archive) and archived.deep is None
    assert demo.inspected.ok and demo.inspected.kind == "bundle"
    assert [(r.soc, r.binary_soc, r.source) for r in demo.inspected.binaries] == [(SOC, SOC, "qnnsystem")]
    g = demo.glue
    assert g.package == "com.example.kws" and g.engine == "ort" and g.targets and g.bundle_files > 0
    assert g.kotlin and all((g.path / k).is_file() for k in g.kotlin)
    assert json.loads((g.glue / "bundle" / "assets" / "qnndeploy" / "manifest.json").read_text()) == manifest
    assert (g.glue / "qnndeploy.gradle").is_file() and any("qnndeploy.gradle" in line for line in g.lines)


@pytest.mark.slow
@pytest.mark.needs_qnn
@pytest.mark.needs_adb
def test_the_demo_bundle_on_an_emulated_phone(demo, device, tmp_path, monkeypatch):
    """device list, info and verify (no runner: pushed and checked, nothing run) on an emulated SM8750 phone, the
    bundle given as its archive, as a script reads them."""
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)  # an SDK set up here would give verify a runner
    assert [(d.serial, d.state, d.soc) for d in api.devices()] == [(device.serial, "device", SOC)]
    info = api.device_info(bundle=demo.bundled.archive)
    assert (info.serial, info.soc, info.bundle) == (device.serial, SOC, "kws-demo 1.0.0")
    assert info.app_choice is not None and (info.app_choice.provider, info.app_choice.soc) == ("npu", SOC)
    (result,) = api.device_verify(api.PhoneRequest(bundle=demo.bundled.archive, record_dir=tmp_path / "records"))
    assert (result.serial, result.provider, result.soc) == (device.serial, "npu", SOC)
    assert result.push is not None and "manifest.json" in result.push.sent
    # nothing ran without a runner: the result and its record say so, never ok
    assert not result.ok and result.outcome == "not run" and {g.status for g in result.graphs} == {"not run"}
    assert result.record is not None and json.loads(result.record.read_text())["ok"] is False
    with pytest.raises(api.QnnDeployError) as raised:
        api.device_verify(api.PhoneRequest(bundle=demo.bundled.archive, serial=device.serial, all_devices=True))
    assert raised.value.exit_code == EXIT_BAD_INPUT


def _timeless(value: object) -> object:
    """A --json value without its wall times ("seconds"): the rest is deterministic."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_estimate_gives_the_numbers_of_the_commands_json(tmp_path, monkeypatch):
    model = tmp_path / "mlp.onnx"
    onnx.save(synth_models.static_mlp(), model)
    e = api.estimate(model, socs=["SM8750", "SM7325"])
    assert [(m.model, [s.soc for s in m.socs]) for m in e.models] == [(str(model), ["SM8750", "SM7325"])]
    m = e.models[0]
    assert m.reference.soc == "QCS9100" and m.reference.figures is not None and m.reference.figures.cycles > 0
    assert m.socs[0].ms is not None and m.socs[0].factor is not None and e.records == ()
    r = run("estimate", model, "--soc", "SM8750,SM7325", "--json")
    assert r.exit_code == 0, r.output
    assert _timeless(json.loads(r.stdout)) == _timeless(jsonable(e))
    with pytest.raises(api.QnnDeployError) as raised:
        api.estimate([tmp_path / "missing.onnx"], socs=["SM8750"])
    assert cli_error("estimate", tmp_path / "missing.onnx", "--soc", "SM8750") == (EXIT_BAD_INPUT, str(raised.value))


def cli_error(*args: object) -> tuple[int, str]:
    """The exit code and the one-line error of a command run in-process."""
    r = run(*args)
    return r.exit_code, r.stderr.removeprefix("error: ").rstrip("\n")


def test_not_a_bundle_is_the_clis_bad_input(tmp_path):
    folder = tmp_path / "not-a-bundle"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"x")
    with pytest.raises(api.QnnDeployError) as raised:
        api.verify_bundle(folder, deep=False)
    assert raised.value.exit_code == EXIT_BAD_INPUT
    assert cli_error("bundle", "verify", folder, "--shallow") == (EXIT_BAD_INPUT, str(raised.value))
    with pytest.raises(api.QnnDeployError) as scaffolding:
        api.scaffold(api.ScaffoldRequest(bundle=folder, package="com.example.kws", out=tmp_path / "glue", shallow=True))
    assert cli_error("scaffold", folder, "--package", "com.example.kws", "-o", tmp_path / "glue", "--shallow") == (
        EXIT_BAD_INPUT, str(scaffolding.value))
    assert not (tmp_path / "glue").exists()


@pytest.mark.slow
@pytest.mark.needs_qnn
def test_a_bundle_failing_verify_is_refused_as_the_cli_refuses_it(demo, tmp_path):
    broken = tmp_path / "kws-demo-1.0.0"
    shutil.copytree(demo.bundled.path, broken)
    cpu = next((broken / "cpu").glob("*.onnx"))
    cpu.write_bytes(cpu.read_bytes() + b"\0")  # its sha256 and size no longer the manifest's
    report = api.verify_bundle(broken, deep=False)
    assert not report.ok and any(p.path == cpu.relative_to(broken).as_posix() for p in report.problems)
    for call, args in (
            (lambda: api.scaffold(api.ScaffoldRequest(bundle=broken, package="com.example.kws", out=tmp_path / "glue",
                                                      shallow=True)),
             ("scaffold", broken, "--package", "com.example.kws", "-o", tmp_path / "glue", "--shallow")),
            (lambda: api.package_play(api.PlayRequest(bundle=broken, out=tmp_path / "play", shallow=True)),
             ("package", "play", broken, "-o", tmp_path / "play", "--shallow")),
            (lambda: api.device_verify(api.PhoneRequest(bundle=broken, record_dir=tmp_path / "records")),  # before adb
             ("device", "verify", broken, "-o", tmp_path / "records")),
            (lambda: api.hosted_devices(broken), ("device", "list", "--aihub", "--bundle", broken))):
        with pytest.raises(api.QnnDeployError) as raised:
            call()
        assert raised.value.exit_code == EXIT_CHECK_FAILED and "fails bundle verify" in str(raised.value)
        assert isinstance(raised.value, api.Unverified) and raised.value.report.problems == report.problems
        code, stderr = cli_error(*args)
        assert (code, stderr.splitlines()[-1].removeprefix("error: ")) == (EXIT_CHECK_FAILED, str(raised.value))
    assert [p.name for p in tmp_path.iterdir()] == [broken.name]  # no glue, pack or record was written


def documented() -> list[str]:
    """The names docs/api.md documents: one `### name` heading each."""
    return re.findall(r"^### `([A-Za-z_]+)`", DOCS.read_text(), flags=re.MULTILINE)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every command of the command line, by its words ("bundle verify")."""
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
        else:
            found.append(" ".join((*prefix, name)))
    return found


def test_every_command_has_an_api_function_or_is_named_as_having_none():
    """A command's function says `qnndeploy COMMAND` in docs/api.md; a command without one is in the Errors
    section's list of those that have none."""
    from qnndeploy.cli import cli

    text = " ".join(DOCS.read_text().split())
    (none,) = re.findall(r"- ([^.]*) have no API function\.", text)
    without = {name for name in re.findall(r"`([^`]+)`", none) if "--" not in name}  # not an option's
    commands = _commands(cli)
    assert "estimate" in commands and "device verify" in commands
    missing = [c for c in commands if f"`qnndeploy {c}" not in text and c not in without
               and c.split()[0] not in without]
    assert missing == [], "commands with no API function, and not said to have none in docs/api.md"


def test_what_a_type_checker_sees_is_what_the_api_resolves():
    """The names bound under `if TYPE_CHECKING:` in api/__init__.py (what mypy and a script's checker see) are
    exactly the names its __getattr__ imports at run time (HOMES), and __all__ is among them."""
    tree = ast.parse(Path(api.__file__).read_text())
    seen: set[str] = set()
    for block in tree.body:
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING":
            for node in block.body:
                if isinstance(node, ast.ImportFrom):
                    seen |= {a.asname or a.name for a in node.names}
                elif isinstance(node, ast.Assign):
                    seen |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    private = {name for name in seen if name.startswith("_")}  # modules the block aliases, to name their members
    assert seen - private == set(api._HOME)
    assert set(api.__all__) <= set(api._HOME) | {"Unverified", "CheckFailed"}  # these two are imported at the top


def test_all_is_what_docs_api_documents():
    assert len(api.__all__) == len(set(api.__all__))
    assert sorted(documented()) == sorted(api.__all__)


def test_every_function_in_docs_api_has_an_example_that_uses_only_the_api():
    parts = re.split(r"^### `([A-Za-z_]+)`\n", DOCS.read_text(), flags=re.MULTILINE)
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        examples = re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
        if not inspect.isclass(getattr(api, name)):
            assert examples, f"docs/api.md shows no example of {name}"
        for code in examples:
            compile(code, f"docs/api.md, {name}", "exec")
            assert set(re.findall(r"\bapi\.([A-Za-z_]+)", code)) <= set(api.__all__), code


def documented_signatures() -> dict[str, list[str]]:
    """name -> its parameters as docs/api.md writes them (`name(a, b=1, *, c=None) -> R`), "*" included."""
    found = {}
    for name, params in re.findall(r"^### `(\w+)`\n`\1\((.*?)\)(?: -> [^`]+)?`", DOCS.read_text(),
                                   flags=re.MULTILINE | re.DOTALL):
        found[name] = [p.split("=")[0].strip() for p in " ".join(params.split()).split(", ") if p]
    return found


def test_docs_api_gives_each_signature_as_it_is():
    """The parameters, their order and where the keyword-only ones start: a signature changed in the code and not
    on the page fails here."""
    signatures = documented_signatures()
    assert {n for n in api.__all__ if not inspect.isclass(getattr(api, n))} <= set(signatures)
    for name, written in signatures.items():
        actual = []
        for p in inspect.signature(getattr(api, name)).parameters.values():
            if p.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in actual:
                actual.append("*")
            actual.append(p.name)
        assert written == actual, name


@pytest.mark.parametrize("name", api.__all__)
def test_every_public_name_is_importable_and_typed(name):
    """A script's type checker sees every parameter and result: a function's, and a class's constructor's."""
    obj = getattr(importlib.import_module("qnndeploy.api"), name)  # what `from qnndeploy.api import NAME` gets
    assert callable(obj)
    if isinstance(obj, enum.EnumMeta):
        return  # a closed set: its members are the values, typed by the class itself
    signature = inspect.signature(obj)
    untyped = [p for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty]
    assert untyped == [], f"{name} has untyped parameters"
    if inspect.isclass(obj):
        assert signature.parameters or not dataclasses.is_dataclass(obj), f"{name} has no fields"
    else:
        assert signature.return_annotation is not inspect.Signature.empty, f"{name} has no return type"
