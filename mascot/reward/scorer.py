"""Load a reward adapter (from a folder or the MLflow registry) and score texts with it."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mascot.granularity import GRANULARITIES, REPLY, Granularity
from mascot.io import InputError
from mascot.llm.identity import folder_digest
from mascot.reward.prompt import reward_input_ids

META_FILE = "mascot_reward.json"


class RewardScorer:
    def __init__(self, model, tokenizer, max_length: int, batch_size: int = 8, granularity: Granularity = REPLY):
        self.model, self.tokenizer, self.max_length, self.batch_size = model, tokenizer, max_length, batch_size
        self.granularity = granularity  # what the model scores: its inputs are built as it was trained on

    @classmethod
    def from_dir(cls, adapter_dir: str | Path, base_model: str | None = None, batch_size: int = 8,
                 label: str | None = None) -> "RewardScorer":
        """The adapter in `adapter_dir` on its base model, after checking that both are what it was trained with
        (`check_trained_with`); `label` names it in messages (a registry URI)."""
        from peft import PeftModel
        from transformers import AutoTokenizer

        adapter_dir = Path(adapter_dir)
        meta = json.loads((adapter_dir / META_FILE).read_text())
        base_path = base_model or meta["base_model"]
        g = check_trained_with(meta, base_path, label or str(adapter_dir))
        tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
        base = load_base_classifier(base_path, tokenizer, meta.get("num_labels", 1), meta.get("keep_layers"))
        model = PeftModel.from_pretrained(base, adapter_dir)
        model.eval()
        return cls(model, tokenizer, meta["max_length"], batch_size, g)

    @classmethod
    def from_registry(cls, model_uri: str, base_model: str | None = None, batch_size: int = 8) -> "RewardScorer":
        import mlflow

        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri)
        return cls.from_dir(local, base_model, batch_size, label=model_uri)


    @torch.inference_mode()
    def score_ids(self, batch_ids: list[list[int]]) -> list[float]:
        self.model.eval()
        scores = []
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(batch_ids), self.batch_size):
            chunk = batch_ids[start: start + self.batch_size]
            width = max(len(x) for x in chunk)
            ids = torch.tensor([x + [pad] * (width - len(x)) for x in chunk])
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in chunk])
            scores.extend(self.model(input_ids=ids, attention_mask=mask).logits[:, 0].float().tolist())
        return scores

    def score(self, items: list[tuple]) -> list[float]:
        """Scores of (persona fields or None, context, reply or block) triples, built by the one reward prompt
        function of this model's granularity."""
        g = self.granularity
        return self.score_ids([reward_input_ids(self.tokenizer, g, p, c, r, self.max_length)[0] for p, c, r in items])


def check_trained_with(meta: dict, base_path: str | Path, label: str) -> Granularity:
    """The granularity a reward adapter scores, once its meta agrees with what is here: the granularity is named,
    the reward text is built as it was in training (Granularity.template_hash), and the base model holds the
    weights it was trained on (their digest). Anything else is refused in one line: what, and what to run."""
    trained = f"{label} (trained at git {meta.get('git_commit', 'unknown')[:12]})"
    retrain = "retrain it (`dvc repro train_rm`, or train_group_rm) or check out the code and base it was trained with"
    name = meta.get("granularity")
    if name not in GRANULARITIES:
        raise InputError(f"{trained}: its meta ({META_FILE}) names no known granularity ({name!r}, expected one of "
                         f"{sorted(GRANULARITIES)}), so what it scores cannot be told; {retrain}")
    g = GRANULARITIES[name]
    if meta.get("template_hash") != g.template_hash:
        raise InputError(f"{trained}: trained on {name} reward text built by template {meta.get('template_hash')}, "
                         f"but this code builds {g.template_hash} (the template, transcript renderer, persona fields "
                         f"or cut mark changed); {retrain}")
    if not (Path(base_path) / "config.json").exists():
        # the registry holds only the adapter; its base is a DVC output of this project
        raise InputError(f"{trained}: the adapter's base model '{base_path}' is not here; fetch it with "
                         f"`dvc pull` (e.g. `dvc pull small_model`) or build it with `dvc repro`")
    here = folder_digest(base_path)
    if meta.get("base_model_digest") != here:
        raise InputError(f"{trained}: trained on base weights {meta.get('base_model_digest')} "
                         f"({meta.get('base_model_source', 'source unknown')}), but '{base_path}' holds {here}; "
                         f"rebuild that base (`dvc checkout small_model` at the commit it was trained at) or {retrain}")
    return g


def load_base_classifier(base_model: str, tokenizer, num_labels: int = 1, keep_layers: int | None = None):
    """The base model with a fresh `score` head of `num_labels` columns (1; 2 for ODIN's quality and length
    heads): a reward is always column 0. `keep_layers`: at most the first N decoder layers (train_rm.keep_layers)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    shallow = {}
    config = AutoConfig.from_pretrained(base_model) if keep_layers is not None else None
    if config is not None and keep_layers < config.num_hidden_layers:  # at most N: a shallower base keeps all
        shallow["num_hidden_layers"] = keep_layers
        if getattr(config, "layer_types", None):  # per-layer attention kinds (Gemma 3, Qwen 3): the first N
            shallow["layer_types"] = config.layer_types[:keep_layers]
    # The base has no `score` head yet (the adapter brings it), and a shallow one leaves the deeper layers'
    # weights unread: silence those reports.
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=num_labels,
                                                                   dtype=torch.float32, **shallow)
    finally:
        hf_logging.set_verbosity(previous)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model
