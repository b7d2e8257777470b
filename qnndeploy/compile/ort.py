"""The `ort` backend: onnxruntime-qnn's QNN EP compiles each job into an EPContext model + QNN context binary.

Each job runs in its own Python process (`python -m qnndeploy.compile.ort SPEC.json`): the QNN and onnxruntime
libraries log to the process's stderr, so a process per job is what gives every job its own complete log, and a
crash in the native compiler fails one job instead of the whole run. Starting one costs about 0.2 s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import IO

from qnndeploy.base import child, socs
from qnndeploy.base.errors import BadInput, QnnDeployError, first_line
from qnndeploy.base.fileio import JSON, write_json
from qnndeploy.base.kinds import BackendName, Precision
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT
from qnndeploy.base.socs import Soc
from qnndeploy.compile import logs
from qnndeploy.compile.jobs import Compiled, CompileError, CompileJob, Member, Tools
from qnndeploy.formats.records import HtpSettings
from qnndeploy.model.onnxio import load_model, real_inputs, tensor_info
from qnndeploy.model.quantize import (
    INT4_SETTINGS,
    SETTINGS,
    Encoding,
    QuantizedLayer,
    int4_weights,
    qdq,
    quantized_layers,
    uint8_io,
)
from qnndeploy.model.samples import load_samples
from qnndeploy.qnn import epcontext, htp, refusals

FEW_CALIBRATION_SAMPLES = 20
QUANTIZED = "quantized.json"  # beside a QDQ graph a job published for the other SoCs' jobs: its layers, warnings
PROVIDER_OPTIONS = ("vtcm_mb", "htp_graph_finalization_optimization_mode", "enable_htp_spill_fill_buffer",
                    "enable_block_quant_weight_optimization")


class OrtBackend:
    name = BackendName.ORT

    def __init__(self) -> None:
        htp._require()
        self.qairt_version = htp.qairt_version()

    def identity(self) -> dict[str, str]:
        return {"qairt": self.qairt_version, "onnxruntime": version("onnxruntime"),
                "onnxruntime-qnn": version("onnxruntime-qnn")}

    def options(self, soc: Soc, precision: Precision, htp: HtpSettings) -> JSON:
        options: JSON = {"htp_arch": soc.arch_number, "soc_model": soc.soc_id,
                   "enable_htp_fp16_precision": precision == Precision.FP16 or bool(htp.keep_fp16),
                   "cpu_fallback": False,
                   "ep_context_embed_mode": 0, "vtcm_mb": htp.vtcm_mb,
                   "htp_graph_finalization_optimization_mode": htp.optimization_mode,
                   "enable_htp_spill_fill_buffer": htp.spill_fill}
        if precision.quantized:
            options["quantization"] = {**(INT4_SETTINGS if precision == Precision.W4A16 else SETTINGS),
                                       **({"nodes_to_exclude": list(htp.keep_fp16)} if htp.keep_fp16 else {}),
                                       **({"int8_weight_nodes": list(htp.keep_int8)} if htp.keep_int8 else {}),
                                       **({"uint8_io": {n: [sc, zp] for n, sc, zp in htp.kv8}} if htp.kv8 else {})}
        if precision == Precision.W4A16:
            # LPBQ: the block scales stored as a per-channel scale and 4-bit multipliers (measured: 2.35 MB against
            # 2.43 MB for a 1024x4096 weight, the same outputs when the scales have that form, as int4_weights's do)
            options["enable_block_quant_weight_optimization"] = True
        return options

    def compile(self, job: CompileJob, work: Path, log: IO[str], tools: Tools) -> Compiled:
        # Temporary files live inside the staging folder: an interrupted job leaves one folder to remove.
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=work) as tmp:
            members = job.members or (Member(job.graph, job.model, job.model_sha256, job.calibration),)
            provider = {k: str(int(v)) for k in PROVIDER_OPTIONS if (v := job.options.get(k)) not in (None, False)}
            quantization = job.options.get("quantization") or {}
            spec: JSON = {"graph": job.graph, "shared": bool(job.members), "soc": job.soc.model, "provider": provider,
                    "fp16": job.options["enable_htp_fp16_precision"],
                    "keep_fp16": quantization.get("nodes_to_exclude", []),
                    "keep_int8": quantization.get("int8_weight_nodes", []),
                    "uint8": quantization.get("uint8_io", {}),
                    "precision": job.precision, "work": str(work), "tmp": tmp,
                    "members": [{"graph": m.graph, "model": str(m.model),
                                 "calibration": str(m.calibration) if m.calibration else None,
                                 "quantized": _quantized_key(job, m)} for m in members],
                    "quantized": str(job.quantized) if job.quantized else None,
                    "result": str(Path(tmp) / "result.json"), "log": str(job.log)}
            spec_path = Path(tmp) / "job.json"
            spec_path.write_text(json.dumps(spec))
            # One BLAS thread: the jobs already run one per core, and OpenBLAS's threads fighting over shared
            # cores made the per-layer errors' products 17x slower (measured: 22 ms against 1.3 ms a MatMul).
            code = tools.run(child.module("compile.ort", str(spec_path)), log,
                             env=child.environ(base={"OPENBLAS_NUM_THREADS": "1", **os.environ,
                                                     "PYTHONUNBUFFERED": "1"}))
            try:
                result = json.loads(Path(spec["result"]).read_text())
            except (OSError, ValueError):
                raise CompileError(f"the compiler process died (exit {code}) before finishing; "
                                   f"see the log") from None
        if not result["ok"]:
            raise CompileError(result["error"])
        layers = {g: tuple(QuantizedLayer.parse(q) for q in found) for g, found in result.get("layers", {}).items()}
        return Compiled([tuple(f) for f in result["files"]], result["warnings"], result.get("graphs", {}),
                        result.get("twins", []), result.get("shared_saving"), layers=layers)


# --- the worker process ----------------------------------------------------------------------------

def run(spec: JSON) -> JSON:
    """Compile one job; runs in the worker process, prints progress into the job log."""
    soc = socs.find(spec["soc"])
    fp16 = spec["fp16"]  # fp16, or a quantized build with nodes kept unquantized (run in fp16)
    precision = Precision(spec["precision"])
    work, tmp = Path(spec["work"]), Path(spec["tmp"])
    warnings: list[str] = []
    models: dict[str, Path] = {}
    layers: dict[str, list[JSON]] = {}
    sources = {m["graph"]: Path(m["model"]) for m in spec["members"]}  # models may become their QDQ graphs
    for m in spec["members"]:
        models[m["graph"]] = Path(m["model"])
        if precision.quantized:
            q = _quantized(m, spec, precision)
            models[m["graph"]] = q.model
            warnings += [f"{m['graph']}: {w}" for w in q.warnings]
            layers[m["graph"]] = [x.to_json() for x in q.layers]
    target = _Target(soc, fp16, precision, spec["provider"], Path(spec["log"]))
    if not spec["shared"]:
        (graph, model), = models.items()
        _compile(model, sources[graph], graph, work, target)
        _check_loads(work / f"{graph}_ctx.onnx", soc, fp16)
        return {"files": [[f"{graph}.bin", CONTEXT_BINARY], [f"{graph}_ctx.onnx", EPCONTEXT]], "warnings": warnings,
                "layers": layers}

    # A shared context: every member compiled into one QNN context (ep.share_ep_contexts), where a weight of equal
    # values, dtype and shape is stored once (measured: exporters' differing weight names do not matter); then each
    # member alone, the twin the host emulator runs for validate and the size the report compares against.
    name = spec["graph"]
    print(f"qnndeploy: compiling {', '.join(models)} into one context {name}.bin with shared weights", flush=True)
    _compile_shared(models, sources, name, work, target)
    files = [[f"{name}.bin", CONTEXT_BINARY]] + [[f"{g}_ctx.onnx", EPCONTEXT] for g in models]
    graphs = {f"{g}_ctx.onnx": g for g in models}
    twins: list[str] = []
    for g, model in models.items():
        print(f"qnndeploy: compiling {g} alone, the twin the host emulator runs in validate", flush=True)
        alone = tmp / f"twin-{g}"
        alone.mkdir()
        _compile(model, sources[g], g, alone, target)
        (alone / f"{g}.bin").replace(work / f"twin-{g}.bin")
        epcontext.retarget(alone / f"{g}_ctx.onnx", work / f"twin-{g}_ctx.onnx", f"twin-{g}.bin")
        _check_loads(work / f"twin-{g}_ctx.onnx", soc, fp16)
        files += [[f"twin-{g}.bin", CONTEXT_BINARY], [f"twin-{g}_ctx.onnx", EPCONTEXT]]
        graphs.update({f"twin-{g}.bin": g, f"twin-{g}_ctx.onnx": g})
        twins += [f"twin-{g}.bin", f"twin-{g}_ctx.onnx"]
    separate = sum((work / f"twin-{g}.bin").stat().st_size for g in models)
    shared = (work / f"{name}.bin").stat().st_size
    print(f"qnndeploy: {name}.bin is {shared:,} bytes; the graphs compiled apart take {separate:,}", flush=True)
    if shared > separate * 0.95:
        warnings.append(f"{name}.bin is {shared:,} bytes, the graphs apart {separate:,}: they have (almost) no weights "
                        "in common (same values, dtype and shape), so sharing saves nothing")
    return {"files": files, "warnings": warnings, "graphs": graphs, "twins": twins,
            "shared_saving": {"shared_bytes": shared, "separate_bytes": separate}, "layers": layers}


@dataclass(frozen=True)
class _Target:
    """What every compile of one job shares: the SoC, fp16 on or off, the precision, the QNN EP's options, the
    job's log."""

    soc: Soc
    fp16: bool
    precision: Precision
    provider: dict[str, str]
    log: Path


