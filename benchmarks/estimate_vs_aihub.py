"""The HTP's host-side estimate (qnndeploy/qnn/hextimate.py) against AI Hub's published phone measurements: every
model of the qai-hub-models wheel's perf.yaml files that torchvision rebuilds, exported with random weights (latency
does not depend on weights) at the input shape AI Hub uses, estimated for QCS9100, and per chip the factor that
turns that estimate into the chip's time: the geometric mean of measured / estimate, each model judged leave-one-out
(the factor fitted without it). Prints per model and chip the measured time, the estimate x factor and their ratio;
per chip the factor, the fraction of models within 1.5x leave-one-out, and Spearman's rank correlation. Issue 36's
target: at least 90% within 1.5x on every calibrated chip. Nothing here is timed on this machine.

The same for the quantized precisions AI Hub measured (perf.yaml's w8a16 and w8a8): each rebuilt fp32 model is
quantized to QDQ with a few random calibration samples (latency does not depend on values) -- w8a16 by qnndeploy's
own quantizer (model/quantize.py, what compile --precision w8a16 builds), w8a8 by onnxruntime's QNN QDQ config with
8-bit activations and weights -- estimated for QCS9100 without fp16, and fitted per chip as fp16 is.

Run: python benchmarks/estimate_vs_aihub.py [--work DIR] [--precision P,...] [--cached-only] [--write]   (needs
torchvision, onnxruntime-qnn and the qai-hub-models wheel, tests/reference-requirements.txt; fp16 about 10 minutes
cold on 2 cores, seconds with the exports and estimates cached in --work; a quantized estimate takes 15-100x its fp16
compile, 5 s to 10 minutes a model, so a cold quantized run takes hours). --write writes
qnndeploy/data/chip_factors.json from the run (every precision). --cached-only fits w8a16 and w8a8 on the quantized
estimates --work holds, and says which models it left out. --smoke: two small models, one chip, fp16 and w8a8.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from benchlib import CACHE, REPO, fail, parse, parser, table

from qnndeploy.base import socs
from qnndeploy.qnn import hextimate, htp
from tests.support import aihub_perf

RUNTIMES = ("onnx", "qnn_context_binary")  # AI Hub's runtimes whose graph is the one qnndeploy compiles
PRECISION = "float"  # perf.yaml's name for fp16 on the HTP
# qnndeploy's precision -> perf.yaml's name for it
PERF_YAML = {"fp16": PRECISION, "w8a16": "w8a16", "w8a8": "w8a8"}
QUANTIZED = ("w8a16", "w8a8")
CALIBRATION_SAMPLES = 2  # random inputs: the ranges they give change values, not the graph the HTP times
SMOKE_MODELS = ("squeezenet1_1", "mnasnet05", "shufflenet_v2")  # fp16: the first two; w8a8: the two it measured
SMOKE_SOC = "SM8650"
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))  # normalize_image_torchvision, inside AI Hub's graphs
KINETICS = ((0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989))  # templates/video_classifier


@dataclass(frozen=True)
class Rebuild:
    """How a perf.yaml model is rebuilt: the torchvision builder its model.py calls, the input shape its
    get_input_spec gives, and the wrapper AI Hub's class puts around the network (templates/*/model.py)."""

    builder: str  # attribute path under torchvision.models
    shape: tuple[int, ...]
    kind: str = "imagenet"  # imagenet: normalize, the net; video: normalize, the net (avgpool a mean), softmax;
    # segmentation: normalize, the net's "out", argmax as uint8
    kwargs: tuple[tuple[str, object], ...] = ()


def _img(size: int) -> tuple[int, ...]:
    return (1, 3, size, size)


