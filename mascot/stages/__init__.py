"""One module per DVC stage (`mascot <stage>`, dvc.yaml): the only place a stage reads and writes its files,
talks to MLflow and prints. Each calls the cores below it (`data/`, `annotate/`, `pairs`, `validate/`,
`reward/`, `promote`, `policy/`) and imports no other stage module: what two stages share lives below both."""
