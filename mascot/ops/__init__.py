"""Operations, apart from the method: `mascot serve` (a vLLM server) and `mascot stack` (the team's tracking
stack), and the process groups both run in. The pipeline never imports this package; `mascot/cli.py` loads it
for those two subcommands only."""
