"""Phones over adb: adb.py (connection, props, shell, files, incremental push), info.py (`device list`,
`device info`), profile.py (`device profile`). adbutils is imported only inside the functions that use it."""
