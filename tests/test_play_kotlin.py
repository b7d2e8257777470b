"""The Play glue (`scaffold --play`), for real: compiled by kotlinc against the stand-ins of the Android and AI
delivery APIs, its pack handling unit-tested on the JVM, and its two rules (PlayRules.playGroup, expectedGroup) in
agreement with qnndeploy/playplan.py over thousands of phones and plans.

The bundle and its `package play` outputs are real (onnxruntime-qnn compiles, qnndeploy.play writes the packs);
Play itself cannot run here, so the JVM tests lay the pack's folders out as Play does on a phone: an install-time
pack's qnndeploy_npu/ among the app's assets, a fast-follow pack's in a folder of its own (AiPackLocation).
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import bundles
import kotlin_build
import pytest
from conftest import require

from qnndeploy import htp, socs
from qnndeploy.play import package_play
from qnndeploy.playplan import FOLDER, expected_group, plan_groups, play_group, read_plan
from qnndeploy.scaffold import scaffold

pytestmark = [pytest.mark.slow, pytest.mark.needs_kotlin]

HERE = Path(__file__).parent / "kotlin"
PACKAGE = "com.example.qnnplay"  # tests/kotlin/play/*.kt import the glue from this package
PLAY_TESTS = 9  # the number of tests in tests/kotlin/play/PlayTests.kt: none may silently disappear
TARGETS = ("SM8550", "SM8650", "SM8750")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    """A real bundle, its fast-follow and install-time packs, and the play glue scaffolded from the fast-follow one."""
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("play-render")
    bundle = bundles.build(root / "b", bundles.compile_inputs(root / "inputs", TARGETS))
    fast = package_play(bundle, root / "fast", delivery="fast-follow").path
    install = package_play(bundle, root / "install", delivery="install-time").path
    glue = scaffold(bundle, PACKAGE, root / "glue", play=fast)
    return {"bundle": bundle, "fast": fast, "install": install, "glue": glue, "root": root}


@pytest.fixture(scope="module")
def kotlin(rendered, tmp_path_factory) -> dict:
    """One javac run for the Java stand-ins, one kotlinc run (-Werror) for the play glue and tests/kotlin/play."""
    generated = sorted(rendered["glue"].path.rglob("*.kt"))
    return kotlin_build.build(generated, sorted((HERE / "play").glob("*.kt")), tmp_path_factory.mktemp("play-kotlin"))


def test_play_glue_compiles(rendered, kotlin):
    names = {p.name for p in kotlin["generated"]}
    assert {"PlayPack.kt", "QnnRuntime.kt", "OrtModels.kt", "Reasons.kt"} <= names
    assert len(kotlin["generated"]) == len(rendered["glue"].kotlin)
    for cls in ("PlayPack", "PlayRules", "PlayPlan", "QnnRuntime"):
        assert (kotlin["classes"] / PACKAGE.replace(".", "/") / "qnndeploy" / f"{cls}.class").is_file(), cls


def group_of(plan: dict, soc: str) -> str:
    name: str = next(g["name"] for g in plan["groups"] if soc in g["socs"])
    return name


def pack_folder(play: Path, plan: dict, soc: str) -> Path:
    return play / plan["pack"] / "src" / "main" / "assets" / f"{FOLDER}#group_{group_of(plan, soc)}"


def test_play_unit_tests_pass_on_the_jvm(rendered, kotlin):
    """The pack's folders as Play lays them out on a phone (the #group_ suffix stripped)."""
    work = kotlin["out"] / "phone"
    fast, install = read_plan(rendered["fast"]), read_plan(rendered["install"])
    base = rendered["glue"].path / "bundle" / "assets"
    fast_assets = work / "fast-follow-assets"
    shutil.copytree(base, fast_assets)
    install_assets = work / "install-time-assets"
    shutil.copytree(base, install_assets)
    shutil.copyfile(rendered["install"] / "play.json", install_assets / "qnndeploy" / "play.json")
    shutil.copytree(pack_folder(rendered["install"], install, "SM8750"), install_assets / FOLDER)
    pack, other = work / "pack" / "assets", work / "other-pack" / "assets"
    shutil.copytree(pack_folder(rendered["fast"], fast, "SM8750"), pack / FOLDER)
    shutil.copytree(pack_folder(rendered["fast"], fast, "SM8550"), other / FOLDER)
    manifest = json.loads((rendered["bundle"] / "manifest.json").read_text())
    setup = {"install_assets": str(install_assets), "fast_follow_assets": str(fast_assets), "pack": str(pack),
             "other_pack": str(other), "scratch": str(work / "scratch"), "pack_name": fast["pack"],
             "group": group_of(fast, "SM8750"), "other_group": group_of(fast, "SM8550"),
             "sha256": {a["path"]: a["sha256"] for t in manifest["targets"] for a in t["artifacts"]}}
    path = work / "setup.json"
    path.write_text(json.dumps(setup))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.playtests.PlayTestsKt", str(path))
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith("FAIL")]
    assert not failures and done.returncode == 0, "\n".join(failures) or done.stderr
    assert sum(line.startswith("ok ") for line in lines) == PLAY_TESTS, done.stdout


