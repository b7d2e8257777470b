"""A stand-in for an Android phone in the tests: a device that speaks the real adb transport protocol on
127.0.0.1, so a real adb server (`adb connect 127.0.0.1:PORT`) and adbutils talk to it as to a phone.

There is no phone on the machines that run the tests; everything above the device (adb server, adbutils,
qnndeploy.device) is the real code. See device.py (the device), fixtures.py (pytest fixtures).

It can also play a broken or hostile phone, for the tests of qnndeploy's deadlines, caps and escaping
(EmulatedDevice's docstring lists them): tools that sleep, flood or trickle, a sync receiver that stops reading
mid-push, a cut connection, escape sequences in properties and file names, a 5,000-digit API level. These are
failure injections at the device's end of the real protocol, not models of a particular phone's bugs.
"""

from .device import PRESETS, EmulatedDevice

__all__ = ["PRESETS", "EmulatedDevice"]
