"""ESConv (thu-coai/Emotional-Support-Conversation): a JSON list of conversations.

`ESConv.json` names the roles seeker/supporter; `FailedESConv.json` names them speaker/listener. A seeker turn
may carry `annotation.feedback` ("1".."5"): the seeker's rating of the supporter's turn(s) just before it, kept
as the turn's `rating` (mascot/data/human_ratings.py); `survey_score` (the seeker's empathy and relevance
ratings of the whole conversation) is kept in the metadata.
"""
from __future__ import annotations

import json
from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn, merge_consecutive
from mascot.io import BadRows, InputError, require

ROLE_MAP = {"seeker": "user", "speaker": "user", "usr": "user", "supporter": "assistant",
            "listener": "assistant", "sys": "assistant"}


def _rating(turn: dict, where: str) -> int | None:
    """The seeker's feedback on the turn, 1-5, or None; anything else is an error that names the turn."""
    annotation = turn.get("annotation") or {}
    raw = annotation.get("feedback") if isinstance(annotation, dict) else None
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InputError(f"{where}: annotation.feedback {raw!r} is not a rating 1-5") from None
    if not 1 <= value <= 5:
        raise InputError(f"{where}: annotation.feedback {raw!r} is not a rating 1-5")
    return value


def _survey(raw) -> dict:
    """The seeker's survey of the whole conversation: {empathy, relevance} as numbers, where given."""
    seeker = (raw or {}).get("seeker") if isinstance(raw, dict) else None
    out = {}
    for key in ("empathy", "relevance"):
        try:
            out[key] = float(seeker[key])
        except (TypeError, KeyError, ValueError):
            continue
    return out


def parse_conversation(conv: dict, where: str, dialogue_id: str, source: str = "esconv") -> Dialogue:
    if not isinstance(conv, dict):
        raise InputError(f"{where}: expected a conversation object, got {type(conv).__name__}")
    dialog = require(conv, "dialog", list, where)
    turns = []
    for j, turn in enumerate(dialog):
        turn_where = f"{where} dialog[{j}]"
        if not isinstance(turn, dict):
            raise InputError(f"{turn_where}: expected an object, got {type(turn).__name__}")
        speaker = require(turn, "speaker", str, turn_where)
        if speaker not in ROLE_MAP:
            raise InputError(f"{turn_where}: unknown speaker '{speaker}' (expected one of {sorted(ROLE_MAP)})")
        turns.append(Turn(ROLE_MAP[speaker], require(turn, "content", str, turn_where), speaker,
                          _rating(turn, turn_where)))
    turns = merge_consecutive(turns)
    if not turns:
        raise InputError(f"{where}: empty dialogue (no non-blank turns)")
    metadata = {k: conv.get(k) for k in ("emotion_type", "problem_type", "experience_type", "situation")
                if conv.get(k) is not None}
    survey = _survey(conv.get("survey_score"))
    if survey:
        metadata["survey_score"] = survey
    return Dialogue(dialogue_id, source, turns, metadata)


def load_esconv(path: str | Path, bad: BadRows) -> list[Dialogue]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    dialogues = []
    for i, conv in enumerate(data):
        with bad.guard():
            # the file's stem keeps ids unique across several ESConv files
            dialogues.append(parse_conversation(conv, f"{path} conversation {i}", f"{path.stem}-{i}"))
    return dialogues


def load_esconv_hub(name: str, bad: BadRows) -> list[Dialogue]:
    """The hub copy (`thu-coai/esconv`) stores each conversation as a JSON string in `text`."""
    try:
        from datasets import load_dataset

        ds = load_dataset(name, split="train")
    except Exception as exc:  # offline machines land here
        raise InputError(f"hub dataset '{name}': could not be loaded ({type(exc).__name__}: {exc}); "
                         "download ESConv.json and use format 'esconv' with its path instead") from None
    dialogues = []
    for i, row in enumerate(ds):
        with bad.guard():
            conv = json.loads(row["text"]) if "text" in row else row
            dialogues.append(parse_conversation(conv, f"{name} row {i}", f"esconv-hub-{i}"))
    return dialogues
