"""Input samples for a graph and the CPU outputs for them: what validate, compile --calib, prepare --inputs and
device verify feed a model, in one place.

A samples folder holds *.npz files (one sample each, one array per input name) or <input>.npy files (one sample,
or several stacked on a new first axis); DIR/<graph>/ is used when it exists, so one folder serves several graphs.
For a one-input graph it may instead hold .wav or .png/.jpg files, one sample each, through a declared
preprocessing (media.py): real signals show errors random input hides.
Random samples are seeded, in ranges every model takes (integers small enough to be valid indices).
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from qnndeploy.base.errors import BadInput, first_line
from qnndeploy.base.fileio import JSON, sha256_file
from qnndeploy.model.media import DEFAULT_PREPROCESS, MEDIA_SUFFIXES, Preprocess, load_media, parse_preprocess
from qnndeploy.model.onnxio import (
    INT_DTYPES,
    MAX_TENSOR_ELEMENTS,
    TensorInfo,
    int_input_ranges,
    load_model,
    real_inputs,
    tensor_info,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

RANDOM_NOTE = ("uniform in [-1, 1) for float inputs; integers in their valid range (ranges: from the graph, or given "
               "with --range), else 0 to 9; seeded")
GUESSED = "0 to 9, a guess: the graph bounds it nowhere (give the values it takes with --range NAME=LO:HI)"
Ranges = Mapping[str, tuple[int, int]]  # --range NAME=LO:HI: an integer input's values, LO to HI inclusive
SUFFIXES = (".npy", ".npz")
Sample = dict[str, "np.ndarray"]  # one array per input (or output) name


def folder_for(inputs: Path, graph: str) -> Path:
    """DIR/<graph>/ when it exists (one folder per graph), else DIR itself."""
    inputs = Path(inputs)
    return inputs / graph if (inputs / graph).is_dir() else inputs


def sample_files(folder: Path) -> list[Path]:
    """The .npy/.npz files of a samples folder, sorted: what records list and fingerprint."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix in SUFFIXES and p.is_file())


def fingerprint(folder: Path, files: Iterable[str], extra: str = "") -> str:
    """The records' sha256 of a samples folder: each listed file's name and sha256, then `extra` (how they were
    preprocessed, where they were)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(f"{name}\0{sha256_file(Path(folder) / name)}\n".encode())
    digest.update(extra.encode())
    return digest.hexdigest()


def media_files(folder: Path) -> list[Path]:
    """The .wav/.png/.jpg files of a samples folder, sorted: one sample each, through a preprocessing."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in MEDIA_SUFFIXES and p.is_file())


def sample_source(inputs: Path | None, random: int | None, preprocess: str | Path | None,
                  folder_option: str = "--inputs") -> Preprocess | None:
    """The rules of --inputs DIR [--preprocess SPEC] | --random N that every command feeding samples shares
    (validate, diagnose, device verify, and compile's calibration folder, `folder_option` --calib): one source at a
    time, a real folder, a preprocessing only for files. Returns the parsed preprocessing."""
    if inputs is not None and random is not None:
        raise BadInput(f"pass {folder_option} DIR or --random N, not both")
    if random is not None and random < 1:
        raise BadInput("--random must be 1 or more")
    if inputs is not None and not Path(inputs).is_dir():
        what = "is a file, not a folder" if Path(inputs).is_file() else "no such folder"
        raise BadInput(f"{folder_option} {inputs}: {what}; give the folder that holds the samples")
    prep = parse_preprocess(preprocess) if preprocess is not None else None
    if prep is not None and inputs is None:
        raise BadInput(f"--preprocess {prep.given} applies to audio or image files: give them with "
                       f"{folder_option} DIR")
    return prep


def for_graph(model: Path, graph: str, inputs: Path | None = None, count: int = 1, seed: int = 0,
              preprocess: str | Path | Preprocess | None = None, ranges: Ranges | None = None
              ) -> tuple[list[Sample], JSON]:
    """The samples for one graph, from `inputs` (DIR/<graph>/ or DIR) or else `count` seeded random ones, and how
    they were made, as the records store it. Audio and image files go through `preprocess` (parse_preprocess's
    text or JSON file; defaults from the input's shape when None). Random integers lie in `ranges` where given
    (the names of other graphs' inputs are ignored), else in the range the graph implies (int_ranges)."""
    proto = load_model(Path(model), weights=False).graph
    return for_inputs([tensor_info(v) for v in real_inputs(proto)], int_ranges(proto, ranges or {}), graph, inputs,
                      count, seed, preprocess)


