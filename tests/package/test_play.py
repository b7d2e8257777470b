"""`qnndeploy package play`: the demo bundle as a Google Play AI pack, checked against Play's real config format
(tests/support/play_format.py: bundletool's protobuf messages and rules), and the group rules both twins use."""

from __future__ import annotations

import hashlib
import json
import random
import re
import zlib
from pathlib import Path

import pytest

import qnndeploy
from qnndeploy.base import socs
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.decide import decision
from qnndeploy.device.verify import play_check
from qnndeploy.formats import playplan
from qnndeploy.formats.manifest import Manifest
from qnndeploy.package import play
from qnndeploy.qnn import htp
from qnndeploy.scaffold import scaffold, templates_dir
from qnndeploy.verification.checks import verify_folder
from tests.support import bundles, play_format
from tests.support.cli import run
from tests.support.host import require, shipped_files

DEMO_SOCS = ("SM8550", "SM8650", "SM8750")
SCANCARD = ("https://github.com/yoshixmk/scancard/blob/07bd1695bb1faf571d21fa34171c3082e44f4f69/app/"
            "build.gradle.kts")


@pytest.fixture(scope="module")
def packed(demo_bundle, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("play") / "play"
    r = run("package", "play", str(demo_bundle), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_each_group_holds_its_socs_npu_files_and_nothing_else(demo_bundle, packed):
    out, _ = packed
    manifest = json.loads((demo_bundle / "manifest.json").read_text())
    assets = out / "qnndeploy_models" / "src" / "main" / "assets"
    folders = {p.name: p for p in assets.iterdir()}
    assert sorted(folders) == sorted([f"qnndeploy_npu#group_{s.lower()}" for s in DEMO_SOCS]
                                     + ["qnndeploy_npu#group_other"])
    for t in manifest["targets"]:
        folder = folders[f"qnndeploy_npu#group_{t['soc'].lower()}"]
        files = {p.relative_to(folder).as_posix(): sha(p) for p in folder.rglob("*") if p.is_file()}
        assert json.loads((folder / "group.json").read_text()) == {"group": t["soc"].lower()}
        del files["group.json"]
        assert files == {a["path"]: a["sha256"] for a in t["artifacts"]}  # this SoC's, no other's, no CPU model
    other = folders["qnndeploy_npu#group_other"]
    assert [p.name for p in other.rglob("*")] == ["group.json"]


@pytest.mark.slow
def test_the_config_is_a_valid_device_group_config_covering_every_alias_and_both_spellings(packed):
    out, _ = packed
    config = play_format.parse((out / "device_targeting_config.xml").read_text())
    play_format.validate(config)
    got = {g.name: {(c.manufacturer, c.model) for s in g.device_selectors for c in s.system_on_chips}
           for g in config.device_groups}
    want = {}
    for name in DEMO_SOCS:
        entry = socs.find(name)
        want[name.lower()] = {(m, model) for m in ("QTI", "Qualcomm") for model in (entry.model, *entry.aliases)}
    assert got == want
    assert {("QTI", "SM8750P"), ("Qualcomm", "SM8750-AC")} <= got["sm8750"]  # the catalog's aliases of SM8750
    assert ("QTI", "SM8650-AC") in got["sm8650"] and ("Qualcomm", "SM8550-AC") in got["sm8550"]  # Galaxy S24, S23
    assert "other" not in got  # Play makes the default group; defining it is not allowed


@pytest.mark.slow
def test_each_phone_downloads_one_socs_files(demo_bundle, packed):
    out, report = packed
    manifest = json.loads((demo_bundle / "manifest.json").read_text())
    plan = playplan.read_plan(out)
    assert plan.manifest_sha256 == sha(demo_bundle / "manifest.json")
    licences = [t["path"] for o in manifest["licences"]["origins"] for t in o["terms"] or ()]
    assert licences and {f.path for f in plan.base.files} >= set(licences)  # the app's, not the pack's
    base = sum((demo_bundle / p).stat().st_size for p in ["manifest.json", *(a["path"] for a in manifest["cpu"]),
                                                          *licences])
    npu = {t["soc"].lower(): sum(a["size"] for a in t["artifacts"]) for t in manifest["targets"]}
    rows = {r["group"]: r for r in report["rows"]}
    for group, size in npu.items():
        assert rows[group]["bytes"] == base + size
        assert rows[group]["deflated"] < report["one_apk_deflated"]
    assert rows["other"]["bytes"] == base and rows["other"]["socs"] == []
    assert report["one_apk_bytes"] == base + sum(npu.values())
    # Gradle: the pack module and the app's settings
    pack = (out / "qnndeploy_models" / "build.gradle").read_text()
    assert "id 'com.android.ai-pack'" in pack and 'packName = "qnndeploy_models"' in pack
    assert 'deliveryType = "fast-follow"' in pack
    app = (out / "play.gradle").read_text()
    for line in ("assetPacks += [':qnndeploy_models']",
                 "deviceTargetingConfig = file(new File(playDir, 'device_targeting_config.xml'))",
                 "enableSplit = true", "defaultGroup = 'other'",
                 "implementation 'com.google.android.play:ai-delivery:0.2.0-beta01'",
                 f"// This version as a public build file uses it: {SCANCARD} (read 2026-12-01)"):
        assert line in app
    readme = (out / "README.md").read_text()
    assert "build-apks --bundle" in readme and "--local-testing" in readme and "--device-groups" in readme


@pytest.mark.slow
def test_text_report_and_options(demo_bundle, tmp_path):
    r = run("package", "play", str(demo_bundle), "-o", str(tmp_path / "p"), "--delivery", "install-time",
            "--pack", "kws_models")
    assert r.exit_code == 0, r.output
    assert "AI pack kws_models (install-time)" in r.output
    names = socs.find("SM8750").names  # SM8750, SM8750P, SM8750-AC
    assert f"group sm8750: SM8750 (v79); selectors: {2 * len(names)} system-on-chip" in r.output
    assert "one APK" in r.output and "of one APK" in r.output
    assert "the model's licence: Apache-2.0; the app ships the model under it" in r.output  # the demo's, as bundled
    assert 'deliveryType = "install-time"' in (tmp_path / "p" / "kws_models" / "build.gradle").read_text()
    # a second run needs --force, and --force replaces only an earlier output
    again = run("package", "play", str(demo_bundle), "-o", str(tmp_path / "p"))
    assert again.exit_code == 2 and "pass --force" in again.output
    assert run("package", "play", str(demo_bundle), "-o", str(tmp_path / "p"), "--force").exit_code == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    foreign = run("package", "play", str(demo_bundle), "-o", str(tmp_path / "mine"), "--force")
    assert foreign.exit_code == 2 and "not an earlier package play output" in foreign.output
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@pytest.mark.slow
def test_a_file_over_plays_pack_limit_is_refused_and_nothing_is_written(demo_bundle, tmp_path, monkeypatch):
    monkeypatch.setattr(play, "PACK_LIMIT", 1000)
    with pytest.raises(QnnDeployError, match=r"kws_demo.bin alone would download .* Play allows 1.0 KB per pack "
                                             r"and a file goes whole in one: split the model into more parts"):
        play.package_play(demo_bundle, tmp_path / "p")
    assert not (tmp_path / "p").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_group_over_plays_pack_limit_spreads_its_files_over_more_packs(on_device_bundle, tmp_path, monkeypatch):
    """A large model's NPU files can pass Play's 1.5 GB per pack (Whisper large's 10 s bundle, 1.46 GB deflated per
    SoC, is just within): each group's files go, whole and in order, to the first pack with room, and every pack
    module has every group's folder. Here the limit is the largest file, so four files per SoC need several packs."""
    manifest = json.loads((on_device_bundle / "manifest.json").read_text())
    deflated = {a["path"]: len(zlib.compress((on_device_bundle / a["path"]).read_bytes(), play.DEFLATE_LEVEL))
                for t in manifest["targets"] for a in t["artifacts"]}
    limit = max(deflated.values())
    monkeypatch.setattr(play, "PACK_LIMIT", limit)
    r = run("package", "play", str(on_device_bundle), "-o", str(tmp_path / "p"), "--pack", "big", "--json")
    assert r.exit_code == 0, r.output
    plan = playplan.read_plan(tmp_path / "p")
    names = [p.name for p in plan.packs]
    assert len(names) > 1 and names == ["big", *(f"big_{n}" for n in range(2, len(names) + 1))]
    assert [p.folder for p in plan.packs] == [playplan.FOLDER, *(f"{playplan.FOLDER}_{n}"
                                                                  for n in range(2, len(names) + 1))]
    groups = [*(g.name for g in plan.groups), plan.default_group]
    for p in plan.packs:
        assets = tmp_path / "p" / p.name / "src" / "main" / "assets"
        assert sorted(f.name for f in assets.iterdir()) == sorted(f"{p.folder}#group_{g}" for g in groups)
        for g in plan.groups:
            folder = assets / f"{p.folder}#group_{g.name}"
            assert json.loads((folder / "group.json").read_text()) == {"group": g.name}
            held = {f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file()} - {"group.json"}
            assert held == {f.path for f in g.files if f.pack == p.name}
            assert sum(deflated[f] for f in held) <= limit
            assert all(sha(folder / f.path) == f.sha256 for f in g.files if f.pack == p.name)
        assert f'packName = "{p.name}"' in (tmp_path / "p" / p.name / "build.gradle").read_text()
    for t, g in zip(manifest["targets"], plan.groups, strict=True):  # every file once, in the manifest's order
        assert [f.path for f in g.files] == [a["path"] for a in t["artifacts"]]
        first_fit = [names.index(f.pack) for f in g.files]
        assert first_fit[0] == 0 and all(b <= max(first_fit[:i]) + 1 for i, b in enumerate(first_fit[1:], 1))
    assert f"assetPacks += [{', '.join(repr(':' + n) for n in names)}]" in (tmp_path / "p" / "play.gradle").read_text()
    assert f"spread over {len(names)} packs" in (tmp_path / "p" / "README.md").read_text()
    lines = json.loads(r.stdout)["lines"]
    assert all(any(f'include(":{n}")' in line for line in lines) for n in names)
    text = run("package", "play", str(on_device_bundle), "-o", str(tmp_path / "p"), "--pack", "big", "--force")
    spread = {g.name: len({f.pack for f in g.files}) for g in plan.groups}
    assert f"AI packs {', '.join(names)} (fast-follow)" in text.output
    assert all(f"its files in {n} packs" in text.output for n in spread.values()), text.output


@pytest.mark.slow
def test_over_plays_limits_with_the_app_is_refused_and_nothing_is_written(demo_bundle, tmp_path, monkeypatch):
    """What every phone gets with the app is capped (data/play_limits.json): the base module at 500 MB, and the base
    with install-time packs at 4 GB. Whisper large's fp32 fallback (5.97 GB deflated) is over the latter, so a
    package Play would refuse is not written, and the message says why."""
    monkeypatch.setattr(play, "APP_LIMIT", 1000)
    with pytest.raises(QnnDeployError, match=r"a phone would download .* with the app \(base .*; deflated\); "
                                             r"Play allows .* the CPU models, every phone's fallback, are too large "
                                             r"for Play"):
        play.package_play(demo_bundle, tmp_path / "p")
    monkeypatch.setattr(play, "BASE_LIMIT", 100)  # not even the manifest fits
    with pytest.raises(QnnDeployError, match=r"the base module would download .* without the CPU models"):
        play.package_play(demo_bundle, tmp_path / "p")
    assert not (tmp_path / "p").exists() and list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # the limits as the data file has them, from Play's size limits page
    assert (play.BASE_LIMIT, play.PACK_LIMIT, play.APP_LIMIT) == (500_000_000, 1_500_000_000, 4_000_000_000)


@pytest.mark.slow
def test_cpu_models_over_the_base_modules_limit_travel_in_install_time_asset_packs(on_device_bundle, tmp_path,
                                                                                   monkeypatch):
    """A CPU fallback over Play's 500 MB for the base module (Whisper small's fp32 is about 1 GB) goes to install-time
    asset packs at the base's asset paths, which a phone merges into the app's assets: the glue reads them as before,
    and scaffold --play leaves them out of the app's own assets."""
    report = verify_folder(on_device_bundle)
    whole = play.package_play(on_device_bundle, tmp_path / "whole", report=report).plan
    assert whole.cpu_packs == ()  # under the limit: in the base module
    manifest = json.loads((on_device_bundle / "manifest.json").read_text())
    models = [a["path"] for a in manifest["cpu"]]
    deflated = {p: len(zlib.compress((on_device_bundle / p).read_bytes(), play.DEFLATE_LEVEL)) for p in models}
    monkeypatch.setattr(play, "BASE_LIMIT", whole.base.deflated - 1)
    out = play.package_play(on_device_bundle, tmp_path / "p", pack="big", report=report)
    plan = playplan.read_plan(tmp_path / "p")
    assert [c.name for c in plan.cpu_packs] == ["big_cpu"]  # more (big_cpu_2, ...) past 1.5 GB, as the AI packs
    assert [f.path for c in plan.cpu_packs for f in c.files] == models  # each once, in order; none in the base
    assert not {f.path for f in plan.base.files} & set(models) and plan.base.deflated <= play.BASE_LIMIT
    for c in plan.cpu_packs:
        module = tmp_path / "p" / c.name
        gradle = (module / "build.gradle").read_text()
        assert "id 'com.android.asset-pack'" in gradle and f'packName = "{c.name}"' in gradle
        assert 'deliveryType = "install-time"' in gradle
        assets = module / "src" / "main" / "assets"
        held = {f.relative_to(assets).as_posix(): sha(f) for f in assets.rglob("*") if f.is_file()}
        assert held == {f"qnndeploy/{f.path}": f.sha256 for f in c.files}  # the base's own asset paths
        assert c.deflated == sum(deflated[f.path] for f in c.files) <= play.PACK_LIMIT
    gradle = (tmp_path / "p" / "play.gradle").read_text()
    assert f"assetPacks += [{', '.join(repr(':' + n) for n in ['big', *(c.name for c in plan.cpu_packs)])}]" in gradle
    assert "travel in install-time asset packs" in (tmp_path / "p" / "README.md").read_text()
    assert all(any(f'include(":{c.name}")' in line for line in out.lines) for c in plan.cpu_packs)
    text = run("package", "play", str(on_device_bundle), "-o", str(tmp_path / "p"), "--pack", "big", "--force")
    assert re.search(r"install-time asset pack big_cpu: \d+ CPU model file\(s\), .* deflated", text.output)
    rows = {r.group: r for r in out.rows}  # a phone still downloads the CPU models, now from the packs
    assert rows["other"].bytes == whole.base.bytes and rows["other"].deflated == whole.base.deflated
    # the app's own assets leave them out; a phone that the decision sends to the CPU finds them with the app
    glue = scaffold(on_device_bundle, "com.example.big", tmp_path / "glue", play=tmp_path / "p", report=report)
    assets = glue.path / "bundle" / "assets" / "qnndeploy"
    assert not any((assets / p).exists() for p in models) and (assets / "play.json").is_file()
    assert all(any(f'include(":{c.name}")' in line for line in glue.lines) for c in plan.cpu_packs)
    check = play_check(plan, playplan.read_config(tmp_path / "p"), {"ro.soc.manufacturer": "QTI", "ro.soc.model":
                       "SM8750", "ro.build.version.sdk": "35"}, "SM8750", files=models)
    assert check.ok, check.reason


def test_plays_limits_are_what_their_source_says():
    """Each limit in data/play_limits.json is the figure its quoted line gives (GB and MB as 10^9 and 10^6), with
    the page and the date it was read; one the copy read did not give stays unknown (null), not guessed. No copy of
    Play's limits can be installed here (bundletool does not carry them): the quote is the check."""
    data = json.loads((Path(play.__file__).parents[1] / "data" / "play_limits.json").read_text())
    assert data["source"].startswith("https://support.google.com/googleplay/android-developer/answer/9859372")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["read"])
    for name, limit in data["limits"].items():
        said = re.search(r"([\d.]+)(GB|MB)\b", limit["says"])
        if limit["bytes"] is None:
            assert said is None and "unknown" in limit["says"], name
        else:
            assert said is not None, name
            assert limit["bytes"] == round(float(said[1]) * {"GB": 10**9, "MB": 10**6}[said[2]]), name


def test_bad_requests_are_one_line_errors(tmp_path):
    bad_pack = run("package", "play", str(tmp_path), "-o", str(tmp_path / "p"), "--pack", "9models")
    assert bad_pack.exit_code == 2 and "invalid AI pack name '9models'" in bad_pack.output
    bad_delivery = run("package", "play", str(tmp_path), "-o", str(tmp_path / "p"), "--delivery", "later")
    assert bad_delivery.exit_code == 2
    not_bundle = run("package", "play", str(tmp_path), "-o", str(tmp_path / "p"))
    assert not_bundle.exit_code == 2 and not_bundle.output.startswith("error:")
    assert len(not_bundle.output.strip().splitlines()) == 1 and not (tmp_path / "p").exists()
    (tmp_path / "no.json").write_text("{}")
    with pytest.raises(QnnDeployError, match="does not follow the Play plan format"):
        playplan.read_plan(tmp_path / "no.json")


def plan_of(groups: dict[str, list[str]]) -> playplan.PlayPlan:
    """A plan with these groups (name -> SoCs), selectors as package play writes them, and no file."""
    return playplan.PlayPlan(
        "t", "1", "ab" * 32, (playplan.PlanPack("qnndeploy_models", playplan.FOLDER),), playplan.Delivery.FAST_FOLLOW,
        tuple(playplan.PlanGroup(n, tuple(s), "v79", tuple(playplan.selectors(s)), (), 0, 0)
              for n, s in groups.items()),
        playplan.PlanBase((), 0, 0, None), 0, 0)


def test_play_group_is_bundletools_exact_first_match():
    plan = plan_of({"sm8750": ["SM8750"], "sm8550": ["SM8550"]})
    groups = playplan.parse_config(play.config_xml(plan))
    assert groups == playplan.plan_groups(plan)
    assert playplan.play_group(groups, "QTI", "SM8750", 35) == "sm8750"
    assert playplan.play_group(groups, "Qualcomm", "SM8750P", 34) == "sm8750"
    assert playplan.play_group(groups, "QTI", "sm8750", 35) == "other"  # exact: case counts
    assert playplan.play_group(groups, "QTI", " SM8750", 35) == "other"  # and spaces
    assert playplan.play_group(groups, "QTI", "SM8750", 30) == "other"  # no SoC for Play below API 31
    assert playplan.play_group(groups, None, "SM8750", 35) == "other"
    assert playplan.play_group(groups, "Samsung", "s5e9945", 34) == "other"
    assert playplan.expected_group(plan, "SM8550") == "sm8550"
    assert playplan.expected_group(plan, "SM8650") == "other" and playplan.expected_group(plan, None) == "other"
    overlapping = [playplan.PlayGroup("first", [[playplan.PlaySoc("QTI", "SM8750")]]), *groups]
    assert playplan.play_group(overlapping, "QTI", "SM8750", 35) == "first"  # the file's order is the priority
    anyone = [playplan.PlayGroup("all", [[]])]  # a selector without system-on-chip selects every phone
    assert playplan.play_group(anyone, None, None, 29) == "all"


def test_play_group_agrees_with_the_proto_reading_of_the_config():
    rng = random.Random(7)
    names = [s.model for s in socs.catalog()]
    plan = plan_of({n.lower(): [n] for n in rng.sample(names, 6)})
    xml = play.config_xml(plan)
    config = play_format.parse(xml)
    play_format.validate(config)
    groups = playplan.parse_config(xml)
    spellings = ["QTI", "Qualcomm", "qti", "QUALCOMM", " QTI", "Samsung", ""]
    models = [*names, *(a for s in socs.catalog() for a in s.aliases), "sm8750", "SM8750 ", "unknown", ""]
    for _ in range(3000):
        man, model, sdk = rng.choice(spellings), rng.choice(models), rng.choice([29, 30, 31, 33, 35])
        assert playplan.play_group(groups, man, model, sdk) == play_format.matching_group(config, man, model, sdk,
                                                                                          "other"), (man, model, sdk)


def test_every_name_phones_report_lands_in_its_socs_group_by_bundletools_exact_rule():
    """A group per catalog SoC, read as bundletool reads the XML: a phone reporting any name of a SoC (the model or
    an alias: a Galaxy S25's SM8750-AC, an S26's SM8850-AD) with either manufacturer spelling is delivered that
    SoC's group, which is the group the decision expects; the same name in another case or with spaces is not
    (bundletool's SystemOnChip list.contains), although the decision still finds the SoC."""
    plan = plan_of({s.model.lower(): [s.model] for s in socs.catalog()})
    xml = play.config_xml(plan)
    config = play_format.parse(xml)
    play_format.validate(config)
    groups = playplan.parse_config(xml)
    every = [(s, name) for s in socs.catalog() for name in s.names]
    assert len({name for _, name in every}) == len(every)  # no name is two SoCs': the groups' selectors are disjoint
    assert {"SM8750-AC", "SM8850-AD", "SM8650-AC", "SM8550-AC", "SM8750P", "SM8350P", "SM8845P", "QCS9075"} <= {
        name for _, name in every}
    for soc, name in every:
        phone = decision.identify(decision.DeviceIdentity(name, None, 34))
        assert phone.soc == soc.model, name
        want = playplan.expected_group(plan, phone.soc)
        assert want == soc.model.lower()
        for manufacturer in playplan.MANUFACTURERS:
            assert play_format.matching_group(config, manufacturer, name, 34, "other") == want, (manufacturer, name)
            assert playplan.play_group(groups, manufacturer, name, 34) == want, (manufacturer, name)
            for near in (name.lower(), f" {name}", f"{name}\n"):
                assert decision.identify(decision.DeviceIdentity(near, None, 34)).soc == soc.model
                assert play_format.matching_group(config, manufacturer, near, 34, "other") == "other", near
                assert playplan.play_group(groups, manufacturer, near, 34) == "other", near
            assert play_format.matching_group(config, manufacturer, name, 30, "other") == "other"  # Android 11


def test_the_proto_model_matches_as_bundletools_list_contains():
    """play_format.matching_group is bundletool's systemOnChipIncluded: an empty list matches every phone, else the
    list must contain a SystemOnChip equal in both fields (protobuf equals), nothing looser."""
    xml = play.config_xml(plan_of({"sm8750": ["SM8750"]}))
    config = play_format.parse(xml)
    chips = list(config.device_groups[0].device_selectors[0].system_on_chips)
    assert play_format.CLASSES["SystemOnChip"](manufacturer="QTI", model="SM8750-AC") in chips
    assert play_format.matching_group(config, "QTI", "SM8750-AC", 31, "other") == "sm8750"
    for manufacturer, model in (("QTI", "SM8750-ac"), ("qti", "SM8750-AC"), ("QTI", "SM8750-AC "), ("QTI", "SM8750-"),
                                ("QTI", "SM8750-ACX"), ("Samsung", "SM8750-AC"), ("", "SM8750-AC"), ("QTI", "")):
        assert play_format.matching_group(config, manufacturer, model, 35, "other") == "other", (manufacturer, model)
    empty = play_format.CLASSES["DeviceGroupConfig"]()
    empty.device_groups.add(name="all").device_selectors.add()  # a selector without system-on-chip elements
    assert play_format.matching_group(empty, "Samsung", "s5e9945", 29, "other") == "all"


def test_a_target_named_by_an_alias_gets_the_catalog_socs_group(tmp_path):
    """The decision matches a target named SM8750P to an SM8750 phone, so the plan's group is for SM8750, with every
    name of it in the selector, and is the group the decision expects."""
    manifest = bundles.manifest(targets=("SM8750P", "SM8550"))
    for entry in [a for t in manifest["targets"] for a in t["artifacts"]] + manifest["cpu"]:
        (tmp_path / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / entry["path"]).write_bytes(entry["path"].encode())
        entry.update(sha256=sha(tmp_path / entry["path"]), size=len(entry["path"]))  # what _Sizes checks
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    parsed = Manifest.parse(manifest)
    plan = play._plan(tmp_path, parsed, "qnndeploy_models", playplan.Delivery.FAST_FOLLOW,
                      play._Sizes(tmp_path, parsed, None))
    group = plan.groups[0]
    assert group.socs == ("SM8750",)
    assert {s.model for s in group.selectors} == set(socs.find("SM8750").names)
    assert playplan.expected_group(plan, decision.identify(decision.DeviceIdentity("SM8750-AC", None, 35)).soc) == \
        group.name


def test_the_gradle_versions_come_from_the_data_file_with_their_sources():
    from qnndeploy.base import compat

    library = compat.gradle_library("ai_delivery")
    assert library == compat.GradleLibrary("com.google.android.play:ai-delivery:0.2.0-beta01", SCANCARD, "2026-12-01")
    data = json.loads((Path(qnndeploy.__file__).parent / "data/maven.json").read_text())
    assert "0.2.0-beta01" in data["ai_delivery"]["source"]["says"]
    assert compat.gradle_library("device_targeting_min_agp").version == "8.10.0"
    for key in ("android_gradle_plugin", "kotlin_android_plugin"):
        assert data[key]["source"]["url"].startswith("https://developer.android.com/"), key
    # no version of these is written in code or templates: the data file is the one place to change them
    package = Path(qnndeploy.__file__).parent
    code = "\n".join(p.read_text() for p in [*package.rglob("*.py"), *shipped_files(templates_dir())])
    assert "ai-delivery:" not in code and '"8.7.3"' not in code and '"8.10.0"' not in code


@pytest.fixture(scope="module")
def on_device_bundle(tmp_path_factory) -> Path:
    """A bundle with SM8550 and SM8750 targets built with --on-device-compile, its runtime bundled: every other phone
    of a validated arch compiles its CPU models (the v81 Stub and Skel added by hand: bundle build ships the
    targets' arches' only)."""
    from qnndeploy.bundle.build import OnDeviceRequest

    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("on-device")
    compiled = bundles.compile_inputs(root / "in", targets=("SM8550", "SM8750"))
    built = bundles.build(root / "bundle", compiled, runtime="bundled", on_device=OnDeviceRequest())
    return bundles.with_arch_libs(built, ["v81"])


def test_phones_of_no_group_reach_the_npu_from_the_base_onnx(on_device_bundle, tmp_path):
    """Issue 25: the default group of a bundle that compiles on the device holds no NPU file, and its phones still
    reach the NPU: the ONNX they compile and every arch's runtime libraries are in the base module. The size report
    says so in its own row."""
    out = tmp_path / "play"
    r = run("package", "play", str(on_device_bundle), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    plan = playplan.read_plan(out)
    manifest = json.loads((on_device_bundle / "manifest.json").read_text())
    base = {f.path for f in plan.base.files}
    compiled = {g["path"] for g in manifest["on_device"]["graphs"]}
    assert plan.on_device is not None
    assert list(plan.on_device.files) == sorted(compiled) == ["cpu/det.onnx", "cpu/rec.onnx"]
    assert compiled <= base  # the models the phone compiles travel in the base, once
    assert {"lib/arm64-v8a/libQnnHtpV81Stub.so", "lib/hexagon-v81/libQnnHtpV81Skel.so"} <= base
    validated = manifest["on_device"]["graphs"][0]["validated"]
    assert "v81" in validated and list(plan.on_device.archs) == validated and plan.on_device.budget_s == 60
    assert plan.on_device.bytes == sum((on_device_bundle / p).stat().st_size for p in compiled)
    rows = {row["group"]: row for row in report["rows"]}
    assert rows["other"]["on_device"] is True and rows["sm8750"]["on_device"] is False
    assert [p.name for p in (out / "qnndeploy_models/src/main/assets/qnndeploy_npu#group_other").rglob("*")] == [
        "group.json"]  # still no NPU file in the default group
    # a phone of no group, SM8845 (v81, no target): the group the decision expects, and it is on the NPU
    device = decision.DeviceIdentity("SM8845", None, 36)
    choice = decision.decide(Manifest.parse(manifest), device, load_errors={}, lib_dir="")
    assert (choice.npu, choice.npu_source) == (True, "on-device")
    groups = playplan.read_config(out)
    assert playplan.play_group(groups, "QTI", "SM8845", 36) == playplan.expected_group(plan, choice.soc) == "other"
    assert set(choice.files) <= base
    text = run("package", "play", str(on_device_bundle), "-o", str(tmp_path / "p2")).output
    size = play.size_text(rows["other"]["deflated"])
    assert (f"other phones: on-device compile from the base ONNX, {size} (group other: HTP "
            f"{', '.join(validated)} validated") in text
    assert "(other phones: on-device compile from the base ONNX)" in (out / "README.md").read_text()


def test_without_on_device_the_default_group_row_is_the_cpu():
    """The row stays what it was for a bundle that does not compile on the device."""
    row = play.SizeRow("other", [], 3, 100, 50)
    assert row.on_device is False
    assert "(none: the CPU)" in play._readme_table([row], 100)
    assert "on-device" not in play._readme_table([row], 100)
