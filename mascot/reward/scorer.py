"""Load a reward adapter (from a folder or the MLflow registry) and score texts with it."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mascot.granularity import GRANULARITIES, REPLY, Granularity
from mascot.reward.prompt import reward_input_ids

META_FILE = "mascot_reward.json"


class RewardScorer:
    def __init__(self, model, tokenizer, max_length: int, batch_size: int = 8, granularity: Granularity = REPLY):
        self.model, self.tokenizer, self.max_length, self.batch_size = model, tokenizer, max_length, batch_size
        self.granularity = granularity  # what the model scores: its inputs are built as it was trained on

    @classmethod
    def from_dir(cls, adapter_dir: str | Path, base_model: str | None = None, batch_size: int = 8) -> "RewardScorer":
        from peft import PeftModel
        from transformers import AutoTokenizer

        adapter_dir = Path(adapter_dir)
        meta = json.loads((adapter_dir / META_FILE).read_text())
        tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
        base_path = base_model or meta["base_model"]
        if not (Path(base_path) / "config.json").exists():
            from mascot.io import InputError

            # the registry holds only the adapter; its base is a DVC output of this project
            raise InputError(f"{adapter_dir}: the adapter's base model '{base_path}' is not here; fetch it with "
                             f"`dvc pull` (e.g. `dvc pull small_model`) or build it with `dvc repro`")
        base = load_base_classifier(base_path, tokenizer)
        model = PeftModel.from_pretrained(base, adapter_dir)
        model.eval()
        return cls(model, tokenizer, meta["max_length"], batch_size, GRANULARITIES[meta.get("granularity", "reply")])

    @classmethod
    def from_registry(cls, model_uri: str, base_model: str | None = None, batch_size: int = 8) -> "RewardScorer":
        import mlflow

        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri)
        return cls.from_dir(local, base_model, batch_size)

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


def load_base_classifier(base_model: str, tokenizer):
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    # The base has no `score` head yet (the adapter brings it): silence the "newly initialized" report.
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=1, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(previous)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model
