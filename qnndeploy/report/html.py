"""The report page: one HTML document with its CSS inline and its plots as inline SVG (svg.py), nothing fetched and
no script. Everything taken from a record is escaped here (`_e`), names and paths included: they are data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import Any

from qnndeploy.formats.benchrecord import STAND_IN_NOTE, Conditions, PathFigures
from qnndeploy.formats.estimaterecord import NOT_CLAIMED
from qnndeploy.report import svg
from qnndeploy.report.entries import (
    BenchInfo,
    BundleInfo,
    CheckInfo,
    Collected,
    CompileInfo,
    DeviceRecordInfo,
    DeviceRun,
    DiagnoseInfo,
    EstimateInfo,
    FileInfo,
    OnDeviceInfo,
    OutputFigures,
    ReachInfo,
    ValidationInfo,
)

NOT_MEASURED = "\u2013"  # an en dash: a figure that was not measured

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;
color:#222;background:#fafafa;line-height:1.4}
h1{font-size:1.6em;margin:.2em 0}h2{border-bottom:2px solid #1f6fb4;padding-bottom:2px;margin-top:1.6em}
h3{margin:1.2em 0 .4em;color:#1f4f7f}h4{margin:.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 .8em;background:#fff}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eef3f8}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.record{background:#fff;border:1px solid #ddd;border-left:4px solid #1f6fb4;padding:8px 12px;margin:10px 0}
.record[data-kind=bench]{border-left-color:#e07b10}.record[data-kind=device],.record[data-kind=on-device]{border-left-color:#2e7d32}
.record[data-status="not run"]{border-left-color:#999}
.record[data-kind=estimate]{border-left-color:#7b1fa2;border-left-style:dashed}.estimated{font-style:italic}
.source{color:#555;font-size:.9em;margin:0 0 .4em}code{background:#f0f0f0;padding:0 3px;word-break:break-all}
.pass{color:#2e7d32;font-weight:600}.fail{color:#c62828;font-weight:600}.warn{color:#b26a00;font-weight:600}
figure{margin:.6em 0}figcaption{color:#444;font-size:.9em;max-width:640px}
.share{display:inline-block;height:10px;background:#1f6fb4;vertical-align:middle}
.muted{color:#666}ul.skipped li{margin:.2em 0}
"""


def _e(value: object) -> str:
    """Text from a record, escaped for HTML text and attribute values alike."""
    return escape(str(value), quote=True)


def _n(value: float | None, fmt: str = ".3g", unit: str = "") -> str:
    if value is None:
        return NOT_MEASURED
    return f"{format(value, fmt)}{unit}"


def _verdict(passed: bool | None, yes: str = "pass", no: str = "FAIL") -> str:
    if passed is None:
        return '<span class="muted">not validated</span>'
    return f'<span class="pass">{yes}</span>' if passed else f'<span class="fail">{no}</span>'


