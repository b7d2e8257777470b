"""The facts qnndeploy measures instead of reading them: what each QAIRT release's compiler writes into a context
binary for every catalog SoC (socs.json "measured"), and which release's runtime loads which release's binaries on
the host HTP emulator (runtime.json "loads").

    python -m tests.support.qnn_facts           measure with every toolchain of runtime.json and print the tables
    python -m tests.support.qnn_facts --write   ... and write them into qnndeploy/data (dated today)
    python -m tests.support.qnn_facts --wheels  the pip requirements of the toolchains (for .ci/run's wheelhouse)

Each measurement runs in a child process under its toolchain (qnndeploy.qnn.toolchain.environ), as compile --qairt
does: `python -m tests.support.qnn_facts compile OUT`, `... names OUT NAME...` and `... load SOURCE BIN...` are those
children. tests/base/test_facts.py re-measures the pinned toolchain's rows and the load table in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

from qnndeploy.qnn import toolchain

DATA = Path(__file__).resolve().parents[2] / "qnndeploy" / "data"
LOAD_SOC = "SM8550"  # the load table's binaries: a SoC every release compiles for
WIDTH = 16


def _models(folder: Path) -> tuple[Path, Path]:
    """A two-node float graph (MatMul, Relu) and its QDQ twin (uint16 activations, uint8 weights)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    w = np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32)
    x, y = h.make_tensor_value_info("x", T.FLOAT, [1, WIDTH]), h.make_tensor_value_info("y", T.FLOAT, [1, WIDTH])

    def save(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], path: Path) -> Path:
        model = h.make_model(h.make_graph(nodes, "facts", [x], [y], inits), opset_imports=[h.make_opsetid("", 21)])
        model.ir_version = 10
        onnx.save(model, path)
        return path

    fp16 = save([h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["y"])],
                [numpy_helper.from_array(w, "w")], folder / "fp16.onnx")
    scale = float(np.abs(w).max() / 127)
    q = [numpy_helper.from_array(np.array(v, dtype=dt), n) for n, v, dt in (
        ("s_x", 8 / 65535, np.float32), ("z_x", 32768, np.uint16), ("s_w", scale, np.float32),
        ("z_w", 128, np.uint8), ("s_a", 64 / 65535, np.float32), ("z_a", 32768, np.uint16))]
    wq = numpy_helper.from_array(np.clip(np.round(w / scale) + 128, 0, 255).astype(np.uint8), "wq")
    qdq = save([h.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
                h.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"]),
                h.make_node("DequantizeLinear", ["wq", "s_w", "z_w"], ["wd"]),
                h.make_node("MatMul", ["xd", "wd"], ["a"]),
                h.make_node("QuantizeLinear", ["a", "s_a", "z_a"], ["aq"]),
                h.make_node("DequantizeLinear", ["aq", "s_a", "z_a"], ["ad"]),
                h.make_node("Relu", ["ad"], ["y"])], [*q, wq], folder / "w8a16.onnx")
    return fp16, qdq


# --- the children (run under a toolchain) -------------------------------------------------------------------------

def compile_all(out: Path) -> dict[str, object]:
    """For every catalog SoC: compile both graphs with CPU fallback off, read the binaries back with this release's
    libQnnSystem. Catalog refusals are not consulted: this is what the compiler itself does."""
    import onnxruntime as ort

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp, markers, qnnsystem

    models = dict(zip(("fp16", "w8a16"), _models(out), strict=True))
    found: dict[str, object] = {}
    for soc in socs.catalog():
        refuses, written, marked = [], None, None
        for precision, model in models.items():
            ctx = out / f"{soc.model}-{precision}_ctx.onnx"
            try:
                with htp.quiet_native_stdout():
                    ort.InferenceSession(str(model), htp.session_options(soc, fp16=precision == "fp16",
                                                                         context_path=ctx))
                binary = out / f"{ctx.stem}_qnn.bin"
                info = qnnsystem.read_context_here(binary)
            except Exception:  # noqa: BLE001 onnxruntime's and libQnnSystem's own errors: a refusal
                refuses.append(precision)
                continue
            written = written or (info.soc_model, int(info.dsp_arch[1:]) if info.dsp_arch else None)
            targets = markers.scan_file(binary, markers=True).context_targets
            marked = marked or (min(arch for _, arch in targets) if len(targets) == 1 else None)
        found[soc.model] = {"soc_model": written[0] if written else None, "arch": written[1] if written else None,
                            "marker_arch": marked, "refuses": refuses}
    blob = qnnsystem.read_context_here(out / f"{LOAD_SOC}-fp16_ctx_qnn.bin").context_blob_version
    return {"qairt": htp.qairt_version(), "blob": blob, "socs": found}


