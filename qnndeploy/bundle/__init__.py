"""Bundle format v1: assemble (build.py), check (verify.py), pack and unpack (archive.py)."""
