"""bundle verify reads every context binary with libQnnSystem: a binary of another graph is caught by its own
metadata even where its QAIRT and SoC markers are right, which the marker scan alone could not do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qnndeploy.verification.checks import verify_bundle
from tests.support.bundles import rehash
from tests.support.cli import run

pytestmark = [pytest.mark.needs_qnn, pytest.mark.slow]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LM's prefill and decode graphs, each compiled alone for SM8750, bundled."""
    from tests.support import corpus_torch

    root = tmp_path_factory.mktemp("swap")
    lm = corpus_torch.export_tiny_lm(root)
    r = run("compile", *(f"{g}={p}" for g, p in lm.items()), "--soc", "SM8750", "-o", str(root / "build"),
            "--no-cache")
    assert r.exit_code == 0, r.output
    r = run("bundle", "--from-build", str(root / "build"), "--name", "lm", "--version", "1",
            "-o", str(root))
    assert r.exit_code == 0, r.output
    return root / "lm-1"


def _swap(bundle: Path, tmp_path: Path, drop_wrapper: bool, records: bool = False) -> tuple[Path, str]:
    """A copy whose prefill.bin is decode's binary, listed with its real hash and size: every marker is right.
    Without its compile and validation records (which name the real binary's sha256: a check of its own) unless
    `records`."""
    copy = tmp_path / "lm-1"
    shutil.copytree(bundle, copy)
    if not records:
        m = json.loads((copy / "manifest.json").read_text())
        m["records"] = []
        shutil.rmtree(copy / "records")
        (copy / "manifest.json").write_text(json.dumps(m))
    npu = copy / "npu" / "SM8750"
    shutil.copyfile(npu / "decode.bin", npu / "prefill.bin")
    rehash(copy, "npu/SM8750/prefill.bin")
    m = json.loads((copy / "manifest.json").read_text())
    arts = m["targets"][0]["artifacts"]
    if drop_wrapper:
        m["targets"][0]["artifacts"] = [a for a in arts if a["format"] != "ort-epcontext"]
        for ctx in npu.glob("*_ctx.onnx"):
            ctx.unlink()
    (copy / "manifest.json").write_text(json.dumps(m))
    return copy, "npu/SM8750/prefill.bin"


def test_the_real_bundle_verifies_by_its_binaries_metadata(bundle: Path) -> None:
    report = verify_bundle(bundle)
    assert report.ok, report.problems
    assert not any("markers only" in w.message for w in report.warnings)


def test_another_graphs_binary_is_caught_by_its_signature(bundle: Path, tmp_path: Path) -> None:
    copy, path = _swap(bundle, tmp_path, drop_wrapper=True)
    problems = [p.message for p in verify_bundle(copy).problems if p.path == path]
    assert problems == [(
        "its graph for 'prefill' is (input_ids 1x1 int32, position 1x1 int32, past_keys 2x1x4x32x32 float32, "
        "past_values 2x1x4x32x32 float32) -> (logits 1x1x512 float32, keys 2x1x4x1x32 float32, values 2x1x4x1x32 "
        "float32), but graph 'prefill' is (input_ids 1x32 int32) -> (logits 1x32x512 float32, keys 2x1x4x32x32 "
        "float32, values 2x1x4x32x32 float32): is it another graph's binary?")], problems


def test_another_graphs_binary_is_caught_by_the_graph_its_wrapper_runs(bundle: Path, tmp_path: Path) -> None:
    copy, path = _swap(bundle, tmp_path, drop_wrapper=False)
    problems = [p.message for p in verify_bundle(copy).problems if p.path == path]
    assert len(problems) == 1 and problems[0].startswith("holds no graph 'QNNExecutionProvider_"), problems
    assert "the one graph 'prefill''s EPContext wrapper runs" in problems[0]


def test_without_libqnnsystem_the_markers_decide_and_the_report_says_so(bundle: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QNNDEPLOY_QNN_SYSTEM_LIB", str(tmp_path / "missing" / "libQnnSystem.so"))
    report = verify_bundle(bundle, allow_unchecked=True)
    assert report.ok
    assert any(w.path == "manifest.json" and "their markers only were read" in w.message for w in report.warnings)
    copy, _ = _swap(bundle, tmp_path, drop_wrapper=True)
    assert verify_bundle(copy, allow_unchecked=True).ok, "the markers alone cannot tell the two binaries apart"
    copy, path = _swap(bundle, tmp_path / "with-records", drop_wrapper=True, records=True)
    [problem] = verify_bundle(copy, allow_unchecked=True).problems  # the records can
    assert problem.path == path and "is not the binary its record records/prefill-SM8750-" in problem.message


def test_resource_warnings_name_the_users_graph_and_leave_spill_fill_alone() -> None:
    """A spill-fill buffer is the DDR scratch the compiler planned (no compile option shrinks it: 4.75 MiB for
    ppocr_det at 4 and 8 MiB of VTCM and with --spill-fill): no warning. A binary compiled for more VTCM than its SoC
    has is one, named by the user's graph, not the EP's internal QNNExecutionProvider_..._1_0."""
    from qnndeploy.base import socs
    from qnndeploy.qnn import contextcheck
    from qnndeploy.qnn.qnnsystem import ContextInfo, GraphInfo

    def context(vtcm_mb: int) -> ContextInfo:
        graph = GraphInfo("QNNExecutionProvider_QNNExecutionProvider_926283722540520043_1_0", (), (),
                          spill_fill_bytes=4_980_736, vtcm_bytes=vtcm_mb << 20, optimization_level=0, htp_dlbc=None,
                          num_hvx_threads=None, io_tensor_bytes=None, op_data_bytes=None, const_bytes=None,
                          graph_info_version=3)
        return ContextInfo("v2.49.40", "2.0", "5.0", "", "3.4", 1, None, "v79", 69, 8, 2, (graph,))

    soc = socs.find("SM8750")
    assert contextcheck.resource_warnings(context(4), soc, "det") == []
    assert contextcheck.resource_warnings(context(16), soc, "det") == [
        (f"det was compiled for 16 MiB of VTCM, more than the {soc.vtcm_mb} MiB of SM8750: it will not load "
         "there (compile --vtcm-mb)")]
