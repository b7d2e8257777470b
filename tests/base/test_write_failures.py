"""What the publishing commands (package play, bundle build, demo, diagnose --plot) do when the output cannot be
written, when an output and an input overlap, and when an input changes between its verification and its copy: one
line naming the output and the cause (exit 2), nothing half-written left behind, and nothing published that was not
verified.

How each write failure is produced here, for real, with the product code untouched (cases: fuzz.write_cases):
- full disk (ENOSPC): a tmpfs of N KiB mounted in a private mount namespace of the child process (`unshare -m` as
  root; `unshare -rm`, a user namespace, otherwise): the kernel's own ENOSPC at whichever write reaches N. It
  stands for a full disk or partition.
- read-only file system (EROFS): the same tmpfs mounted (or remounted, after an earlier output was put in) read-only.
  It stands for a read-only mount: a CI cache, a mounted image, a file system remounted ro after errors.
- file size limit (EFBIG): RLIMIT_FSIZE set in the child (Python ignores SIGXFSZ, so a write past the limit fails
  with EFBIG); it needs no privilege. It stands for a file system's largest file (FAT32's 4 GiB) and `ulimit -f`.
- permission denied (EACCES): a folder of mode 0555; a root child runs without CAP_DAC_OVERRIDE (dropped from its
  bounding set with prctl before exec), so the kernel applies the mode bits to it as to any user.
- names over 255 bytes (ENAMETOOLONG), a file where a folder must be (ENOTDIR), symlinks: real paths.
Where no mount namespace can be made (unprivileged user namespaces disabled), the mount cases are skipped.

The race tests change a bundle file at a fixed point (the copy function's first call, or the read of the manifest
right after verification) through monkeypatch, so they are deterministic.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from qnndeploy.base import fileio, interrupt
from qnndeploy.base.errors import QnnDeployError
from qnndeploy.qnn import htp
from tests.support import bundles, fuzz
from tests.support.cli import run
from tests.support.host import require


def tree(folder: Path) -> dict[str, str]:
    """Every entry under folder: a file's sha256, 'dir' or 'link -> target'."""
    out = {}
    for top, dirs, files in os.walk(folder):  # not into symlinked folders
        for name in dirs + files:
            p = Path(top, name)
            out[p.relative_to(folder).as_posix()] = (f"link -> {p.readlink()}" if p.is_symlink() else "dir"
                                                     if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def one_line_error(r, *needles: str) -> str:
    """The CLI ended with exit 2 and one line `error: ...` holding each needle."""
    assert "Traceback" not in r.output, r.output
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# --- fileio.copy_verified --------------------------------------------------------------------------------------

def test_copy_verified_returns_the_hash_and_size_of_the_bytes_it_wrote(tmp_path):
    src, dest = tmp_path / "a", tmp_path / "b"
    data = os.urandom(3 * 4096 + 17)
    src.write_bytes(data)
    seen: list[bytes] = []
    copied = fileio.copy_verified(src, dest, expect=fileio.Expected(hashlib.sha256(data).hexdigest(), len(data)),
                                  scan=seen.append)
    assert dest.read_bytes() == data and b"".join(seen) == data
    assert copied == fileio.Copied(hashlib.sha256(data).hexdigest(), len(data))


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "socket"])
def test_copy_verified_refuses_what_is_not_a_regular_file_at_once(tmp_path, kind):
    src, dest = tmp_path / "src", tmp_path / "dest"
    (tmp_path / "real").write_bytes(b"x")
    if kind == "symlink":
        src.symlink_to(tmp_path / "real")
    elif kind == "fifo":
        os.mkfifo(src)  # opened with O_NONBLOCK: no writer, yet no hang
    elif kind == "folder":
        src.mkdir()
    else:
        import socket
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(src))
    with pytest.raises(QnnDeployError, match=r"symlink|not a regular file") as e:
        fileio.copy_verified(src, dest)
    assert "\n" not in str(e.value)
    assert not dest.exists()