def _compile(model: Path, source: Path, graph: str, work: Path, target: _Target) -> None:
    """One graph into work/<graph>.bin and work/<graph>_ctx.onnx (which loads <graph>.bin); `model` is `source`
    or its QDQ graph."""
    import onnxruntime as ort

    soc, fp16 = target.soc, target.fp16
    ctx = work / f"{graph}_ctx.onnx"
    print(f"qnndeploy: compiling {model} for {soc.model} (htp_arch {soc.arch_number}, soc_model {soc.soc_id}, "
          f"{'fp16' if fp16 else 'quantized'}), CPU fallback off", flush=True)
    try:
        ort.InferenceSession(str(model), htp.session_options(soc, fp16=fp16, context_path=ctx, log_level=1,
                                                             provider=target.provider))
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own Fail/InvalidGraph types
        raise BadInput(_refused(model, target, _ort_message(e), source)) from None
    _name_binary(work, [ctx], graph)


def _compile_shared(models: dict[str, Path], sources: dict[str, Path], name: str, work: Path, target: _Target) -> None:
    """All graphs into one context, work/<name>.bin, loaded by each work/<graph>_ctx.onnx."""
    import onnxruntime as ort

    soc, fp16 = target.soc, target.fp16
    ctxs = [work / f"{g}_ctx.onnx" for g in models]
    for i, (g, model) in enumerate(models.items()):
        print(f"qnndeploy: adding {g} ({model}) to the shared context", flush=True)
        share = {"ep.share_ep_contexts": "1", **({"ep.stop_share_ep_contexts": "1"} if i == len(models) - 1 else {})}
        try:
            ort.InferenceSession(str(model), htp.session_options(soc, fp16=fp16, context_path=ctxs[i], log_level=1,
                                                                 config=share, provider=target.provider))
        except Exception as e:  # noqa: BLE001 onnxruntime raises its own Fail/InvalidGraph types
            raise BadInput(f"{g}: {_refused(model, target, _ort_message(e), sources[g])}") from None
    _name_binary(work, ctxs, name)
    print("qnndeploy: the shared context is not loaded here: the host emulator cannot load a context whose graphs "
          "share weights (QAIRT 2.51 crashes); each graph's twin is loaded instead", flush=True)


