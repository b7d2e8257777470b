"""`device verify --aihub` and `device list --aihub`: a bundle on phones Qualcomm AI Hub hosts.

For each requested phone (a hosted device name, or a SoC: any hosted device with its chipset, asked for by the
chipset name current AI Hub uses, then by older releases' names), the same decision as the app's picks the bundle
target; each graph's context binary from the bundle runs there in one AI Hub inference job with profiling on, fed
the inputs `device verify` and `validate` use. Its outputs are compared with the CPU model on this host with
validate's metrics, and the profile (inference time, first and warm load time, peak memory, the compute unit of
each layer) goes into the same device record as an adb verify, with the job ids and URLs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qnndeploy.base import numbers, socs
from qnndeploy.base.errors import BadInput, QnnDeployError
from qnndeploy.base.fileio import JSON
from qnndeploy.base.pool import Pool
from qnndeploy.decide import decision
from qnndeploy.device.runner import Clock
from qnndeploy.device.verify import (
    DeviceJob,
    DeviceVerification,
    GraphRun,
    GraphStatus,
    add_not_run,
    settle,
    write_record,
)
from qnndeploy.formats.manifest import FileFormat, Manifest, Provider
from qnndeploy.model import metrics
from qnndeploy.qnn import aihub

TIMEOUT_S = 3600.0  # one inference job, queueing for a hosted phone included
ANDROID_SDK = 35  # what the decision is told of a hosted phone: Build.SOC_MODEL exists there (API 31+)


@dataclass
class HostedChoice:
    """A hosted device with the bundle target the app would choose on it."""

    device: aihub.HostedDevice
    choice: decision.Decision | None  # None without a bundle


def list_hosted(manifest: Manifest | None = None) -> list[HostedChoice]:
    """AI Hub's devices, their chipset mapped to the catalog, and with a bundle what the app would choose there."""
    return [HostedChoice(d, _decide(manifest, d) if manifest is not None else None) for d in aihub.hosted_devices()]


def _decide(manifest: Manifest, device: aihub.HostedDevice) -> decision.Decision:
    phone = decision.DeviceIdentity(device.soc or device.chipset, None, ANDROID_SDK)
    return decision.decide(manifest, phone, load_errors={}, lib_dir="")


def resolve(names: list[str], soc_names: list[str]) -> list[tuple[str, Any, aihub.HostedDevice]]:
    """(label, hub.Device to submit to, what it is) for each --device NAME and --soc SOC. A device or SoC whose
    chipset AI Hub lists as not available for jobs is refused here, before any upload."""
    hub = aihub.client()
    found = []
    for name in names:
        with aihub.errors(f"device {name!r}"):
            matches = hub.get_devices(name=name)
        if not matches:
            raise BadInput(f"AI Hub has no device named {name!r}: `qnndeploy device list --aihub` lists them")
        device = aihub.hosted(matches[0])
        if device.soc is not None:
            aihub.refuse_unhosted(socs.find(device.soc))
        found.append((name, aihub.device_named(name), device))
    for soc_name in soc_names:
        soc = socs.find(soc_name)
        target = aihub.device_for(soc)
        found.append((soc.model, target.device, target.hosted))
    if not found:
        raise BadInput("give the hosted phones: --device NAME or --soc SOC (repeatable)")
    return found


def verify_hosted(job: DeviceJob, names: list[str], soc_names: list[str]) -> list[DeviceVerification]:
    """Every requested hosted phone, in parallel; a phone that fails does not stop the others."""
    targets = resolve(names, soc_names)

    def one(target: tuple[str, Any, aihub.HostedDevice]) -> DeviceVerification:
        label, device, hosted = target
        try:
            return _verify_one(job, device, hosted)
        except QnnDeployError as e:
            return DeviceVerification(label, error=str(e), model=hosted.name)

    with Pool(max_workers=len(targets)) as pool:
        return list(pool.map(one, targets))