def test_copy_verified_beneath_a_folder_refuses_a_folder_swapped_for_a_link(tmp_path):
    root, outside = tmp_path / "bundle", tmp_path / "outside"
    (outside / "SM8750").mkdir(parents=True)
    (outside / "SM8750" / "g.bin").write_bytes(b"same bytes")
    (root / "npu").mkdir(parents=True)
    (root / "npu" / "SM8750").symlink_to(outside / "SM8750")
    with pytest.raises(QnnDeployError, match=r"npu/SM8750 is a symlink; a file must be a regular file inside"):
        fileio.copy_verified(root / "npu" / "SM8750" / "g.bin", tmp_path / "dest", beneath=root)
    assert not (tmp_path / "dest").exists()
    fileio.copy_verified(outside / "SM8750" / "g.bin", tmp_path / "dest", beneath=outside)  # no link on the way


@pytest.mark.parametrize("change", ["flip", "grow", "shrink"])
def test_copy_verified_refuses_bytes_that_are_not_the_listed_ones_and_leaves_no_destination(tmp_path, change):
    src, dest = tmp_path / "a", tmp_path / "b"
    data = os.urandom(10_000)
    listed = hashlib.sha256(data).hexdigest(), len(data)
    src.write_bytes({"flip": data[:5000] + bytes([data[5000] ^ 1]) + data[5001:], "grow": data + b"\0",
                     "shrink": data[:-1]}[change])
    with pytest.raises(QnnDeployError, match=r"/a changed since it was verified \(") as e:
        fileio.copy_verified(src, dest, expect=fileio.Expected(*listed))
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_copy_verified_never_writes_through_an_existing_destination(tmp_path):
    (tmp_path / "a").write_bytes(b"new")
    (tmp_path / "victim").write_bytes(b"keep")
    (tmp_path / "b").symlink_to(tmp_path / "victim")
    with pytest.raises(FileExistsError):
        fileio.copy_verified(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "victim").read_bytes() == b"keep"


