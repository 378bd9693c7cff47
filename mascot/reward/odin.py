"""ODIN (Chen et al., ICML 2024, "ODIN: Disentangled Reward Mitigates Hacking in RLHF"): a reward model with two
heads on one trunk, one for quality and one for length, so that the quality head, the only one used downstream,
is free of the length that judges on this kind of data pay for.

The sequence classifier has two labels: column 0 is the quality head (what `RewardScorer` reads, as it reads a
one-label model's only column), column 1 the length head. The loss:

    -logsigmoid((q_c + l_c) - (q_r + l_r) [- margin])          the ranking loss on the heads' sum
    + length_weight  * (1 - pearson(l, words))                 the length head takes length
    + quality_weight * |pearson(q, words)|                     the quality head leaves it

with the correlations over the batch's chosen and rejected replies together (2 x batch_size; the config refuses
fewer than `min_batch_replies`). The paper adds an orthogonality term on the two heads' weights; with a LoRA
trunk and tiny batches we keep the two correlation terms, which carry the disentangling.
"""
from __future__ import annotations

import torch
from torch import nn
from trl import RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

QUALITY, LENGTH = 0, 1
LENGTH_COLUMNS = ("chosen_words", "rejected_words")


def pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson's r of two vectors, differentiable; 0 where either is constant."""
    x, y = x - x.mean(), y - y.mean()
    denom = torch.sqrt((x * x).sum() * (y * y).sum())
    return torch.where(denom > 1e-8, (x * y).sum() / denom.clamp_min(1e-8), torch.zeros_like(denom))


def odin_loss(logits: torch.Tensor, words: torch.Tensor, margin: torch.Tensor | None, length_weight: float,
              quality_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of a [2B, 2] logits batch (chosen rows first), each row's reply `words`: (loss, its parts)."""
    quality, length = logits[:, QUALITY].float(), logits[:, LENGTH].float()
    total_c, total_r = torch.chunk(quality + length, 2)
    rank = -nn.functional.logsigmoid(total_c - total_r - (margin if margin is not None else 0.0)).mean()
    words = words.float()
    length_corr, quality_corr = pearson(length, words), pearson(quality, words)
    loss = rank + length_weight * (1.0 - length_corr) + quality_weight * quality_corr.abs()
    q_c, q_r = torch.chunk(quality, 2)
    return loss, {"rank_loss": rank.item(), "length_head_corr": length_corr.item(),
                  "quality_head_corr": quality_corr.item(), "quality_accuracy": (q_c > q_r).float().mean().item()}


class WordsCollator:
    """TRL's preference collator, plus each row's reply words (chosen rows first, as the input ids are)."""

    def __init__(self, pad_token_id: int):
        self.inner = DataCollatorForPreference(pad_token_id=pad_token_id)

    def __call__(self, examples: list[dict]) -> dict:
        out = self.inner([{k: v for k, v in e.items() if k not in LENGTH_COLUMNS} for e in examples])
        out["words"] = torch.tensor([e["chosen_words"] for e in examples] + [e["rejected_words"] for e in examples],
                                    dtype=torch.float)
        return out


class OdinRewardTrainer(RewardTrainer):
    """TRL's RewardTrainer with ODIN's loss (module docstring); the dataset rows carry `chosen_words` and
    `rejected_words` beside TRL's `chosen_ids`, `rejected_ids` (and `margin`)."""

    def __init__(self, *args, length_weight: float = 1.0, quality_weight: float = 1.0, **kwargs):
        processing_class, model = kwargs["processing_class"], kwargs["model"]
        kwargs.setdefault("data_collator", WordsCollator(processing_class.pad_token_id))
        # TRL refuses a classifier of more than one label (a reward is one number); ODIN's second label is the
        # length head, which the loss below reads and nothing downstream does: shown as one for TRL's check only
        labels, model.config.num_labels = model.config.num_labels, 1
        try:
            super().__init__(*args, **kwargs)
        finally:
            model.config.num_labels = labels
        self.length_weight, self.quality_weight = length_weight, quality_weight

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["chosen_ids", "rejected_ids", "margin", *LENGTH_COLUMNS]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        words, margin = inputs.pop("words"), inputs.pop("margin", None)
        outputs = model(**inputs, use_cache=False)
        if outputs.logits.shape[-1] != 2:
            raise ValueError(f"ODIN needs a two-label classifier (quality, length); this one has "
                             f"{outputs.logits.shape[-1]}: build it with num_labels=2")
        loss, parts = odin_loss(outputs.logits, words.to(outputs.logits.device), margin, self.length_weight,
                                self.quality_weight)
        for name, value in parts.items():
            self._metrics[mode][name].append(value)
        with torch.no_grad():
            total_c, total_r = torch.chunk(outputs.logits.sum(-1), 2)
            self._metrics[mode]["accuracy"].append((total_c > total_r).float().mean().item())
            self._metrics[mode]["margin"].append((total_c - total_r).mean().item())
        return (loss, outputs) if return_outputs else loss
