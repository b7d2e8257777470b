"""A FIXTURE OF THE BENCH RECORD FORMAT, hand-written until `qnndeploy device bench` exists: the shape the issue 26
spec fixes for bench-<serial>-<graph>.json (qnndeploy/schemas/bench-record.schema.json once device bench lands),
with made-up figures: one phone x graph, both paths, a sustained run, a perf-mode sweep, a per-op profile and a
failed gate. When device bench exists, the report tests should take its real output from the emulated phone."""

from __future__ import annotations

from typing import Any


def path_figures(p50: float, energy: float | None, cpu: float, runs: int = 200) -> dict[str, Any]:
    return {"first_ms": p50 * 11, "latency_ms": {"p50": p50, "p90": p50 * 1.2, "p99": p50 * 1.7, "mean": p50 * 1.05,
                                                 "min": p50 * 0.9, "max": p50 * 2.0},
            "throughput_per_s": round(1000 / p50, 1), "rtf": None, "cpu_percent": cpu,
            "energy_mj_per_inference": energy, "energy_source": "current_now x voltage_now" if energy else None,
            "runs": runs, "block_p50_ms": [p50 * f for f in (0.98, 1.0, 1.03, 1.01)]}


def bench_record(graph: str = "kws_demo", serial: str = "emulator-5554", soc: str = "SM8750",
                 op_name: str = "conv1") -> dict[str, Any]:
    """A bench record of the spec's shape; `graph`, `serial` and `op_name` go in as given (a hostile name too)."""
    return {
        "record": "qnndeploy-bench", "record_version": 1, "created": "2026-12-02T14:00:00Z", "qnndeploy": "0.1.0",
        "bundle": {"name": "kws-demo", "version": "1.0.0", "qairt": "2.49.40", "manifest_sha256": "0" * 64},
        "phone": {"serial": serial, "model": "Emulated SM8750 Phone", "manufacturer": "QTI", "soc": soc,
                  "sdk_int": 35, "fingerprint": "qti/emulated/sm8750:15"},
        "decision": {"provider": "npu", "npu_source": "prebuilt", "reason_key": "npu", "dsp_arch": "v79"},
        "graph": graph,
        "settings": {"runs": 200, "blocks": 4, "minutes": 2, "perf_mode": "burst", "cpu_threads": 4,
                     "npu_tool": "qnn-net-run", "cpu_tool": "onnxruntime_perf_test -e cpu"},
        "conditions": {"charging": False, "screen_on": False, "battery_level_start": 80, "battery_level_end": 79,
                       "temperature_c_start": 31.0, "temperature_c_end": 36.5, "thermal_status_start": 0,
                       "thermal_status_end": 2},
        "paths": {"npu": path_figures(1.1, 0.9, 14.0), "cpu": path_figures(9.2, 4.5, 96.0)},
        "ratios": {"latency_p50": 0.12, "throughput": 8.4, "energy_per_inference": 0.2, "cpu_percent": 0.146},
        "sustained": [{"t_s": t, "path": path, "latency_ms_p50": base * (1 + t / 400), "throughput_per_s": 1000 / base,
                       "temperature_c": 31.0 + t / 24, "thermal_status": min(t // 40, 2)}
                      for t in range(0, 121, 20) for path, base in (("npu", 1.1), ("cpu", 9.2))],
        "sweep": [{"perf_mode": mode, "npu": path_figures(p50, energy, 14.0, runs=50)}
                  for mode, p50, energy in (("burst", 1.1, 0.9), ("sustained_high_performance", 1.3, 0.8),
                                            ("balanced", 1.9, 0.7), ("power_saver", 3.2, None))],
        "profile": {"level": "basic", "source": "qnn-profile-viewer", "trace": f"bench-{serial}-{graph}-trace.json",
                    "ops": [{"name": op_name, "type": "Conv2d", "time_us": 120.0, "share": 0.31, "where": "htp"},
                            {"name": "conv2", "type": "Conv2d", "time_us": 90.0, "share": 0.23, "where": "htp"},
                            {"name": "pool", "type": "PoolAvg2d", "time_us": 40.0, "share": 0.10, "where": "htp"},
                            {"name": "fc", "type": "FullyConnected", "time_us": 30.0, "share": 0.08,
                             "where": "cpu"}],
                    "partitions": [{"name": "QNN_partition_0", "time_us": 380.0, "where": "htp"}]},
        "gate": {"baseline": "baseline/bench-emulator-5554-kws_demo.json", "threshold": 0.1, "passed": False,
                 "regressions": [{"figure": "npu.latency_ms.p50", "was": 0.7, "now": 1.1, "ratio": 1.57}]},
        "notes": ["cpu.rtf: the input has no known duration"],
    }
