"""mascot: the MASCOT training method as a DVC + MLflow pipeline (docs/architecture.md maps stages to modules).

Imports: the project's own modules import each other at the top of the file, floor by floor, with no upward
import and no circle (tests/test_architecture.py). An import inside a function is kept only so that a light
module (the command line, the config, the pairs) does not load a heavy library (torch, transformers, TRL,
PEFT, MLflow, Great Expectations, vLLM's client, ...) or an optional one at import time.
"""