def _name_binary(work: Path, ctxs: list[Path], name: str) -> None:
    """Rename the one context binary onnxruntime-qnn wrote (named after the first wrapper) to <name>.bin and point
    every wrapper at it."""
    written = work / f"{ctxs[0].stem}_qnn.bin"
    if not written.is_file():
        raise BadInput(f"onnxruntime-qnn wrote no context binary next to {ctxs[0].name}")
    binary = work / f"{name}.bin"
    written.replace(binary)
    for ctx in ctxs:
        if epcontext.context_refs(ctx) != [written.name]:
            raise BadInput(f"{ctx.name} does not load {written.name}: unexpected onnxruntime-qnn output")
        epcontext.retarget(ctx, ctx, binary.name)
    print(f"qnndeploy: renamed {written.name} to {binary.name}", flush=True)


def _check_loads(ctx: Path, soc: Soc, fp16: bool) -> None:
    import onnxruntime as ort

    print(f"qnndeploy: checking that {ctx.name} loads", flush=True)
    try:
        ort.InferenceSession(str(ctx), htp.session_options(soc, fp16=fp16, log_level=2))
    except Exception as e:  # noqa: BLE001 onnxruntime raises its own, unexported types
        raise BadInput(f"{ctx.name} does not load: {_ort_message(e)}") from None


