#!/bin/bash
# One short check of the training code on a CUDA GPU (benchmarks/gpu_check.py says what it runs), for a machine
# with no network where PyTorch (CUDA), transformers, PEFT and accelerate are installed (../shared/STACK.md, "A GPU
# machine for short checks"). What that machine lacks travels as wheels: `make gpu-wheels` here downloads them
# (cp312, no dependencies resolved there) into .gpu_wheels/ (about 30 MiB); this script installs them into
# .gpu_site/ and puts the repository and them on the import path. Within 8 minutes (the timeout below); on a
# machine without a GPU it says "no GPU" and exits 0. The report goes to $OUT/gpu_check.md (or reports/).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! $PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no GPU (torch is missing or sees no CUDA device); nothing to check"
  exit 0
fi
if ls .gpu_wheels/*.whl >/dev/null 2>&1; then
  $PY -m pip install --quiet --no-index --no-deps --target .gpu_site .gpu_wheels/*.whl || exit 1
  export PYTHONPATH="$PWD/.gpu_site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MLFLOW_TRACKING_URI="sqlite:///${TMPDIR:-/tmp}/gpu-check-mlflow.db"
REPORT="${OUT:-reports}/gpu_check.md"
timeout 480 $PY benchmarks/gpu_check.py --report "$REPORT" "$@"
status=$?
[ $status = 124 ] && echo "gpu_check: stopped at 8 minutes; the report has the steps that finished" >&2
exit $status
