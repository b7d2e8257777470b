"""A QNN context binary read by QNN itself: libQnnSystem's system-context API (what qnn-context-binary-utility
uses) returns the binary's own metadata — QAIRT build, blob and API versions, SoC, HTP arch, and per graph its
input/output tensors and HTP sizes — where markers.py can only guess from strings in the bytes.

The structures below mirror the public QNN headers (QnnTypes.h, QnnDevice.h, HTP/QnnHtpDevice.h,
System/QnnSystemContext.h, System/QnnSystemInterface.h, HTP/QnnHtpSystemContext.h) field for field; ctypes lays
them out as the C compiler does. Each versioned struct is read only for the versions those headers define.

libQnnSystem does not validate a hostile file before parsing it (docs/limits-and-guarantees.md): a damaged binary can
crash the process that reads it. So callers use `read_context`, which reads the file in a child process
(`python -m qnndeploy.qnn.qnnsystem FILE` prints JSON) under a timeout; `read_context_here` reads in this process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import mmap
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from qnndeploy.base import child
from qnndeploy.base.errors import (
    EXIT_CHECK_FAILED,
    BadInput,
    CheckFailed,
    MissingTool,
    QnnDeployError,
    error_for,
    first_line,
)
from qnndeploy.base.fileio import open_regular
from qnndeploy.base.htparch import HtpArch

LIBRARY_ENV = "QNNDEPLOY_QNN_SYSTEM_LIB"  # a libQnnSystem.so to use instead of the onnxruntime-qnn wheel's
TIMEOUT_S = 60.0  # for the child reading one binary; a 1 GB binary takes about a second
MAX_BYTES = 8 << 30  # a context binary over this is refused before it is mapped
ENV_TIMEOUT = "QNNDEPLOY_QNN_SYSTEM_TIMEOUT"

# --- the C structures ---------------------------------------------------------------------------------------

_Fields = list[tuple[str, Any]]  # a ctypes _fields_ list shared by the versions of a struct


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("patch", ctypes.c_uint32)]


class _ScaleOffset(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("offset", ctypes.c_int32)]


class _AxisScaleOffset(ctypes.Structure):
    _fields_ = [("axis", ctypes.c_int32), ("numScaleOffsets", ctypes.c_uint32),
                ("scaleOffset", ctypes.POINTER(_ScaleOffset))]


class _BwScaleOffset(ctypes.Structure):
    _fields_ = [("bitwidth", ctypes.c_uint32), ("scale", ctypes.c_float), ("offset", ctypes.c_int32)]


class _BwAxisScaleOffset(ctypes.Structure):
    _fields_ = [("bitwidth", ctypes.c_uint32), ("axis", ctypes.c_int32), ("numElements", ctypes.c_uint32),
                ("scales", ctypes.POINTER(ctypes.c_float)), ("offsets", ctypes.POINTER(ctypes.c_int32))]


class _Encodings(ctypes.Union):
    # The other members (block, vector, float-block encodings and pointers) are no larger than these: 32 bytes.
    _fields_ = [("scaleOffset", _ScaleOffset), ("axisScaleOffset", _AxisScaleOffset),
                ("bwScaleOffset", _BwScaleOffset), ("bwAxisScaleOffset", _BwAxisScaleOffset)]


class _QuantizeParams(ctypes.Structure):
    _fields_ = [("encodingDefinition", ctypes.c_uint32), ("quantizationEncoding", ctypes.c_uint32),
                ("u", _Encodings)]


class _ClientBuffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dataSize", ctypes.c_uint32)]


class _TensorMemory(ctypes.Union):
    _fields_ = [("clientBuf", _ClientBuffer), ("memHandle", ctypes.c_void_p), ("retrieveRaw", ctypes.c_void_p)]


class _SparseParams(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("numSpecifiedElements", ctypes.c_uint32),
                ("numSparseDimensions", ctypes.c_uint32)]


_TENSOR_COMMON: _Fields = [("id", ctypes.c_uint32), ("name", ctypes.c_char_p), ("type", ctypes.c_uint32),
                  ("dataFormat", ctypes.c_uint32), ("dataType", ctypes.c_uint32),
                  ("quantizeParams", _QuantizeParams), ("rank", ctypes.c_uint32),
                  ("dimensions", ctypes.POINTER(ctypes.c_uint32)), ("memType", ctypes.c_uint32),
                  ("memory", _TensorMemory)]


class _TensorV1(ctypes.Structure):
    _fields_ = _TENSOR_COMMON


class _TensorV2(ctypes.Structure):
    _fields_ = [*_TENSOR_COMMON, ("isDynamicDimensions", ctypes.POINTER(ctypes.c_uint8)),
                ("sparseParams", _SparseParams), ("isProduced", ctypes.c_uint8)]


class _TensorVersions(ctypes.Union):
    _fields_ = [("v1", _TensorV1), ("v2", _TensorV2)]


class _QnnTensor(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("u", _TensorVersions)]


_GRAPH_V1: _Fields = [("graphName", ctypes.c_char_p), ("numGraphInputs", ctypes.c_uint32),
             ("graphInputs", ctypes.POINTER(_QnnTensor)), ("numGraphOutputs", ctypes.c_uint32),
             ("graphOutputs", ctypes.POINTER(_QnnTensor))]
_GRAPH_V2: _Fields = [*_GRAPH_V1, ("numUpdateableTensors", ctypes.c_uint32),
                      ("updateableTensors", ctypes.POINTER(_QnnTensor))]


class _GraphInfoV1(ctypes.Structure):
    _fields_ = _GRAPH_V1


class _GraphInfoV2(ctypes.Structure):
    _fields_ = _GRAPH_V2


class _GraphInfoV3(ctypes.Structure):
    _fields_ = [*_GRAPH_V2, ("graphBlobInfoSize", ctypes.c_uint32), ("graphBlobInfo", ctypes.c_void_p),
                ("startOpIndex", ctypes.c_uint32), ("endOpIndex", ctypes.c_uint32)]


class _GraphInfoVersions(ctypes.Union):
    _fields_ = [("v1", _GraphInfoV1), ("v2", _GraphInfoV2), ("v3", _GraphInfoV3)]


class _GraphInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("u", _GraphInfoVersions)]


class _OnChipDevice(ctypes.Structure):  # QnnHtpDevice_OnChipDeviceInfoExtension_t
    _fields_ = [("vtcmSize", ctypes.c_size_t), ("socModel", ctypes.c_uint32), ("signedPdSupport", ctypes.c_bool),
                ("dlbcSupport", ctypes.c_bool), ("arch", ctypes.c_uint32)]


class _DeviceExtension(ctypes.Structure):  # QnnHtpDevice_DeviceInfoExtension_t (devType 0: on chip)
    _fields_ = [("devType", ctypes.c_uint32), ("onChipDevice", _OnChipDevice)]


class _HardwareDeviceV1(ctypes.Structure):
    _fields_ = [("deviceId", ctypes.c_uint32), ("deviceType", ctypes.c_uint32), ("numCores", ctypes.c_uint32),
                ("cores", ctypes.c_void_p), ("deviceInfoExtension", ctypes.POINTER(_DeviceExtension))]


class _HardwareDevice(ctypes.Structure):  # a version and a union of one member: the member is 8-byte aligned
    _fields_ = [("version", ctypes.c_uint32), ("v1", _HardwareDeviceV1)]


class _PlatformInfoV1(ctypes.Structure):
    _fields_ = [("numHwDevices", ctypes.c_uint32), ("hwDevices", ctypes.POINTER(_HardwareDevice))]


class _PlatformInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("v1", _PlatformInfoV1)]


_BINARY_HEAD: _Fields = [("backendId", ctypes.c_uint32), ("buildId", ctypes.c_char_p), ("coreApiVersion", _Version),
                ("backendApiVersion", _Version), ("socVersion", ctypes.c_char_p)]
_BINARY_V1: _Fields = [*_BINARY_HEAD, ("hwInfoBlobVersion", _Version), ("contextBlobVersion", _Version),
              ("hwInfoBlobSize", ctypes.c_uint32), ("hwInfoBlob", ctypes.c_void_p),
              ("contextBlobSize", ctypes.c_uint64), ("numContextTensors", ctypes.c_uint32),
              ("contextTensors", ctypes.POINTER(_QnnTensor)), ("numGraphs", ctypes.c_uint32),
              ("graphs", ctypes.POINTER(_GraphInfo))]


class _BinaryInfoV1(ctypes.Structure):
    _fields_ = _BINARY_V1


class _BinaryInfoV2(ctypes.Structure):
    _fields_ = [*_BINARY_V1, ("platformInfo", ctypes.POINTER(_PlatformInfo))]


class _BinaryInfoV3(ctypes.Structure):  # V3 drops the hardware info blob and adds context metadata and socModel
    _fields_ = [*_BINARY_HEAD, ("contextBlobVersion", _Version), ("contextBlobSize", ctypes.c_uint64),
                ("numContextTensors", ctypes.c_uint32), ("contextTensors", ctypes.POINTER(_QnnTensor)),
                ("numGraphs", ctypes.c_uint32), ("graphs", ctypes.POINTER(_GraphInfo)),
                ("platformInfo", ctypes.POINTER(_PlatformInfo)), ("contextMetadataSize", ctypes.c_uint32),
                ("contextMetadata", ctypes.c_void_p), ("socModel", ctypes.c_uint32)]


class _BinaryInfoVersions(ctypes.Union):
    _fields_ = [("v1", _BinaryInfoV1), ("v2", _BinaryInfoV2), ("v3", _BinaryInfoV3)]


class _BinaryInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("u", _BinaryInfoVersions)]


class _HtpGraphBlobV1(ctypes.Structure):
    _fields_ = [("spillFillBufferSize", ctypes.c_uint64), ("vtcmSize", ctypes.c_uint32),
                ("optimizationLevel", ctypes.c_uint32), ("htpDlbc", ctypes.c_uint8),
                ("numHvxThreads", ctypes.c_uint64)]


class _HtpGraphBlob(ctypes.Structure):  # QnnHtpSystemContext_GraphBlobInfo_t
    _fields_ = [("version", ctypes.c_uint32), ("v1", _HtpGraphBlobV1)]


class _HtpGraphBlobV2(ctypes.Structure):  # QnnHtpSystemContext_GraphBlobInfoV2_t: carries its own version
    _fields_ = [("version", ctypes.c_uint32), ("nativeKChannelSize", ctypes.c_uint64),
                ("nativeVChannelSize", ctypes.c_uint64), ("isSafeShareIO", ctypes.c_uint32),
                ("ioTensorSize", ctypes.c_uint64), ("opDataSize", ctypes.c_uint64), ("constSize", ctypes.c_uint64),
                ("ddrTensorSize", ctypes.c_uint64), ("sharedWeightsSize", ctypes.c_uint64)]


class _HtpContextBlob(ctypes.Structure):  # QnnHtpSystemContext_ContextBlobInfo_t, version 1
    _fields_ = [("version", ctypes.c_uint32), ("dspArch", ctypes.c_uint32)]


class _HtpHwBlobV1(ctypes.Structure):
    _fields_ = [("graphListIndex", ctypes.c_uint32), ("spillFillBufferSize", ctypes.c_uint64)]


class _HtpHwBlob(ctypes.Structure):  # QnnHtpSystemContext_HwBlobInfo_t
    _fields_ = [("version", ctypes.c_uint32), ("v1", _HtpHwBlobV1)]


_Handle = ctypes.c_void_p
_CreateFn = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.POINTER(_Handle))
_GetMetadataFn = ctypes.CFUNCTYPE(ctypes.c_uint64, _Handle, ctypes.c_void_p, ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.POINTER(_BinaryInfo)))
_GetBinaryInfoFn = ctypes.CFUNCTYPE(ctypes.c_uint64, _Handle, ctypes.c_void_p, ctypes.c_uint64,
                                    ctypes.POINTER(ctypes.POINTER(_BinaryInfo)), ctypes.POINTER(ctypes.c_uint64))
_FreeFn = ctypes.CFUNCTYPE(ctypes.c_uint64, _Handle)


class _Implementation(ctypes.Structure):  # the first four entries of QnnSystemInterface_ImplementationV1_x_t
    _fields_ = [("systemContextCreate", ctypes.c_void_p), ("systemContextGetBinaryInfo", ctypes.c_void_p),
                ("systemContextGetMetaData", ctypes.c_void_p), ("systemContextFree", ctypes.c_void_p)]


class _Interface(ctypes.Structure):
    _fields_ = [("backendId", ctypes.c_uint32), ("providerName", ctypes.c_char_p),
                ("systemApiVersion", _Version), ("implementation", _Implementation)]


# --- what a binary holds, as plain data --------------------------------------------------------------------

_DTYPES = {0x0008: "int8", 0x0016: "int16", 0x0032: "int32", 0x0064: "int64",
           0x0108: "uint8", 0x0116: "uint16", 0x0132: "uint32", 0x0164: "uint64",
           0x0216: "float16", 0x0226: "bfloat16", 0x0232: "float32", 0x0264: "float64",
           0x0304: "int4", 0x0308: "int8", 0x0316: "int16", 0x0332: "int32",
           0x0404: "uint4", 0x0408: "uint8", 0x0416: "uint16", 0x0432: "uint32",
           0x0508: "bool", 0x0608: "string"}
_FIXED_POINT = range(0x0300, 0x0500)  # SFIXED_POINT_*, UFIXED_POINT_*: the integers of a quantized tensor
_ENCODINGS = {0: "scale_offset", 1: "axis_scale_offset", 2: "bw_scale_offset", 3: "bw_axis_scale_offset",
              4: "block", 5: "blockwise_expansion", 6: "vector", 7: "float_block", 8: "bw_axis_scale_offset_mapped",
              9: "bw_block_mapped", 10: "bw_blockwise_expansion_mapped", 11: "bw_float_block"}
_QNN_UNDEFINED = 0x7FFFFFFF
_MAX_ITEMS = 1 << 20  # a count above this in the returned metadata means a layout or library fault: refuse


@dataclass(frozen=True)
class Quantization:
    """How a fixed-point tensor maps to real numbers: real = scale * (q + offset), per tensor or per `axis`."""

    encoding: str
    scale: float | None = None
    offset: int | None = None
    bitwidth: int | None = None
    axis: int | None = None
    scales: tuple[float, ...] = ()
    offsets: tuple[int, ...] = ()


@dataclass(frozen=True)
class QnnTensorInfo:
    name: str
    dims: tuple[int, ...]
    dtype: str  # numpy's name for the element type the app passes: float16, uint16, int32…
    qnn_dtype: int  # the QNN data type code (0x0416 = UFIXED_POINT_16): says whether the integers are quantized
    quantization: Quantization | None


@dataclass(frozen=True)
class GraphInfo:
    name: str
    inputs: tuple[QnnTensorInfo, ...]
    outputs: tuple[QnnTensorInfo, ...]
    spill_fill_bytes: int | None  # None where the binary's version does not record the field
    vtcm_bytes: int | None  # the VTCM the graph was compiled for (the header says MB; QAIRT 2.51 writes bytes)
    optimization_level: int | None
    htp_dlbc: int | None
    num_hvx_threads: int | None
    io_tensor_bytes: int | None
    op_data_bytes: int | None
    const_bytes: int | None
    graph_info_version: int


@dataclass(frozen=True)
class ContextInfo:
    build_id: str  # the QAIRT build that wrote the binary, e.g. "v2.51.0.260929181845"
    core_api_version: str
    backend_api_version: str
    soc_version: str
    context_blob_version: str  # "X.Y"
    context_blob_size: int
    hw_info_blob_version: str | None
    dsp_arch: str | None  # "v79", from the HTP context metadata or the platform info
    soc_model: int | None  # QNN's Qnn_SocModel_t number (69 = SM8750), from the binary info or the platform info
    vtcm_mb: int | None  # the device's VTCM as recorded in the platform info
    binary_info_version: int
    graphs: tuple[GraphInfo, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def context_from_json(data: dict[str, Any]) -> ContextInfo:
    """The inverse of ContextInfo.to_json (how a child process's answer comes back)."""
    def tensor(t: dict[str, Any]) -> QnnTensorInfo:
        q = t["quantization"]
        quant = None if q is None else Quantization(
            q["encoding"], q["scale"], q["offset"], q["bitwidth"], q["axis"], tuple(q["scales"]), tuple(q["offsets"]))
        return QnnTensorInfo(t["name"], tuple(t["dims"]), t["dtype"], t["qnn_dtype"], quant)

    graphs = tuple(GraphInfo(**{**g, "inputs": tuple(tensor(t) for t in g["inputs"]),
                                "outputs": tuple(tensor(t) for t in g["outputs"])}) for g in data["graphs"])
    return ContextInfo(**{**data, "graphs": graphs})


# --- the library ------------------------------------------------------------------------------------------------

def library_path() -> Path:
    """$QNNDEPLOY_QNN_SYSTEM_LIB, else the x86-64 libQnnSystem.so of the installed onnxruntime-qnn wheel (found
    without importing the package, which would load onnxruntime)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise MissingTool(f"{LIBRARY_ENV}={override} is not a file: point it at a libQnnSystem.so")
        return path
    spec = importlib.util.find_spec("onnxruntime_qnn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "libQnnSystem.so"
        if path.is_file():
            return path
    raise MissingTool("libQnnSystem.so not found: pip install onnxruntime-qnn (Linux x86-64), or set "
                      f"{LIBRARY_ENV}")


_LOADED: dict[Path, _Interface] = {}


def _interface(path: Path) -> _Interface:
    """The system interface table of the library at `path` (loaded once; QNN keeps it valid while loaded)."""
    if path in _LOADED:
        return _LOADED[path]
    try:
        lib = ctypes.CDLL(str(path))
        get_providers = lib.QnnSystemInterface_getProviders
    except (OSError, AttributeError) as e:
        raise MissingTool(f"cannot load {path}: {first_line(e)}") from None
    get_providers.restype = ctypes.c_uint64
    get_providers.argtypes = [ctypes.POINTER(ctypes.POINTER(ctypes.POINTER(_Interface))),
                              ctypes.POINTER(ctypes.c_uint32)]
    providers = ctypes.POINTER(ctypes.POINTER(_Interface))()
    count = ctypes.c_uint32()
    err = get_providers(ctypes.byref(providers), ctypes.byref(count))
    if err or not count.value:
        raise MissingTool(f"{path} offers no QNN system interface (error {err})")
    for i in range(count.value):
        iface: _Interface = providers[i].contents
        impl = iface.implementation
        # System API 1.x has had create/getBinaryInfo/free since 1.0 and getMetaData since 1.3 (same offsets)
        if iface.systemApiVersion.major == 1 and impl.systemContextCreate and impl.systemContextFree and (
                impl.systemContextGetMetaData or impl.systemContextGetBinaryInfo):
            _LOADED[path] = iface
            return iface
    raise MissingTool(f"{path} offers no QNN system API 1.x with the context functions")


def system_api_version(library: Path | None = None) -> str:
    v = _interface(library or library_path()).systemApiVersion
    return f"{v.major}.{v.minor}.{v.patch}"


# --- reading --------------------------------------------------------------------------------------------------

def _version(v: _Version, parts: int = 3) -> str:
    return ".".join(str(x) for x in (v.major, v.minor, v.patch)[:parts])


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _count(n: int, what: str) -> int:
    if n > _MAX_ITEMS:
        raise CheckFailed(f"libQnnSystem returned {n:,} {what}: not a layout this reader knows")
    return n


def _quantization(q: _QuantizeParams, dtype: int) -> Quantization | None:
    if dtype not in _FIXED_POINT or q.encodingDefinition != 1 or q.quantizationEncoding == _QNN_UNDEFINED:
        return None
    kind = q.quantizationEncoding
    name = _ENCODINGS.get(kind, f"encoding_{kind}")
    if kind == 0:
        return Quantization(name, q.u.scaleOffset.scale, q.u.scaleOffset.offset)
    if kind == 2:
        b = q.u.bwScaleOffset
        return Quantization(name, b.scale, b.offset, bitwidth=b.bitwidth)
    if kind == 1:
        a = q.u.axisScaleOffset
        n = _count(a.numScaleOffsets, "scale/offsets")
        pairs = [a.scaleOffset[i] for i in range(n)] if a.scaleOffset else []
        return Quantization(name, axis=a.axis, scales=tuple(p.scale for p in pairs),
                            offsets=tuple(p.offset for p in pairs))
    if kind == 3:
        w = q.u.bwAxisScaleOffset
        n = _count(w.numElements, "scales")
        return Quantization(name, bitwidth=w.bitwidth, axis=w.axis,
                            scales=tuple(w.scales[i] for i in range(n)) if w.scales else (),
                            offsets=tuple(w.offsets[i] for i in range(n)) if w.offsets else ())
    return Quantization(name)  # block and vector encodings: named, their tables not read


def _tensor(t: _QnnTensor) -> QnnTensorInfo:
    if t.version not in (1, 2):
        raise CheckFailed(f"libQnnSystem returned a tensor of version {t.version}, unknown to this reader")
    v = t.u.v1 if t.version == 1 else t.u.v2  # V2 begins with V1's fields
    rank = _count(v.rank, "dimensions")
    dims = tuple(v.dimensions[i] for i in range(rank)) if v.dimensions else ()
    return QnnTensorInfo(_text(v.name), dims, _DTYPES.get(v.dataType, f"qnn_0x{v.dataType:04x}"), v.dataType,
                         _quantization(v.quantizeParams, v.dataType))


def _tensors(array: Any, n: int) -> tuple[QnnTensorInfo, ...]:  # ctypes pointer arrays are untyped
    return tuple(_tensor(array[i]) for i in range(_count(n, "tensors"))) if array else ()


def _graph(g: _GraphInfo) -> GraphInfo:
    if g.version not in (1, 2, 3):
        raise CheckFailed(f"libQnnSystem returned graph info of version {g.version}, unknown to this reader")
    v = (g.u.v1, g.u.v2, g.u.v3)[g.version - 1]  # V2 and V3 begin with V1's fields
    blob: _HtpGraphBlobV1 | None = None
    sizes: _HtpGraphBlobV2 | None = None
    if g.version == 3 and g.u.v3.graphBlobInfo:
        size, address = g.u.v3.graphBlobInfoSize, g.u.v3.graphBlobInfo
        head = _HtpGraphBlob.from_address(address) if size >= ctypes.sizeof(_HtpGraphBlob) else None
        blob = head.v1 if head is not None and head.version == 1 else None
        # QAIRT 2.4x+ appends the V2 sizes (a struct carrying its own version 2) after the V1 wrapper
        if blob is not None and size >= ctypes.sizeof(_HtpGraphBlob) + ctypes.sizeof(_HtpGraphBlobV2):
            tail = _HtpGraphBlobV2.from_address(address + ctypes.sizeof(_HtpGraphBlob))
            sizes = tail if tail.version == 2 else None
    return GraphInfo(
        _text(v.graphName), _tensors(v.graphInputs, v.numGraphInputs), _tensors(v.graphOutputs, v.numGraphOutputs),
        spill_fill_bytes=blob.spillFillBufferSize if blob else None, vtcm_bytes=blob.vtcmSize if blob else None,
        optimization_level=blob.optimizationLevel if blob else None, htp_dlbc=blob.htpDlbc if blob else None,
        num_hvx_threads=blob.numHvxThreads if blob else None,
        io_tensor_bytes=sizes.ioTensorSize if sizes else None, op_data_bytes=sizes.opDataSize if sizes else None,
        const_bytes=sizes.constSize if sizes else None, graph_info_version=g.version)


def _platform(p: Any) -> tuple[int | None, int | None, int | None]:
    """(soc model, HTP arch, VTCM MB) of the first on-chip HTP device in a QnnDevice_PlatformInfo_t, if any."""
    if not p or p.contents.version != 1 or not p.contents.v1.hwDevices:
        return None, None, None
    info = p.contents.v1
    for i in range(_count(info.numHwDevices, "devices")):
        dev = info.hwDevices[i]
        ext = dev.v1.deviceInfoExtension
        if dev.version == 1 and ext and ext.contents.devType == 0:
            chip = ext.contents.onChipDevice
            return chip.socModel or None, chip.arch or None, chip.vtcmSize or None
    return None, None, None


def _context(info: _BinaryInfo) -> tuple[ContextInfo, dict[int, int]]:
    """The plain data of a BinaryInfo, and spill-fill sizes per graph index from a V1/V2 hardware info blob."""
    version = info.version
    if version not in (1, 2, 3):
        raise CheckFailed(f"libQnnSystem returned binary info of version {version}, unknown to this reader")
    v = (info.u.v1, info.u.v2, info.u.v3)[version - 1]
    graphs = tuple(_graph(v.graphs[i]) for i in range(_count(v.numGraphs, "graphs"))) if v.graphs else ()
    soc_model = arch = vtcm = None
    hw_version = None
    spill: dict[int, int] = {}
    if version in (2, 3):
        soc_model, arch, vtcm = _platform(v.platformInfo)
    if version == 3:
        soc_model = v.socModel or soc_model
        if v.contextMetadata and v.contextMetadataSize >= ctypes.sizeof(_HtpContextBlob):
            meta = _HtpContextBlob.from_address(v.contextMetadata)
            arch = meta.dspArch if meta.version == 1 and meta.dspArch else arch
    else:
        hw_version = _version(v.hwInfoBlobVersion)
        if v.hwInfoBlob and v.hwInfoBlobSize >= ctypes.sizeof(_HtpHwBlob):
            hw = _HtpHwBlob.from_address(v.hwInfoBlob)
            if hw.version == 1:
                spill[hw.v1.graphListIndex] = hw.v1.spillFillBufferSize
    return ContextInfo(
        build_id=_text(v.buildId), core_api_version=_version(v.coreApiVersion),
        backend_api_version=_version(v.backendApiVersion), soc_version=_text(v.socVersion),
        context_blob_version=_version(v.contextBlobVersion, 2), context_blob_size=v.contextBlobSize,
        hw_info_blob_version=hw_version, dsp_arch=str(HtpArch(arch)) if arch else None, soc_model=soc_model,
        vtcm_mb=vtcm, binary_info_version=version, graphs=graphs), spill


def read_context_here(path: Path, library: Path | None = None) -> ContextInfo:
    """Read a context binary's metadata in this process. The file is mapped copy-on-write, not copied: the library
    gets a writable address (getBinaryInfo takes a non-const buffer) and the file is never written."""
    iface = _interface(library or library_path())
    impl = iface.implementation
    with open_regular(path, MAX_BYTES, "context binary", follow=True) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise CheckFailed(f"{path} is empty, not a QNN context binary")
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        buffer = (ctypes.c_char * size).from_buffer(mapped)
        try:
            return _read(path, impl, ctypes.addressof(buffer), size)
        finally:
            del buffer
    finally:
        mapped.close()


def _read(path: Path, impl: _Implementation, address: int, size: int) -> ContextInfo:
    handle = _Handle()
    err = _CreateFn(impl.systemContextCreate)(ctypes.byref(handle))
    if err:
        raise MissingTool(f"libQnnSystem could not create a system context (error {err})")
    try:
        info = ctypes.POINTER(_BinaryInfo)()
        if impl.systemContextGetMetaData:
            err = _GetMetadataFn(impl.systemContextGetMetaData)(handle, address, size, ctypes.byref(info))
        else:
            info_size = ctypes.c_uint64()
            err = _GetBinaryInfoFn(impl.systemContextGetBinaryInfo)(handle, address, size, ctypes.byref(info),
                                                                    ctypes.byref(info_size))
        if err or not ctypes.cast(info, ctypes.c_void_p).value:
            raise CheckFailed(f"{path} is not a QNN context binary libQnnSystem can read ({_error(err)})")
        context, spill = _context(info.contents)
    finally:
        # frees the binary info too; its error code is not acted on: the data was copied out before, and the
        # reader runs in a child process that exits next
        _FreeFn(impl.systemContextFree)(handle)
    if spill:
        graphs = tuple(g if g.spill_fill_bytes is not None or i not in spill
                       else GraphInfo(**{**g.__dict__, "spill_fill_bytes": spill[i]})
                       for i, g in enumerate(context.graphs))
        context = ContextInfo(**{**context.__dict__, "graphs": graphs})
    return context


def _error(code: int) -> str:
    names = {30000: "invalid handle", 30001: "invalid argument", 30002: "operation failed",
             30010: "malformed binary", 1000: "unsupported feature", 1002: "out of memory"}
    return f"error {code}: {names[code]}" if code in names else f"error {code}"


# --- in a child process ---------------------------------------------------------------------------------------

def _timeout() -> float:
    value = os.environ.get(ENV_TIMEOUT, "")
    try:
        return float(value) if value else TIMEOUT_S
    except ValueError:
        raise BadInput(f"{ENV_TIMEOUT}={value} is not a number of seconds") from None


def read_context(path: Path, library: Path | None = None, timeout: float | None = None) -> ContextInfo:
    """Read a context binary's metadata in a child process, so that a binary that crashes or hangs libQnnSystem
    costs a one-line error, not the caller's process. Raises MissingTool when the library
    is missing, CheckFailed when it refuses the file or crashes on it."""
    [answer] = read_contexts([Path(path)], library, timeout)
    if isinstance(answer, QnnDeployError):
        raise answer
    return answer


MAX_ANSWER_BYTES = 16 << 20  # one binary's metadata as JSON: a few KB per graph


def read_contexts(paths: list[Path], library: Path | None = None, timeout: float | None = None
                  ) -> list[ContextInfo | QnnDeployError]:
    """read_context for many files, in as few children as it takes: one child reads them in turn and answers a
    line each, within `timeout` per file; the file that crashes or hangs a child gets that error, and the files
    after it are read by a new child. (A child costs about 0.2 s of start-up: a bundle of 200 binaries would
    otherwise spend 40 s starting children.)"""
    lib = library or library_path()
    limit = timeout if timeout is not None else _timeout()
    answers: list[ContextInfo | QnnDeployError] = []
    while len(answers) < len(paths):
        answers += _read_in_child(paths[len(answers):], lib, limit)
    return answers


def _read_in_child(paths: list[Path], lib: Path, limit: float) -> list[ContextInfo | QnnDeployError]:
    """The answers of one child, in order, for a prefix of `paths` (at least its first file)."""
    answers: list[ContextInfo | QnnDeployError] = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(child.module("qnn.qnnsystem", "--library", str(lib), *map(str, paths)),
                                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=child.environ())
        assert proc.stdout is not None
        with proc.stdout:
            for path, line in zip(paths, _lines(proc.stdout.fileno(), limit), strict=False):
                if line is None:  # it hangs on this file
                    proc.kill()
                    proc.wait()
                    return [*answers, CheckFailed(f"libQnnSystem did not finish reading {path} in {limit:g} s: "
                                                  "not a context binary it can read")]
                answers.append(_answer(path, line))
            if len(answers) < len(paths):
                proc.kill()
            code = proc.wait()
        if len(answers) == len(paths):
            return answers
        path = paths[len(answers)]  # the child ended (or said too much) without answering for it
        if code < 0:
            return [*answers, CheckFailed(f"libQnnSystem crashed reading {path} (signal {-code}): a damaged or "
                                          "hostile context binary")]
        err.seek(0)
        said = err.read(MAX_ANSWER_BYTES).decode(errors="replace")
        return [*answers, CheckFailed(f"libQnnSystem failed reading {path} (exit {code}): "
                                      f"{first_line(Exception(said)) if said.strip() else 'no output'}")]


def _lines(fd: int, limit: float) -> Iterator[bytes | None]:
    """The lines a child writes to `fd`, each within `limit` seconds of the one before (None: it missed that),
    until end of file; a line over MAX_ANSWER_BYTES ends it."""
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line
        if len(buf) > MAX_ANSWER_BYTES:
            return
        ready, _, _ = select.select([fd], [], [], limit)
        if not ready:
            yield None
            return
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buf += chunk


def _answer(path: Path, line: bytes) -> ContextInfo | QnnDeployError:
    try:
        answer = json.loads(line)
    except ValueError:
        return CheckFailed(f"libQnnSystem failed reading {path}: its answer is not JSON")
    if "error" in answer:
        return error_for(answer.get("exit_code", EXIT_CHECK_FAILED), answer["error"])
    return context_from_json(answer)


def main(argv: list[str]) -> int:
    """`python -m qnndeploy.qnn.qnnsystem [--library LIB] FILE...`: one JSON line per file, the ContextInfo or
    {"error": ...}, written as each file is read."""
    library = None
    if len(argv) >= 3 and argv[0] == "--library":
        library, argv = Path(argv[1]), argv[2:]
    if not argv:
        print(json.dumps({"error": "usage: python -m qnndeploy.qnn.qnnsystem [--library LIB] FILE...", "exit_code": 2}))
        return 2
    for file in argv:
        sys.stdout.flush()
        saved = os.dup(1)  # the library may print on stdout: only the JSON answers go there
        os.dup2(2, 1)
        try:
            try:
                answer: dict[str, Any] = read_context_here(Path(file), library).to_json()
            except QnnDeployError as e:
                answer = {"error": str(e), "exit_code": e.exit_code}
            ctypes.CDLL(None).fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