def _size(n: int | None) -> str:
    if n is None:
        return NOT_MEASURED
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table; head is plain text (escaped here), cells are HTML made by this module."""
    out = ["<table><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr>"]
    out.extend("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                for i, c in enumerate(row)) + "</tr>" for row in rows)
    out.append("</table>")
    return "".join(out)


def _figure(svg_text: str, caption: str, kind: str) -> str:
    return f'<figure data-plot="{_e(kind)}">{svg_text}<figcaption>{caption}</figcaption></figure>'


class _Page:
    def __init__(self, c: Collected) -> None:
        self.c = c
        self.copies: dict[str, list[str]] = {}
        for copy, shown in c.duplicates.items():
            self.copies.setdefault(shown, []).append(copy)

    def record(self, kind: str, source: str, title: str, body: str, status: str | None = None) -> str:
        also = self.copies.get(source, [])
        more = (" (the same file as " + ", ".join(f"<code>{_e(a)}</code>" for a in also) + ")") if also else ""
        said = f' data-status="{_e(status)}"' if status else ""  # "not run": grey, not the kind's colour
        return (f'<div class="record" data-kind="{_e(kind)}" data-source="{_e(source)}"{said}><h4>{title}</h4>'
                f'<p class="source">from <code>{_e(source)}</code>{more}</p>{body}</div>')


def _outputs_table(outputs: Sequence[OutputFigures]) -> str:
    return _table(["output", "verdict", "SNR dB", "cosine", "max |diff|", "rel L2", "note"],
                  ([_e(o.name), _verdict(o.passed, "ok", "BAD"), _n(o.snr_db, ".1f"), _n(o.cosine, ".6f"),
                    _n(o.max_abs_diff, ".2e"), _n(o.rel_l2, ".2e"), _e(o.note or "")] for o in outputs),
                  numeric=(2, 3, 4, 5))


def _files(files: Sequence[FileInfo]) -> str:
    return ", ".join(f"<code>{_e(f.path)}</code> {_e(_size(f.size))}" for f in files) or NOT_MEASURED


# --- one block per record kind ------------------------------------------------------------------------------------

def _check(p: _Page, r: CheckInfo) -> str:
    cls = {"ready": "pass", "fixable": "warn"}.get(r.verdict, "fail")
    if r.measured:
        coverage = (f"{_n(r.coverage, '.1%')} of {r.total_nodes} nodes on the HTP, {r.qnn_partitions} HTP "
                    f"partition(s), {r.cpu_partitions} CPU partition(s)")
    else:
        coverage = f"HTP coverage not measured: {_e(r.reason)}"
    findings = "".join(f"<li>{_e(f)}</li>" for f in r.findings)
    body = f"<p>verdict <span class=\"{cls}\">{_e(r.verdict)}</span>; {coverage}</p>"
    return p.record("check", r.source, "check", body + (f"<ul>{findings}</ul>" if findings else ""))


def _compile(p: _Page, r: CompileInfo) -> str:
    ok = r.status == "ok"
    lines = [f"<p>{_verdict(ok, 'compiled', 'FAILED')} by {_e(r.backend)} (QAIRT {_e(r.qairt)}), {_e(r.precision)}, "
             f"{_e(r.dsp_arch)}, in {_n(r.duration_s, '.1f', ' s')}"
             + (f"; shared context <code>{_e(r.shared)}</code>" if r.shared else "") + "</p>"]
    if r.error:
        lines.append(f'<p class="fail">{_e(r.error)}</p>')
    lines.append(_table(["file", "format", "size"],
                        ([f"<code>{_e(f.path)}</code>", _e(f.format), _e(_size(f.size))] for f in r.outputs),
                        numeric=(2,)))
    lines += [f'<p class="warn">warning: {_e(w)}</p>' for w in r.warnings]
    return p.record("compile", r.source, "compile", "".join(lines))


def _validation(p: _Page, r: ValidationInfo) -> str:
    limits = ", ".join(f"{_e(k)} {v:g}" for k, v in r.thresholds.items())
    head = (f"<p>{_verdict(r.passed)} on the host HTP emulator against onnxruntime CPU, {_e(r.precision)}; "
            f"{_e(r.samples)}; thresholds {limits}"
            + (f"; looser threshold because: {_e(r.threshold_reason)}" if r.threshold_reason else "")
            + (f"; {r.seconds_per_run:.3f} s per emulator run (not phone speed)" if r.seconds_per_run else "")
            + "</p>")
    if r.task is not None:
        head += (f"<p>{_verdict(bool(r.task_passed))} what the app reads, which decides for its output (the tensor "
                 f"figures below are evidence): {_e(r.task)}</p>")
    if r.chain is not None:
        head += f"<p>{_verdict(bool(r.chain_passed))} {_e(r.chain)}</p>"
    if r.loop is not None:
        head += f"<p>{_verdict(bool(r.loop_passed))} {_e(r.loop)}</p>" + _table(
            ["sample", "CPU text", "NPU text"], ([str(i), _e(c), _e(n)] for i, (c, n) in enumerate(r.loop_texts)))
    return p.record("validation", r.source, "validation", head + _outputs_table(r.outputs))


def _diagnose(p: _Page, r: DiagnoseInfo) -> str:
    shown = [x for x in r.probes if x.snr_db is not None]
    plot = svg.line_chart([svg.Series("SNR", [(x.position, min(x.snr_db or 0.0, 150.0)) for x in shown],
                                      marked=[x.bad for x in shown])],
                          title=f"diagnose {r.graph} {r.soc}", x_label="position in the graph (node)",
                          y_label="SNR dB", threshold=r.min_snr_db)
    bad = (f"first bad tensor <code>{_e(r.first_bad)}</code> ({_e(r.first_bad_op or '')})" if r.first_bad
           else "no probed tensor below the threshold")
    head = (f"<p>the build's binary: {_verdict(r.ok)}; {len(r.probes)} tensors probed"
            + (f" in a graph of {r.nodes} nodes" if r.nodes else "") + f"; {bad}</p>")
    caption = (f"SNR of each probed tensor against the producing node's position (CPU fp32 vs host HTP emulator); "
               f"bad probes red, threshold {_n(r.min_snr_db, 'g', ' dB')} dashed; SNR capped at 150 dB")
    return p.record("diagnose", r.source, "diagnose", head + _figure(plot, caption, "diagnose"))


def _on_device(p: _Page, r: OnDeviceInfo) -> str:
    head = (f"<p>{_verdict(r.passed)}: compiled as a phone's QNN EP compiles it for {_e(r.arch)} ({_e(r.soc)}) in "
            f"{_n(r.compile_s, '.1f', ' s')}, run on the host HTP emulator against the CPU model</p>")
    err = f'<p class="fail">{_e(r.error)}</p>' if r.error else ""
    return p.record("on-device", r.source, f"on-device compile validation, {_e(r.arch)}",
                    head + err + _outputs_table(r.outputs))


def _device_run(p: _Page, d: DeviceRecordInfo, run: DeviceRun) -> str:
    status = {"passed": "pass", "failed": "fail", "not run": "muted"}.get(run.status, "warn")
    head = (f"<p>{_e(d.model)} <code>{_e(d.serial)}</code> ({_e(d.soc)}, {_e(d.dsp_arch or 'no HTP arch')}), "
            f"decision {_e(d.provider or '?')}: {_e(d.reason or '')}; bundle {_e(d.bundle)}"
            + (f"; {_e(d.created)}" if d.created else "") + "</p>"
            f'<p><span class="{status}">{_e(run.status)}</span>' + (f": {_e(run.reason)}" if run.reason else "")
            + f"; {run.samples} sample(s), {run.inferences} inference(s); first run "
            f"{_n(run.first_run_s and run.first_run_s * 1e3, '.1f', ' ms')}, per inference "
            f"{_n(run.per_inference_s and run.per_inference_s * 1e3, '.3g', ' ms')}"
            + (f" ({_e(run.clock)} clock)" if run.clock else "") + "</p>")
    return p.record("device", d.source, "device verify", head + (_outputs_table(run.outputs) if run.outputs else ""),
                    status=run.status if run.status == "not run" else None)


_PATH_ROWS: list[tuple[str, Callable[[PathFigures], float | None], str]] = [
    ("first inference, ms", lambda f: f.first_ms, ".3g"),
    ("session start cold, ms", lambda f: f.launch.session_cold_ms, ".3g"),
    ("session start warm, ms", lambda f: f.launch.session_warm_ms, ".3g"),
    ("first result cold, ms", lambda f: f.launch.first_result_cold_ms, ".3g"),
    ("first result warm, ms", lambda f: f.launch.first_result_warm_ms, ".3g"),
    ("latency p50, ms", lambda f: f.latency_ms.p50, ".3g"), ("latency p90, ms", lambda f: f.latency_ms.p90, ".3g"),
    ("latency p99, ms", lambda f: f.latency_ms.p99, ".3g"), ("latency mean, ms", lambda f: f.latency_ms.mean, ".3g"),
    ("latency min, ms", lambda f: f.latency_ms.min, ".3g"), ("latency max, ms", lambda f: f.latency_ms.max, ".3g"),
    ("throughput, /s", lambda f: f.throughput_per_s, ".4g"), ("real-time factor", lambda f: f.rtf, ".3g"),
    ("process CPU, %", lambda f: f.cpu_percent, ".3g"),
    ("energy per inference, mJ", lambda f: f.energy_mj_per_inference, ".3g"),
    ("runs", lambda f: None if f.runs is None else float(f.runs), ".0f"),
]
_RATIO_OF = {"latency p50, ms": "latency_p50", "throughput, /s": "throughput",
             "energy per inference, mJ": "energy_per_inference", "process CPU, %": "cpu_percent"}


def _conditions(c: Conditions) -> str:
    def pair(a: object, b: object, unit: str = "") -> str:
        return f"{_e(NOT_MEASURED if a is None else a)}{unit} → {_e(NOT_MEASURED if b is None else b)}{unit}"

    def yes_no(value: bool | None) -> str:
        return "yes" if value is True else "no" if value is False else NOT_MEASURED

    return (f"<p>conditions: charging {yes_no(c.charging)}, screen on {yes_no(c.screen_on)}; battery "
            f"{pair(c.battery_level_start, c.battery_level_end, '%')}; temperature "
            f"{pair(c.temperature_c_start, c.temperature_c_end, ' °C')}; thermal status "
            f"{pair(c.thermal_status_start, c.thermal_status_end)}</p>")


def _bench(p: _Page, r: BenchInfo) -> str:
    rec = r.record
    names = sorted(rec.paths, key=lambda n: (n != "npu", n != "cpu", n))
    settings = ", ".join(f"{_e(k)} {_e(v)}" for k, v in rec.settings.items() if v is not None)
    out = [f"<p>{_e(r.phone)} <code>{_e(r.serial)}</code> ({_e(r.soc)}); bundle {_e(r.bundle)}, QAIRT "
           f"{_e(r.qairt)}; decision {_e(r.decision)}" + (f"; {_e(rec.created)}" if rec.created else "") + "</p>",
           f"<p>settings: {settings}</p>", _conditions(rec.conditions)]
    head = ["figure", *names] + (["npu / cpu"] if rec.ratios else [])
    rows = []
    for title, get, fmt in _PATH_ROWS:
        cells = [_e(title), *(_n(get(rec.paths[n]), fmt) for n in names)]
        if rec.ratios:
            key = _RATIO_OF.get(title)
            cells.append(f"<b>{_n(rec.ratios.get(key), '.3g')}</b>" if key else "")
        rows.append(cells)
    out.append(_table(head, rows, numeric=tuple(range(1, len(head)))))
    runs = ", ".join(f"{_e(n)} {_e(NOT_MEASURED if rec.paths[n].runs is None else rec.paths[n].runs)} runs"
                     for n in names)
    out.append(_figure(
        svg.ranges([svg.Range(n, lat.min, lat.p50, lat.p90, lat.p99, lat.max, lat.mean, f.block_p50_ms,
                              svg.colour(n, i)) for i, n in enumerate(names)
                    for f in (rec.paths[n],) for lat in (f.latency_ms,)],
                   title=f"latency {rec.graph} {r.phone}", unit="ms per inference"),
        f"Latency per inference ({runs}): line min to max, box p50 to p90, thick bar p50, tick p99, diamond mean, "
        "dots the p50 of each block (the spread over repeats).", "latency"))
    out.append(_figure(
        svg.bars([(n, rec.paths[n].energy_mj_per_inference, svg.colour(n, i)) for i, n in enumerate(names)],
                 title=f"energy per inference {rec.graph}", unit="mJ"),
        "Energy per inference, from battery current × voltage integrated over each path's run ("
        + ", ".join(f"{_e(n)}: {_e(rec.paths[n].energy_source or 'not measured')}" for n in names) + ").",
        "energy"))
    if rec.sustained:
        out.append(_sustained(r))
    if rec.sweep:
        out.append("<h4>performance-mode sweep</h4>" + _table(
            ["perf mode", "npu p50 ms", "npu throughput /s", "npu mJ/inference"],
            ([_e(s.perf_mode), *(_n(v, ".3g") for v in (s.npu.latency_ms.p50, s.npu.throughput_per_s,
                                                        s.npu.energy_mj_per_inference))] for s in rec.sweep),
            numeric=(1, 2, 3)))
    if r.ops or r.partitions:
        out.append(_profile(r))
    if rec.gate is not None:
        g = rec.gate
        out.append(f"<h4>gate against <code>{_e(g.baseline)}</code></h4><p>{_verdict(g.passed, 'passed', 'FAILED')}"
                   f", threshold {_n(g.threshold, '.0%')}</p>")
        if g.regressions:
            out.append(_table(["figure", "was", "now", "now / was"],
                              ([_e(x.figure), _n(x.was), _n(x.now), _n(x.ratio)] for x in g.regressions),
                              numeric=(1, 2, 3)))
    if rec.notes:
        out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in rec.notes) + "</ul>")
    return p.record("bench", r.source, "bench: NPU vs CPU on the phone", "".join(out))


def _band(lower: float | None, upper: float | None, fmt: str = ".3g") -> str:
    return f"{_n(lower, fmt)} to {_n(upper, fmt)}" if lower is not None or upper is not None else NOT_MEASURED


def _estimated(e: EstimateInfo) -> str:
    """An estimate in a few words, labelled as what it is."""
    r = e.record
    if r.ms is None:
        return f'<span class="estimated">estimated, not measured</span>: no number ({_e(r.reason or "")})'
    factor = f"factor {_n(r.factor, '.3g')}" if r.factor is not None else _e(r.fit or "no factor")
    return (f'<span class="estimated">estimated, not measured</span>: {_n(r.ms, ".3g", " ms")} (band '
            f"{_band(r.ms_lower, r.ms_upper)} ms), {factor}")


def _estimate(p: _Page, e: EstimateInfo, benches: Sequence[BenchInfo]) -> str:
    """The estimate of one graph x SoC, where it comes from, what it does not claim, and beside it any latency a
    bench of the same graph on a phone of the same SoC measured."""
    r, c = e.record, e.record.cost_model
    out = [f"<p>{_estimated(e)}</p>"]
    if r.fit:
        out.append(f"<p>fit: {_e(r.fit)}</p>")
    out.append(_table(
        ["cost model", "SoC", "QAIRT", "clock", "cycles", "cycle band", "ms at the clock", "fill", "spill",
         "ops without a cost"],
        [["the HTP backend's host-side cost model (Hextimate)", _e(c.soc or NOT_MEASURED), _e(c.qairt or NOT_MEASURED),
          _n(c.clock_mhz, "g", " MHz"), _n(None if c.cycles is None else float(c.cycles), ",.0f"),
          _band(None if c.cycles_lower is None else float(c.cycles_lower),
                None if c.cycles_upper is None else float(c.cycles_upper), ",.0f"),
          _n(c.ms, ".3g"), _e(_size(r.fill_bytes)), _e(_size(r.spill_bytes)),
          _n(None if r.ops_without_cost is None else float(r.ops_without_cost), ".0f")]], numeric=(4, 5, 6, 9)))
    if c.clock_source:
        out.append(f'<p class="muted">clock: {_e(c.clock_source)}</p>')
    out += [f'<p class="warn">warning: {_e(w)}</p>' for w in r.warnings]
    measured = [(b, b.record.paths["npu"].latency_ms.p50) for b in benches if "npu" in b.record.paths]
    if measured:
        out.append("<h4>estimated beside measured</h4>" + _table(
            ["what", "NPU ms", "from"],
            [[f'<span class="estimated">estimated, not measured</span> (band {_band(r.ms_lower, r.ms_upper)})',
              _n(r.ms, ".3g"), f"<code>{_e(e.source)}</code>"],
             *([f"measured: bench latency p50 on {_e(b.phone)} <code>{_e(b.serial)}</code>"
                + (f" (measured / estimated {_n(p50 / r.ms, '.3g')})" if p50 is not None and r.ms else "")
                + (' <span class="warn">stand-in tools: the host\'s time, not a phone\'s</span>'
                   if STAND_IN_NOTE in b.record.notes else ""),
                _n(p50, ".3g"), f"<code>{_e(b.source)}</code>"] for b, p50 in measured)], numeric=(1,)))
    out.append(f'<p class="muted">{_e(r.factors)}</p><p class="estimated">{_e(NOT_CLAIMED)}</p>')
    return p.record("estimate", e.source, "estimate (estimated, not measured)", "".join(out))


def _sustained(r: BenchInfo) -> str:
    rec = r.record
    paths = sorted({s.path for s in rec.sustained}, key=lambda n: (n != "npu", n))
    latency = [svg.Series(n, [(s.t_s, s.latency_ms_p50) for s in rec.sustained if s.path == n and s.latency_ms_p50
                              is not None], svg.colour(n, i)) for i, n in enumerate(paths)]
    temps = sorted({s.t_s: s.temperature_c for s in rec.sustained if s.temperature_c is not None}.items())
    statuses: dict[float, int | None] = {}
    for s in rec.sustained:  # one per interval: the highest either path saw
        statuses[s.t_s] = max((x for x in (statuses.get(s.t_s), s.thermal_status) if x is not None), default=None)
    out = [_figure(svg.line_chart(latency, title=f"sustained latency {rec.graph}", x_label="time, s",
                                  y_label="p50 ms"),
                   f"Sustained run: latency p50 per interval ({len(rec.sustained)} intervals).", "sustained")]
    if temps:
        out.append(_figure(svg.line_chart([svg.Series("temperature", temps, svg.RED)],
                                          title=f"sustained temperature {rec.graph}", x_label="time, s",
                                          y_label="°C"),
                           "Temperature over the sustained run; thermal status (0 none to 6 shutdown) at each "
                           "interval: " + ", ".join(f"{t:g} s {_e(NOT_MEASURED if status is None else status)}"
                                                    for t, status in statuses.items()) + ".", "temperature"))
    return "".join(out)


def _profile(r: BenchInfo) -> str:
    out = [f"<h4>op profile ({_e(r.profile_level or '?')}, from {_e(r.profile_source or '?')})</h4>"]
    if r.trace:
        out.append(f"<p>Chrome trace: <code>{_e(r.trace)}</code> (Perfetto, chrome://tracing)</p>")
    for title, rows, total in (("ops", r.ops, r.ops_total), ("partitions", r.partitions, r.partitions_total)):
        if not rows:
            continue
        top = sorted(rows, key=lambda o: -(o.time_us or 0.0))[:40]
        out.append(_table(
            [title[:-1], "type", "time µs", "share", "where"],
            ([f"<code>{_e(o.name)}</code>", _e(o.type), _n(o.time_us, ".4g"),
              (f'<span class="share" style="width:{max(0.0, min(o.share, 1.0)) * 120:.0f}px"></span> '
               f"{o.share:.1%}" if o.share is not None else NOT_MEASURED),
              _e(o.where) if o.where.lower() in ("htp", "") else f'<span class="warn">{_e(o.where)}</span>']
             for o in top), numeric=(2,)))
        if max(total, len(rows)) > len(top):
            out.append(f'<p class="muted">{max(total, len(rows)) - len(top)} more {title} with less time not shown</p>')
    return "".join(out)


def _phone_verdict(d: DeviceRecordInfo) -> str:
    """ok (green) only when every graph ran and nothing failed; not run is grey, never a pass."""
    if d.outcome == "not run":
        return '<span class="muted">not run</span>'
    return _verdict(d.ok and d.outcome in ("passed", "ran"), "ok", "FAILED")


def _phone(p: _Page, d: DeviceRecordInfo) -> str:
    body = (f"<p>{_phone_verdict(d)}: {_e(d.model)} <code>{_e(d.serial)}</code>, {_e(d.soc)} "
            f"({_e(d.dsp_arch or 'no HTP arch')}); the app's decision: {_e(d.provider or '?')}, {_e(d.reason or '')}; "
            f"bundle {_e(d.bundle)}" + (f"; {_e(d.created)}" if d.created else "") + "</p>")
    body += "".join(f"<p>{_e(line)}</p>" for line in (d.push, d.play, d.note) if line)
    body += _table(["graph", "status", "first run", "per inference", "session start cold / warm",
                    "first result cold / warm"],
                   ([_e(r.graph), _run_status(r), _n(r.first_run_s and r.first_run_s * 1e3, ".1f", " ms"),
                     _n(r.per_inference_s and r.per_inference_s * 1e3, ".3g", " ms"),
                     f"{_n(r.launch.session_cold_ms, '.1f')} / {_n(r.launch.session_warm_ms, '.1f', ' ms')}",
                     f"{_n(r.launch.first_result_cold_ms, '.1f')} / {_n(r.launch.first_result_warm_ms, '.1f', ' ms')}"]
                    for r in d.runs),
                   numeric=(2, 3, 4, 5)) if d.runs else "<p>no graph was run on the phone</p>"
    return p.record("phone", d.source, f"device verify on {_e(d.serial)}", body,
                    status="not run" if d.outcome == "not run" else None)


def _run_status(r: DeviceRun) -> str:
    if r.status == "not run":
        return f'<span class="muted">not run</span>: {_e(r.reason or "")}'
    return _e(r.status)


def _bundle(p: _Page, b: BundleInfo) -> str:
    rows = ([_e(t.soc), _e(t.dsp_arch), _e(t.precision), _files(t.files), _verdict(t.validated),
             "; ".join(f"{_e(g)}: {_e(on or NOT_MEASURED)}" for g, on in t.judged_on) or NOT_MEASURED]
            for t in b.targets)
    licence = (f"licence {_e(b.license)}" if b.license else
               '<span class="warn">licence not given</span> (bundle build --license)')
    split = (f"; on the CPU in every target (a split's parts): {', '.join(map(_e, b.cpu_only))}" if b.cpu_only
             else "")
    body = (f"<p>model {_e(b.model or b.name)}, {licence}; format v{b.format_version}, QAIRT {_e(b.qairt)}, graphs "
            f"{', '.join(map(_e, b.graphs))}{split}; runtime {_e(b.runtime)}</p>"
            + _table(["SoC", "arch", "precision", "files", "validation", "judged on"], rows))
    if b.on_device:
        body += "<p>on-device compile validated for: " + "; ".join(
            f"{_e(g)}: {', '.join(map(_e, arches)) or 'no arch'}" for g, arches in b.on_device) + "</p>"
    return p.record("bundle", b.source, f"bundle {_e(b.name)} {_e(b.version)}", body)


def _reach(p: _Page, r: ReachInfo) -> str:
    """A bundle's reach, compact: the summary per world, then one row per chipset, its best name's path and reason
    (`qnndeploy reach` lists every name phones report)."""
    title = f"which phones take the NPU: bundle {_e(r.bundle)}"
    if r.reach is None:
        return p.record("reach", r.source, title, f'<p class="warn">not computed: {_e(r.error)}</p>')
    paths = {"prebuilt": "pass", "on-device": "warn", "cpu": "muted"}
    best = r.reach.best()
    body = (f"<p>The app's decision (engine {_e(r.reach.engine)}, first start: the QNN libraries load) on "
            f"{r.reach.chipsets} chipsets of Qualcomm's chipset table and the SoC catalog. Compact: one row per "
            f"chipset, with its best reported name's path and reason; <code>qnndeploy reach BUNDLE</code> lists all "
            f"{len(r.reach.rows)} names phones report (Build.SOC_MODEL from Android 12, ro.board.platform before). "
            "Reason keys are those the app's glue logs in its decision line.</p>"
            + _table(["world", "prebuilt", "on-device", "cpu"],
                     ([_e(w.world), str(w.prebuilt), str(w.on_device), str(w.cpu)] for w in r.reach.summary),
                     numeric=(1, 2, 3))
            + _table(["world", "chipset", "SoC", "arch", "reported as", "path", "reason", "runtime", "Play group"],
                     ([_e(x.world), _e(x.chipset or NOT_MEASURED) + (f"<br><span class=\"muted\">"
                                                                     f"{_e(x.marketing_name)}</span>"
                                                                     if x.marketing_name else ""),
                       _e(x.soc or NOT_MEASURED), _e(x.dsp_arch or NOT_MEASURED),
                       f"{_e(x.spelling)} ({_e(x.identified_by)}"
                       + (", assumed from AI Hub's name)" if x.spelled == "assumed" else ")"),
                       f'<span class="{paths[x.path]}">{_e(x.path)}</span>',
                       f"<code>{_e(x.reason_key)}</code> {_e(x.reason)}", _e(x.runtime or NOT_MEASURED),
                       _e(x.play_group)] for x in best)))
    return p.record("reach", r.source, title, body)


# --- the page --------------------------------------------------------------------------------------------------------

Cell = dict[str, list[Any]]


def cells(c: Collected) -> dict[tuple[str, str], Cell]:
    """Every record by (graph, SoC), in the order graphs and SoCs sort."""
    out: dict[tuple[str, str], Cell] = {}

    def put(graph: str, soc: str, kind: str, item: Any) -> None:
        out.setdefault((graph, soc), {}).setdefault(kind, []).append(item)

    for a in c.checks:
        put(a.graph, a.soc, "check", a)
    for b in c.compiles:
        put(b.graph, b.soc, "compile", b)
    for v in c.validations:
        put(v.graph, v.soc, "validation", v)
    for d in c.diagnoses:
        put(d.graph, d.soc, "diagnose", d)
    for o in c.on_device:
        put(o.graph, o.soc, "on-device", o)
    for dev in c.devices:
        for run in dev.runs:
            put(run.graph, dev.soc, "device", (dev, run))
    for bench in c.benches:
        put(bench.record.graph, bench.soc, "bench", bench)
    for est in c.estimates:
        put(est.record.graph, est.record.soc, "estimate", est)
    return dict(sorted(out.items()))


def _validated(v: ValidationInfo) -> str:
    """A validation's verdict in the overview: a pass under a threshold loosened with a reason is not the same green."""
    if v.passed and v.threshold_reason:
        return '<span class="warn">pass (looser threshold)</span>'
    return _verdict(v.passed)


