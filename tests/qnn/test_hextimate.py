"""The HTP backend's host-side performance model (qnndeploy/qnn/hextimate.py): the forwarding backend library built
with the machine's C compiler and cached, the estimate of fixed graphs pinned per QAIRT release, a phone SoC's
"no estimate" with the backend's own reason, and a missing compiler's one-line MissingTool."""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from qnndeploy.base import socs
from qnndeploy.base.errors import EXIT_MISSING_TOOL, CheckFailed, MissingTool
from qnndeploy.qnn import hextimate, htp, toolchain
from tests.support import hextimate_golden as golden
from tests.support import synth_models
from tests.support.host import require

# The estimates of two fixed graphs for QCS9100 (and SA8255, the same), per QAIRT release (tests/support/
# hextimate_golden.py's graphs): synth_models.static_mlp() (MatMul 16x8 + Add + Relu) and layers(4, 512, 64) (four
# 512-wide MatMul+Relu layers on 64 rows), fp16. The graphs are deterministic and so is the backend's model, so a
# change here is a change of the cost model or of how qnndeploy turns it on. Measured here on 2026-12-05 with
# onnxruntime-qnn 2.3.0-2.7.0. The installed release (whose row must exist) is checked in this process, with SA8255
# too; every release of data/runtime.json in a child under its toolchain (the forwarder built against each
# release's libQnnHtp.so). Fields: cycles, lower, upper, fill bytes, spill bytes, ops without a cost.
MLP = (2314, 2189, 2477, 6144, 2048, 0)
GOLDEN = {
    "2.47.0": {"mlp": MLP, "layers": (226788, 200999, 257146, 2230272, 131072, 0)},
    "2.48.40": {"mlp": MLP, "layers": (226788, 200999, 257146, 2230272, 131072, 0)},
    "2.49.40": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
    "2.50.40": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
    "2.51.0": {"mlp": MLP, "layers": (230187, 205269, 259472, 2230272, 131072, 0)},
}


def _numbers(f: hextimate.Figures) -> tuple[int, ...]:
    return (f.cycles, f.lower, f.upper, f.fill_bytes, f.spill_bytes, f.ops_without_cost)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One build folder for the module's tests (built once), never the user's cache."""
    monkeypatch.setenv(hextimate.ENV_DIR, str(tmp_path_factory.getbasetemp() / "hextimate-cache"))


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


# --- parsing the profiling CSV (no QNN needed) -----------------------------------------------------------------

CSV = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,FINALIZE,9741,US,BACKEND,ROOT,QNN (finalize) time
0,UNKNOWN,290,US,BACKEND,SUB-EVENT,Graph Preparation Initializing
0,BACKEND,0,US,BACKEND,ROOT,Performance Estimates
0,BACKEND,0,US,BACKEND,SUB-EVENT,Mode
0,BACKEND,879047,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles)
0,BACKEND,766218,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles (lower estimate))
0,BACKEND,1016092,CYCLES,BACKEND,SUB-EVENT,Simulated (Accelerator exec cycles (upper estimate))
0,BACKEND,586,US,BACKEND,SUB-EVENT,Simulated (Accelerator exec time us)
0,BACKEND,17041408,BYTES,BACKEND,SUB-EVENT,Input Fill
0,BACKEND,5,BYTES,BACKEND,SUB-EVENT,Intermediate Fill
0,BACKEND,7,BYTES,BACKEND,SUB-EVENT,Intermediate Spill
0,BACKEND,0,BYTES,BACKEND,SUB-EVENT,Inter HTP Fill
0,BACKEND,0,BYTES,BACKEND,SUB-EVENT,Inter HTP Spill
0,BACKEND,262144,BYTES,BACKEND,SUB-EVENT,Output Spill
0,BACKEND,2,US,BACKEND,SUB-EVENT,Missing Ops (Number of Ops with no Costs associated)
"""


