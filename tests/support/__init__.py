"""The tests' helpers and stand-ins, none of them a test: model builders, bundle makers, the CLI runner, and the
stand-ins of what cannot run here (a phone, AI Hub, the QAIRT SDK). Test files import them as `tests.support.X`;
inside this package they import each other relatively."""

from pathlib import Path

import qnndeploy

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # the repository: README.md, android-sample/, templates/, benchmarks/
QAIRT_STANDIN = HERE / "qairt_standin"  # a stand-in QAIRT SDK (its README says what it does)
KOTLIN = REPO / "tests" / "kotlin"  # the Kotlin tests and the JVM stand-ins of Android's classes
SPEECH = Path(qnndeploy.__file__).parent / "data" / "samples" / "speech.wav"  # the speech sample qnndeploy ships
