"""The licence manifest (format 6's licences) and the 16 KB page gate of bundle build and verify.

What is real here: the onnxruntime-qnn wheel installed in this environment (its package metadata, its licence files)
and its compiler, which makes the demo build's context binaries. What is a stand-in: the runtime libraries
(tests/support/elfgen.py's ELF files in the QAIRT SDK layout; the real SDK needs a Qualcomm account), so nothing
here loads a re-aligned library: a Skel is Hexagon code, which nothing on this machine runs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from qnndeploy.base.errors import BadInput
from qnndeploy.bundle.build import build_bundle, spec_from_build
from qnndeploy.formats import elf
from qnndeploy.qnn import htp
from qnndeploy.verification.checks import verify_bundle
from tests.support import REPO
from tests.support.cli import run
from tests.support.elfgen import AARCH64, QDSP6, QUALCOMM_SKEL_ALIGN, android_lib, fake_sdk, skel_lib


@pytest.fixture(scope="module")
def demo(demo_run: Path) -> Path:
    """The demo's output folder: three SoCs compiled and validated by the installed onnxruntime-qnn."""
    return demo_run


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(demo: Path, out: Path, **kw) -> Path:
    return build_bundle(replace(spec_from_build(demo / "build", "kws", "1.0.0"), **kw), out).path


def problems(bundle: Path) -> list[str]:
    return [f"{p.path}: {p.message}" for p in verify_bundle(bundle).problems]


@pytest.fixture
def bundle(demo, tmp_path) -> Path:
    """The demo build bundled with an external runtime, as `qnndeploy demo` does."""
    return build(demo, tmp_path / "out")


def test_the_compiler_wheels_licence_files_are_copied_and_hashed(bundle):
    m = manifest(bundle)
    dist = metadata.distribution("onnxruntime-qnn")
    wheel = next(o for o in m["licences"]["origins"] if o["kind"] == "onnxruntime-qnn")
    assert (wheel["id"], wheel["version"]) == (f"onnxruntime-qnn-{dist.version}", dist.version)
    assert wheel["qairt"] == htp.qairt_version()
    # every file of the wheel's own file list named like a licence or notice, and nothing else
    shipped = {f.as_posix(): Path(str(dist.locate_file(f))) for f in dist.files or ()
               if f.name in ("LICENSE", "Qualcomm_LICENSE.pdf", "ThirdPartyNotices.txt")}
    assert {t["path"] for t in wheel["terms"]} == {f"licences/{wheel['id']}/{p}" for p in shipped}
    assert any(p.endswith("dist-info/licenses/LICENSE") for p in shipped)
    for t in wheel["terms"]:
        source = shipped[t["path"].removeprefix(f"licences/{wheel['id']}/")]
        assert (bundle / t["path"]).read_bytes() == source.read_bytes()
        assert t["sha256"] == sha(bundle / t["path"]) and t["size"] == source.stat().st_size
    binaries = {a["path"]: a["sha256"] for t in m["targets"] for a in t["artifacts"] if a["path"].endswith(".bin")}
    assert {f["path"]: (f["sha256"], f["origin"]) for f in m["licences"]["files"]} == {
        p: (s, wheel["id"]) for p, s in binaries.items()}
    maven = next(o for o in m["licences"]["origins"] if o["kind"] == "maven")
    assert maven["coordinate"] == m["runtime"]["maven"] and maven["terms"] is None  # the app brings it, and its terms
    report = verify_bundle(bundle)
    assert report.ok, report.problems
    names = ", ".join(t["path"].rsplit("/", 1)[-1] for t in wheel["terms"])
    assert report.licences == [f"onnxruntime-qnn {dist.version} -> licences/{wheel['id']}/ ({names})",
                               f"{m['runtime']['maven']} -> terms unknown"]
    shown = run("bundle", "verify", bundle, "--shallow").output
    assert f"    licence: onnxruntime-qnn {dist.version} -> licences/{wheel['id']}/ ({names})\n" in shown


def test_verify_catches_a_tampered_licence_file(bundle):
    terms = manifest(bundle)["licences"]["origins"][0]["terms"]
    path = bundle / terms[0]["path"]
    path.write_bytes(path.read_bytes().replace(b"Microsoft", b"Nobody Co", 1))
    assert problems(bundle) == [(f"{terms[0]['path']}: sha256 differs from the manifest (the file changed after "
                                "bundling)")]


