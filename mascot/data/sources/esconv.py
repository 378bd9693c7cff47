"""ESConv (thu-coai/Emotional-Support-Conversation): a JSON list of conversations.

`ESConv.json` names the roles seeker/supporter; `FailedESConv.json` names them speaker/listener.
"""
from __future__ import annotations

import json
from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn, merge_consecutive
from mascot.io import BadRows, InputError, require

ROLE_MAP = {"seeker": "user", "speaker": "user", "usr": "user", "supporter": "assistant",
            "listener": "assistant", "sys": "assistant"}


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
        turns.append(Turn(ROLE_MAP[speaker], require(turn, "content", str, turn_where), speaker))
    turns = merge_consecutive(turns)
    if not turns:
        raise InputError(f"{where}: empty dialogue (no non-blank turns)")
    metadata = {k: conv.get(k) for k in ("emotion_type", "problem_type", "experience_type", "situation")
                if conv.get(k) is not None}
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
