"""Push throughput of `qnndeploy device verify` against plain `adb push` of the same files, to the emulated phone.

Both go through the same real adb server to the adb-protocol device emulator of tests/support/device_emulator (there is
no phone here), in one run: the figures compare the two, not a USB cable. Each repeat starts from an empty folder
on the phone; the contenders alternate. verify's push includes what plain adb push does not do: reading the
sha256 of every file on the phone before and after, and the staging rename. Then a second verify, with nothing
changed, must send 0 bytes. Prints medians of --repeat runs. The phone runs in a process of its own (`python -m
device_emulator`), as a real one does. The row "plain adb push + one sha256sum pass" is what any push whose every
byte is checked on the phone after it landed costs at least, when the phone's hashing cannot overlap the transfer
(as on 2 busy cores): where that row is under the target, the target cannot be met by pushing faster.
--link-mb-s paces the phone's receiver, as a USB cable would (the default: loopback, as fast as it goes).

The bundle holds real context binaries for SM8750 (benchlib.real_inputs: MatMul graphs compiled by onnxruntime-qnn,
cached in ~/.cache/qnndeploy-bench) and runtime libraries that are support/elfgen.py's stand-ins (there is no QAIRT
SDK here; nothing runs them: the benchmark measures the push, with no runner).

    python benchmarks/device_push.py [--mb 64] [--repeat 3] [--link-mb-s MB_S] [--cache-dir DIR] [--smoke]
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import CACHE, REPO, Target, fail, median, parse, parser, real_inputs, table

from tests.support.elfgen import fake_sdk

GRAPHS = {"encoder": 0.75, "decoder": 0.25}  # share of the context-binary bytes
SOC = "SM8750"


def make_bundle(root: Path, cache: Path, binary_bytes: int) -> Path:
    """A bundle for SM8750: real context binaries of about `binary_bytes` in all, CPU models, runtime libs."""
    from qnndeploy.bundle.build import BundleSpec, build_bundle

    # a binary holds the weights at fp16: half their fp32 bytes
    cpu, npu = real_inputs(cache, {g: int(2 * binary_bytes * share) for g, share in GRAPHS.items()}, [SOC])
    spec = BundleSpec(name="bench", version="1.0.0", cpu=cpu, npu=npu, sdk_root=fake_sdk(root / "sdk", ["v79"]),
                      license="Apache-2.0")
    return build_bundle(spec, root / "out").path


def adb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["adb", *args], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--mb", type=float, default=64, help="context-binary bytes in the bundle, MB [64]")
    ap.add_argument("--cache-dir", type=Path, default=CACHE, help=f"compiled inputs are kept here [{CACHE}]")
    ap.add_argument("--link-mb-s", type=float, default=None,
                    help="the phone takes file data at most this fast, MB/s, as over a USB cable (e.g. 40 for "
                         "USB 2) [as fast as it can: loopback]")
    args = parse(ap)
    if shutil.which("adb") is None:
        fail("adb is not installed (Debian/Ubuntu: apt install adb)")

    from qnndeploy.device import verify
    from qnndeploy.device.adb import connect
    from qnndeploy.formats.manifest import load_manifest
    from qnndeploy.verification.checks import opened

    with tempfile.TemporaryDirectory(prefix="device-push-") as tmp_name:
        tmp = Path(tmp_name)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(ANDROID_ADB_SERVER_PORT=str(port), HOME=str(tmp / "home"))
        os.environ.pop("ANDROID_SERIAL", None)
        (tmp / "home").mkdir()
        adb("start-server")
        # the phone in a process of its own, as a real one is: not sharing the GIL with the verify under test
        link = [] if args.link_mb_s is None else ["sm8750", str(args.link_mb_s * 1e6)]
        phone = subprocess.Popen([sys.executable, "-m", "tests.support.device_emulator", str(tmp / "phone"), *link],
                                 text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
        try:
            assert phone.stdout is not None
            serial = f"127.0.0.1:{int(phone.stdout.readline())}"
            adb("connect", serial)
            while f"{serial}\tdevice" not in adb("devices").stdout:
                time.sleep(0.1)
            bundle = make_bundle(tmp, args.cache_dir, int((1 if args.smoke else args.mb) * 1e6))
            with opened(bundle) as (_, report):
                if not report.ok:
                    fail(f"the bundle does not verify: {report.problems}")
            manifest = load_manifest(bundle)
            job = verify.DeviceJob(bundle, manifest, verify.PhoneRequest(bundle=bundle, record_dir=tmp / "records"))
            dev = connect(serial)

            first = verify.verify_device(job, serial)
            files = first.push.sent
            total = first.push.bytes_sent
            plain_dir = tmp / "plain"  # the same files, in the same layout, for adb push
            for rel in files:
                (plain_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                os.link(bundle / rel, plain_dir / rel)

            plain_s, verify_push_s, verify_all_s = [], [], []
            for _ in range(args.repeat):
                dev.run(f"rm -rf {verify.REMOTE_ROOT}", check=True)
                start = time.perf_counter()
                adb("-s", serial, "push", str(plain_dir), f"{verify.REMOTE_ROOT}/plain")
                plain_s.append(time.perf_counter() - start)

                dev.run(f"rm -rf {verify.REMOTE_ROOT}", check=True)
                start = time.perf_counter()
                r = verify.verify_device(job, serial)
                verify_all_s.append(time.perf_counter() - start)
                verify_push_s.append(r.push.seconds)
                if r.push.bytes_sent != total or r.outcome != "not run":  # no runner: pushed, checked, nothing run
                    fail(f"device verify sent {r.push.bytes_sent} of {total} bytes, outcome {r.outcome}")

            start = time.perf_counter()
            second = verify.verify_device(job, serial)
            second_s = time.perf_counter() - start
            hash_s = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                dev.sha256s(job.remote_dir)
                hash_s.append(time.perf_counter() - start)
        finally:
            phone.communicate()  # its stdin closes: it stops
            subprocess.run(["adb", "kill-server"], capture_output=True, check=False)

    if second.push.bytes_sent != 0:
        fail(f"the second verify, with nothing changed, sent {second.push.bytes_sent} bytes")
    mb = total / 1e6
    plain, push, whole = median(plain_s), median(verify_push_s), median(verify_all_s)
    link = "loopback" if args.link_mb_s is None else f"a link of {args.link_mb_s:g} MB/s"
    print(f"bundle: {len(files)} files pushed to the {SOC} phone over {link}, {mb:.1f} MB; median of {args.repeat} "
          "runs")
    table(["", "seconds", "MB/s", "ratio"], [
        ["plain adb push (same files)", f"{plain:.2f}", f"{mb / plain:.1f}", "reference"],
        ["device verify, push_folder", f"{push:.2f}", f"{mb / push:.1f}", f"{plain / push:.2f}x the throughput"],
        ["device verify, one phone", f"{whole:.2f}", f"{mb / whole:.1f}", f"{plain / whole:.2f}x the throughput"],
        ["sha256sum on the phone", f"{median(hash_s):.2f}", "", "one pass over every file"],
        ["plain adb push + one sha256sum pass", f"{plain + median(hash_s):.2f}", "",
         f"{plain / (plain + median(hash_s)):.2f}x the throughput"],
        ["second verify, unchanged", f"{second_s:.2f}", "", f"{second.push.bytes_sent} bytes sent"],
    ], [[], [Target("throughput vs plain adb push", plain / push, ">=", 0.9)], [], [], [], []])
    print("device verify, one phone: props, decision and push_folder; push_folder reads the sha256 of every file on "
          "the phone before and after sending (the sha256sum row is one such pass)")


if __name__ == "__main__":
    main()