def _verify_one(job: DeviceJob, device: Any, hosted: aihub.HostedDevice) -> DeviceVerification:
    result = DeviceVerification(hosted.name, model=hosted.name, android_release=hosted.os, runner="aihub")
    choice = _decide(job.manifest, hosted)
    result.soc, result.identified_by, result.dsp_arch = choice.soc, f"AI Hub chipset {hosted.chipset}", choice.dsp_arch
    result.provider, result.reason = choice.provider, choice.reason
    if not choice.npu:
        result.expectation = "CPU fallback expected: nothing to run on AI Hub"
        add_not_run(result, choice, f"the app runs it on the CPU here ({choice.reason}): nothing to run on AI Hub")
        settle(result)
        result.record = write_record(job, result)
        return result
    if choice.npu_source == decision.NpuSource.ON_DEVICE:  # no context binary of the bundle's to submit
        result.npu_source, result.compile_budget_s = str(choice.npu_source), choice.compile_budget_s
        result.expectation = ("NPU, compiled on the phone (on-device): not run on AI Hub, which compiles on its own "
                              "host; run it over adb with device verify --ort-runner")
        add_not_run(result, choice, "compiled on the phone (on-device): AI Hub compiles on its own host, not as the "
                                    "app's QNN EP; run it over adb with device verify --ort-runner")
        settle(result)
        result.record = write_record(job, result)
        return result
    binaries = {a.path: a for t in job.manifest.targets for a in t.artifacts
                if a.format == FileFormat.QNN_CONTEXT_BINARY}
    for graph in choice.paths:
        if graph in choice.cpu_graphs:
            continue
        binary = next(p for p, a in binaries.items() if a.serves(graph) and p in choice.files)
        result.graphs.append(_run_graph(job, device, hosted, graph, binary, choice))
    ran = bool(result.graphs) and all(g.status == GraphStatus.PASSED for g in result.graphs)
    statuses = {g.status for g in result.graphs}
    add_not_run(result, choice, "")  # a split's CPU parts: not run on AI Hub
    settle(result)
    result.expectation = ("NPU: every context binary ran on the hosted phone and matches the CPU model" if ran
                          else "NPU target, but it failed on the hosted phone" if GraphStatus.ERROR in statuses
                          else "NPU: the context binaries ran, but their outputs differ from the CPU model's")
    result.record = write_record(job, result)
    return result


def _run_graph(job: DeviceJob, device: Any, hosted: aihub.HostedDevice, graph: str, binary: str,
               choice: decision.Decision) -> GraphRun:
    hub = aihub.client()
    run = GraphRun(graph, binary, GraphStatus.ERROR, ran_on=Provider.NPU)  # an inference job on the hosted phone's HTP
    samples, expected, run.inputs = job.reference(graph)
    names = list(samples[0])
    what = f"{graph} on {hosted.name}"
    try:
        with aihub.errors(what):
            remote = hub.submit_inference_job(model=str(job.bundle / binary), device=device,
                                              inputs={n: [s[n] for s in samples] for n in names},
                                              name=f"{graph}-{hosted.name}", profile=True, retry=False)
        run.hosted = aihub.job_ref(remote)
        aihub.wait(remote, what, TIMEOUT_S)
        with aihub.errors(f"the outputs of {what}"):
            outputs = remote.download_output_data()
            profile = remote.download_profile()
    except QnnDeployError as e:
        run.reason = str(e)
        return run
    actual = _per_sample(outputs or {}, list(expected[0]), len(samples))
    precision = next(t.precision for t in job.manifest.targets if t.soc == choice.soc)
    run.thresholds = limits = metrics.thresholds_for(precision)
    job.judge(run, graph, choice.soc, expected, actual, limits)
    run.samples, run.inferences, run.clock = len(samples), len(samples), Clock.AIHUB
    run.hosted = {**run.hosted, **profile_figures(profile)}
    seconds = run.hosted.get("inference_ms")
    run.per_inference_s = round(seconds / 1000, 6) if isinstance(seconds, float) else None
    return run


def _per_sample(outputs: dict[str, list[Any]], names: list[str], count: int) -> list[dict[str, Any]]:
    """AI Hub's {name: [one array per sample]} as one {name: array} per sample; names by position when the context
    binary renamed the outputs (a QNN graph may sanitize tensor names)."""
    if set(outputs) != set(names) and len(outputs) == len(names):
        outputs = dict(zip(names, outputs.values(), strict=True))
    missing = [n for n in names if n not in outputs or len(outputs[n]) != count]
    if missing:
        raise QnnDeployError(f"AI Hub returned no output {', '.join(missing)} (it gave {', '.join(outputs) or 'none'})")
    return [{n: outputs[n][i] for n in names} for i in range(count)]


def profile_figures(profile: JSON) -> JSON:
    """The figures of AI Hub's profile that the device record keeps (times in AI Hub's microseconds, as ms)."""
    summary = profile.get("execution_summary") or {}

    def ms(key: str) -> float | None:  # AI Hub's times are µs; anything but a finite, non-negative number is none
        value = numbers.figure(summary.get(key), low=0)
        return round(value / 1000, 3) if value is not None else None

    peak = summary.get("inference_memory_peak_range") or summary.get("estimated_inference_peak_memory")
    units: dict[str, int] = {}
    for layer in profile.get("execution_detail") or []:
        unit = str(layer.get("compute_unit", "?"))
        units[unit] = units.get(unit, 0) + 1
    return {"inference_ms": ms("estimated_inference_time"), "first_load_ms": ms("first_load_time"),
            "warm_load_ms": ms("warm_load_time"),
            "peak_memory_bytes": list(peak) if isinstance(peak, (list, tuple)) else peak,
            "compute_units": units}