def for_inputs(specs: list[TensorInfo], ranges: Mapping[str, tuple[int, int, str]], graph: str,
               inputs: Path | None = None, count: int = 1, seed: int = 0,
               preprocess: str | Path | Preprocess | None = None) -> tuple[list[Sample], JSON]:
    """for_graph for inputs given as specs, with every integer input's range (int_ranges): a split model's chain
    has the inputs of several parts."""
    prep = preprocess if isinstance(preprocess, Preprocess) or preprocess is None else parse_preprocess(preprocess)
    if inputs is None:
        if prep is not None:
            raise BadInput(f"--preprocess {prep.given} applies to audio or image files: give them with "
                           "--inputs DIR")
        return (random_samples(specs, count, seed, {n: (lo, hi) for n, (lo, hi, _) in ranges.items()}),
                random_record(count, seed, ranges))
    folder = folder_for(inputs, graph)
    files = media_files(folder)
    if files:
        if sample_files(folder):
            raise BadInput(f"{folder} holds both NumPy samples (.npy/.npz) and audio or image files: keep "
                           "one kind per folder")
        samples, described, notes = load_media(files, specs, prep, graph)
        return samples, {"kind": "files", "folder": str(folder.resolve()), "samples": len(samples),
                         "files": [p.name for p in files], "preprocess": described,
                         **({"notes": notes} if notes else {})}
    if prep is not None:
        raise BadInput(f"--preprocess {prep.given}: {folder} has no .wav, .png or .jpg files (NumPy samples "
                       "are fed as they are)")
    samples = load_samples(folder, specs)
    return samples, {"kind": "files", "folder": str(folder.resolve()), "samples": len(samples),
                     "files": [p.name for p in sample_files(folder)]}