def test_verify_catches_a_missing_licence_file(bundle):
    terms = manifest(bundle)["licences"]["origins"][0]["terms"]
    (bundle / terms[-1]["path"]).unlink()
    assert problems(bundle) == [f"{terms[-1]['path']}: is listed in the manifest but missing from the bundle"]


def test_verify_catches_a_qualcomm_file_without_its_entry(bundle):
    m = manifest(bundle)
    dropped = m["licences"]["files"].pop(0)
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert problems(bundle) == [(f"{dropped['path']}: is a Qualcomm file with no licences entry: where it came from "
                                "and under which terms is not recorded; bundle it again")]


def test_verify_catches_an_entry_of_other_bytes_or_origin(bundle):
    m = manifest(bundle)
    first, second = m["licences"]["files"][:2]
    first["sha256"], second["origin"] = "ab" * 32, "elsewhere"
    (bundle / "manifest.json").write_text(json.dumps(m))
    found = problems(bundle)
    assert len(found) == 2
    assert found[0].startswith(f"{first['path']}: licences gives it sha256 abababababab…, the manifest ")
    assert found[1] == f"{second['path']}: licences names its origin 'elsewhere', which it does not declare"


def test_a_format_6_manifest_without_licences_fails_the_schema(bundle):
    m = manifest(bundle)
    del m["licences"]
    (bundle / "manifest.json").write_text(json.dumps(m))
    assert problems(bundle) == ["manifest.json: schema: (top): 'licences' is a required property"]


def test_an_sdk_folder_without_licence_files_has_unknown_terms(demo, tmp_path):
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"])
    b = build(demo, tmp_path / "out", sdk_root=sdk)
    m = manifest(b)
    origin = next(o for o in m["licences"]["origins"] if o["kind"] == "qairt-sdk")
    assert origin["terms"] is None and origin["qairt"] == m["qairt"]["build"]
    libs = {lib["path"] for lib in m["runtime"]["libs"]}
    assert {f["path"] for f in m["licences"]["files"] if f["origin"] == origin["id"]} == libs
    assert not (b / "licences" / origin["id"]).exists()
    report = verify_bundle(b)
    assert report.ok, report.problems
    assert "qairt-sdk -> terms unknown" in report.licences


def test_a_runtime_folder_with_a_licence_file_carries_it(demo, tmp_path):
    """The rule, on a folder made here: the licence and notice files at its root are copied, nothing else."""
    libs = tmp_path / "libs"
    for name in ("libQnnHtp.so", "libQnnSystem.so", *(f"libQnnHtpV{n}Stub.so" for n in (73, 75, 79))):
        android_lib(libs / name)
    for n in (73, 75, 79):
        skel_lib(libs / f"libQnnHtpV{n}Skel.so", f"v{n}")
    (libs / "LICENSE.txt").write_text("terms as given\n")
    (libs / "NOTICE").write_text("notices\n")
    (libs / "readme.md").write_text("not a licence\n")
    b = build(demo, tmp_path / "out", libs_dir=libs)
    origin = next(o for o in manifest(b)["licences"]["origins"] if o["kind"] == "runtime-libs")
    assert [t["path"] for t in origin["terms"]] == ["licences/runtime-libs/LICENSE.txt", "licences/runtime-libs/NOTICE"]
    assert (b / "licences/runtime-libs/NOTICE").read_text() == "notices\n"
    assert verify_bundle(b).ok


# --- the 16 KB page gate -------------------------------------------------------------------------------------------

def test_an_unaligned_android_library_is_refused_before_anything_is_written(demo, tmp_path):
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"])
    android_lib(sdk / "lib/aarch64-android/libQnnSystem.so", align=4096)
    out = tmp_path / "out"
    with pytest.raises(BadInput) as e:
        build(demo, out, sdk_root=sdk)
    assert str(e.value) == (f"{sdk}/lib/aarch64-android/libQnnSystem.so has PT_LOAD alignment 4096, and Google Play "
                            "and phones with 16 KB pages need 16384: relink it with -Wl,-z,max-page-size=16384, or "
                            "pass --align-16k to raise its p_align (done only where its segments allow it, proven on "
                            "the file); nothing was written")
    assert not out.exists()
    r = run("bundle", "build", "--from-build", demo / "build", "--name", "kws", "--version", "1.0.0",
            "--qnn-sdk-root", sdk, "-o", out)
    assert (r.exit_code, r.stderr) == (2, f"error: {e.value}\n") and not out.exists()


