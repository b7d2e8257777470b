"""Phones over adb: adb.py (connection, props, shell, files, incremental push), info.py (`device list`,
`device info`), profile.py (`device profile`), verify.py (`device verify`) with runner.py (qnn-net-run on the phone
and its known errors), bench.py (`device bench`: NPU against CPU, energy and heat). adbutils is imported only
inside the functions that use it."""