VIDEO = (1, 3, 16, 112, 112)  # templates/video_classifier get_input_spec: 16 frames of 112x112
# perf.yaml model id -> its rebuild, read from the wheel's models/<id>/model.py (and its template's). Left out:
# mobilenet_v2 (the wheel's own implementation, not torchvision's), swinv2_base (no float measurement), and models
# whose model.py builds more than a torchvision network. The swin models are torchvision's as they are: AI Hub's
# replaces their attention with its own HTP-friendly modules (templates/swin), so theirs is not the same graph.
MODELS: dict[str, Rebuild] = {
    "convnext_base": Rebuild("convnext_base", _img(224)),
    "convnext_tiny": Rebuild("convnext_tiny", _img(224)),
    "densenet121": Rebuild("densenet121", _img(224)),
    "efficientnet_b0": Rebuild("efficientnet_b0", _img(224)),
    "efficientnet_b4": Rebuild("efficientnet_b4", _img(380)),  # EFFICIENTNET_B4_DIM
    "efficientnet_v2_s": Rebuild("efficientnet_v2_s", _img(384)),  # EFFICIENTNET_V2_S_DIM
    "fcn_resnet50": Rebuild("segmentation.fcn_resnet50", _img(520), "segmentation",
                            (("aux_loss", False), ("weights_backbone", None))),  # templates/deeplab: 520x520
    "googlenet": Rebuild("googlenet", _img(224), kwargs=(("aux_logits", False), ("init_weights", False))),
    "inception_v3": Rebuild("inception_v3", _img(299),  # INCEPTION_V3_DIM
                            kwargs=(("aux_logits", False), ("init_weights", False), ("transform_input", False))),
    "mnasnet05": Rebuild("mnasnet0_5", _img(224)),
    "mobilenet_v3_large": Rebuild("mobilenet_v3_large", _img(224)),
    "mobilenet_v3_small": Rebuild("mobilenet_v3_small", _img(224)),
    "regnet": Rebuild("regnet_x_3_2gf", _img(224)),
    "regnet_y_800mf": Rebuild("regnet_y_800mf", _img(224)),
    "resnet101": Rebuild("resnet101", _img(224)),
    "resnet18": Rebuild("resnet18", _img(224)),
    "resnet50": Rebuild("resnet50", _img(224)),
    "resnet_2plus1d": Rebuild("video.r2plus1d_18", VIDEO, "video"),
    "resnet_3d": Rebuild("video.r3d_18", VIDEO, "video"),
    "resnet_mixed": Rebuild("video.mc3_18", VIDEO, "video"),
    "resnext101": Rebuild("resnext101_32x8d", _img(224)),
    "resnext50": Rebuild("resnext50_32x4d", _img(224)),
    "shufflenet_v2": Rebuild("shufflenet_v2_x0_5", _img(224)),
    "squeezenet1_1": Rebuild("squeezenet1_1", _img(224)),
    "swin_base": Rebuild("swin_b", _img(224)),
    "swin_small": Rebuild("swin_s", _img(224)),
    "swin_tiny": Rebuild("swin_t", _img(224)),
    "vit": Rebuild("vit_b_16", _img(224)),
    "wideresnet50": Rebuild("wide_resnet50_2", _img(224)),
}


def _check_wheel(package: Path, model: str, rebuild: Rebuild) -> str | None:
    """The model's model.py in the installed wheel must still call the builder of the table: a qai-hub-models
    release that changes a model must not go unnoticed. (The manifests' "Input resolution" is not the shape
    get_input_spec gives, e.g. 224x224 for inception_v3's 299: the shapes above come from the code.)"""
    code_path = package / "models" / model / "model.py"
    code = code_path.read_text(encoding="utf-8") if code_path.is_file() else ""
    if rebuild.builder.split(".")[-1] not in code:
        return f"{model}/model.py no longer calls {rebuild.builder}"
    return None


def _torchvision_models() -> ModuleType:
    """torchvision.models. PyPI's torchvision wheel is built against CUDA torch: beside the CPU torch the project
    installs, its C++ ops do not load and `import torchvision` fails registering them; the network definitions need
    none of them, so they are then imported without torchvision/__init__.py."""
    try:
        import torchvision.models

        return torchvision.models
    except (ImportError, RuntimeError):
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        spec = importlib.util.find_spec("torchvision")
        if spec is None or not spec.submodule_search_locations:
            raise
        package = ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["torchvision"] = package
        return importlib.import_module("torchvision.models")