def test_the_profiling_csv_gives_one_event_per_graph_and_its_times_at_the_data_clock() -> None:
    events = hextimate.parse(CSV)
    assert len(events) == 1 and "Graph Preparation Initializing" not in events[0]
    f = hextimate.figures(events[0], "2.50.40", "QCS9100")
    assert (f.cycles, f.lower, f.upper, f.backend_us) == (879047, 766218, 1016092, 586)
    assert (f.fill_bytes, f.spill_bytes, f.ops_without_cost) == (17041408 + 5, 262144 + 7, 2)
    assert f.clock_mhz == 1497.6 and "data/hextimate.json" in f.clock_source
    assert f.ms == pytest.approx(879047 / 1497.6 / 1000, abs=1e-6)
    assert f.ms is not None and f.ms_lower is not None and f.ms_upper is not None
    assert f.ms_lower < f.ms < f.ms_upper
    # A release with no clock row gets cycles, no time, and says so.
    other = hextimate.figures(events[0], "2.0.0", "QCS9100")
    assert other.ms is None and other.clock_mhz is None and "no simulated clock" in other.clock_source
    # QAIRT 2.47-2.49 write no microseconds: the figures say None, not 0.
    older = hextimate.parse("\n".join(line for line in CSV.splitlines() if "exec time us" not in line))
    assert hextimate.figures(older[0], "2.49.40", "QCS9100").backend_us is None


# --- the library and the backend -------------------------------------------------------------------------------

@pytest.mark.needs_qnn
def test_the_library_is_built_once_and_then_taken_from_the_cache() -> None:
    first = hextimate.build()
    assert first.library.is_file() and first.library.name == "libQnnHtp.so"
    assert hasattr(ctypes.CDLL(str(first.library)), "QnnInterface_getProviders")  # loading it runs nothing
    assert (first.library.parent / "libQnnSystem.so").resolve() == first.real.parent / "libQnnSystem.so"
    made = first.library.stat().st_mtime_ns
    again = hextimate.build()
    assert again.library == first.library and not again.compiled
    assert again.library.stat().st_mtime_ns == made
    assert not [p for p in again.library.parent.parent.iterdir() if p.name.startswith(".")]  # no staging left