def test_qualcomms_4k_skels_are_refused_without_align_16k(demo, tmp_path):
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"], skel_align=QUALCOMM_SKEL_ALIGN)
    with pytest.raises(BadInput, match=r"libQnnHtpV73Skel.so has PT_LOAD alignment 4096, .*use a Skel built 16 "
                                       r"KB-aligned, or pass --align-16k"):
        build(demo, tmp_path / "out", sdk_root=sdk)
    assert not (tmp_path / "out").exists()


def test_align_16k_changes_only_p_align_and_records_both_hashes(demo, tmp_path):
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"], skel_align=QUALCOMM_SKEL_ALIGN)
    b = build(demo, tmp_path / "out", sdk_root=sdk, align_16k=True)
    m = manifest(b)
    entries = {f["path"]: f for f in m["licences"]["files"]}
    for n in (73, 75, 79):
        rel = f"lib/hexagon-v{n}/libQnnHtpV{n}Skel.so"
        before = (sdk / f"lib/hexagon-v{n}/unsigned/libQnnHtpV{n}Skel.so").read_bytes()
        after = (b / rel).read_bytes()
        assert entries[rel]["original_sha256"] == hashlib.sha256(before).hexdigest()
        assert entries[rel]["sha256"] == hashlib.sha256(after).hexdigest() != entries[rel]["original_sha256"]
        changed = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
        assert changed and len(before) == len(after)
        assert set(changed) <= set(range(52 + 28, 52 + 32))  # ELF32: p_align, the last word of the one phdr
        assert elf.read_elf(b / rel).load_aligns == (16384,)
    assert not any("original_sha256" in f for f in m["licences"]["files"] if "Skel" not in f["path"])
    assert verify_bundle(b).ok


def two_loads(machine: int, second: tuple[int, int]) -> bytes:
    """An ELF64 (AArch64) or ELF32 (Hexagon) file with two 4 KB-aligned PT_LOAD segments, the second at (offset,
    vaddr)."""
    if machine == AARCH64:
        header = struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 64, 0, 0, 64, 56, 2, 0, 0, 0)
        phdrs = (struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 0x1000, 0x1000, 4096)
                 + struct.pack("<IIQQQQQQ", 1, 6, second[0], second[1], second[1], 0x100, 0x100, 4096))
        ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    else:
        header = struct.pack("<HHIIIIIHHHHHH", 3, machine, 1, 0, 52, 0, 0x73, 52, 32, 2, 0, 0, 0)
        phdrs = (struct.pack("<IIIIIIII", 1, 0, 0, 0, 0x1000, 0x1000, 5, 4096)
                 + struct.pack("<IIIIIIII", 1, second[0], second[1], second[1], 0x100, 0x100, 6, 4096))
        ident = b"\x7fELF\x01\x01\x01" + bytes(9)
    data = ident + header + phdrs
    return data + bytes(second[0] + 0x100 - len(data))


@pytest.mark.parametrize("machine", [AARCH64, QDSP6])
def test_realignment_is_proven_on_the_bytes(machine):
    congruent = two_loads(machine, (0x1000, 0x5000))  # 0x1000 = 0x5000 mod 16384: the same pages with 16 KB
    after = elf.realigned(congruent)
    assert [s.align for s in elf.parse_elf_bytes(after).loads] == [16384, 16384]
    with pytest.raises(ValueError, match="byte 0x200 changed outside the PT_LOAD p_align fields"):
        elf.prove_realigned(congruent, after[:0x200] + b"\x01" + after[0x201:])
    with pytest.raises(ValueError, match="not congruent modulo 16384: its file layout must change"):
        elf.realigned(two_loads(machine, (0x1000, 0x2000)))  # the usual 4 KB layout: only relinking helps


def test_align_16k_refuses_a_library_whose_segments_do_not_allow_it(demo, tmp_path):
    sdk = fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"])
    (sdk / "lib/aarch64-android/libQnnHtp.so").write_bytes(two_loads(AARCH64, (0x1000, 0x2000)))
    with pytest.raises(BadInput, match=r"libQnnHtp.so has PT_LOAD alignment 4096, .* and --align-16k cannot raise "
                                       r"it: its PT_LOAD segment 1 has p_offset 0x1000 and p_vaddr 0x2000, not "
                                       r"congruent modulo 16384"):
        build(demo, tmp_path / "out", sdk_root=sdk, align_16k=True)
    assert not (tmp_path / "out").exists()


