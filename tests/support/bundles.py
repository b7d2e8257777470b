"""Bundles for the scaffold, decision and Kotlin tests: manifests as plain dicts, and real bundles on disk.

Real bundles hold context binaries compiled by onnxruntime-qnn's QNN HTP compiler and EPContext wrappers that
refer to them, built with `qnndeploy bundle`'s own build_bundle; the runtime libraries are tests/support/elfgen.py's
stand-ins (there is no QAIRT SDK here).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base import socs
from qnndeploy.base.names import CONTEXT_BINARY, EPCONTEXT, EXTERNAL_DATA
from qnndeploy.qnn.markers import build_version

from .elfgen import BUILD

if TYPE_CHECKING:
    from qnndeploy.bundle.build import OnDeviceRequest

QAIRT = build_version(BUILD)


def _file(path: str, seed: str) -> dict:
    return {"path": path, "sha256": hashlib.sha256(seed.encode()).hexdigest(), "size": 1000 + len(path)}


def manifest(targets=("SM8550", "SM8750"), graphs=("det", "rec"), runtime: str = "external",
             formats=(CONTEXT_BINARY, EPCONTEXT), name: str = "demo", version: str = "1.0.0", format_version: int = 2,
             external=()) -> dict:
    """A schema-valid manifest dict (checksums made up): for decisions, which never read the files. The CPU models
    of the graphs in `external` keep their weights in cpu/<graph>.onnx.data."""
    archs = sorted({socs.find(s).dsp_arch for s in targets})
    libs = [{**_file(f"lib/arm64-v8a/{n}", n), "role": r, "abi": "arm64-v8a"}
            for n, r in (("libQnnHtp.so", "htp"), ("libQnnSystem.so", "system"), ("libQnnHtpPrepare.so", "prepare"))]
    for a in archs:
        libs.append({**_file(f"lib/arm64-v8a/libQnnHtpV{a[1:]}Stub.so", a), "role": "stub", "abi": "arm64-v8a",
                     "dsp_arch": a})
        libs.append({**_file(f"lib/hexagon-{a}/libQnnHtpV{a[1:]}Skel.so", a), "role": "skel",
                     "abi": f"hexagon-{a}", "dsp_arch": a})
    suffix = {CONTEXT_BINARY: ".bin", EPCONTEXT: "_ctx.onnx"}
    return {
        "format": "qnndeploy-bundle", "format_version": format_version, "name": name, "version": version,
        "created_by": "tests", "qairt": {"version": QAIRT, "build": BUILD},
        "source": {"model": name, "sha256": None, "commit": None, "license": "Apache-2.0"},
        "graphs": [{"name": g, "inputs": [{"name": "x", "dtype": "float32", "shape": [1, 16]}],
                    "outputs": [{"name": "y", "dtype": "float32", "shape": [1, 16]}]} for g in graphs],
        "targets": [{"soc": s, "soc_id": socs.find(s).soc_id, "dsp_arch": socs.find(s).dsp_arch, "precision": "fp16",
                     "artifacts": [{**_file(f"npu/{s}/{g}{suffix[f]}", s + g + f), "graph": g, "format": f}
                                   for g in graphs for f in formats],
                     "validation": None} for s in targets],
        "cpu": [{**_file(f"cpu/{g}.onnx", g), "graph": g, "format": "onnx"} for g in graphs]
        + [{**_file(f"cpu/{g}.onnx.data", g), "graph": g, "format": EXTERNAL_DATA} for g in external],
        "runtime": {"mode": "bundled", "libs": libs} if runtime == "bundled"
        else {"mode": "external", "maven": f"com.qualcomm.qti:qnn-runtime:{QAIRT}"},
        "records": [],
    }


def shared(m: dict, name: str = "pair", graphs: tuple[str, ...] | None = None) -> dict:
    """`m` (format 3) with each target's context binaries replaced by one binary NAME.bin shared by `graphs` (default:
    all of them), as `compile --share` makes it."""
    gs = list(graphs or [g["name"] for g in m["graphs"]])
    targets = []
    for t in m["targets"]:
        arts = [a for a in t["artifacts"] if a["format"] != CONTEXT_BINARY]
        binary = {**_file(f"npu/{t['soc']}/{name}.bin", t["soc"] + name), "graphs": gs, "format": CONTEXT_BINARY}
        targets.append({**t, "artifacts": [binary, *arts]})
    return {**m, "format_version": 3, "targets": targets}


def accepted(m: dict, soc: str = "SM8750", graphs: tuple[str, ...] = ("rec",), on: object = "cpu",
             reasons: dict | None = None) -> dict:
    """`m` with `graphs` failed on SOC's target and shipped with a reason (bundle --accept), its accepted_on `on`
    (None: absent). `reasons`: graph -> the "accepted" value to write instead of {"reason": "r-GRAPH", ...}."""
    summaries = {g["name"]: {"passed": g["name"] not in graphs} for g in m["graphs"]}
    for g in graphs:
        summaries[g]["accepted"] = (reasons or {}).get(g, {"reason": f"r-{g}", "by": "bundle --accept"})
    flagged = {"validation": {"passed": not graphs, "graphs": summaries}, **({} if on is None else {"accepted_on": on})}
    return {**m, "targets": [{**t, **flagged} if t["soc"] == soc else t for t in m["targets"]]}


def split(m: dict, cpu_graph: str = "det") -> dict:
    """`m` (format 3) as a split model: `cpu_graph` runs on the CPU only (no target files), then the others."""
    graphs = [{**g, "cpu_only": True} if g["name"] == cpu_graph else g for g in m["graphs"]]
    targets = [{**t, "artifacts": [a for a in t["artifacts"] if a.get("graph") != cpu_graph]} for t in m["targets"]]
    order = [cpu_graph] + [g["name"] for g in m["graphs"] if g["name"] != cpu_graph]
    return {**m, "format_version": 3, "graphs": graphs, "targets": targets, "pipeline": order}


ON_DEVICE_OPTIONS = {"enable_htp_fp16_precision": "1", "htp_graph_finalization_optimization_mode": "3"}


def on_device(m: dict, validated=("v69", "v73", "v75", "v79", "v81", "v85"), budget_s: float = 60,
              own: tuple[str, ...] = ()) -> dict:
    """`m` (format 4) with an on_device section for its graphs that are not cpu_only, each validated for `validated`
    (a dict: graph -> arches for graphs that differ); the graphs in `own` have an on-device model of their own
    (on-device/<graph>.onnx, with external data), the others compile their CPU model."""
    graphs = [g["name"] for g in m["graphs"] if not g.get("cpu_only")]
    per = validated if isinstance(validated, dict) else {g: list(validated) for g in graphs}
    artifacts = [a for g in own for a in ({**_file(f"on-device/{g}.onnx", "od" + g), "graph": g, "format": "onnx"},
                                          {**_file(f"on-device/{g}.onnx.data", "od" + g), "graph": g,
                                           "format": EXTERNAL_DATA})]
    section = {"budget_s": budget_s, "artifacts": artifacts,
               "graphs": [{"graph": g, "path": f"on-device/{g}.onnx" if g in own else f"cpu/{g}.onnx",
                           "ep_options": dict(ON_DEVICE_OPTIONS), "validated": list(per.get(g, []))} for g in graphs]}
    return {**m, "format_version": 4, "on_device": section}


def tiny_model(path: Path, width: int, ir_version: int = 10) -> Path:
    """MatMul + Relu on [1, width], at an IR version every ONNX Runtime an app may use reads (onnx's helper would
    write its newest, 14, which ONNX Runtime 1.30 and older refuse)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])
    w = helper.make_tensor("w", TensorProto.FLOAT, [width, width], np.random.default_rng(width).random(width * width))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [x], [y], [w])
    path.parent.mkdir(parents=True, exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version
    onnx.save(model, path)
    return path


def with_external_data(model: Path, dest: Path, location: str | None = None) -> Path:
    """A copy of `model` at `dest` whose weights all live in one external data file (default: <dest name>.data)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(model))
    for t in m.graph.initializer:  # onnx moves only raw_data tensors out; make_tensor from a list writes float_data
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    dest.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(dest), save_as_external_data=True, all_tensors_to_one_file=True,
              location=location or f"{dest.name}.data", size_threshold=0)
    return dest


def compile_inputs(root: Path, targets=("SM8550", "SM8750"), graphs=("det", "rec"), ctx: bool = True,
                   external=()) -> dict:
    """CPU models and, per SoC and graph, a real context binary named <graph>.bin (the bundle's name for it) and,
    with ctx, the EPContext wrapper made to refer to that name. The CPU models of the graphs in `external` keep
    their weights in an external data file."""
    import onnx
    import onnxruntime as ort

    from qnndeploy.qnn import htp

    cpu = {g: tiny_model(root / "cpu" / f"{g}.onnx", 8 * (i + 1)) for i, g in enumerate(graphs)}
    npu: dict = {}
    for soc in targets:
        for g, model in cpu.items():
            out = root / soc
            out.mkdir(parents=True, exist_ok=True)
            ort.InferenceSession(str(model), htp.session_options(socs.find(soc), context_path=out / f"{g}_ctx.onnx"))
            (out / f"{g}_ctx_qnn.bin").rename(out / f"{g}.bin")
            files = [out / f"{g}.bin"]
            if ctx:
                wrapper = onnx.load(str(out / f"{g}_ctx.onnx"))
                for node in wrapper.graph.node:
                    for a in node.attribute:
                        if a.name == "ep_cache_context":
                            a.s = f"{g}.bin".encode()
                onnx.save(wrapper, str(out / f"{g}_ctx.onnx"))
                files.append(out / f"{g}_ctx.onnx")
            npu.setdefault(soc, {})[g] = files
    cpu.update({g: with_external_data(cpu[g], root / "cpu-external" / f"{g}.onnx") for g in external})
    return {"cpu": cpu, "npu": npu, "root": root}


def build(out: Path, inputs: dict, runtime: str = "external", name: str = "demo", version: str = "1.0.0",
          on_device: OnDeviceRequest | None = None) -> Path:
    """A real bundle folder made by `qnndeploy bundle`'s build_bundle; with `on_device`, as `bundle build
    --on-device-compile` makes it (each graph compiled and compared here for every arch it validates)."""
    from qnndeploy.bundle.build import BundleSpec, build_bundle

    from .elfgen import fake_sdk

    sdk = None
    if runtime == "bundled":
        sdk = fake_sdk(inputs["root"] / "sdk", sorted({socs.find(s).dsp_arch for s in inputs["npu"]}))
    spec = BundleSpec(name=name, version=version, cpu=inputs["cpu"], npu=inputs["npu"], sdk_root=sdk,
                      qairt_version=QAIRT, license="Apache-2.0", on_device=on_device)
    return build_bundle(spec, out).path



def with_arch_libs(bundle: Path, archs: list[str]) -> Path:
    """A bundled-runtime bundle given, by hand, the Stub and Skel of `archs` too (elfgen's stand-ins), listed in its
    manifest: `bundle build` ships those of its targets' arches only, also with --on-device-compile, so a phone of a
    validated arch without a target would find no Stub (the decision's runtime_libs_missing). Changed in place."""
    import json

    from .elfgen import fake_sdk

    path = bundle / "manifest.json"
    m = json.loads(path.read_text())
    sdk = fake_sdk(bundle.parent / f"{bundle.name}-libs", archs)
    for arch in archs:
        n = arch[1:]
        for src, rel, role, abi in (
                (sdk / "lib/aarch64-android" / f"libQnnHtpV{n}Stub.so", f"lib/arm64-v8a/libQnnHtpV{n}Stub.so",
                 "stub", "arm64-v8a"),
                (sdk / f"lib/hexagon-{arch}/unsigned/libQnnHtpV{n}Skel.so", f"lib/hexagon-{arch}/libQnnHtpV{n}Skel.so",
                 "skel", f"hexagon-{arch}")):
            data = src.read_bytes()
            (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
            (bundle / rel).write_bytes(data)
            m["runtime"]["libs"].append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                         "role": role, "abi": abi, "dsp_arch": arch})
            if "licences" in m:  # from the runtime's origin, as bundle build records its other libraries
                origin = next(o["id"] for o in m["licences"]["origins"] if o["kind"] == "qairt-sdk")
                m["licences"]["files"].append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(),
                                               "origin": origin})
    path.write_text(json.dumps(m, indent=2) + "\n")
    return bundle


def rehash(bundle: Path, rel: str) -> None:
    """Update the manifest for a file changed on purpose (its entries' sha256 and size, its licences entry too), so
    that only the check under test can fire."""
    import json

    manifest_path = bundle / "manifest.json"
    m = json.loads(manifest_path.read_text())
    data = (bundle / rel).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    for entry in ([a for t in m["targets"] for a in t["artifacts"]] + m["runtime"].get("libs", []) + m["cpu"]
                  + m.get("records", [])):
        if entry["path"] == rel:
            entry["sha256"], entry["size"] = digest, len(data)
    for entry in m.get("licences", {}).get("files", []):
        if entry["path"] == rel:
            entry["sha256"] = digest
    manifest_path.write_text(json.dumps(m))
