"""The bundle format (the version base/names.py FORMAT_VERSION names; every older one is still read): assemble it
(build.py); verification/checks.py checks one and formats/archive.py packs and unpacks it."""
