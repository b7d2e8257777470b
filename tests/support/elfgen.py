"""Small synthetic ELF files with correct headers, standing in for the QNN runtime libraries (no SDK here)."""

from __future__ import annotations

import struct
from pathlib import Path


def _installed_build() -> str:
    """The build string the installed onnxruntime-qnn's QNN libraries embed, so that stand-in runtime libraries are
    of the QAIRT the tests compile with (one QAIRT per bundle)."""
    from qnndeploy.base.errors import QnnDeployError
    from qnndeploy.qnn import markers, qnnsystem

    try:
        builds = markers.scan_file(qnnsystem.library_path().with_name("libQnnSaver.so"), markers=True).builds
    except QnnDeployError:
        builds = set()
    return min(builds) if len(builds) == 1 else "v2.50.40.260831140417"  # onnxruntime-qnn 2.6.0's, without it


BUILD = _installed_build()
QAIRT = BUILD[1:].rsplit(".", 1)[0]  # "2.50.40": the QAIRT release of that build
AARCH64, QDSP6 = 183, 164


def elf_bytes(bits: int, machine: int, flags: int = 0, align: int = 16384, payload: bytes = b"") -> bytes:
    """An ELF shared object with one PT_LOAD segment of alignment `align`, followed by `payload`."""
    if bits == 64:
        ehsize, phentsize = 64, 56
        header = struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, 0, flags, ehsize, phentsize, 1, 0, 0, 0)
        phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 4096, 4096, align)
    else:
        ehsize, phentsize = 52, 32
        header = struct.pack("<HHIIIIIHHHHHH", 3, machine, 1, 0, ehsize, 0, flags, ehsize, phentsize, 1, 0, 0, 0)
        phdr = struct.pack("<IIIIIIII", 1, 0, 0, 0, 4096, 4096, 5, align)
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1, 1]) + bytes(9)
    return ident + header + phdr + payload


def android_lib(path: Path, build: str = BUILD, align: int = 16384, machine: int = AARCH64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf_bytes(64, machine, 0, align, f"\0QnnHtp {build}\0".encode() + bytes(512)))
    return path


# Qualcomm ships the Hexagon Skels with a 4 KB p_align (the public flutter_edge_ai build hook that raises them says so:
# DenisovAV/flutter_edge_ai@0dd9e64, packages/flutter_edge_ai_litertlm/README.md); bundle build refuses them unless
# --align-16k raises it, so the stand-ins are 16 KB-aligned unless a test asks for Qualcomm's 4 KB.
QUALCOMM_SKEL_ALIGN = 4096


def skel_lib(path: Path, arch: str, build: str = BUILD, align: int = 16384) -> Path:
    """A Hexagon Skel: ELF32, e_machine 164, e_flags holding the arch as hex digits (v79 -> 0x79)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf_bytes(32, QDSP6, int(arch[1:], 16), align, f"\0Skel {build}\0".encode() + bytes(512)))
    return path


def fake_sdk(root: Path, archs: list[str], build: str = BUILD, skel_align: int = 16384) -> Path:
    """A folder in the QAIRT SDK layout holding stand-in libraries for the given archs (no licence file: whether and
    where the real SDK keeps one is not known here)."""
    android = root / "lib" / "aarch64-android"
    for name in ("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpPrepare.so"):
        android_lib(android / name, build)
    for arch in archs:
        n = arch[1:]
        android_lib(android / f"libQnnHtpV{n}Stub.so", build)
        skel_lib(root / "lib" / f"hexagon-{arch}" / "unsigned" / f"libQnnHtpV{n}Skel.so", arch, build, skel_align)
    return root
