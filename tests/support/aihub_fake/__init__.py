"""A stand-in for the Qualcomm AI Hub service in the tests: FakeAiHub answers the real, unmodified `qai-hub`
client (0.56.0) on 127.0.0.1 with the client's own wire protocol, and does the jobs' work on this machine's host
QNN HTP compiler and emulator (onnxruntime-qnn).

No machine that runs the tests reaches AI Hub; everything from the qai-hub client up is the real code. See
service.py (the service and its failure injection), htp_worker.py (the jobs' real work), devices.json (the hosted
fleet and where its names and attributes come from), fixtures.py (pytest fixtures) and README.md (what the fake
measures and what of the protocol is unverified against the real service).
"""

from .service import DEVICES_FILE, FakeAiHub, JobRefused, parse_options

__all__ = ["DEVICES_FILE", "FakeAiHub", "JobRefused", "parse_options"]
