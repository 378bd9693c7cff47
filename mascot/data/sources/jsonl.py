"""The project's plain format: one `{id, context: [{role, content}], metadata}` object per line.

A user message may carry `rating` (1-5): the user's own rating of the assistant turn(s) just before it, as
ESConv's `annotation.feedback`; rated turns join the human reference set (mascot/data/human_ratings.py)."""
from __future__ import annotations

from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn
from mascot.io import BadRows, InputError, read_jsonl, require

ROLES = {"user": "user", "assistant": "assistant"}


def load_jsonl_dialogues(path: str | Path, bad: BadRows) -> list[Dialogue]:
    dialogues = []
    seen: dict[str, int] = {}
    for lineno, rec in read_jsonl(path, bad):
        with bad.guard():
            where = f"{path}:{lineno}"
            did = require(rec, "id", (str, int), where)
            if str(did) in seen:
                raise InputError(f"{where}: duplicate id {did!r} (first on line {seen[str(did)]})")
            context = require(rec, "context", list, where)
            if not context:
                raise InputError(f"{where}: field 'context' is empty")
            turns = []
            for j, msg in enumerate(context):
                mw = f"{where} context[{j}]"
                if not isinstance(msg, dict):
                    raise InputError(f"{mw}: expected a message object, got {type(msg).__name__}")
                role = require(msg, "role", str, mw)
                if role not in ROLES:
                    raise InputError(f"{mw}: role '{role}' is not one of {sorted(ROLES)}")
                content = require(msg, "content", str, mw).strip()
                if not content:
                    raise InputError(f"{mw}: empty content")
                rating = msg.get("rating")
                if rating is not None and (isinstance(rating, bool) or rating not in (1, 2, 3, 4, 5)):
                    raise InputError(f"{mw}: rating {rating!r} is not a whole number 1-5")
                turns.append(Turn(ROLES[role], content, None, int(rating) if rating is not None else None))
            metadata = rec.get("metadata", {})
            if not isinstance(metadata, dict):
                raise InputError(f"{where}: field 'metadata' should be an object, got {type(metadata).__name__}")
            seen[str(did)] = lineno
            dialogues.append(Dialogue(str(did), metadata.get("source", "jsonl"), turns, metadata))
    return dialogues
