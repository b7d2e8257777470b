"""Shared by the STAND-IN QAIRT tools in this folder (see ../../README.md): call recording, ELF-shaped files."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

# soc_id (QNN soc_model) -> the name a context binary records, for the SoCs the tests use.
SOC_NAMES = {30: "SM8350", 35: "SM7325", 36: "SM8450", 42: "SM8475", 43: "SM8550", 57: "SM8650", 69: "SM8750",
             87: "SM8850", 77: "QCS9100", 52: "SA8255", 39: "SA8295"}
BUILD = "v2.50.40.260831140417"  # the pinned onnxruntime-qnn's QAIRT: the stand-in's binaries are compiled by it
ELF_MACHINE = {"x86_64-linux-clang": 62, "aarch64-android": 183}


def record(tool: str) -> None:
    """Append this call (argv and the environment the tools depend on) to $QAIRT_STANDIN_CALLS."""
    path = os.environ.get("QAIRT_STANDIN_CALLS")
    if not path:
        return
    env = {k: os.environ.get(k) for k in ("QNN_SDK_ROOT", "LDFLAGS", "PYTHONPATH", "LD_LIBRARY_PATH")}
    with Path(path).open("a") as f:
        f.write(json.dumps({"tool": tool, "argv": sys.argv[1:], "cwd": str(Path.cwd()), "env": env}) + "\n")


def fail(tool: str, message: str, code: int = 1) -> None:
    print(f"{tool}: error: {message}", file=sys.stderr)
    sys.exit(code)


def write_elf(path: str, machine: int, page_align: int, payload: bytes) -> None:
    """A 64-bit little-endian ET_DYN header with one PT_LOAD segment of alignment `page_align`, then `payload`."""
    ehdr = struct.pack("<4sBBBBB7sHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7,
                       3, machine, 1, 0, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    size = 64 + 56 + len(payload)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, page_align)
    with Path(path).open("wb") as f:
        f.write(ehdr + phdr + payload)


def elf_machine(path: str) -> int | None:
    with Path(path).open("rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int(struct.unpack_from("<H", head, 18)[0])


def library_source(path: str) -> str:
    """The ONNX model a stand-in model library was made from (the converter names it in the .cpp)."""
    data = Path(path).read_bytes()
    start = data.find(b"source=")
    return data[start + 7:data.index(b"\0", start)].decode() if start >= 0 else ""


def compile_context(model: str, out: str, soc_id: int, dsp_arch: str, vtcm_mb: int, level: int) -> None:
    """A real context binary of `model` at `out`, from onnxruntime-qnn's HTP compiler."""
    import tempfile

    import onnxruntime as ort

    from qnndeploy.base import socs
    from qnndeploy.qnn import htp, qnnsystem

    # the wheel's HTP library by its path: LD_LIBRARY_PATH names this stand-in SDK's, which loads nowhere
    backend = str(qnnsystem.library_path().with_name("libQnnHtp.so"))
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp) / "model_ctx.onnx"
        options = htp.session_options(socs.find(soc_id), fp16=True, context_path=ctx,
                                      provider={"backend_path": backend, "vtcm_mb": str(vtcm_mb),
                                                "htp_graph_finalization_optimization_mode": str(level)})
        ort.InferenceSession(model, options)
        (Path(tmp) / "model_ctx_qnn.bin").replace(out)
