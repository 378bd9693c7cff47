"""ESConv (thu-coai/Emotional-Support-Conversation), in the three shapes its users have on disk.

- `ESConv.json`: a JSON list of conversations, roles seeker/supporter, a turn's words in `content`;
- `FailedESConv.json`: the same list, roles speaker/listener; a seeker turn may carry `annotation.feedback`
  ("1".."5"): the seeker's rating of the supporter's turn(s) just before it, kept as the turn's `rating`
  (mascot/data/human_ratings.py);
- the Hugging Face hub's copy (`thu-coai/esconv`, its train/validation/test files): JSON Lines, one conversation
  a line, roles usr/sys, a turn's words in `text`.

`format: esconv` reads all three (a file whose first character is `[` is a list, anything else JSON Lines).
`survey_score.seeker` (the seeker's empathy and relevance ratings of the whole conversation, and the emotion
intensity before and after, 1-5) is kept in the metadata, with `emotion_drop` = before - after.
"""
from __future__ import annotations

import json
from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn, merge_consecutive
from mascot.io import BadRows, InputError, read_jsonl, require

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


SURVEY_KEYS = ("empathy", "relevance", "initial_emotion_intensity", "final_emotion_intensity")


def _survey(raw) -> dict:
    """The seeker's survey of the whole conversation: {empathy, relevance, initial/final emotion intensity} as
    numbers where given, and `emotion_drop` (how much better the seeker felt) where both intensities are."""
    seeker = (raw or {}).get("seeker") if isinstance(raw, dict) else None
    out = {}
    for key in SURVEY_KEYS:
        try:
            out[key] = float(seeker[key])
        except (TypeError, KeyError, ValueError):
            continue
    if "initial_emotion_intensity" in out and "final_emotion_intensity" in out:
        out["emotion_drop"] = out["initial_emotion_intensity"] - out["final_emotion_intensity"]
    return out


def _words(turn: dict, where: str) -> str:
    """A turn's words: `content` (ESConv.json, FailedESConv.json) or `text` (the hub's copy)."""
    for key in ("content", "text"):
        if key in turn:
            if not isinstance(turn[key], str):
                raise InputError(f"{where}: field '{key}' must be a string, got {type(turn[key]).__name__}")
            return turn[key]
    raise InputError(f"{where}: no 'content' or 'text' field (the turn's words)")


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
        turns.append(Turn(ROLE_MAP[speaker], _words(turn, turn_where), speaker, _rating(turn, turn_where)))
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
    """A JSON list of conversations, or JSON Lines of them (the hub's files); ids are `<file stem>-<index>`
    (the list's index, or the line's number counted from 0)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return _load_lines(path, bad)
    try:
        data = json.loads(text)
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


def _load_lines(path: Path, bad: BadRows) -> list[Dialogue]:
    dialogues = []
    for lineno, conv in read_jsonl(path, bad):
        with bad.guard():
            dialogues.append(parse_conversation(conv, f"{path}:{lineno}", f"{path.stem}-{lineno - 1}"))
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