def export(model: str, rebuild: Rebuild, path: Path) -> None:
    """The torchvision network with random weights, wrapped as AI Hub's class wraps it, exported to ONNX."""
    import torch

    torch.manual_seed(0)
    build: Any = _torchvision_models()
    for part in rebuild.builder.split("."):
        build = getattr(build, part)
    net = build(weights=None, **dict(rebuild.kwargs)).eval()
    dims = (1, 3, 1, 1, 1) if rebuild.kind == "video" else (1, 3, 1, 1)
    mean, std = KINETICS if rebuild.kind == "video" else IMAGENET
    if rebuild.kind == "video":
        class MeanPool(torch.nn.Module):  # templates/video_classifier SimpleAvgPool
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x.reshape(x.shape[0], x.shape[1], -1).mean(dim=2)
        net.avgpool = MeanPool()

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.register_buffer("mean", torch.tensor(mean).reshape(dims))
            self.register_buffer("std", torch.tensor(std).reshape(dims))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.net((x - self.mean) / self.std)
            if rebuild.kind == "video":
                return torch.softmax(y, dim=1)
            if rebuild.kind == "segmentation":
                return y["out"].argmax(1).to(torch.uint8)
            return y

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part.onnx")
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # vit: the fused eval-mode attention has no ONNX export
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation, once per model
            torch.onnx.export(Wrapped().eval(), (torch.rand(rebuild.shape),), str(tmp), dynamo=False,
                              opset_version=17, input_names=["image"], output_names=["output"])
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    tmp.replace(path)


def estimated(model: str, rebuild: Rebuild, work: Path, qairt: str) -> dict[str, object]:
    """The QCS9100 estimate of one model, cached in `work` per QAIRT release: cycles, bounds, or why none."""
    import torch

    cache = _cached(work, model, "fp16", qairt)
    if cache.is_file():
        loaded: dict[str, object] = json.loads(cache.read_text())
        return loaded
    onnx_path = work / f"{model}.torch-{torch.__version__}.onnx"
    start = time.monotonic()
    try:
        if not onnx_path.is_file():
            export(model, rebuild, onnx_path)
    except Exception as e:  # noqa: BLE001 the export of one model failing leaves it out, said why
        return {"error": f"export: {str(e).splitlines()[0][:200]}"}
    exported = time.monotonic() - start
    try:
        est = hextimate.estimate(onnx_path, socs.find(hextimate.CALIBRATED_ON))
    except Exception as e:  # noqa: BLE001 a graph the HTP does not take whole has no estimate
        said = str(e).splitlines()[0].split(": `qnndeploy check")[0]  # the command names this machine's path
        return {"error": f"estimate: {said[:200]}"}
    if est.figures is None:
        return {"error": f"no estimate: {est.reason}"}
    f = est.figures
    found: dict[str, object] = {"cycles": f.cycles, "lower": f.lower, "upper": f.upper, "ms": f.ms,
                                "ops_without_cost": f.ops_without_cost, "export_s": round(exported, 1),
                                "estimate_s": est.seconds}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(found, indent=1))
    return found


