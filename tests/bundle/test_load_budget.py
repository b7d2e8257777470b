"""bundle verify warns when a context binary is larger than one part is planned to load on its arch
(data/load_budget.json): the phone may refuse it (err 1002), so the warning says to cut it into more parts."""

from __future__ import annotations

from qnndeploy.formats.manifest import Manifest
from qnndeploy.model import loadplan
from qnndeploy.verification.checks import check_warnings
from tests.support import bundles


def test_a_binary_above_its_arch_budget_is_a_warning_naming_the_budget() -> None:
    m = bundles.manifest(targets=("SM8650", "SM8750"), graphs=("llm",))
    v79 = loadplan.budget_for("v79")
    big = next(a for t in m["targets"] if t["soc"] == "SM8750" for a in t["artifacts"] if a["path"].endswith(".bin"))
    big["size"] = v79.bytes + 1
    warned = [w for w in check_warnings(Manifest.parse(m), {}) if "planned to load" in w.message]
    assert [w.path for w in warned] == [big["path"]]
    assert f"{v79.bytes / 1e6:,.0f} MB" in warned[0].message and "derived" in warned[0].message
    big["size"] = v79.bytes  # at the budget: no warning
    assert not [w for w in check_warnings(Manifest.parse(m), {}) if "planned to load" in w.message]