def _refused(model: Path, target: _Target, message: str, source: Path) -> str:
    """The one-line error for a graph the HTP compiler refused, with what onnxruntime's message leaves out.
    A node QNN refused while composing the graph ("Failed to compose Qnn graph") is named from the log, with its
    ONNX op from `source` and the rewrite when it is a refusal measured here. Else, partitioning the model again
    with CPU fallback allowed (check's measurement) finds the nodes the HTP leaves to the CPU: when none is on the
    HTP and it takes not even a lone Relu for this SoC, the SoC is the cause, not the model; else the unsupported
    nodes are named, from the log or, when it names none, from the measurement."""
    soc, fp16, log = target.soc, target.fp16, target.log
    composed = refusals.parse(_read(log))
    if composed:
        graph = load_model(source, weights=False).graph
        named = [str(refusals.explain(r, graph, target.precision, source, soc.model)) for r in composed]
        return "; ".join(named[:2]) + (f"; and {len(named) - 2} more (see the log)" if len(named) > 2 else "")
    try:
        measured = htp.measure_htp(model, soc, fp16=fp16)
    except QnnDeployError:
        measured = None
    cpu_nodes = measured.cpu_nodes if measured and measured.measured else []
    if measured is not None and cpu_nodes and not measured.qnn_partitions and htp.htp_takes_nothing(soc):
        return (f"{htp.soc_takes_nothing(soc, measured.qairt)}; drop --soc {soc.model} "
                "(its phones keep the CPU fallback)")
    found = [f for f in logs.parse_file(log, limit=None) if f.kind == logs.UNSUPPORTED] \
        or [logs.not_supported(n.name or "(unnamed)", n.op_type) for n in cpu_nodes]
    return logs.unsupported_error(found) or message


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class _Keep:
    """The nodes a quantized build leaves in float (--keep-fp16), those whose weights w4a16 keeps at 8 bits
    (--keep-int8), and the tensors given 8-bit activations (the KV cache's, --kv-bits 8)."""

    fp16: list[str]
    int8: list[str]
    uint8: dict[str, list[float]]  # tensor -> [scale, zero point]


@dataclass(frozen=True)
class _Quantized:
    model: Path  # the QDQ graph
    layers: list[QuantizedLayer]
    warnings: list[str]

    @classmethod
    def read(cls, folder: Path) -> _Quantized:
        """The QDQ graph another job published in `folder`."""
        made = json.loads((folder / QUANTIZED).read_text())
        return cls(folder / made["model"], [QuantizedLayer.parse(x) for x in made["layers"]], made["warnings"])


def _quantized_key(job: CompileJob, member: Member) -> str:
    """What decides a member's QDQ graph: its model, its samples, the precision and the quantizer's settings."""
    calibration = (member.calibration_record or job.options.get("calibration") or {}).get("sha256")
    decided = [member.model_sha256, calibration, str(job.precision), job.options.get("quantization"),
               version("onnxruntime")]
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()[:32]


