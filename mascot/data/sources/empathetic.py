"""EmpatheticDialogues (facebookresearch): CSV rows of conv_id, utterance_idx, context, prompt,
speaker_idx, utterance; `_comma_` stands for a comma. The speaker of the first utterance is the person
who lived the situation (the user); the other speaker is the listener.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn, merge_consecutive
from mascot.io import BadRows, InputError

COLUMNS = ("conv_id", "utterance_idx", "context", "prompt", "speaker_idx", "utterance")


def _unescape(text: str) -> str:
    return text.replace("_comma_", ",")


def load_empathetic(path: str | Path, bad: BadRows) -> list[Dialogue]:
    path = Path(path)
    rows_by_conv: dict[str, list[tuple[int, dict, int]]] = defaultdict(list)
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:6]] != list(COLUMNS):
            raise InputError(f"{path}:1: expected the header {','.join(COLUMNS)}, got {header}")
        for rowno, row in enumerate(reader, start=2):
            with bad.guard():
                if len(row) < 6:
                    raise InputError(f"{path}:{rowno}: expected at least 6 columns, got {len(row)}")
                rec = dict(zip(COLUMNS, row))
                try:
                    idx = int(rec["utterance_idx"])
                except ValueError:
                    raise InputError(f"{path}:{rowno}: utterance_idx {rec['utterance_idx']!r} is not an integer") from None
                rows_by_conv[rec["conv_id"]].append((idx, rec, rowno))
    dialogues = []
    for conv_id, rows in rows_by_conv.items():
        with bad.guard():
            rows.sort(key=lambda r: r[0])
            first_speaker = rows[0][1]["speaker_idx"]
            turns = merge_consecutive([
                Turn("user" if rec["speaker_idx"] == first_speaker else "assistant", _unescape(rec["utterance"]),
                     rec["speaker_idx"]) for _, rec, _ in rows])
            if not turns:
                raise InputError(f"{path}:{rows[0][2]}: conversation {conv_id} has no non-blank utterance")
            first = rows[0][1]
            dialogues.append(Dialogue(f"ed-{conv_id}", "empathetic", turns,
                                      {"emotion_type": first["context"], "situation": _unescape(first["prompt"])}))
    return dialogues
