"""The bundle format (v2; v1 is still read): assemble (build.py), check (verify.py), pack and unpack (archive.py)."""
