"""Floor 0: what every floor uses: errors, files, the SoC catalog, names, child processes, text escaping, JSON
fields read leniently."""
