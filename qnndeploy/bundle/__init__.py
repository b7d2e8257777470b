"""The bundle format (v3; v1 and v2 are still read): assemble it (build.py); formats/verify.py checks one and
formats/archive.py packs and unpacks it."""