def test_verify_refuses_a_4k_skel(demo, tmp_path):
    """Skels travel in the app's lib/arm64-v8a/ (scaffold's jniLibs), where Play's 16 KB check reads them."""
    b = build(demo, tmp_path / "out", sdk_root=fake_sdk(tmp_path / "sdk", ["v73", "v75", "v79"]))
    rel = "lib/hexagon-v79/libQnnHtpV79Skel.so"
    skel_lib(tmp_path / "4k.so", "v79", align=QUALCOMM_SKEL_ALIGN)
    shutil.copy(tmp_path / "4k.so", b / rel)
    m = manifest(b)
    for entry in [*m["runtime"]["libs"], *m["licences"]["files"]]:
        if entry["path"] == rel:
            entry["sha256"] = sha(b / rel)
    (b / "manifest.json").write_text(json.dumps(m))
    assert problems(b) == [(f"{rel}: PT_LOAD alignment is 4096: the app packs Skels in lib/arm64-v8a/, where Google "
                           "Play's 16 KB check needs >= 16384 (bundle build --align-16k raises it)")]


# --- each compiler's origin, from what its compile record says ------------------------------------------------------

def test_a_wheel_is_found_in_its_toolchain_folder_by_its_package_metadata(tmp_path, monkeypatch):
    """A toolchain folder is pip's --target layout: the wheel's dist-info lists its files (RECORD). Written here by
    hand for a known toolchain that is not the installed one (no wheel is downloaded)."""
    from qnndeploy.bundle import licences
    from qnndeploy.qnn import toolchain

    installed = metadata.version("onnxruntime-qnn")
    tc = next(t for t in toolchain.known() if t.onnxruntime_qnn != installed)
    monkeypatch.setenv(toolchain.ENV_DIR, str(tmp_path))
    folder = toolchain.folder(tc)
    info = folder / f"onnxruntime_qnn-{tc.onnxruntime_qnn}.dist-info"
    (folder / "onnxruntime_qnn").mkdir(parents=True)
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: onnxruntime-qnn\nVersion: {tc.onnxruntime_qnn}\n")
    (folder / "onnxruntime_qnn/Qualcomm_LICENSE.pdf").write_bytes(b"%PDF terms")
    (folder / "onnxruntime_qnn/__init__.py").write_text("")
    (info / "RECORD").write_text("onnxruntime_qnn/Qualcomm_LICENSE.pdf,,\nonnxruntime_qnn/__init__.py,,\n"
                                 f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    record = {"backend": "ort", "qairt": tc.qairt, "tools": {"onnxruntime-qnn": tc.onnxruntime_qnn}}
    origin = licences.compiler(record, None)
    assert (origin.id, origin.version, origin.qairt) == (f"onnxruntime-qnn-{tc.onnxruntime_qnn}", tc.onnxruntime_qnn,
                                                        tc.qairt)
    assert origin.found_in == f"the toolchain folder {folder} (onnxruntime-qnn {tc.onnxruntime_qnn})"
    assert origin.terms == ((folder / "onnxruntime_qnn/Qualcomm_LICENSE.pdf",
                             f"licences/{origin.id}/onnxruntime_qnn/Qualcomm_LICENSE.pdf"),)
    monkeypatch.setenv(toolchain.ENV_DIR, str(tmp_path / "none"))  # nowhere here: the terms are unknown
    gone = licences.compiler(record, None)
    assert gone.terms is None and gone.found_in == (f"onnxruntime-qnn {tc.onnxruntime_qnn} is neither installed "
                                                    "here nor a toolchain folder")


def test_the_qairt_and_aihub_backends_and_binaries_without_a_record(tmp_path):
    from qnndeploy.bundle import licences
    from qnndeploy.formats.manifest import OriginKind

    sdk = licences.sdk(fake_sdk(tmp_path / "sdk", ["v79"]))
    qairt = {"backend": "qairt", "qairt": "2.40.0", "tools": {"qairt_sdk": "2.40.0.251030"}}
    assert licences.compiler(qairt, sdk) == sdk  # the SDK bundle build was given: of the bundle's one QAIRT build
    alone = licences.compiler(qairt, None)
    assert (alone.kind, alone.version, alone.terms) == (OriginKind.QAIRT_SDK, "2.40.0.251030", None)
    hub = licences.compiler({"backend": "aihub", "qairt": "2.40.0", "tools": {}}, None)
    assert (hub.kind, hub.terms) == (OriginKind.AIHUB, None)
    assert licences.compiler(None, sdk).kind == OriginKind.UNKNOWN
    # the QAIRT SDK stand-in has no licence file: no public source read here says what the real SDK's root holds
    standin = licences.sdk(REPO / "tests/support/qairt_standin")
    assert standin.terms is None and standin.found_in == "the root of the QAIRT SDK folder qairt_standin"