def _overview(grid: dict[tuple[str, str], Cell], anchors: dict[tuple[str, str], str]) -> str:
    rows = []
    for key, cell in grid.items():
        check = cell.get("check", [])
        comp = cell.get("compile", [])
        val = cell.get("validation", [])
        snrs = [o.snr_db for v in val for o in v.outputs if o.snr_db is not None]
        bench = cell.get("bench", [])
        estimates = cell.get("estimate", [])
        rows.append([
            f'<a href="#{anchors[key]}">{_e(key[0])}</a>', _e(key[1]),
            "; ".join(f"{_e(a.verdict)}, {_n(a.coverage, '.0%')} HTP" for a in check) or NOT_MEASURED,
            "; ".join(f"{_verdict(b.status == 'ok', 'ok', 'FAILED')} {_n(b.duration_s, '.1f', ' s')}, "
                      + _e(_size(sum(f.size or 0 for f in b.outputs))) for b in comp) or NOT_MEASURED,
            ("; ".join(map(_validated, val)) + (f", worst SNR {min(snrs):.1f} dB" if snrs else "")) or NOT_MEASURED,
            "; ".join(f"{_verdict(o.passed)} {_e(o.arch)}" for o in cell.get("on-device", [])) or NOT_MEASURED,
            "; ".join(f"{_e(d.serial)} {_e(run.status)}" for d, run in cell.get("device", [])) or NOT_MEASURED,
            "; ".join(map(_estimated, estimates)) or NOT_MEASURED,
            "; ".join(f"{_e(b.serial)}: p50 NPU/CPU {_n(b.record.ratios.get('latency_p50'), '.2g')}, energy "
                      f"{_n(b.record.ratios.get('energy_per_inference'), '.2g')}" for b in bench) or NOT_MEASURED,
        ])
    return _table(["graph", "SoC", "check", "compile", "validation", "on-device compile", "device verify",
                   "estimate", "bench"], rows)