# --- Python and Kotlin give the same groups ---

MANUFACTURERS = ["QTI", "Qualcomm", "qti", "QUALCOMM", " QTI", "QTI ", "Samsung", "", None, "\u212aTI", "Q\u0131TI"]
SDKS = [30, 31, 35]


def odd_plans(real: dict) -> list[dict]:
    """The real plan and variations both twins must read alike: other orders, a SoC in two groups (the first in the
    file wins), selectors in odd case and spacing, a selector with no SoC (Play: every phone), another default."""
    groups = real["groups"]
    first = {**groups[-1], "name": "first", "selectors": groups[-1]["selectors"][:1]}
    odd = {**groups[0], "name": "odd", "socs": ["sm8650", "SM8650 "],
           "selectors": [{"manufacturer": "qti", "model": "sm8650"}, {"manufacturer": " QTI", "model": "SM8650 "},
                         {"manufacturer": "QTI", "model": "SM8750\u00a0"},
                         {"manufacturer": "QTI", "model": "\u017fm8750"}]}
    everyone = {**groups[0], "name": "everyone", "selectors": []}
    return [
        real,
        {**real, "groups": groups[::-1]},
        {**real, "groups": [first, *groups]},
        {**real, "groups": [odd, *groups[1:]]},
        {**real, "groups": [groups[0], everyone, *groups[1:]]},
        {**real, "groups": groups[1:], "default_group": "fallback"},
        {**real, "groups": [groups[2], groups[0]]},
    ]


def phone_models() -> list[str | None]:
    names: list[str | None] = []
    for soc in socs.catalog():
        for name in (soc.model, *soc.aliases):
            mixed = "".join(c.lower() if i % 2 else c for i, c in enumerate(name))
            names += [name, name.lower(), mixed, f" {name}", f"{name}\n"]
    return [*names, "SM8750P", "sm8750p", "unknown", "", None, "\u017fm8750", "SM8750\u00a0", "\U0001f600"]


def test_python_and_kotlin_choose_the_same_groups(rendered, kotlin):
    plans = odd_plans(read_plan(rendered["fast"]))
    models = phone_models()
    play_cases = list(itertools.product(range(len(plans)), MANUFACTURERS, models, SDKS))
    soc_values = [*(m for m in models if m is None or m.strip() == m), "SM8650 "]
    expected_cases = list(itertools.product(range(len(plans)), soc_values))
    path = kotlin["out"] / "play-agreement.json"
    path.write_text(json.dumps({"plans": plans, "play": play_cases, "expected": expected_cases}))
    done = kotlin_build.run_jvm(kotlin, "qnndeploy.playtests.PlayAgreement", str(path))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["play"]) == len(play_cases) > 20_000
    groups = [plan_groups(p) for p in plans]
    want = [play_group(groups[i], man, model, sdk, plans[i]["default_group"]) for i, man, model, sdk in play_cases]
    mismatches = [(c, w, g) for c, w, g in zip(play_cases, want, out["play"], strict=True) if w != g]
    assert not mismatches, mismatches[:5]
    # every name phones of a bundle SoC report (the model and each alias, e.g. SM8750-AC) lands in that SoC's group
    for group in plans[0]["groups"]:
        for name in socs.find(group["socs"][0]).names:
            for manufacturer in ("QTI", "Qualcomm"):
                i = play_cases.index((0, manufacturer, name, 35))
                assert want[i] == out["play"][i] == group["name"], (manufacturer, name)
    assert out["expected"] == [expected_group(plans[i], soc) for i, soc in expected_cases]
    # not trivially equal: each plan sends phones to several groups, and every odd group and default is reached
    for i in range(len(plans)):
        assert len({w for (j, *_), w in zip(play_cases, want, strict=True) if j == i}) >= 2, i
    assert {"first", "odd", "everyone", "fallback", "other"} <= set(want)
    assert len(set(out["expected"])) > 3
