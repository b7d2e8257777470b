"""What the page shows of each kind of record, one frozen dataclass per kind (collect.py reads them, html.py renders
them), and Collected, everything read from the paths of one report. A figure a record does not hold is None."""

from __future__ import annotations

from dataclasses import dataclass, field

from qnndeploy.decide.reach import Reach
from qnndeploy.formats.benchrecord import BenchRecord, Launch, ProfileRow
from qnndeploy.formats.estimaterecord import EstimateRecord


@dataclass(frozen=True)
class Skipped:
    source: str  # as shown: relative to the path given, under its name
    reason: str


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int | None
    format: str


@dataclass(frozen=True)
class OutputFigures:
    """One output compared with the CPU (validate's metrics), as a record holds it."""

    name: str
    passed: bool | None
    snr_db: float | None
    cosine: float | None
    max_abs_diff: float | None
    rel_l2: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class CheckInfo:
    """One model x SoC of a `qnndeploy check --json` output."""

    source: str
    graph: str
    soc: str
    verdict: str
    measured: bool
    reason: str
    total_nodes: int
    cpu_nodes: int
    qnn_partitions: int
    cpu_partitions: int
    findings: tuple[str, ...] = ()

    @property
    def coverage(self) -> float | None:
        """The share of nodes on the HTP, when op support was measured."""
        if not self.measured or not self.total_nodes:
            return None
        return (self.total_nodes - self.cpu_nodes) / self.total_nodes


@dataclass(frozen=True)
class CompileInfo:
    source: str
    graph: str
    soc: str
    dsp_arch: str
    backend: str
    qairt: str
    precision: str
    status: str
    error: str | None
    duration_s: float | None
    outputs: tuple[FileInfo, ...]
    shared: str | None = None
    warnings: tuple[str, ...] = ()
    created: str | None = None


@dataclass(frozen=True)
class ValidationInfo:
    source: str
    graph: str
    soc: str
    precision: str
    passed: bool
    thresholds: dict[str, float]
    outputs: tuple[OutputFigures, ...]
    samples: str
    seconds_per_run: float | None = None
    threshold_reason: str | None = None
    task: str | None = None  # the task verdict that decided for its output, in words
    task_passed: bool | None = None
    chain: str | None = None  # a split's part: the split as the app runs it, in words
    chain_passed: bool | None = None
    loop: str | None = None  # an encoder-decoder's graph: its decode loop, in words
    loop_passed: bool | None = None
    loop_texts: tuple[tuple[str, str], ...] = ()  # per sample: the CPU's text, the NPU's


@dataclass(frozen=True)
class DiagnoseProbe:
    """One probed tensor of a `diagnose --json` output, as the page shows it on the error curve."""

    position: int
    tensor: str
    op_type: str
    snr_db: float | None
    cosine: float | None
    bad: bool


@dataclass(frozen=True)
class DiagnoseInfo:
    """A `qnndeploy diagnose --json` output: the error curve along the graph."""

    source: str
    graph: str
    soc: str
    ok: bool
    min_snr_db: float | None
    nodes: int | None
    probes: tuple[DiagnoseProbe, ...]
    first_bad: str | None
    first_bad_op: str | None


@dataclass(frozen=True)
class TargetInfo:
    soc: str
    dsp_arch: str
    precision: str
    files: tuple[FileInfo, ...]
    validated: bool | None
    judged_on: tuple[tuple[str, str], ...] = ()  # per graph: the inputs its validation rested on, in words


@dataclass(frozen=True)
class BundleInfo:
    source: str
    name: str
    version: str
    format_version: int
    qairt: str
    graphs: tuple[str, ...]
    targets: tuple[TargetInfo, ...]
    runtime: str
    on_device: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (graph, the arches it was validated for)
    model: str = ""  # the source model's name
    license: str | None = None  # the model's licence, as bundle build --license gave it
    cpu_only: tuple[str, ...] = ()  # a split's parts that always run on the CPU


@dataclass(frozen=True)
class OnDeviceInfo:
    """records/<graph>-on-device-<arch>.json of a bundle: the graph compiled as a phone's QNN EP will, run on the
    host HTP emulator against the CPU model."""

    source: str
    graph: str
    arch: str
    soc: str
    compile_s: float | None
    passed: bool
    error: str | None
    outputs: tuple[OutputFigures, ...]


@dataclass(frozen=True)
class DeviceRun:
    graph: str
    status: str
    reason: str | None
    samples: int
    inferences: int
    first_run_s: float | None
    per_inference_s: float | None
    clock: str | None
    outputs: tuple[OutputFigures, ...]
    launch: Launch = field(default_factory=Launch)  # its first launch, cold and warm (none in older records)


@dataclass(frozen=True)
class DeviceRecordInfo:
    """A device verify record: one phone, the bundle's decision there and each graph's run."""

    source: str
    serial: str
    model: str
    soc: str
    dsp_arch: str | None
    ok: bool
    provider: str | None
    reason: str | None
    bundle: str
    runs: tuple[DeviceRun, ...]
    created: str | None
    note: str | None = None  # the runner's note: why no graph ran, where it ran
    push: str | None = None  # what the push sent, in words
    play: str | None = None  # device verify --play: the device group Play delivers against the one expected
    outcome: str = "failed"  # "passed" | "ran" | "not run" | "failed": what the phone proved (not run is never ok)


@dataclass(frozen=True)
class BenchInfo:
    """A bench record (formats/benchrecord.py: one phone x graph) and what the page shows of it in words."""

    source: str
    record: BenchRecord
    soc: str
    serial: str
    phone: str
    bundle: str
    qairt: str
    decision: str
    profile_level: str | None = None
    profile_source: str | None = None
    trace: str | None = None
    ops: tuple[ProfileRow, ...] = ()  # the ones with the most time (collect.MAX_SHOWN_ROWS), most first
    partitions: tuple[ProfileRow, ...] = ()
    ops_total: int = 0  # in the record
    partitions_total: int = 0


@dataclass(frozen=True)
class EstimateInfo:
    """An estimate record (formats/estimaterecord.py: one graph x SoC), estimated, not measured."""

    source: str
    record: EstimateRecord


@dataclass(frozen=True)
class ReachInfo:
    """`qnndeploy reach` of one bundle manifest the report read (engine ort): which phones take which path; error
    when the manifest cannot be asked (a target the catalog does not know, a shape the reader refuses)."""

    source: str
    bundle: str
    reach: Reach | None
    error: str | None = None


@dataclass
class Collected:
    """Everything read from the paths, in the order found, and what was skipped."""

    paths: list[str] = field(default_factory=list)
    bundles: list[BundleInfo] = field(default_factory=list)
    checks: list[CheckInfo] = field(default_factory=list)
    compiles: list[CompileInfo] = field(default_factory=list)
    validations: list[ValidationInfo] = field(default_factory=list)
    diagnoses: list[DiagnoseInfo] = field(default_factory=list)
    on_device: list[OnDeviceInfo] = field(default_factory=list)
    devices: list[DeviceRecordInfo] = field(default_factory=list)
    benches: list[BenchInfo] = field(default_factory=list)
    estimates: list[EstimateInfo] = field(default_factory=list)
    reaches: list[ReachInfo] = field(default_factory=list)  # one per bundle, made from its manifest
    skipped: list[Skipped] = field(default_factory=list)
    duplicates: dict[str, str] = field(default_factory=dict)  # a record's copy (shown) -> the one shown

    @property
    def records(self) -> int:
        return sum(len(x) for x in (self.bundles, self.checks, self.compiles, self.validations, self.diagnoses,
                                    self.on_device, self.devices, self.benches, self.estimates))