def cpu_outputs(model: Path, samples: list[Sample]) -> list[Sample]:
    """The reference: each sample's outputs from onnxruntime on the CPU, by output name."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return [dict(zip(names, session.run(None, s), strict=True)) for s in samples]
    except Exception as e:  # noqa: BLE001 onnxruntime's exception types are not exported
        raise BadInput(f"onnxruntime could not run {model} on the CPU: {first_line(e)}") from None


def reference(model: Path, graph: str, inputs: Path | None = None, count: int = 1, seed: int = 0,
              preprocess: str | Path | Preprocess | None = None, ranges: Ranges | None = None
              ) -> tuple[list[Sample], list[Sample], JSON]:
    """(samples, CPU outputs, how the samples were made) for one graph."""
    samples, used = for_graph(model, graph, inputs, count, seed, preprocess, ranges)
    return samples, cpu_outputs(model, samples), used


# --- integer inputs' valid ranges ------------------------------------------------------------------

def int_ranges(graph: onnx.GraphProto, given: Ranges) -> dict[str, tuple[int, int, str]]:
    """Every integer input's (lo, hi inclusive, why): `given` first, else what the graph implies
    (onnxio.int_input_ranges), else 0 to 9 with the GUESSED note that asks for --range."""
    specs = [s for s in (tensor_info(v) for v in real_inputs(graph)) if s.dtype in INT_DTYPES]
    found = int_ranges_given(specs, given)
    inferred = int_input_ranges(graph)
    for spec in specs:
        if spec.name in inferred and spec.name not in found:
            lo, end, why = inferred[spec.name]
            found[spec.name] = (lo, end - 1, why)
        found.setdefault(spec.name, (0, 9, GUESSED))
    return {s.name: found[s.name] for s in specs}


def int_ranges_given(specs: list[TensorInfo], given: Ranges) -> dict[str, tuple[int, int, str]]:
    """The --range values of these inputs, each refused when its type cannot hold it."""
    import numpy as np

    found = {}
    for spec in specs:
        if spec.name in given:
            lo, hi = given[spec.name]
            info = np.iinfo(np.dtype(spec.dtype))
            if lo < info.min or hi > info.max:
                raise BadInput(f"--range {spec.name}={lo}:{hi}: input {spec.name} is {spec.dtype}, which holds "
                               f"{info.min} to {info.max}")
            found[spec.name] = (lo, hi, "given with --range")
    return found


def random_record(count: int, seed: int, ranges: Mapping[str, tuple[int, int, str]]) -> JSON:
    """How random samples were made, as the records keep it: enough for bundle verify and diagnose to make them
    again (each integer input's range and where it came from)."""
    return {"kind": "random", "samples": count, "seed": seed, "distribution": RANDOM_NOTE,
            **({"ranges": {n: {"from": lo, "to": hi, "why": why} for n, (lo, hi, why) in ranges.items()}}
               if ranges else {})}


def recorded_ranges(described: JSON) -> dict[str, tuple[int, int]]:
    """The ranges a record's random samples were drawn in (random_record), to draw the same ones again."""
    found = {}
    for name, r in (described.get("ranges") or {}).items():
        if isinstance(r, dict) and isinstance(r.get("from"), int) and isinstance(r.get("to"), int):
            found[str(name)] = (r["from"], r["to"])
    return found


def recorded_preprocess(described: JSON) -> str | None:
    """The --preprocess a record's audio or image files went through (None: their defaults), to make them again."""
    made = described.get("preprocess")
    given = made.get("given") if isinstance(made, dict) else made
    return None if given in (None, DEFAULT_PREPROCESS) else str(given)


def in_words(described: JSON | None) -> str:
    """What a record's samples were, in a few words: the evidence a verdict rests on ("3 sample files", "1 seeded
    random sample", "a split's chain on ..."), for the manifest and the report."""
    if not isinstance(described, dict):
        return "not recorded"
    kind, count = described.get("kind"), described.get("samples")
    if kind in ("chain", "loop"):
        inner = described.get("samples")
        return f"{'the split as a chain' if kind == 'chain' else 'the decode loop'} on {in_words(inner)}"
    n = count if isinstance(count, int) else "?"
    if kind == "files":
        return f"{n} sample file{'' if n == 1 else 's'}"
    if kind == "random":
        return f"{n} seeded random sample{'' if n == 1 else 's'}"
    return "not recorded"


def guessed(described: JSON) -> list[str]:
    """The integer inputs whose random values were guessed (no range in the graph, none given)."""
    return [n for n, r in (described.get("ranges") or {}).items() if isinstance(r, dict) and r.get("why") == GUESSED]


# --- reading and making samples --------------------------------------------------------------------

def load_samples(folder: Path, specs: list[TensorInfo]) -> list[Sample]:
    """Samples from `folder`: each *.npz is one sample (one array per input name; any single name for a
    one-input graph); <input>.npy holds one sample, or several stacked on a new first axis."""
    folder = Path(folder)
    samples: list[Sample] = []
    for path in sorted(folder.glob("*.npz")):
        arrays = read_arrays(path)
        if len(specs) == 1 and len(arrays) == 1:
            arrays = {specs[0].name: next(iter(arrays.values()))}
        missing = [s.name for s in specs if s.name not in arrays]
        if missing:
            raise BadInput(f"{path}: no array for input(s) {', '.join(missing)} (has {', '.join(arrays)})")
        samples.append({s.name: _fit(arrays[s.name], s, path) for s in specs})
    npy = {s.name: folder / f"{s.name}.npy" for s in specs}
    if any(p.is_file() for p in npy.values()):
        missing = [n for n, p in npy.items() if not p.is_file()]
        if missing:
            raise BadInput(f"{folder}: .npy files for some inputs but not for {', '.join(missing)}")
        stacks = {}
        for s in specs:
            arrays = read_arrays(npy[s.name])
            if len(arrays) != 1:
                raise BadInput(f"{npy[s.name]}: an archive of {len(arrays)} arrays; a .npy holds one array")
            (arr,) = arrays.values()
            stacks[s.name] = arr if s.shape is not None and arr.ndim == len(s.shape) + 1 else arr[None]
        counts = {len(a) for a in stacks.values()}
        if len(counts) != 1:
            raise BadInput(f"{folder}: the .npy files hold different numbers of samples ({sorted(counts)})")
        samples.extend({s.name: _fit(stacks[s.name][i], s, npy[s.name]) for s in specs} for i in range(counts.pop()))
    if not samples:
        names = ", ".join(f"{s.name}.npy" for s in specs)
        raise BadInput(f"{folder}: no input samples (*.npz, or {names})")
    return samples


def read_one(folder: Path, spec: TensorInfo) -> np.ndarray:
    """prepare --inputs: one sample, NAME.npy or NAME.npz per input ('/' and ':' in NAME as '_'), of exactly the
    input's dtype and (prepared, static) shape."""
    import numpy as np

    stem = spec.name.replace("/", "_").replace(":", "_")
    files = [folder / f"{stem}.npy", folder / f"{stem}.npz"]
    found = next((f for f in files if f.is_file()), None)
    if found is None:
        raise BadInput(f"--inputs {folder}: no {files[0].name} or {files[1].name} for input {spec.name}")
    arrays = read_arrays(found)
    if not arrays:
        raise BadInput(f"{found} holds no array; input {spec.name} needs one")
    array = next(iter(arrays.values()))
    if array.dtype != np.dtype(spec.dtype):
        raise BadInput(f"{found} holds {array.dtype}, input {spec.name} takes {np.dtype(spec.dtype)}")
    if list(array.shape) != spec.shape:
        raise BadInput(f"{found} has shape {list(array.shape)}, the prepared input {spec.name} is {spec.shape}")
    return array


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of one .npz file, or {stem: array} for a .npy file; any damage is a one-line error.
    The one reader of sample files."""
    import numpy as np

    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):  # a lazy archive: read every member now, then close it
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return {Path(path).stem: loaded}
    except Exception as e:  # noqa: BLE001 numpy raises ValueError, EOFError, OSError, BadZipFile… for bad files
        raise BadInput(f"cannot read {path} as a NumPy array file ({first_line(e).rstrip('.')}); save "
                       "samples with numpy.save or numpy.savez") from None


def write_samples(folder: Path, samples: list[Sample], first: int = 0) -> None:
    """Samples as .npz files in `folder`, one per sample, that load_samples reads back: how samples made here (audio
    and image files preprocessed) reach a process that reads a folder. Written member by member, so an input may be
    named anything (numpy.savez reserves some names). Numbered from `first`, to add to a folder."""
    import numpy as np

    for i, sample in enumerate(samples, first):
        with zipfile.ZipFile(Path(folder) / f"{i:05d}.npz", "w") as z:
            for name, array in sample.items():
                with z.open(f"{name}.npy", "w") as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)


def _fit(arr: np.ndarray, spec: TensorInfo, path: Path) -> np.ndarray:
    import numpy as np

    if spec.dynamic or list(arr.shape) != spec.shape:
        raise BadInput(f"{path}: input '{spec.name}' has shape {list(arr.shape)}, the model needs "
                       f"{spec.shape_text()}")
    target = np.dtype(spec.dtype)
    if arr.dtype != target:
        if not np.can_cast(arr.dtype, target, "same_kind"):
            raise BadInput(f"{path}: input '{spec.name}' is {arr.dtype}, the model needs {target}")
        arr = arr.astype(target)
    return np.ascontiguousarray(arr)


def random_samples(specs: list[TensorInfo], count: int, seed: int, int_ranges: Ranges | None = None) -> list[Sample]:
    """`count` seeded samples (RANDOM_NOTE; booleans fair coin flips); other dtypes need real inputs.
    `int_ranges` gives an integer input its values, LO to HI included (int_ranges), else 0 to 9."""
    import numpy as np

    for s in specs:
        if s.dynamic:
            raise BadInput(f"input '{s.name}' has dynamic size {s.shape_text()}: random inputs need fixed "
                           "sizes")
        if math.prod(s.static_shape) > MAX_TENSOR_ELEMENTS:
            raise BadInput(f"input '{s.name}' {s.shape_text()} has {math.prod(s.static_shape):,} elements, "
                           f"over the limit of {MAX_TENSOR_ELEMENTS:,} per tensor: no random sample is made")
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        sample: Sample = {}
        for s in specs:
            dtype, shape = np.dtype(s.dtype), s.static_shape
            if dtype.kind == "f":
                sample[s.name] = rng.uniform(-1, 1, shape).astype(dtype)
            elif dtype.kind == "b":
                sample[s.name] = rng.random(shape) < 0.5
            elif dtype.kind in "iu":
                lo, hi = (int_ranges or {}).get(s.name, (0, 9))
                sample[s.name] = rng.integers(lo, hi, shape, dtype=np.int64, endpoint=True).astype(dtype)
            else:
                raise BadInput(f"input {s.name} is {s.dtype}: give real inputs with --inputs DIR")
        samples.append(sample)
    return samples


# --- audio and image files through a declared preprocessing ---------------------------------------------
