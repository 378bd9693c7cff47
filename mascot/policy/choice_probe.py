"""What GRPO moves in a Director: at each step, the policy's probability of each agent at the directive's choice
point (`train_director.choice_probe`), on a few of its own training states.

A directive decoded under its grammar names one of the team's agents: at the choice point the sampler draws a name
among the valid ones, token by token, each token's probability renormalised over the tokens the grammar allows
there. The probe computes that distribution from the policy's logits over each name's own tokens (the names'
token trie after the prompt): the probability the constrained sampler gives each agent, and how far it moved from
the first step (the KL of the choice). A policy that learns whom to give the floor concentrates it; one that
spreads it has moved without choosing.
"""
from __future__ import annotations

import json
import math

import torch
from transformers import TrainerCallback

from mascot.precision import native_bf16


def choice_texts(prompt, tokenizer, style: str) -> str:
    """The text the choice follows: a transcript prompt ends in "Agent:"; a chat prompt (no prefill) is rendered
    with its generation prompt and the label the grammar writes first."""
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) + "Agent:"
    return prompt


@torch.no_grad()
def choice_distribution(model, tokenizer, prefix: str, names: list[str]) -> dict[str, float]:
    """Each name's probability at the choice point after `prefix`, under the grammar's token-by-token
    renormalisation over the names' own tokens (their trie)."""
    special = not (tokenizer.bos_token and prefix.startswith(tokenizer.bos_token))  # a chat template writes its own
    head = tokenizer(prefix, add_special_tokens=special)["input_ids"]
    seqs = [tokenizer(prefix + " " + n, add_special_tokens=special)["input_ids"] for n in names]
    conts = [s[len(head):] if s[:len(head)] == head else s[len(head) - 1:] for s in seqs]
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id or 0
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=model.device)
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=model.device)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=native_bf16()):
        hidden = inner.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    start = [len(s) - len(c) for s, c in zip(seqs, conts)]  # where each name's first token sits
    cap = getattr(inner.config.get_text_config(), "final_logit_softcapping", None)
    log_p = {}
    for k, (n, c) in enumerate(zip(names, conts)):
        rows = hidden[k, [start[k] - 1 + j for j in range(len(c))]]
        logits = inner.get_output_embeddings()(rows).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        lp = logits.log_softmax(-1)
        total = 0.0
        for j, token in enumerate(c):  # renormalised over the tokens that continue some name with the same start
            allowed = sorted({o[j] for o in conts if len(o) > j and o[:j] == c[:j]})
            total += float(lp[j, token] - torch.logsumexp(lp[j, allowed], 0))
        log_p[n] = total
    norm = math.log(sum(math.exp(v) for v in log_p.values()))
    return {n: round(math.exp(v - norm), 5) for n, v in log_p.items()}


class ChoiceProbe(TrainerCallback):
    """Every step (and before the first), the agents' probabilities at the choice point of each probe prompt; the
    history is the stage's `choice_probe` figure. A diagnostic: not kept across a resume (it starts again)."""

    def __init__(self, prompts: list, names: list[str], style: str):
        self.prompts, self.names, self.style = prompts, names, style
        self.prefixes, self.tokenizer, self.history = [], None, []

    def measure(self, model, step: int, tokenizer) -> None:
        if self.tokenizer is None:  # the trainer's own (its processing_class), known once it runs
            self.tokenizer = tokenizer
            self.prefixes = [choice_texts(p, tokenizer, self.style) for p in self.prompts]
        was_training = model.training
        model.eval()
        rows = [choice_distribution(model, self.tokenizer, p, self.names) for p in self.prefixes]
        if was_training:
            model.train()
        mean = {n: round(sum(r[n] for r in rows) / len(rows), 4) for n in self.names}
        record = {"step": step, "mean": mean, "per_prompt": rows}
        if self.history:  # how far each prompt's choice moved from the first step's
            first = self.history[0]["per_prompt"]
            record["kl_from_first"] = round(sum(
                sum(p[n] * math.log(max(p[n], 1e-12) / max(q[n], 1e-12)) for n in self.names)
                for p, q in zip(rows, first)) / len(rows), 5)
        self.history.append(record)
        print(f"choice probe, step {step}: " + ", ".join(f"{n} {v}" for n, v in mean.items())
              + (f"; KL from step 0 {record['kl_from_first']}" if "kl_from_first" in record else ""), flush=True)

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not self.history:
            self.measure(model, state.global_step, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.measure(model, state.global_step, processing_class)

    def figures(self) -> dict:
        """The history without each prompt's row, and its ends: the mean choice at the first and last step."""
        if not self.history:
            return {}
        return {"choice_probe": [{k: v for k, v in h.items() if k != "per_prompt"} for h in self.history],
                "choice_probe_first": self.history[0]["mean"], "choice_probe_last": self.history[-1]["mean"],
                "choice_probe_prompts": len(self.prompts)}


def choice_step_figures(steps: list[dict]) -> dict:
    """The sampled choices per GRPO step (`director.choice_record`): as a compact history for the figures file."""
    return {"choices_by_step": steps} if steps else {}


def rows_prompts(rows: list[dict], limit: int) -> list:
    """The first `limit` distinct prompts of the training rows (each Director state once)."""
    seen, out = set(), []
    for r in rows:
        key = json.dumps(r["prompt"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(r["prompt"])
        if len(out) >= limit:
            break
    return out
