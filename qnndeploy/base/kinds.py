"""The closed sets that several floors share, as StrEnums: each value is the string the files, the JSON output and
the command line have always used, so a member is written, printed and compared as that string."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    """How a graph is compiled for the HTP: fp16 activations and weights, or 8-bit (w8a16) or block-quantized 4-bit
    (w4a16: its MatMul and Gemm weights) weights with 16-bit activations."""

    FP16 = "fp16"
    W8A16 = "w8a16"
    W4A16 = "w4a16"

    @property
    def quantized(self) -> bool:
        """Whether the build quantizes the graph (and so needs calibration samples)."""
        return self != Precision.FP16


class BackendName(StrEnum):
    """Who compiles: onnxruntime-qnn here, the QAIRT SDK's tools here, or Qualcomm AI Hub's cloud."""

    ORT = "ort"
    QAIRT = "qairt"
    AIHUB = "aihub"


def choices(kind: type[StrEnum]) -> list[str]:
    """The values of a closed set, in order, for a click.Choice and for messages."""
    return [m.value for m in kind]


class Side(StrEnum):
    """A side of a model split in two (prepare --split-at): the front part, or the back one."""

    HEAD = "head"
    TAIL = "tail"
