"""Progress bars on stderr, visible in `dvc repro` output."""
from __future__ import annotations

import sys

from tqdm import tqdm


def bar(total: int, desc: str, initial: int = 0) -> tqdm:
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, mininterval=2.0, dynamic_ncols=True,
                unit="rec")