def quantize(fp32: Path, precision: str, out: Path, shape: tuple[int, ...]) -> None:
    """The rebuilt fp32 model as a QDQ model of `precision`, calibrated on CALIBRATION_SAMPLES random inputs:
    w8a16 by qnndeploy's own quantizer (what compile --precision w8a16 builds), w8a8 by the same onnxruntime QNN
    QDQ config with 8-bit activations."""
    import numpy as np
    import onnx

    from qnndeploy.model import quantize as q

    name = onnx.load(str(fp32), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    samples = [{name: rng.random(shape, dtype=np.float32)} for _ in range(CALIBRATION_SAMPLES)]
    tmp = out.with_suffix(".part.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if precision == "w8a16":
            q.qdq(fp32, samples, tmp)
        else:
            _qdq_w8a8(fp32, samples, tmp)
    for helper in out.parent.glob(f"{tmp.stem}_src*.onnx"):  # the quantizer's private copy and its helpers
        helper.unlink()
    tmp.replace(out)


def _qdq_w8a8(model: Path, samples: list[dict[str, Any]], out: Path) -> None:
    """onnxruntime's QNN QDQ config with 8-bit (uint8) activations and weights, MinMax."""
    import shutil

    from onnxruntime.quantization import CalibrationDataReader, QuantType
    from onnxruntime.quantization import quantize as ort_quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    private = out.with_name(f"{out.stem}_src.onnx")
    shutil.copyfile(model, private)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.it, None)

    config = get_qnn_qdq_config(str(private), Reader(), activation_type=QuantType.QUInt8,
                                weight_type=QuantType.QUInt8)
    ort_quantize(str(private), str(out), config)


def estimated_quantized(model: str, rebuild: Rebuild, precision: str, work: Path, qairt: str) -> dict[str, object]:
    """The QCS9100 estimate of one model quantized to `precision` (fp16 off, as compile's w8a16 without kept
    nodes), cached in `work` per QAIRT release; the QDQ model is removed once estimated (they are large)."""
    import torch

    cache = _cached(work, model, precision, qairt)
    if cache.is_file():
        loaded: dict[str, object] = json.loads(cache.read_text())
        return loaded
    onnx_path = work / f"{model}.torch-{torch.__version__}.onnx"
    qdq_path = work / f"{model}.{precision}.onnx"
    start = time.monotonic()
    try:
        if not onnx_path.is_file():
            export(model, rebuild, onnx_path)
        quantize(onnx_path, precision, qdq_path, rebuild.shape)
    except Exception as e:  # noqa: BLE001 one model failing leaves it out, said why
        return {"error": f"quantize: {str(e).splitlines()[0][:200]}"}
    quantized = time.monotonic() - start
    print(f"{precision}: estimating {model}", file=sys.stderr, flush=True)
    try:
        est = hextimate.estimate(qdq_path, socs.find(hextimate.CALIBRATED_ON), fp16=False)
    except Exception as e:  # noqa: BLE001 a graph the HTP does not take whole has no estimate
        said = str(e).splitlines()[0].split(": `qnndeploy check")[0]
        refused: dict[str, object] = {"error": f"estimate: {said[:200]}"}
        if "did not finish" not in said:  # the compile is deterministic and minutes long: its refusal is kept
            cache.write_text(json.dumps(refused, indent=1))
        return refused
    finally:
        qdq_path.unlink(missing_ok=True)
    if est.figures is None:
        return {"error": f"no estimate: {est.reason}"}
    f = est.figures
    found: dict[str, object] = {"cycles": f.cycles, "lower": f.lower, "upper": f.upper, "ms": f.ms,
                                "ops_without_cost": f.ops_without_cost, "quantize_s": round(quantized, 1),
                                "estimate_s": est.seconds}
    cache.write_text(json.dumps(found, indent=1))
    return found


def _fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def _within(r: float) -> bool:
    return max(r, 1 / r) <= hextimate.WITHIN


@dataclass
class Run:
    """One precision's run: AI Hub's measurements, the estimates, the fits and what was left out."""

    precision: str
    measured: dict[str, dict[str, aihub_perf.Measured]]  # soc -> model -> measurement
    runtime_of: dict[str, str]
    estimates: dict[str, dict[str, object]]
    skipped: dict[str, str]
    fits: dict[str, hextimate.FactorFit]


def _cached(work: Path, model: str, precision: str, qairt: str) -> Path:
    """Where estimated() and estimated_quantized() cache a model's estimate."""
    return work / (f"{model}.qairt-{qairt}.estimate.json" if precision == "fp16" else
                   f"{model}.{precision}.qairt-{qairt}.estimate.json")


def _fp16_seconds(work: Path, model: str, qairt: str) -> float:
    path = _cached(work, model, "fp16", qairt)
    return float(json.loads(path.read_text()).get("estimate_s", math.inf)) if path.is_file() else math.inf


def run(precision: str, names: list[str], args: Any, package: Path, qairt: str) -> Run:
    """Measurements, estimates and per chip the fit of one precision, with its ratio table printed."""
    perf = PERF_YAML[precision]
    # AI Hub's measurements, one device per catalog SoC, the first runtime of RUNTIMES that has any
    measured: dict[str, dict[str, aihub_perf.Measured]] = {}
    runtime_of: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for model in names:
        problem = _check_wheel(package, model, MODELS[model])
        if problem:
            fail(problem)
        rows = aihub_perf.measured(package, model, perf)
        if not rows:
            skipped[model] = f"no {perf} measurement in perf.yaml"
            continue
        for runtime in RUNTIMES:
            for soc, row in aihub_perf.per_soc(rows, runtime).items():
                if runtime_of.setdefault(soc, runtime) == runtime:
                    measured.setdefault(soc, {})[model] = row
    if args.smoke:
        measured = {SMOKE_SOC: measured.get(SMOKE_SOC, {})}

    # the QCS9100 estimates; quantized ones, which take 15-100x the fp16 compile's time, fastest first (by that
    # time, where cached), so that a run stopped early has estimated the most models
    estimates: dict[str, dict[str, object]] = {}
    for model in sorted(names, key=lambda m: _fp16_seconds(args.work, m, qairt)) if precision != "fp16" else names:
        if model in skipped:
            continue
        if args.cached_only and precision != "fp16" and not _cached(args.work, model, precision, qairt).is_file():
            skipped[model] = "not estimated: no cached estimate in --work (--cached-only)"
            continue
        found = (estimated(model, MODELS[model], args.work, qairt) if precision == "fp16" else
                 estimated_quantized(model, MODELS[model], precision, args.work, qairt))
        if "error" in found:
            skipped[model] = str(found["error"])
        else:
            estimates[model] = found

    # the fit per SoC, and the ratio table
    fits: dict[str, hextimate.FactorFit] = {}
    rows_out: list[list[str]] = []
    for soc in sorted(measured, key=lambda s: (s != hextimate.CALIBRATED_ON, s)):
        pairs = [(m, r.ms, float(estimates[m]["ms"])) for m, r in sorted(measured[soc].items())  # type: ignore[arg-type]
                 if m in estimates]
        if len(pairs) < 2:
            continue
        fitted = hextimate.fit(pairs)
        fits[soc] = fitted
        for model, ms, est in pairs:
            loo = fitted.loo[model]
            rows_out.append([model, soc, _fmt(ms), _fmt(est), _fmt(est * fitted.factor), f"{ms / est:.2f}",
                             f"{loo:.2f}", "yes" if _within(loo) else "NO"])
    print(f"\n== {precision} (perf.yaml {perf}) ==")
    if not fits:
        print(f"no chip has two models both measured and estimated at {precision}"
              + (f"; left out: {skipped}" if skipped else ""))
        return Run(precision, measured, runtime_of, estimates, skipped, fits)
    print(f"AI Hub: qai-hub-models {aihub_perf.version()}, precision {perf}, runtime per chip "
          f"{', '.join(f'{s} {runtime_of[s]}' for s in sorted(fits))}; estimates: QAIRT {qairt}, "
          f"{hextimate.CALIBRATED_ON}" + ("" if precision == "fp16" else f", QDQ {precision}, fp16 off"))
    print()
    table(["model", "chip", "measured ms", "estimate ms", "estimate x factor", "measured/estimate",
           "ratio (leave-one-out)", "within 1.5x"], rows_out)
    print()
    summary = []
    for soc, f in fits.items():
        row = measured[soc][next(iter(f.loo))]
        summary.append([soc, row.device, str(len(f.loo)), f"{f.factor:.3f}", f"{f.within:.0%}",
                        f"{f.loo_median:.2f}", f"{f.loo_worst:.2f}", f"{f.spearman:.3f}"])
    table(["chip", "AI Hub device", "models", "factor", "within 1.5x (leave-one-out)", "median ratio",
           "worst ratio", "Spearman"], summary)
    missed = [s for s, f in fits.items() if f.within < 0.9]
    print(f"\n{precision}: issue 36's target, >= 90% within 1.5x leave-one-out on every chip: "
          f"{'met' if not missed else 'NOT met on ' + ', '.join(missed)}")
    if skipped:
        print("left out: " + "; ".join(f"{m} ({why})" for m, why in sorted(skipped.items())))
    return Run(precision, measured, runtime_of, estimates, skipped, fits)


def main() -> None:
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--work", type=Path, default=CACHE / "estimate-vs-aihub",
                    help="exports and estimates are cached here [~/.cache/qnndeploy-bench/estimate-vs-aihub]")
    ap.add_argument("--precision", default=",".join(PERF_YAML),
                    help=f"the precisions to fit, comma-separated [{','.join(PERF_YAML)}]")
    ap.add_argument("--cached-only", action="store_true",
                    help="estimate no quantized model: fit w8a16 and w8a8 on the estimates cached in --work (a model "
                         "without one is left out, and the fit's n says so); fp16 takes seconds and runs as always")
    ap.add_argument("--write", action="store_true", help="write qnndeploy/data/chip_factors.json from this run")
    args = parse(ap)
    precisions = [p for p in args.precision.split(",") if p]
    if unknown := [p for p in precisions if p not in PERF_YAML]:
        ap.error(f"unknown precision {', '.join(unknown)}: use {', '.join(PERF_YAML)}")
    if args.smoke and args.write:
        ap.error("--write needs the full run, not --smoke")
    if args.write and set(precisions) != set(PERF_YAML):
        ap.error("--write needs every precision")
    package = aihub_perf.package_dir()
    if package is None:
        fail("qai-hub-models is not installed (pip install --no-deps -r tests/reference-requirements.txt)")
    qairt = htp.qairt_version()
    mhz, _ = hextimate.clock(qairt, hextimate.CALIBRATED_ON)
    if mhz is None:
        fail(f"no simulated clock for QAIRT {qairt} in data/hextimate.json: the estimates have no time")
    print(f"estimates at {mhz} MHz (data/hextimate.json)")
    runs = {}
    for precision in precisions:
        if args.smoke and precision == "w8a16":  # its quantized compile is w8a8's path with 16-bit activations
            print("\n== w8a16: left to the full run in --smoke (tests/qnn/test_chip_factors.py re-estimates one) ==")
            continue
        if args.smoke:
            names = list(SMOKE_MODELS[:2]) if precision == "fp16" else [
                m for m in SMOKE_MODELS if aihub_perf.measured(package, m, PERF_YAML[precision])][:2]
        else:
            names = list(MODELS)
        runs[precision] = run(precision, names, args, package, qairt)
    if not runs.get("fp16", next(iter(runs.values()))).fits:
        fail("no chip has two models both measured and estimated")
    if args.write:
        write(runs, qairt, mhz)