def compile_names(out: Path, names: list[str]) -> dict[str, object]:
    """What the EP makes of a chip name: the fp16 graph compiled with soc_model="NAME" and no htp_arch, read back
    with libQnnSystem; None where the compiler refuses (no arch for that soc_model on the host)."""
    import onnxruntime as ort

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp, qnnsystem

    fp16, _ = _models(out)
    found: dict[str, object] = {}
    for name in names:
        ctx = out / f"name-{name}_ctx.onnx"
        try:
            with htp.quiet_native_stdout():
                ort.InferenceSession(str(fp16), htp.session_options(socs.find(name), context_path=ctx, provider={
                    "soc_model": name, "htp_arch": "0"}))
            info = qnnsystem.read_context_here(out / f"{ctx.stem}_qnn.bin")
            found[name] = [info.soc_model, int(info.dsp_arch[1:]) if info.dsp_arch else None]
        except Exception:  # noqa: BLE001 onnxruntime's and libQnnSystem's own errors: a refusal
            found[name] = None
    return {"qairt": htp.qairt_version(), "names": found}


def load_all(source: Path, binaries: list[Path]) -> dict[str, object]:
    """Whether this release's runtime loads each binary and computes what the CPU does. Each binary is loaded
    through an EPContext wrapper written here, at IR version 10, so that any ONNX Runtime reads it: the question
    is QNN's contextCreateFromBinary, not the wrapper."""
    import onnx
    import onnxruntime as ort
    from onnx import helper as h

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp

    feed = {"x": np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]}
    want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    model = onnx.load(str(source))
    rows: dict[str, object] = {}
    for binary in binaries:
        node = h.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", main_context=1, embed_mode=0,
                           ep_cache_context=binary.name, source="QNNExecutionProvider", partition_name="facts")
        wrapper = h.make_model(h.make_graph([node], "facts", list(model.graph.input), list(model.graph.output)),
                               opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
        wrapper.ir_version = 10
        path = binary.with_name(f"{binary.stem}.load_ctx.onnx")
        onnx.save(wrapper, path)
        try:
            with htp.quiet_native_stdout():
                got = ort.InferenceSession(str(path), htp.session_options(socs.find(LOAD_SOC))).run(None, feed)[0]
            cosine = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
            rows[str(binary)] = {"loads": cosine > 0.999, "error": None if cosine > 0.999 else f"cosine {cosine}"}
        except Exception as e:  # noqa: BLE001 onnxruntime's own error types: a refusal
            rows[str(binary)] = {"loads": False, "error": str(e).splitlines()[0][:300]}
    return {"qairt": htp.qairt_version(), "rows": rows}


# --- the driver ---------------------------------------------------------------------------------------------------

def _env(tc: toolchain.Toolchain) -> dict[str, str]:
    if toolchain.is_current(tc):
        here = str(Path(__file__).resolve().parents[2])
        return {**os.environ, "PYTHONSAFEPATH": "1",
                "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    toolchain.install(tc, say=lambda line: print(f"qnn_facts: {line}", file=sys.stderr))
    return toolchain.environ(tc)


def _child(tc: toolchain.Toolchain, *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-P", "-m", "tests.support.qnn_facts", *args], env=_env(tc),
                          capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{tc.name}: {' '.join(args[:1])} failed: {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_compilers(tcs: list[toolchain.Toolchain], work: Path) -> dict[str, dict[str, object]]:
    """toolchain QAIRT -> the compile child's answer; the binaries stay in work/<qairt>/."""
    answers = {}
    for tc in tcs:
        out = work / tc.qairt
        out.mkdir(parents=True, exist_ok=True)
        answers[tc.qairt] = _child(tc, "compile", str(out))
    return answers


def measure_loads(tcs: list[toolchain.Toolchain], work: Path) -> list[dict[str, object]]:
    """The load table: every toolchain's runtime against the LOAD_SOC fp16 binary of every toolchain (measured
    binaries in work/<qairt>/ from measure_compilers)."""
    binaries = {tc.qairt: work / tc.qairt / f"{LOAD_SOC}-fp16_ctx_qnn.bin" for tc in tcs}
    rows = []
    for runtime in tcs:
        answer = _child(runtime, "load", str(work / tcs[0].qairt / "fp16.onnx"), *map(str, binaries.values()))
        by_path = answer["rows"]
        assert isinstance(by_path, dict)
        rows += [{"binary": q, "runtime": runtime.qairt, "loads": by_path[str(b)]["loads"]}
                 for q, b in binaries.items()]
    return rows


def write(compilers: dict[str, dict[str, object]], loads: list[dict[str, object]]) -> None:
    """Put the measurements into socs.json ("measured", one row per QAIRT) and runtime.json ("loads"), dated."""
    today = date.today().isoformat()
    socs_path = DATA / "socs.json"
    data = json.loads(socs_path.read_text())
    for soc in data["socs"]:
        soc["measured"] = [{"qairt": q, **answer["socs"][soc["model"]]}  # type: ignore[index]
                           for q, answer in compilers.items()]
    data["sources"]["measured"]["read"] = today
    lines = ["{", f'  "about": {json.dumps(data["about"])},', '  "sources": {']
    items = list(data["sources"].items())
    lines += [f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" + ("," if i < len(items) - 1 else "")
              for i, (k, v) in enumerate(items)]
    lines += ["  },", '  "socs": [']
    lines += ["    " + json.dumps(s, ensure_ascii=False) + ("," if i < len(data["socs"]) - 1 else "")
              for i, s in enumerate(data["socs"])]
    socs_path.write_text("\n".join([*lines, "  ]", "}"]) + "\n")
    runtime_path = DATA / "runtime.json"
    runtime = json.loads(runtime_path.read_text())
    runtime["loads"]["measured"], runtime["loads"]["rows"] = today, loads
    runtime_path.write_text(json.dumps(runtime, indent=2, ensure_ascii=False) + "\n")


def wheels() -> list[str]:
    """The pip requirements of every toolchain but the installed one."""
    return [w for tc in toolchain.known() if not toolchain.is_current(tc)
            for w in [f"onnxruntime-qnn=={tc.onnxruntime_qnn}"] + ([f"onnxruntime=={tc.onnxruntime}"] if tc.onnxruntime
                                                                   else [])]


def main(argv: list[str]) -> int:
    if argv[:1] == ["compile"]:
        print(json.dumps(compile_all(Path(argv[1]))))
        return 0
    if argv[:1] == ["names"]:
        print(json.dumps(compile_names(Path(argv[1]), argv[2:])))
        return 0
    if argv[:1] == ["load"]:
        print(json.dumps(load_all(Path(argv[1]), [Path(p) for p in argv[2:]])))
        return 0
    if argv[:1] == ["--wheels"]:
        print(" ".join(wheels()))
        return 0
    tcs = toolchain.known()
    with tempfile.TemporaryDirectory(prefix="qnn-facts-") as tmp:
        compilers = measure_compilers(tcs, Path(tmp))
        loads = measure_loads(tcs, Path(tmp))
    for q, answer in compilers.items():
        print(f"QAIRT {q}: context blob {answer['blob']}")
        for model, seen in answer["socs"].items():  # type: ignore[attr-defined]
            print(f"  {model:<9} soc_model {seen['soc_model']}  arch {seen['arch']}  refuses {seen['refuses']}")
    for row in loads:
        print(f"binary {row['binary']:<8} runtime {row['runtime']:<8} {'loads' if row['loads'] else 'REFUSED'}")
    if argv[:1] == ["--write"]:
        write(compilers, loads)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
