"""Compiling generated Kotlin for the JVM tests: the Java stand-ins with javac, then the glue, the Kotlin stand-ins
and the test sources in one kotlinc run (-Werror); and running a compiled main class."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import KOTLIN
from .host import find_kotlinc, require

STUBS = KOTLIN / "stubs"


def build(generated: list[Path], tests: list[Path], out: Path) -> dict:
    """Returns the classpath to run with, the classes folder and the generated sources."""
    kotlinc = find_kotlinc()
    require(kotlinc is not None, "kotlinc (npm install -g kotlin-compiler)")
    require(shutil.which("javac") is not None, "javac (Java 17)")
    assert kotlinc is not None
    lib = kotlinc.resolve().parent.parent / "lib"
    stubs = out / "stubs"
    java = sorted(str(p) for p in (STUBS / "java").rglob("*.java"))
    subprocess.run(["javac", "-nowarn", "-d", str(stubs), *java], check=True, capture_output=True, text=True)
    support = sorted((STUBS.parent / "support").glob("*.kt"))  # test helpers every JVM test build shares
    sources = generated + sorted((STUBS / "kotlin").rglob("*.kt")) + support + tests
    classes = out / "classes"
    # kotlinx.coroutines, the sample app's (kotlinc ships kotlinx-coroutines-core-jvm in its lib folder)
    coroutines = lib / "kotlinx-coroutines-core-jvm.jar"
    cp = os.pathsep.join([str(stubs), str(lib / "kotlin-test.jar"), str(coroutines)])
    # -XX:TieredStopAtLevel=1: the JVM's quick JIT only. Its optimizing JIT's threads cost kotlinc more CPU than
    # they save in one compile of these sources: measured here 38 s wall, 53 s CPU against 65 s and 122 s.
    # Its code cache then defaults to 48 MB, which these sources came to fill (kotlinc failed with "Out of space
    # in CodeCache for adapters" when the JIT had compiled more): 256 MB, as with the optimizing JIT.
    jvm = ["-J-XX:TieredStopAtLevel=1", "-J-XX:ReservedCodeCacheSize=256m"]
    done = subprocess.run([str(kotlinc), *jvm, "-Werror", "-jvm-target", "17", "-cp", cp, "-d", str(classes),
                           *map(str, sources)], check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"kotlinc failed:\n{done.stdout}\n{done.stderr}"
    run_cp = os.pathsep.join([str(classes), str(stubs), str(lib / "kotlin-stdlib.jar"), str(lib / "kotlin-test.jar"),
                              str(coroutines)])
    return {"classes": classes, "cp": run_cp, "generated": generated, "out": out}


def run_jvm(kotlin: dict, main: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-cp", kotlin["cp"], main, *args], check=False, capture_output=True, text=True,
                          timeout=timeout)