@pytest.mark.needs_qnn
def test_a_missing_compiler_is_missing_tool_with_what_to_install(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hextimate.ENV_DIR, str(tmp_path / "fresh"))  # nothing cached: it must compile
    monkeypatch.setenv("CC", "qnndeploy-no-such-cc")
    with pytest.raises(MissingTool) as e:
        hextimate.build()
    assert e.value.exit_code == EXIT_MISSING_TOOL
    assert "qnndeploy-no-such-cc" in str(e.value) and "apt-get install gcc" in str(e.value)
    assert "\n" not in str(e.value)
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc on PATH
    with pytest.raises(MissingTool, match=r"no C compiler \(cc\).*apt-get install gcc"):
        hextimate.build()
    assert not (tmp_path / "fresh").exists() or not any((tmp_path / "fresh").iterdir())


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_golden_cycles_of_fixed_graphs_on_qcs9100(tmp_path: Path) -> None:
    qairt = htp.qairt_version()
    if qairt not in GOLDEN:
        pytest.fail(f"no golden estimate for QAIRT {qairt}: measure the two graphs on QCS9100 and add them to GOLDEN")
    mlp = _save(synth_models.static_mlp(), tmp_path / "mlp.onnx")
    est = hextimate.estimate(mlp, socs.find("QCS9100"))
    assert est.figures is not None, est.reason
    f = est.figures
    assert _numbers(f) == GOLDEN[qairt]["mlp"]
    assert (est.soc, est.qairt, est.graphs, est.reason) == ("QCS9100", qairt, 1, "")
    assert f.lower < f.cycles < f.upper
    assert f.clock_mhz is not None and f.ms is not None and f.ms_lower is not None and f.ms_upper is not None
    assert f.ms_lower < f.ms < f.ms_upper and f.ms == pytest.approx(f.cycles / f.clock_mhz / 1000, abs=1e-6)
    layers = hextimate.estimate(_save(golden.layers(4, 512, 64), tmp_path / "layers.onnx"), socs.find("QCS9100"))
    assert layers.figures is not None and _numbers(layers.figures) == GOLDEN[qairt]["layers"]
    # SA8255, the other v73 SoC the model covers, gives the same estimate.
    same = hextimate.estimate(mlp, socs.find("SA8255")).figures
    assert same is not None and _numbers(same) == _numbers(f)


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_the_forwarder_gives_the_golden_estimate_with_every_qairt_release_qnndeploy_supports(
        toolchains: list[toolchain.Toolchain], tmp_path: Path) -> None:
    """Issue 36: the forwarder built against each release's libQnnHtp.so (in a child under that toolchain) must
    give the release's golden figures. Its interface position (graphCreate at 15, backendGetApiVersion at 3) is
    checked: a moved table is refused (no provider) or crashes the compile, and either fails here with that
    release's words. Its config is not, by the figures: with profiling on, the backend's own init graph options
    already hold hextimate = 1 for QCS9100 in 2.47.0-2.51.0, and the stock EP gives the same figures without the
    forwarder (measured 2026-12-05); a renamed key or a value of 0 changes nothing here."""
    assert [tc.qairt for tc in toolchains] == sorted(GOLDEN, key=lambda q: tuple(map(int, q.split(".")))), (
        "a release of data/runtime.json without a GOLDEN row (or a row without its release): measure it")
    got = {tc.qairt: golden.run(tc, tmp_path / tc.qairt) for tc in toolchains}
    for tc in toolchains:
        a = got[tc.qairt]
        assert a.qairt == tc.qairt, a  # the child imported that toolchain's onnxruntime-qnn
        assert a.real.name == "libQnnHtp.so", a  # the forwarder was built for, and forwards to, its backend
        assert toolchain.is_current(tc) or a.real.is_relative_to(toolchain.folder(tc).resolve()), a
    assert {q: a.graphs for q, a in got.items()} == GOLDEN


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_larger_graph_has_more_cycles_and_the_backends_microseconds_agree_with_the_clock(tmp_path: Path) -> None:
    small = hextimate.estimate(_save(synth_models.static_mlp(), tmp_path / "mlp.onnx"), socs.find("QCS9100"))
    large = hextimate.estimate(_save(golden.layers(4, 512, 64), tmp_path / "layers.onnx"), socs.find("QCS9100"))
    assert small.figures is not None and large.figures is not None
    assert large.figures.cycles > 10 * small.figures.cycles
    assert large.figures.fill_bytes > 4 * 512 * 512 * 2  # the fp16 weights are read in
    # The backend prints whole microseconds truncated from cycles / clock: the data's clock must give the same.
    f = large.figures
    assert f.backend_us is not None and f.backend_us >= 50 and f.clock_mhz is not None, f"QAIRT {large.qairt}"
    assert math.floor(f.cycles / f.clock_mhz) == f.backend_us


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_phone_soc_gets_no_estimate_and_the_backends_reason(tmp_path: Path) -> None:
    model = _save(synth_models.static_mlp(), tmp_path / "mlp.onnx")
    est = hextimate.estimate(model, socs.find("SM8750"))
    assert est.figures is None and est.graphs == 0
    assert est.reason == "the HTP backend says: Performance Estimates unsupported on soc SM8750"


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_a_graph_the_htp_does_not_take_whole_is_refused_not_estimated_in_part(tmp_path: Path) -> None:
    model = _save(synth_models.unsupported_op(), tmp_path / "det.onnx")
    with pytest.raises(CheckFailed, match=r"does not take the whole graph for QCS9100.*qnndeploy check"):
        hextimate.estimate(model, socs.find("QCS9100"))


