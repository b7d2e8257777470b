"""Qualcomm AI Hub through its own client (PyPI qai-hub): its configuration, the hosted devices, jobs and errors.

AI Hub compiles ONNX into QNN context binaries and runs them on hosted phones. qnndeploy drives it with the real
`qai_hub` client and never handles credentials: the token stays in qai-hub's own configuration (`qai-hub configure`,
an INI file at $QAIHUB_CLIENT_INI or ~/.qai_hub/client.ini); qnndeploy only checks that one exists and names its
server, and never reads, stores or prints the token.
"""

from __future__ import annotations

import configparser
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

from qnndeploy.base import socs
from qnndeploy.base.errors import BadInput, CheckFailed, MissingTool

CONFIG_ENV = "QAIHUB_CLIENT_INI"
INSTALL = "pip install 'qnndeploy[aihub]' (the qai-hub client)"
CONFIGURE = "qai-hub configure --api_token TOKEN (the token from your AI Hub account settings)"
POLL_S = 5.0  # between two status requests of a job; the client's own wait() polls every 10 s
_BOX = re.compile(r"[\u2500-\u257f]+")  # the box-drawing frames of some client messages


@dataclass
class HubStatus:
    """What `doctor` says of AI Hub: the client, and whether qai-hub's configuration exists (never its token)."""

    installed: bool
    version: str | None
    config: str  # the INI path qai-hub reads
    configured: bool  # the file exists and holds a non-empty api_token
    api_url: str | None


def config_path() -> Path:
    """Where qai-hub reads its configuration: $QAIHUB_CLIENT_INI, else ~/.qai_hub/client.ini."""
    given = os.environ.get(CONFIG_ENV)
    return Path(given) if given else Path.home() / ".qai_hub" / "client.ini"


def status() -> HubStatus:
    try:
        installed: str | None = version("qai-hub")
    except PackageNotFoundError:
        installed = None
    path = config_path()
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error:
        parser = configparser.ConfigParser()
    api = parser["api"] if parser.has_section("api") else {}
    return HubStatus(installed is not None, installed, str(path), bool(api.get("api_token", "").strip()),
                     api.get("api_url") or None)


def client() -> ModuleType:
    """The qai_hub module, with qai-hub's configuration present; a one-line error saying what to do otherwise."""
    try:
        import qai_hub
    except ImportError:
        raise MissingTool(f"the AI Hub backend needs the qai-hub client: {INSTALL}") from None
    module: ModuleType = qai_hub
    if not status().configured:
        raise MissingTool(f"qai-hub is not configured (no API token in {config_path()}): {CONFIGURE}")
    return module


def one_line(message: object) -> str:
    """A client message on one line: box frames and repeated whitespace removed."""
    return " ".join(_BOX.sub(" ", str(message)).split())


@contextmanager
def errors(what: str) -> Iterator[None]:
    """qai-hub's exceptions as qnndeploy's one-line errors: a user error (token, unknown device, bad request) is bad
    input (exit 2); a rate limit or quota, or an error on AI Hub's side, fails the command (exit 1)."""
    from qai_hub.client import Error, RateLimitedError, UserError

    try:
        yield
    except RateLimitedError as e:
        raise CheckFailed(f"{what}: AI Hub refused it for now (rate limit or quota): {one_line(e)}; try again "
                          "later") from None
    except UserError as e:
        raise BadInput(f"{what}: {one_line(e)}") from None
    except Error as e:
        raise CheckFailed(f"{what}: AI Hub failed: {one_line(e)}") from None


@dataclass
class HostedDevice:
    """A device AI Hub hosts, with its chipset mapped to the catalog."""

    name: str
    os: str
    chipset: str | None  # its "chipset:" attribute in the spelling it carries (the catalog's, when one matches)
    soc: str | None  # the catalog model with that chipset among its aihub_chipsets, None when the catalog has none
    dsp_arch: str | None
    attributes: list[str] = field(default_factory=list)


@dataclass
class HubTarget:
    """Where AI Hub runs a SoC's jobs: the hub.Device to submit to, the chipset spelling AI Hub listed it under, and
    the first hosted device it lists for it."""

    device: Any  # hub.Device(attributes=["chipset:<chipset>", "framework:qnn"])
    chipset: str
    hosted: HostedDevice