def test_copy_verified_stops_at_a_safe_point_and_leaves_no_destination(tmp_path):
    (tmp_path / "a").write_bytes(b"\0" * (3 * fileio.CHUNK))
    with interrupt.Run() as run, pytest.raises(KeyboardInterrupt):
        run.stop()
        fileio.copy_verified(tmp_path / "a", tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_copy_verified_leaves_no_destination_when_the_write_fails(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE in a child process) in the middle of the copy: the OSError reaches the caller
    with its errno, and the half-written destination is gone."""
    (tmp_path / "a").write_bytes(os.urandom(3 * fileio.CHUNK))
    code = ("import errno, resource, sys\nfrom pathlib import Path\nfrom qnndeploy.base import fileio\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fileio.CHUNK + 1}, {fileio.CHUNK + 1}))\n"
            "try:\n    fileio.copy_verified(Path(sys.argv[1]), Path(sys.argv[2]))\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno])\n")
    done = subprocess.run([sys.executable, "-c", code, tmp_path / "a", tmp_path / "b"], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "EFBIG", done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


# --- fileio: the OSError -> words mapping, output checks ---------------------------------------------------------

@pytest.mark.parametrize(("code", "words"), [
    (errno.ENOSPC, "no space left on the device"), (errno.EROFS, "read-only file system"),
    (errno.ENAMETOOLONG, "a name is too long for the file system"),
    (errno.ENOTDIR, "a part of the path is not a folder"),
    (errno.EACCES, "permission denied"), (errno.EDQUOT, "the disk quota is used up"),
    (errno.EFBIG, "a file is larger than the file system or the file size limit (ulimit -f) allows")])
def test_write_errors_name_the_output_and_the_cause_in_words(tmp_path, code, words):
    """The output the user named, not the staging file the error came from, and the cause in words."""
    staged = tmp_path / ".out.partial-123-abcdefgh" / "x" / "y.bin"
    e = fileio.write_error(OSError(code, os.strerror(code), str(staged)), tmp_path / "out")
    assert str(e) == f"cannot write {tmp_path / 'out'}: {words}"
    assert e.exit_code == 2


def test_a_name_too_long_is_told_with_its_length(tmp_path):
    e = fileio.write_error(OSError(errno.ENAMETOOLONG, "File name too long", str(tmp_path / ("n" * 300) / "x")),
                           tmp_path / "out")
    assert "has 300 bytes; a name may have at most 255" in str(e)


def test_check_writable_leaves_room_for_the_staging_name(tmp_path):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX") - fileio.STAGING_OVERHEAD
    fileio.check_writable(tmp_path / ("n" * limit))
    with fileio.staging_dir(tmp_path / ("n" * limit)) as tmp:  # the longest name allowed can be staged
        (tmp / "f").write_text("x")
    with pytest.raises(QnnDeployError, match=f"may have at most {limit} "):
        fileio.check_writable(tmp_path / ("n" * (limit + 1)))
    with pytest.raises(QnnDeployError, match="has 300 bytes, over the file system's limit of 255"):
        fileio.check_writable(tmp_path / ("n" * 300) / "out")
    with pytest.raises(QnnDeployError, match="over the limit of 4096 for a whole path"):
        fileio.check_writable(tmp_path.joinpath(*["d" * 200] * 21))


def test_check_writable_refuses_a_symlink_and_a_file_on_the_way(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(QnnDeployError, match=r"-o .*link is a symlink \(to .*empty\)"):
        fileio.check_writable(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(QnnDeployError, match=r"cannot write -o .*file/a/b: .*file is not a folder"):
        fileio.check_writable(tmp_path / "file" / "a" / "b")
    fileio.check_writable(tmp_path / "link" / "new")  # a link above the output is followed


def test_check_apart_sees_through_links(tmp_path):
    bundle = tmp_path / "b" / "bundle"
    bundle.mkdir(parents=True)
    (tmp_path / "alias").symlink_to(tmp_path / "b")
    for out, words in ((bundle, "is the bundle"), (bundle / "x" / "y", "is inside the bundle"),
                       (tmp_path / "alias" / "bundle" / "play", "is inside the bundle"),
                       (tmp_path / "alias", "holds the bundle")):
        with pytest.raises(QnnDeployError, match=words):
            fileio.check_apart(out, [("bundle", bundle)])
    fileio.check_apart(tmp_path / "alias", [("bundle", bundle)], holding=False)
    fileio.check_apart(tmp_path / "play", [("bundle", bundle), ("none", None)])


def test_a_failed_tidy_staging_removes_the_folders_it_made_and_only_those(tmp_path):
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), fileio.staging_dir(tmp_path / "kept" / "a" / "b" / "out", tidy=True) as tmp:
        (tmp / "f").write_text("x")
        raise RuntimeError
    assert tree(tmp_path) == {"kept": "dir"}


# --- a bundle to package (a real one: verify loads its context binary) --------------------------------------------

@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory) -> Path:
    require(htp.available(), "onnxruntime-qnn")
    root = tmp_path_factory.mktemp("small")
    inputs = bundles.compile_inputs(root / "inputs", targets=("SM8550", "SM8750"), graphs=("enc",))
    return bundles.build(root / "bundles", inputs)


@pytest.fixture
def bundle(small_bundle, tmp_path) -> Path:
    dest = tmp_path / "in" / small_bundle.name
    shutil.copytree(small_bundle, dest)
    return dest


# --- package play: outputs that overlap the bundle, or cannot be written -----------------------------------------

def test_play_refuses_an_output_inside_the_bundle_or_holding_it_before_writing(bundle, tmp_path):
    before = tree(tmp_path)
    one_line_error(run("package", "play", bundle, "-o", bundle / "play"), "is inside the bundle")
    one_line_error(run("package", "play", bundle, "-o", bundle), "is the bundle")
    (tmp_path / "alias").symlink_to(bundle)
    one_line_error(run("package", "play", bundle, "-o", tmp_path / "alias" / "p"), "is inside the bundle")
    (bundle.parent / ".qnndeploy-play").write_text("as if an earlier output\n")  # --force would replace it
    one_line_error(run("package", "play", bundle, "-o", bundle.parent, "--force"), "holds the bundle")
    (bundle.parent / ".qnndeploy-play").unlink()
    assert tree(tmp_path) == {**before, "alias": f"link -> {bundle}"}


def test_play_refuses_a_symlink_output_even_to_an_empty_folder(bundle, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    one_line_error(run("package", "play", bundle, "-o", tmp_path / "link"), "is a symlink")
    assert tree(tmp_path / "empty") == {}


def test_play_into_an_empty_folder_keeps_it_when_a_write_fails(bundle, tmp_path):
    """A real write failure (EFBIG: RLIMIT_FSIZE of 1 byte in the child) into an empty -o: one line naming -o and
    the cause, and the empty folder is still there, still empty, with nothing beside it."""
    import resource

    out = tmp_path / "out"
    out.mkdir()
    def play(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "qnndeploy", "package", "play", str(bundle), "-o", str(out),
                               *extra], capture_output=True, text=True, check=False, timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1)))

    too_large = "a file is larger than the file system or the file size limit (ulimit -f) allows"
    done = play("--shallow")  # the pack's first file fails
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"error: cannot write {out}: {too_large}"
    done = play()  # the deep check's first temporary file fails: said of it, never of the bundle's binaries
    assert done.returncode == 2 and done.stderr.startswith("error: cannot write ") and too_large in done.stderr
    assert "does not load" not in done.stderr + done.stdout
    assert out.is_dir() and tree(out) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


# --- package play: a bundle file that changes between verification and copy -------------------------------------

def _mutate(path: Path, kind: str, outside: Path) -> None:
    """Change one bundle file the way another process could, in place."""
    data = path.read_bytes()
    outside.mkdir(exist_ok=True)
    if kind == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif kind == "grow":
        path.write_bytes(data + b"\0")
    elif kind == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif kind in ("symlink-same", "symlink-other"):
        (outside / path.name).write_bytes(data if kind == "symlink-same" else b"a file from outside the bundle")
        path.unlink()
        path.symlink_to(outside / path.name)
    elif kind == "folder-symlink":  # its folder swapped for a link to a copy outside, same bytes
        shutil.copytree(path.parent, outside / path.parent.name)
        shutil.rmtree(path.parent)
        path.parent.symlink_to(outside / path.parent.name)
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        raise AssertionError(kind)


MUTATIONS = ["flip", "grow", "truncate", "symlink-same", "symlink-other", "folder-symlink", "fifo"]
WHY = {"flip": "changed since it was verified", "grow": "changed since it was verified",
       "truncate": "changed since it was verified", "symlink-same": "is a symlink",
       "symlink-other": "is a symlink", "folder-symlink": "is a symlink", "fifo": "is a FIFO"}


@pytest.mark.parametrize("kind", MUTATIONS)
@pytest.mark.parametrize("moment", ["before-plan", "before-copy"])
def test_play_publishes_nothing_when_a_bundle_file_changes_after_verification(bundle, tmp_path, monkeypatch,
                                                                              moment, kind):
    """Verified, then changed before play reads it for the plan (a CPU model: in the plan only) or before its copy
    into the pack (an NPU file): one line, exit 2, nothing published, nothing from outside the bundle read in."""
    from qnndeploy.package import play

    out, outside = tmp_path / "play", tmp_path / "outside"
    manifest = json.loads((bundle / "manifest.json").read_text())
    if moment == "before-plan":
        victim = bundle / manifest["cpu"][0]["path"]
        real_read = play.read_manifest

        def reading(path: Path):
            _mutate(victim, kind, outside)
            return real_read(path)

        monkeypatch.setattr(play, "read_manifest", reading)
    else:
        real_copy, calls = play.copy_verified, []

        def copying(src: Path, *a, **k):
            if not calls:
                _mutate(src, kind, outside)
            calls.append(src)
            return real_copy(src, *a, **k)

        monkeypatch.setattr(play, "copy_verified", copying)
    r = run("package", "play", bundle, "-o", out)
    one_line_error(r, WHY[kind])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in", "outside"]


@pytest.mark.parametrize("victim", ["manifest", "cpu", "npu"])
@pytest.mark.parametrize("kind", ["flip", "symlink-other", "fifo"])
def test_scaffold_copies_only_the_verified_bytes(bundle, tmp_path, monkeypatch, victim, kind):
    """scaffold copies the bundle beside the glue: a file verified, then changed or swapped for a link before its
    copy, ends the run in one line (exit 2) with nothing published."""
    from qnndeploy import scaffold

    manifest = json.loads((bundle / "manifest.json").read_text())
    path = {"manifest": bundle / "manifest.json", "cpu": bundle / manifest["cpu"][0]["path"],
            "npu": bundle / manifest["targets"][0]["artifacts"][0]["path"]}[victim]
    real = scaffold._copy_bundle

    def copying(*a, **k):
        _mutate(path, kind, tmp_path / "outside")
        return real(*a, **k)

    monkeypatch.setattr(scaffold, "_copy_bundle", copying)
    out = tmp_path / "glue"
    r = run("scaffold", bundle, "--package", "com.example.x", "-o", out, "--shallow")
    one_line_error(r, WHY[kind])
    assert not out.exists()


def test_play_json_vouches_only_for_the_verified_bytes(bundle, tmp_path):
    """The plan's sha256 of every file is the manifest's, and the pack holds exactly those bytes."""
    out = tmp_path / "play"
    assert run("package", "play", bundle, "-o", out).exit_code == 0
    plan = json.loads((out / "play.json").read_text())
    listed = {a["path"]: a["sha256"] for t in json.loads((bundle / "manifest.json").read_text())["targets"]
              for a in t["artifacts"]}
    for g in plan["groups"]:
        for f in g["files"]:
            packed = out / "qnndeploy_models/src/main/assets" / f"qnndeploy_npu#group_{g['name']}" / f["path"]
            assert f["sha256"] == listed[f["path"]] == hashlib.sha256(packed.read_bytes()).hexdigest()
    assert plan["bundle"]["manifest_sha256"] == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()


# --- bundle build: outputs that overlap inputs, inputs that change while they are copied ------------------------

@pytest.fixture(scope="module")
def small_build(tmp_path_factory) -> Path:
    """A `qnndeploy compile` folder: one graph for SM8750, validated."""
    require(htp.available(), "onnxruntime-qnn")
    from qnndeploy.compile import compile_models
    from qnndeploy.validate import ValidateOptions, validate_build

    root = tmp_path_factory.mktemp("build")
    model = bundles.tiny_model(root / "enc.onnx", 16)
    assert compile_models({"enc": model}, ["SM8750"], root / "build").ok
    assert validate_build(root / "build", ValidateOptions(random=1)).ok
    return root / "build"


@pytest.fixture
def build(small_build, tmp_path) -> Path:
    dest = tmp_path / "work" / "build"
    shutil.copytree(small_build, dest)
    return dest


def bundle_cmd(build: Path, out: Path, *extra: str) -> list[str]:
    return ["bundle", "build", "--name", "enc", "--version", "1.0.0", "--from-build", str(build), "-o", str(out),
            *extra]


def test_bundle_build_refuses_an_output_inside_the_build_folder_or_replacing_an_input(build, tmp_path):
    work = tmp_path / "work"
    before = tree(tmp_path)
    one_line_error(run(*bundle_cmd(build, build)), "is the build folder")
    one_line_error(run(*bundle_cmd(build, build / "enc" / "bundles")), "is inside the build folder")
    # --force replaces NAME-VERSION/: refused when that is the build folder, or holds it
    named = work / "enc-1.0.0"
    build.rename(named)
    one_line_error(run(*bundle_cmd(named, work, "--force")), "the bundle", "is the build folder")
    build.mkdir()
    named.rename(build / "build")
    build.rename(named)
    one_line_error(run(*bundle_cmd(named / "build", work, "--force")), "the bundle", "holds the build folder")
    named.rename(tmp_path / "moved")
    (tmp_path / "moved" / "build").rename(build)
    (tmp_path / "moved").rmdir()
    assert tree(tmp_path) == before
    assert run(*bundle_cmd(build, work)).exit_code == 0  # beside the build folder is fine


@pytest.mark.parametrize(("which", "kind"), [  # a log has no recorded hash: a changed log is bundled as it is read
    *(("context binary", k) for k in ("flip", "symlink-same", "symlink-other", "folder-symlink", "fifo")),
    *(("log", k) for k in ("symlink-same", "symlink-other", "folder-symlink", "fifo"))])
def test_bundle_build_refuses_a_build_file_changed_or_linked_before_its_copy(build, tmp_path, monkeypatch, kind,
                                                                            which):
    """A context binary (its compile record holds its sha256) or a log (no hash: only O_NOFOLLOW protects it)
    changed or swapped for a link right before bundle copies it: refused, nothing published. A link to a file of
    the same bytes too: a bundle holds no file from outside the folders it was given."""
    from qnndeploy.bundle import build as stage

    victim = build / "enc" / "SM8750" / "enc.bin" if which == "context binary" else next((build / "logs").iterdir())
    real_copy = stage.copy_verified

    def copying(src: Path, *a, **k):
        if Path(src) == victim:
            _mutate(victim, kind, tmp_path / "outside")
        return real_copy(src, *a, **k)

    monkeypatch.setattr(stage, "copy_verified", copying)
    out = tmp_path / "out"
    why = {"flip": "enc.bin changed since it was compiled", "fifo": "is a FIFO"}.get(kind, "is a symlink")
    one_line_error(run(*bundle_cmd(build, out)), why)
    assert not out.exists()


def test_bundle_build_writes_the_bytes_it_hashed_while_a_source_changes_during_its_copy(build, tmp_path,
                                                                                      monkeypatch):
    """A context binary changed during its own copy, right after its first chunk: a change ahead of the copy is
    refused (the bytes written are not the compile record's), a change behind it is not in the copy, which keeps
    the record's bytes: the bundle holds what was hashed, and that is what was compiled."""
    from qnndeploy.bundle import build as stage

    binary = build / "enc" / "SM8750" / "enc.bin"
    record = json.loads((build / "enc" / "SM8750" / "compile.json").read_text())
    want = next(o["sha256"] for o in record["outputs"] if o["path"] == "enc.bin")
    monkeypatch.setattr(fileio, "CHUNK", 4096)  # several chunks for this small binary
    original = binary.read_bytes()
    assert len(original) > 3 * 4096
    real_copy = stage.copy_verified

    for where, out in ((3 * 4096, tmp_path / "ahead"), (0, tmp_path / "behind")):
        def copying(src: Path, *a, where: int = where, **k):
            if Path(src) != binary:
                return real_copy(src, *a, **k)
            outer, done = k.pop("progress"), list[int]()

            def progress(n: int) -> None:
                if not done:  # once, after the first chunk was read and written
                    data = bytearray(original)
                    data[where] ^= 0xFF
                    binary.write_bytes(bytes(data))
                    done.append(n)
                if outer is not None:
                    outer(n)
            return real_copy(src, *a, progress=progress, **k)

        monkeypatch.setattr(stage, "copy_verified", copying)
        spec = stage.spec_from_build(build, "enc", "1.0.0")
        if where:
            with pytest.raises(QnnDeployError, match=r"enc\.bin changed since it was compiled \(its sha256"):
                stage.build_bundle(spec, out)
            assert not out.exists()
        else:
            result = stage.build_bundle(spec, out)
            shipped = result.path / "npu" / "SM8750" / "enc.bin"
            assert hashlib.sha256(shipped.read_bytes()).hexdigest() == want
            listed = json.loads((result.path / "manifest.json").read_text())["targets"][0]["artifacts"]
            assert {a["path"]: a["sha256"] for a in listed}["npu/SM8750/enc.bin"] == want
        binary.write_bytes(original)


# --- demo: an output apart from the folders it reads --------------------------------------------------------

def test_demo_refuses_an_output_inside_or_holding_its_runtime_libraries_before_any_stage(tmp_path):
    require(htp.available(), "onnxruntime-qnn")
    from tests.support.elfgen import fake_sdk

    sdk = fake_sdk(tmp_path / "old-demo" / "sdk", ["v73", "v75", "v79"])
    before = tree(tmp_path)
    one_line_error(run("demo", "-o", sdk / "demo", "--qnn-sdk-root", sdk), "is inside the QAIRT SDK folder")
    (tmp_path / "old-demo" / ".qnndeploy-demo").write_text("an earlier demo output, as --force may replace\n")
    one_line_error(run("demo", "-o", tmp_path / "old-demo", "--force", "--qnn-sdk-root", sdk),
                   "holds the QAIRT SDK folder")
    (tmp_path / "old-demo" / ".qnndeploy-demo").unlink()
    assert tree(tmp_path) == before


# --- diagnose --plot: refused before the run -------------------------------------------------------------------

@pytest.mark.parametrize("place", ["missing folder", "a file as folder", "a folder", "a symlink", "long name"])
def test_diagnose_refuses_a_plot_it_could_not_write_before_reading_anything(tmp_path, place):
    """The plot is checked first: the job folder given does not even exist, and the error is the plot's."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "target").write_text("x")
    (tmp_path / "link.png").symlink_to(tmp_path / "target")
    plot, words = {"missing folder": (tmp_path / "nowhere" / "c.png", "does not exist"),
                   "a file as folder": (tmp_path / "file" / "c.png", "is not a folder"),
                   "a folder": (tmp_path, "is a folder"),
                   "a symlink": (tmp_path / "link.png", "is a symlink"),
                   "long name": (tmp_path / ("p" * 300 + ".png"), "over the file system's limit")}[place]
    one_line_error(run("diagnose", tmp_path / "no-such-build" / "g" / "SM8750", "--plot", plot), "--plot", words)
    assert (tmp_path / "target").read_text() == "x"


# --- generated write failures, each a separate process (the slow tier) -----------------------------------------

# Runs one command with its output place made unwritable, then says what it did to the place. It runs as the child
# of the test (inside `unshare` for a tmpfs of its own: the mount is private to that namespace and goes with it).
# argv[1]: a JSON spec (see run_write_case).
LAUNCHER = r"""
import ctypes, ctypes.util, hashlib, json, os, resource, shutil, subprocess, sys
spec = json.loads(sys.argv[1])
mnt = spec["mnt"]
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MS_RDONLY, MS_REMOUNT = 1, 32

def mount(flags, options):
    if libc.mount(b"tmpfs", mnt.encode(), b"tmpfs", flags, options.encode()) != 0:
        raise OSError(ctypes.get_errno(), "mount tmpfs " + options)

def snapshot():
    out = {}
    for top, dirs, files in os.walk(mnt):
        for name in dirs + files:
            p = os.path.join(top, name)
            rel = os.path.relpath(p, mnt)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out

if spec["mount"]:
    mount(0, spec["mount"])
if spec["earlier"]:
    shutil.copytree(spec["earlier"], mnt, symlinks=True, dirs_exist_ok=True)
if spec["zeros"]:
    fd = os.open(os.path.join(mnt, "zeros"), os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, bytes(4096)):
            pass
    except OSError:  # ENOSPC: the place is full
        pass
    os.close(fd)
if spec["remount_ro"]:
    mount(MS_REMOUNT | MS_RDONLY, spec["mount"])
if spec["denied"]:
    os.chmod(mnt, 0o555)
before = snapshot()

def limits():
    if spec["fsize"] is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize"], spec["fsize"]))
    if spec["denied"] and os.geteuid() == 0:
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: without them root obeys the mode bits
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone from what the command execs with
                raise OSError(ctypes.get_errno(), "prctl")

# pipes, not files: a file size limit would cut the command's own stderr file
done = subprocess.run(spec["argv"], cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL, capture_output=True,
                      preexec_fn=limits, timeout=spec["timeout"])
code = done.returncode
for name, data in (("stdout", done.stdout), ("stderr", done.stderr)):
    with open(spec[name], "wb") as f:
        f.write(data)
after = snapshot()
if spec["denied"]:
    os.chmod(mnt, 0o755)
with open(spec["result"], "w") as f:
    json.dump({"code": code, "before": before, "after": after}, f)
"""
DOCUMENTED_EXITS = {0, 1, 2, 3, 10, 11}
TIMEOUT_S = 120  # a guard against a hang only: the slowest case (a whole demo) takes a few seconds


def _namespace_prefix() -> list[str] | None:
    """The command that runs a child in a private mount namespace where it may mount a tmpfs: `unshare -m` as root,
    `unshare -rm` (a user namespace) otherwise; None where neither works here."""
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "--mount", "--propagation", "private", "--"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    import tempfile
    with tempfile.TemporaryDirectory() as probe:
        code = ("import ctypes, ctypes.util, sys\nlibc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)\n"
                "sys.exit(libc.mount(b'tmpfs', sys.argv[1].encode(), b'tmpfs', 0, b'size=4k'))")
        done = subprocess.run([*prefix, sys.executable, "-c", code, probe], capture_output=True, check=False)
    return prefix if done.returncode == 0 else None


def _pages(folder: Path) -> tuple[int, int]:
    """(bytes the files under folder take on a tmpfs, in whole pages; the largest file's size)."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(-(-n // 4096) * 4096 for n in sizes), max(sizes, default=0)


def run_write_case(case: fuzz.WriteCase, folder: Path, prefix: list[str] | None, earlier: dict[str, Path]
                   ) -> str | None:
    """None when the case keeps the invariant, "skipped: ..." when it cannot run here, else what broke."""
    if case.mount and prefix is None:
        return "skipped: no mount namespace here"
    mnt, home, tmp = folder / "mnt", folder / "home", folder / "tmp"
    for d in (mnt, home, tmp):
        d.mkdir(parents=True)
    argv = [sys.executable, "-m", "qnndeploy", *(a.replace("MNT", str(mnt), 1) if a.startswith("MNT") else a
                                                 for a in case.args)]
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache")}
    spec = {"mnt": str(mnt), "mount": case.mount, "earlier": str(earlier[case.command]) if case.fill == "earlier"
            else None, "zeros": case.fill == "zeros", "remount_ro": case.remount_ro, "fsize": case.fsize,
            "denied": case.technique == "denied", "argv": argv, "cwd": str(folder), "env": env,
            "stdout": str(folder / "stdout"), "stderr": str(folder / "stderr"), "result": str(folder / "result"),
            "timeout": TIMEOUT_S}
    launcher = [sys.executable, "-c", LAUNCHER, json.dumps(spec)]
    done = subprocess.run([*prefix, *launcher] if case.mount and prefix else launcher, capture_output=True,
                          text=True, check=False, timeout=TIMEOUT_S + 30)
    if done.returncode != 0 or not (folder / "result").exists():
        return f"the launcher failed: {done.stderr.strip()[-300:]}"
    result = json.loads((folder / "result").read_text())
    code, before, after = result["code"], result["before"], result["after"]
    stderr = (folder / "stderr").read_text(errors="replace")
    staged = [k for k in after if ".partial-" in k or ".old-" in k or ".qnndeploy-room-" in k]
    left = [p.relative_to(folder).as_posix() for d in (home, tmp) for p in d.rglob("*")]
    lines = stderr.strip().splitlines()
    if code < 0:
        return f"killed by signal {-code}: {stderr[-300:]}"
    if "Traceback" in stderr:
        return f"traceback: {lines[-1] if lines else ''}"
    if code not in DOCUMENTED_EXITS:
        return f"undocumented exit {code}"
    if left:
        return f"left files in HOME or TMPDIR: {left[:3]}"
    if staged:
        return f"left staging behind: {staged[:3]}"
    if code == 0:
        if case.fits is False:
            return "succeeded where the output cannot be written"
        complete = case.complete.replace("MNT/", "", 1)
        return None if complete in after else f"exit 0 without a complete output ({complete} missing)"
    if case.fits is True:
        return f"failed with room to spare: {stderr.strip()[:300]}"
    if code != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
        return f"exit {code}, not one line of error: {stderr[:300]!r}"
    if fuzz.CAUSE_WORDS[case.technique] not in lines[0]:
        return f"the error does not say '{fuzz.CAUSE_WORDS[case.technique]}': {lines[0][:300]}"
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        return f"failed, yet changed the place: {changed[:4]}"
    return None


@pytest.mark.slow
@pytest.mark.fuzz
def test_every_write_failure_ends_in_one_line_and_leaves_the_place_as_it_was(demo_run, tmp_path):
    """package play, bundle build, demo and diagnose --plot, each against a full disk (swept), a read-only file
    system, a file size limit and a folder it may not write in, each in a process of its own."""
    prefix = _namespace_prefix()
    earlier: dict[str, Path] = {}
    measured: dict[str, tuple[int, int]] = {"demo": _pages(demo_run)}
    commands = fuzz.write_commands(demo_run)
    for command in ("play", "bundle", "diagnose"):  # an earlier output of each, as a successful run leaves it
        earlier[command] = tmp_path / "earlier" / command
        earlier[command].mkdir(parents=True)
        args = [a.replace("MNT", str(earlier[command]), 1) if a.startswith("MNT") else a for a in commands[command][0]]
        r = run(*args)
        assert r.exit_code in (0, 1) and "Traceback" not in r.output, r.output  # diagnose: exit 1 on a bad graph
        measured[command] = _pages(earlier[command])
    cases = list(fuzz.write_cases(demo_run, measured))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: run_write_case(ic[1], tmp_path / "cases" / str(ic[0]), prefix, earlier),
                                enumerate(cases)))
    skipped = [c.name for c, why in zip(cases, results, strict=True) if why and why.startswith("skipped")]
    broken = [f"{c.name}: {why}" for c, why in zip(cases, results, strict=True) if why and c.name not in skipped]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken)
    assert len(skipped) < len(cases)
    if skipped:
        pytest.skip(f"{len(skipped)} of {len(cases)} cases need a mount namespace, which cannot be made here "
                    "(the others passed)")
