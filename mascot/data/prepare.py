"""Corpora + personas -> queries: the readers (the `prepare` stage: mascot/stages/prepare.py)."""
from __future__ import annotations

from pathlib import Path

from mascot.config import SourceSpec
from mascot.data.dialogue import Dialogue
from mascot.data.sources.empathetic import load_empathetic
from mascot.data.sources.esconv import load_esconv, load_esconv_hub
from mascot.data.sources.jsonl import load_jsonl_dialogues
from mascot.data.sources.qmsum import load_qmsum
from mascot.io import BadRows, InputError, require_model_dir

LOADERS = {"esconv": load_esconv, "qmsum": load_qmsum, "empathetic": load_empathetic,
           "jsonl": load_jsonl_dialogues, "hub-esconv": load_esconv_hub}


def load_source(spec: SourceSpec, bad: BadRows) -> list[Dialogue]:
    if spec.format != "hub-esconv" and not Path(spec.path).exists():
        raise InputError(f"{spec.path}: source file not found (prepare.sources, format {spec.format})")
    dialogues = LOADERS[spec.format](spec.path, bad)
    dialogues = dialogues[: spec.limit] if spec.limit else dialogues
    if spec.heldout is not None:  # the source decides its conversations' split (mascot/splits.py is_held_out)
        for d in dialogues:
            d.metadata["heldout"] = spec.heldout
    return dialogues


def token_counter(tokenizer_path: str):
    from transformers import AutoTokenizer

    require_model_dir(tokenizer_path, "prepare.tokenizer")
    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda text: len(tok.encode(text, add_special_tokens=False))


