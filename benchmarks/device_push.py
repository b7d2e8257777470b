"""Push throughput of `qnndeploy device verify` against plain `adb push` of the same files, to the emulated phone.

Both go through the same real adb server to the adb-protocol device emulator of tests/device_emulator (there is
no phone here), in one run: the figures compare the two, not a USB cable. Each repeat starts from an empty folder
on the phone; the contenders alternate. verify's push includes what plain adb push does not do: reading the
sha256 of every file on the phone before and after, and the staging rename. Then a second verify, with nothing
changed, must send 0 bytes. Prints medians of --repeat runs.
Usage: python benchmarks/device_push.py [--mb 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bundles import tiny_model
from device_emulator import EmulatedDevice
from elfgen import BUILD, fake_sdk

GRAPHS = {"encoder": 0.75, "decoder": 0.25}  # share of the context-binary bytes


def make_bundle(root: Path, total_bytes: int) -> Path:
    """A bundle for SM8750: context-binary-like files (QNN markers, random bytes), CPU models, runtime libs."""
    from qnndeploy.bundle.build import BundleSpec, build_bundle

    block = os.urandom(16 << 20)
    npu, cpu = {"SM8750": {}}, {}
    for i, (g, share) in enumerate(GRAPHS.items()):
        size = int(total_bytes * share)
        p = root / "in" / f"{g}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("wb") as f:
            f.write(f"{BUILD}\0soc_type=SM8750;arch=79\0".encode())
            f.writelines(block[: min(len(block), size - off)] for off in range(0, size, len(block)))
        npu["SM8750"][g] = [p]
        cpu[g] = tiny_model(root / "in" / f"{g}.onnx", 8 * (i + 1))
    spec = BundleSpec(name="bench", version="1.0.0", cpu=cpu, npu=npu, sdk_root=fake_sdk(root / "sdk", ["v79"]),
                      license="Apache-2.0")
    return build_bundle(spec, root / "out").path


def adb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["adb", *args], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=64, help="context-binary bytes in the bundle, MB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("adb") is None:
        sys.exit("adb is not installed (Debian/Ubuntu: apt install adb)")

    from qnndeploy.device import verify
    from qnndeploy.device.adb import connect

    with tempfile.TemporaryDirectory(prefix="device-push-") as tmp_name:
        tmp = Path(tmp_name)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(ANDROID_ADB_SERVER_PORT=str(port), HOME=str(tmp / "home"))
        os.environ.pop("ANDROID_SERIAL", None)
        (tmp / "home").mkdir()
        adb("start-server")
        phone = EmulatedDevice("sm8750", base=tmp / "phone").start()
        try:
            adb("connect", phone.serial)
            while f"{phone.serial}\tdevice" not in adb("devices").stdout:
                time.sleep(0.1)
            bundle = make_bundle(tmp, int(args.mb * 1e6))
            with verify.checked_bundle(bundle) as (_, report, manifest):
                assert report.ok and manifest is not None, report.problems
            job = verify.Job(bundle, manifest, record_dir=tmp / "records")
            dev = connect(phone.serial)

            first = verify.verify_device(job, phone.serial)
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
                adb("-s", phone.serial, "push", str(plain_dir), f"{verify.REMOTE_ROOT}/plain")
                plain_s.append(time.perf_counter() - start)

                dev.run(f"rm -rf {verify.REMOTE_ROOT}", check=True)
                start = time.perf_counter()
                r = verify.verify_device(job, phone.serial)
                verify_all_s.append(time.perf_counter() - start)
                verify_push_s.append(r.push.seconds)
                assert r.push.bytes_sent == total and r.ok

            start = time.perf_counter()
            second = verify.verify_device(job, phone.serial)
            second_s = time.perf_counter() - start
            hash_s = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                dev.sha256s(job.remote_dir)
                hash_s.append(time.perf_counter() - start)
        finally:
            phone.stop()
            subprocess.run(["adb", "kill-server"], capture_output=True, check=False)

    mb = total / 1e6
    med = {k: statistics.median(v) for k, v in
           (("plain", plain_s), ("push", verify_push_s), ("verify", verify_all_s))}
    print(f"bundle: {len(files)} files pushed to the SM8750 phone, {mb:.1f} MB; median of {args.repeat} runs")
    print(f"  plain adb push (same files)      {med['plain']:7.2f} s  {mb / med['plain']:7.1f} MB/s")
    print(f"  device verify, push_folder       {med['push']:7.2f} s  {mb / med['push']:7.1f} MB/s  "
          f"({med['plain'] / med['push']:.0%} of adb push)")
    print(f"  device verify, one phone         {med['verify']:7.2f} s  {mb / med['verify']:7.1f} MB/s  "
          "(props, decision, push_folder)")
    print(f"  of which sha256sum of every file on the phone, one pass: {statistics.median(hash_s):.2f} s "
          "(push_folder's check after sending; the rest is the transfer and shell round trips)")
    print(f"  second verify, nothing changed   {second_s:7.2f} s  bytes sent: {second.push.bytes_sent}")
    if second.push.bytes_sent != 0:
        sys.exit("FAIL: the second verify sent bytes")


if __name__ == "__main__":
    main()