@pytest.mark.needs_qnn
@pytest.mark.slow
def test_when_the_forwarder_cannot_load_the_backend_its_own_line_is_the_error(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model = _save(synth_models.static_mlp(), tmp_path / "mlp.onnx")
    built = hextimate.build()
    gone = hextimate.Built(built.library, tmp_path / "no" / "libQnnHtp.so", False, 0.0)
    monkeypatch.setattr(hextimate, "build", lambda: gone)
    with pytest.raises(CheckFailed, match=r"Hextimate backend library failed: cannot load the real HTP backend"):
        hextimate.estimate(model, socs.find("QCS9100"))


# --- the forwarder against a stand-in backend: what it sends, and the layout check ---------------------------------

# A stand-in for libQnnHtp.so (QnnInterface_getProviders and a table whose graphCreate records the configs it gets),
# in the layout of QNN API 2.x with backendSetConfig, or in the older one where pointer 3 is backendGetBuildId.
FAKE_BACKEND = r"""
#include <stdint.h>
typedef struct { uint32_t major, minor, patch; } V;
typedef struct { V core, backend; } A;
typedef struct { uint32_t id; const char* name; A api; void* fns[64]; } P;
static const void** seen;
static uint64_t get_version(A* a) { a->core = (V){2, 39, 0}; a->backend = (V){5, 50, 0}; return 0; }
static uint64_t get_build_id(const char** id) { *id = "v2.50.40"; return 0; }
static uint64_t graph_create(void* c, const char* n, const void** cfg, void** g) {
  (void)c; (void)n; seen = cfg; *g = (void*)1; return 0; }
static P prov = {6, "FAKE", {{2, 39, 0}, {5, 50, 0}}, {0}};
uint64_t QnnInterface_getProviders(const void*** list, uint32_t* n) {
  static const void* l[1];
  prov.fns[3] = OLD_LAYOUT ? (void*)get_build_id : (void*)get_version;
  prov.fns[15] = graph_create;
  l[0] = &prov; *list = l; *n = 1; return 0; }
const void** fake_seen(void) { return seen; }
"""

# Run in a child (the forwarder loads its backend once per process): getProviders, then graphCreate through the
# table it hands out with one config of the caller's, then the list the stand-in's graphCreate received.
DRIVER = r"""
import ctypes, sys
fwd = ctypes.CDLL(sys.argv[1])
providers, count = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_uint32()
rc = fwd.QnnInterface_getProviders(ctypes.byref(providers), ctypes.byref(count))
print("rc", rc, count.value)
if rc == 0:
    table = providers[0] + 40  # backendId, providerName, apiVersion: 4 + 4 (padding) + 8 + 24 bytes
    create = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.c_void_p.from_address(table + 15 * 8).value)
    mine = (ctypes.c_uint8 * 16)(3)  # a QnnGraph_Config_t of the caller's (option 3, priority)
    configs = (ctypes.c_void_p * 2)(ctypes.addressof(mine), None)
    graph = ctypes.c_void_p()
    print("create", create(None, b"g", configs, ctypes.byref(graph)))
    seen = ctypes.cast(ctypes.CDLL(sys.argv[2]).fake_seen, ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p)))()
    print("first", seen[0] == ctypes.addressof(mine), "end", seen[2] is None)
    added = seen[1]
    htp = ctypes.c_void_p.from_address(added + 8).value  # QnnGraph_Config_t: option, then customConfig at 8
    key = ctypes.c_char_p(ctypes.c_void_p.from_address(htp + 8).value).value.decode()
    print("graph_option", ctypes.c_int32.from_address(added).value,
          "htp_option", ctypes.c_int32.from_address(htp).value, "key", key,
          "type", hex(ctypes.c_int32.from_address(htp + 16).value),
          "value", ctypes.c_uint32.from_address(htp + 24).value)
"""


def _fake_backend(tmp_path: Path, old_layout: bool) -> Path:
    require(shutil.which("cc") is not None, "a C compiler (cc)")
    src = tmp_path / "fake.c"
    src.write_text(FAKE_BACKEND)
    lib = tmp_path / f"libfake{int(old_layout)}.so"
    subprocess.run(["cc", "-shared", "-fPIC", f"-DOLD_LAYOUT={int(old_layout)}", "-o", str(lib), str(src)],
                   check=True)
    return lib


def _drive(library: Path, backend: Path) -> str:
    env = {**os.environ, hextimate.ENV_BACKEND: str(backend)}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(library), str(backend)], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@pytest.mark.needs_qnn
def test_the_forwarder_appends_the_finalize_config_hextimate_1_to_the_callers_configs(tmp_path: Path) -> None:
    out = _drive(hextimate.build().library, _fake_backend(tmp_path, old_layout=False))
    assert "rc 0 1" in out and "create 0" in out and "first True end True" in out
    # QnnGraph_Config_t CUSTOM (0) -> QnnHtpGraph_CustomConfig_t FINALIZE_CONFIG (7), key "hextimate",
    # Qnn_Scalar_t QNN_DATATYPE_UINT_32 (0x132) = 1, at the offsets of the QNN headers cited in hextimate.c
    assert "graph_option 0 htp_option 7 key hextimate type 0x132 value 1" in out


@pytest.mark.needs_qnn
def test_the_forwarder_refuses_a_table_of_another_layout(tmp_path: Path) -> None:
    out = _drive(hextimate.build().library, _fake_backend(tmp_path, old_layout=True))
    assert "rc 1009 0" in out  # QNN_COMMON_ERROR_LOADING_BINARIES: the EP gets no provider at all
    assert "another layout than QNN API 2.x with backendSetConfig" in out