# What a device needs for compile -> link -> inference of a context binary: qai-hub refuses a link or a .bin on a
# device without it. No OS: the chipset decides the binary, and some hosted boards run Linux (IQ-9075 EVK).
REQUIRED = ("framework:qnn",)


def _chipsets() -> dict[str, socs.Soc]:
    """Every AI Hub spelling of a catalog SoC's chipset (current and older releases'), to the SoC."""
    return {name: s for s in socs.catalog() for name in s.aihub_chipsets}


def hosted(device: Any) -> HostedDevice:
    """A qai_hub.Device as qnndeploy sees it."""
    attrs = list(device.attributes)
    chipsets = [a.split(":", 1)[1] for a in attrs if a.startswith("chipset:")]  # a device may list aliases
    known = _chipsets()
    chipset = next((c for c in chipsets if c in known), None)
    soc = known[chipset] if chipset else None
    return HostedDevice(device.name, device.os, chipset or next(iter(chipsets), None), soc.model if soc else None,
                        soc.dsp_arch if soc else None, attrs)


def hosted_devices() -> list[HostedDevice]:
    hub = client()
    with errors("listing AI Hub's devices"):
        return [hosted(d) for d in hub.get_devices()]


def refuse_unhosted(soc: socs.Soc) -> None:
    """A one-line error, before anything reaches AI Hub, for a SoC whose jobs AI Hub cannot run: no chipset name in
    the catalog (exit 2), or a chipset AI Hub lists as not available for jobs (exit 3)."""
    if not soc.aihub_chipsets:
        known = ", ".join(s.model for s in socs.catalog() if s.aihub_chipsets and s.aihub_hosted)
        raise BadInput(f"AI Hub has no chipset name for {soc.model} in the catalog (socs.json aihub_chipsets); "
                       f"AI Hub targets: {known}")
    if soc.aihub_hosted is False:
        raise MissingTool(f"AI Hub lists chipset {soc.aihub_chipset} ({soc.model}) as not available for jobs: "
                          f"drop --soc {soc.model} (socs.json aihub_hosted)")


def device_for(soc: socs.Soc) -> HubTarget:
    """Any hosted device with this SoC: asked for by the chipset name current AI Hub uses, then by each older
    release's name, so a service that still lists the old spelling is used too."""
    refuse_unhosted(soc)
    hub = client()
    for chipset in soc.aihub_chipsets:
        attributes = [f"chipset:{chipset}", *REQUIRED]
        with errors(f"a hosted {soc.model} device"):
            found = hub.get_devices(attributes=attributes)
        if found:
            return HubTarget(hub.Device(attributes=attributes), chipset, hosted(found[0]))
    raise MissingTool(f"AI Hub hosts no device with chipset {' or '.join(soc.aihub_chipsets)} and "
                      f"{', '.join(REQUIRED)} ({soc.model}): `qnndeploy device list --aihub` lists them")


def device_named(name: str) -> Any:
    return client().Device(name)


def job_ref(job: Any) -> dict[str, str]:
    return {"job_id": str(job.job_id), "url": str(job.url)}


def wait(job: Any, what: str, timeout_s: float, *, should_stop: Callable[[], bool] | None = None,
         on_state: Callable[[str], None] | None = None) -> None:
    """Poll a job until it ends. A job that fails on AI Hub's side, or outlives timeout_s, is a one-line error with
    its reason and URL. should_stop (a Ctrl-C elsewhere) ends the waiting with KeyboardInterrupt: AI Hub keeps the
    job, since qai-hub has no way to cancel one."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        if should_stop is not None and should_stop():
            raise KeyboardInterrupt
        with errors(what):
            state = job.get_status()
        if state.code != last and on_state is not None:
            on_state(state.code)
        last = state.code
        if state.success:
            return
        if state.failure:
            raise CheckFailed(f"{what}: AI Hub job {job.job_id} failed: {one_line(state.message or 'no reason')} "
                              f"({job.url})")
        if time.monotonic() >= deadline:
            raise CheckFailed(f"{what}: AI Hub job {job.job_id} still {state.code} after {timeout_s:.0f} s; it "
                              f"goes on on AI Hub ({job.url}): raise --timeout, or look there")
        time.sleep(POLL_S)
