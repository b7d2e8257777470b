"""The fuzz tier: every case of tests/support/fuzz.py run as a user would, one process each, under the invariant that
fuzz.py states. Run alone with `pytest -m fuzz`; it is part of the slow tier."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import bundles, fuzz

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.needs_qnn]


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    return bundles.build(root / "bundles", bundles.compile_inputs(root / "inputs", targets=("SM8550", "SM8750"),
                                                                  graphs=("det", "rec"), external=("det",)))


def test_every_hostile_input_is_refused_cleanly(good_bundle, tmp_path):
    cases = fuzz.all_cases(good_bundle)
    assert len(cases) >= 250, len(cases)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: fuzz.run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken[:80])


# --- report (issue 34): extreme plot figures draw a page; the page never lands inside what it reads ----------------

def test_report_s_hostile_inputs_give_a_page_or_a_one_line_error(good_bundle, tmp_path):
    from tests.report.fuzz_cases import report_cases

    cases = list(report_cases(good_bundle))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda ic: fuzz.run_case(ic[1], tmp_path / str(ic[0])), enumerate(cases)))
    broken = [f"{case.name}: {why}" for case, why in zip(cases, results, strict=True) if why]
    assert broken == [], f"{len(broken)} of {len(cases)} cases broke the invariant:\n" + "\n".join(broken)
