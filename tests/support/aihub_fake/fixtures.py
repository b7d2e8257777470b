"""pytest fixtures: a FakeAiHub on 127.0.0.1 and the qai-hub client pointed at it through its own configuration.

Use from a test module with `pytest_plugins = ["tests.support.aihub_fake.fixtures"]`.
- aihub (function): a started FakeAiHub (stopped after the test), and QAIHUB_CLIENT_INI set to a client.ini
  ([api] api_token, api_url, web_url, verbose = False) written for it in the test's tmp_path; the client's job
  polling interval is 0.125 s instead of 10 s. Failure injection: the methods of FakeAiHub (service.py).
- aihub_ini (function): the path of that client.ini (e.g. to rewrite it, or to hand it to a subprocess's env).
- aihub_unconfigured (function): QAIHUB_CLIENT_INI pointing at a file that does not exist, and HOME at an empty
  folder, so the client finds no configuration at all (qai-hub's "Failed to load client configuration" path).
- aihub_fast_retries (function): the client's transport retries of 429/5xx keep their count (7 tries) but wait
  milliseconds instead of 0.75·2^n s, so a persistent 500 or a 429 on job creation fails in well under a second
  instead of 12-47 s. The client's code is unchanged; only its module-level retry constants are patched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .service import FakeAiHub

# A power of two, so that the client's float sum of sleeps stays exact: wait() polls when elapsed % interval == 0.
POLLING_INTERVAL = 0.125


def _fresh_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """qai_hub's module-level functions (qai_hub.get_devices, submit_compile_job, …) are bound methods of one global
    Client that loads its configuration once, on its first call: forget it, so this test's client.ini is read (a new
    qai_hub.Client() reads it anyway). And poll jobs every POLLING_INTERVAL s instead of 10 s."""
    import qai_hub.client
    import qai_hub.hub

    monkeypatch.setattr(qai_hub.client.Job, "_polling_interval", POLLING_INTERVAL)
    monkeypatch.setattr(qai_hub.hub._global_client, "_config", None)


@pytest.fixture
def aihub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAiHub]:
    fake = FakeAiHub().start()
    ini = fake.write_client_ini(tmp_path / "qaihub-client.ini")
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(ini))
    _fresh_client(monkeypatch)
    fake.client_ini = ini
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def aihub_ini(aihub: FakeAiHub) -> Path:
    assert aihub.client_ini is not None  # the aihub fixture writes it
    return aihub.client_ini


@pytest.fixture
def aihub_unconfigured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    missing = tmp_path / "no-such-client.ini"
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(missing))
    _fresh_client(monkeypatch)
    return missing


@pytest.fixture
def aihub_fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    from qai_hub.util import session

    monkeypatch.setattr(session, "BACKOFF_FACTOR", 0.001)
    monkeypatch.setattr(session, "MAX_WAIT", 0.01)