def _factor_rows(r: Run) -> list[dict[str, object]]:
    return [{"soc": soc, "factor": round(f.factor, 4), "models": len(f.loo), "within": round(f.within, 4),
             "loo_median": round(f.loo_median, 4), "loo_worst": round(f.loo_worst, 4),
             "spearman": round(f.spearman, 4), "device": r.measured[soc][next(iter(f.loo))].device,
             "matched": r.measured[soc][next(iter(f.loo))].matched}
            for soc, f in sorted(r.fits.items())]


def _runtime(r: Run) -> str:
    runtimes = sorted({r.runtime_of[s] for s in r.fits})
    if len(runtimes) != 1:
        fail(f"{r.precision}: the chips were fitted on different runtimes ({runtimes}): one fit holds one runtime")
    return runtimes[0]


def _models(r: Run) -> dict[str, dict[str, object]]:
    return {m: {"builder": f"torchvision.models.{MODELS[m].builder}", "input": list(MODELS[m].shape),
                "cycles": e["cycles"], "lower": e["lower"], "upper": e["upper"],
                "ops_without_cost": e["ops_without_cost"]}
            for m, e in sorted(r.estimates.items())}


def write(runs: dict[str, Run], qairt: str, mhz: float) -> None:
    """chip_factors.json from every precision's run. A fit whose figures are those already stored keeps its date:
    the date says when the figures were fitted, not when the file was last written."""
    path = REPO / "qnndeploy" / hextimate.FACTORS
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    today = time.strftime("%Y-%m-%d", time.gmtime())
    fp16 = runs["fp16"]
    estimates = {
        "soc": hextimate.CALIBRATED_ON, "qairt": qairt, "clock_mhz": mhz, "precision": "fp16",
        "how": ("torchvision's network with random weights (seed 0), wrapped as AI Hub's model class wraps it, "
                "exported by torch.onnx.export (TorchScript, opset 17) at the input shape AI Hub uses; "
                "hextimate.estimate(model, QCS9100)"),
        "models": _models(fp16), "left_out": dict(sorted(fp16.skipped.items())),
    }
    factors = _factor_rows(fp16)
    same = old.get("estimates") == estimates and old.get("factors") == factors
    quantized: dict[str, object] = {}
    not_calibrated: dict[str, str] = {}
    for precision in QUANTIZED:
        r = runs[precision]
        if not r.fits:
            not_calibrated[precision] = (f"no factor: no chip had two {precision} models both measured by AI Hub "
                                         "and estimated here; no number is given")
            continue
        how = {"w8a16": "qnndeploy's own quantizer (qnndeploy/model/quantize.py: onnxruntime's QNN QDQ config, "
                        "uint16 activations, uint8 weights, MinMax), what compile --precision w8a16 builds",
               "w8a8": "onnxruntime's QNN QDQ config (get_qnn_qdq_config) with uint8 activations and uint8 "
                       "weights, MinMax"}[precision]
        entry = {
            "source": {"perf_yaml_precision": PERF_YAML[precision], "runtime": _runtime(r)},
            "estimates": {
                "precision": precision,
                "how": (f"the fp16 rebuild above, quantized to QDQ by {how}, calibrated on {CALIBRATION_SAMPLES} "
                        "random inputs (latency does not depend on values); hextimate.estimate(model, QCS9100, "
                        "fp16=False)"),
                "models": _models(r), "left_out": dict(sorted(r.skipped.items()))},
            "factors": _factor_rows(r),
        }
        before = (old.get("quantized") or {}).get(precision) or {}
        kept = {k: v for k, v in before.items() if k != "fitted"}
        quantized[precision] = {"fitted": before["fitted"] if kept == entry else today, **entry}
    data = {
        "about": ("Per phone chip and precision, the factor that turns the HTP's host-side estimate for QCS9100 "
                  "(qnndeploy/qnn/hextimate.py) into that chip's time: the geometric mean of measured / estimate "
                  "over the models below, measured by AI Hub (qai-hub-models' perf.yaml), estimated here. The top "
                  "level holds fp16; `quantized` holds w8a16 and w8a8, each with its own models, estimates and "
                  "factors. Written by `python benchmarks/estimate_vs_aihub.py --write`, never by hand; "
                  "tests/qnn/test_chip_factors.py refits it from the installed wheel. Per chip: factor, models (how "
                  "many), within (the fraction within 1.5x, leave-one-out: each model judged against the factor "
                  "fitted without it), loo_median and loo_worst (measured / predicted, leave-one-out), spearman "
                  "(ranks of the estimates against the measured times), device (AI Hub's device) and matched (how "
                  "the device's chipset was matched to the catalog SoC). Nothing here is a measurement of "
                  "qnndeploy's."),
        "source": {"wheel": f"qai-hub-models {aihub_perf.version()}", "files": "qai_hub_models/models/*/perf.yaml",
                   "precision": "fp16", "perf_yaml_precision": PRECISION, "runtime": _runtime(fp16),
                   "measured_by": "Qualcomm AI Hub (the job_id of each measurement is in perf.yaml)"},
        "precisions_not_calibrated": not_calibrated,
        "fitted": old["fitted"] if same and "fitted" in old else today,
        "made_by": "benchmarks/estimate_vs_aihub.py --write",
        "estimates": estimates,
        "factors": factors,
        "quantized": quantized,
    }
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