def _quantized(member: JSON, spec: JSON, precision: Precision) -> _Quantized:
    """The member's QDQ graph: made by another SoC's job of this compile (it does not depend on the SoC), or made
    now in the run's shared folder (spec's "quantized", else the job's own) and published there for the others."""
    graph, model = member["graph"], Path(member["model"])
    keep = _Keep(spec["keep_fp16"], spec["keep_int8"], spec["uint8"])
    if spec["quantized"] is None:
        return quantize(model, Path(member["calibration"]), Path(spec["tmp"]) / f"{graph}_qdq.onnx", precision, keep)
    done, log = Path(spec["quantized"]) / member["quantized"], Path(spec["log"])
    if (done / QUANTIZED).is_file():
        said = json.loads((done / QUANTIZED).read_text())["said"]
        print(f"qnndeploy: {graph}'s QDQ graph is the one an earlier job of this compile made (the same model, "
              f"samples and settings; a QDQ graph does not depend on the SoC); what quantizing it said:\n{said}",
              end="", flush=True)
        return _Quantized.read(done)
    mine = Path(tempfile.mkdtemp(prefix=f".{done.name}-", dir=done.parent))
    start = _logged(log)
    q = quantize(model, Path(member["calibration"]), mine / f"{graph}_qdq.onnx", precision, keep)
    with log.open("rb") as f:  # the quantizer's lines in this job's log: the other jobs' logs repeat them
        f.seek(start)
        said = f.read(_logged(log) - start).decode(errors="replace")
    write_json(mine / QUANTIZED, {"model": q.model.name, "layers": [x.to_json() for x in q.layers],
                                  "warnings": q.warnings, "said": said})
    try:
        mine.rename(done)
    except OSError:  # a job running at the same time published it first: this one goes on with its own
        return q
    return _Quantized.read(done)


def _logged(log: Path) -> int:
    """The bytes in the job's log so far (this process's stdout and stderr go there)."""
    sys.stdout.flush()
    sys.stderr.flush()
    return log.stat().st_size


def quantize(model: Path, calibration: Path, out: Path, precision: Precision, keep: _Keep) -> _Quantized:
    """Static QDQ quantization (16-bit activations; 8-bit weights, or w4a16's int4 blocks) calibrated on real input
    samples, the `keep.fp16` nodes left in float; with each quantized weight's error on those samples."""

    graph = load_model(model, weights=False).graph  # read once: a part's graph can be gigabytes
    inputs = [tensor_info(v) for v in real_inputs(graph)]
    samples = load_samples(calibration, inputs)
    names = {n.name for n in graph.node}
    io = {t.name for t in inputs} | {o.name for o in graph.output}
    kv8 = {t: Encoding(float(scale), int(zp)) for t, (scale, zp) in keep.uint8.items() if t in io}
    kept = f"; {', '.join(keep.fp16)} kept in fp16" if keep.fp16 else ""
    kv = f"; the KV cache's {len(kv8)} inputs and outputs uint8" if kv8 else ""
    weights = "int4 in blocks of 32 (MatMul/Gemm), else uint8" if precision == Precision.W4A16 else "uint8"
    print(f"qnndeploy: quantizing to QDQ (activations uint16, weights {weights}, MinMax) with {len(samples)} "
          f"calibration sample(s) from {calibration}{kept}{kv}", flush=True)
    qdq(model, samples, out, [n for n in keep.fp16 if n in names], kv8)
    warnings = []
    if len(samples) < FEW_CALIBRATION_SAMPLES:
        warnings.append(f"calibrated on {len(samples)} sample(s) only: use {FEW_CALIBRATION_SAMPLES} or more real "
                        "inputs for stable 16-bit activation ranges")
    if precision == Precision.W4A16:
        eight = int4_weights(model, out, [n for n in keep.int8 if n in names])
        for k in eight:
            print(f"qnndeploy: {k}", flush=True)
        warnings += [str(k) for k in eight if k.nodes and not set(k.nodes) & set(keep.int8)]
    if kv8:
        uint8_io(out, kv8)
    layers = quantized_layers(model, out, samples)
    return _Quantized(out, layers, warnings)


def _ort_message(e: Exception) -> str:
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first_line(e))


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = {"ok": True, **run(spec)}
    except QnnDeployError as e:
        print(f"qnndeploy: error: {e}", flush=True)
        result = {"ok": False, "error": str(e)}
    except Exception as e:  # noqa: BLE001 a bug or an unexpected library error: keep the traceback in the log
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(e).__name__}: {_ort_message(e)}"}
    write_json(Path(spec["result"]), result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