def _cpu_parts(c: Collected) -> str:
    """The CPU parts of split models: no record of their own (they are never compiled), judged in their chain."""
    parts = [f"{_e(g)} (bundle {_e(b.name)} {_e(b.version)})" for b in c.bundles for g in b.cpu_only]
    return ("<p>On the CPU on every phone, judged in their split's chain (the NPU part's validation): "
            + ", ".join(parts) + "</p>") if parts else ""


_ORDER = ("check", "compile", "validation", "diagnose", "on-device", "device", "estimate", "bench")


def render(c: Collected, created: str, version: str) -> str:
    """The whole page."""
    p = _Page(c)
    grid = cells(c)
    anchors = {key: f"cell-{i}" for i, key in enumerate(grid)}
    renderers: dict[str, Callable[[Any], str]] = {
        "check": lambda r: _check(p, r), "compile": lambda r: _compile(p, r),
        "validation": lambda r: _validation(p, r), "diagnose": lambda r: _diagnose(p, r),
        "on-device": lambda r: _on_device(p, r), "device": lambda r: _device_run(p, *r),
        "bench": lambda r: _bench(p, r)}
    title = "qnndeploy report: " + ", ".join(c.paths)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
             f"<header><h1>qnndeploy report</h1><p>made by qnndeploy {_e(version)} at {_e(created)} from "
             + ", ".join(f"<code>{_e(x)}</code>" for x in c.paths)
             + f": {c.records} record(s) read, {len(c.skipped)} skipped. {NOT_MEASURED} means not measured. "
               "Host HTP emulator figures are the HTP's arithmetic, not phone speed."
             + (f" Estimates: {_e(NOT_CLAIMED)}." if c.estimates else "") + "</p></header>",
             '<section id="overview"><h2>Overview: graph × SoC</h2>', _overview(grid, anchors), _cpu_parts(c),
             "</section>"]
    if c.bundles:
        parts += ['<section id="bundles"><h2>Bundles</h2>', *(_bundle(p, b) for b in c.bundles), "</section>"]
    if c.reaches:
        parts += ['<section id="reach"><h2>Which phones take the NPU (reach)</h2>', *(_reach(p, r) for r in c.reaches),
                  "</section>"]
    if c.devices:
        parts += ['<section id="phones"><h2>Phones (device verify)</h2>', *(_phone(p, d) for d in c.devices),
                  "</section>"]
    graphs = list(dict.fromkeys(g for g, _ in grid))
    for gi, graph in enumerate(graphs):
        parts.append(f'<section class="graph" id="graph-{gi}" data-graph="{_e(graph)}"><h2>{_e(graph)}</h2>')
        for key, cell in grid.items():
            if key[0] != graph:
                continue
            parts.append(f'<section class="cell" id="{anchors[key]}" data-graph="{_e(graph)}" '
                         f'data-soc="{_e(key[1])}"><h3>{_e(graph)} on {_e(key[1])}</h3>')
            parts += [_estimate(p, item, cell.get("bench", [])) if kind == "estimate" else renderers[kind](item)
                      for kind in _ORDER for item in cell.get(kind, [])]
            parts.append("</section>")
        parts.append("</section>")
    if c.skipped:
        parts += ['<section id="skipped"><h2>Skipped files</h2><ul class="skipped">',
                  *(f'<li data-source="{_e(s.source)}"><code>{_e(s.source)}</code>: {_e(s.reason)}</li>'
                    for s in c.skipped), "</ul></section>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)
