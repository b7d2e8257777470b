"""Floor 3: the files qnndeploy writes and the rules that read them: manifest, records, archives, the Play plan."""
