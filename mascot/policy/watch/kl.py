"""How far the policy has moved: its probe answers and, per answer, the KL of the current policy from the base
policy (the adapter switched off: no second copy), exact over the vocabulary on the answer's own tokens."""
from __future__ import annotations

from contextlib import contextmanager, nullcontext


def greedy_answers(model, tokenizer, prompts: list, max_new_tokens: int, temperature: float = 0.0) -> list[str]:
    """The policy's greedy continuation of each prompt (text, or messages through the chat template); with a
    temperature above 0, a sample at a fixed seed (the same draws at every check: only the policy changes)."""
    return answers_and_kl(model, tokenizer, prompts, max_new_tokens, temperature, kl=False)[0]


# probes a forward pass: the fp32 log-probs over Gemma's 262k vocabulary at 8 x 64 answer positions are 0.5 GB a
# pass (two kept, with one pass's logits over the whole rows while it runs)
KL_BATCH = 8


@contextmanager
def float32_weights(model):
    """The model's bf16/fp16 parameters and buffers held in fp32 for the block, then put back in their own
    dtype, bit for bit (a bf16 value is exact in fp32); the Parameter objects stay the same (optimizer state)."""
    import torch

    low = [t for t in (*model.parameters(), *model.buffers()) if t.dtype in (torch.bfloat16, torch.float16)]
    dtypes = [t.dtype for t in low]
    for t in low:
        t.data = t.data.float()
    try:
        yield
    finally:
        for t, dtype in zip(low, dtypes):
            t.data = t.data.to(dtype)


def _kl_from_base(model, sequences, prompt_mask, width: int, lengths: list[int], dtype: str = "float32"
                  ) -> tuple[list, list]:
    """(per answer: the summed KL over its tokens, the mean) for left-padded prompts followed by their answers,
    in one forward pass with the adapter and one without, in fp32 (`dtype` float32) or the policy's own precision
    (auto). Each row is moved to the left edge (its prompt, its answer, then filler on the right) and run without
    an attention mask: causal attention never reads to the right, so a row is computed as it is alone. In fp32 a
    batch gives each probe its KL alone; in bf16 rounding put the CPU default's figure off by 4% to 75%
    (tests/test_watch.py, docs/results.md)."""
    import torch

    from mascot.precision import native_bf16

    longest = max(lengths)
    if longest == 0:
        return [0.0] * len(lengths), [0.0] * len(lengths)
    prompt_lengths = prompt_mask.sum(-1).tolist()
    real = [sequences[r, width - n_prompt: width + n_answer]
            for r, (n_prompt, n_answer) in enumerate(zip(prompt_lengths, lengths))]
    span = max(len(ids) for ids in real)
    filler = real[0][0]  # any token: nothing to its left reads it
    ids = torch.stack([torch.cat([row, row.new_full((span - len(row),), filler)]) for row in real])
    # the logits that predict each answer token: from the last prompt position on, clamped inside the row
    at = torch.tensor(prompt_lengths, device=ids.device)[:, None] - 1 + torch.arange(longest, device=ids.device)[None]
    at = at.clamp(max=span - 1)
    answer_mask = (torch.arange(longest, device=ids.device)[None, :]
                   < torch.tensor(lengths, device=ids.device)[:, None]).float()

    full = dtype == "float32"
    # the backbone over every position, the LM head over the answer's positions only: a head over every position
    # of prompt and answer (the causal LM's forward, as TRL's fused head leaves it on a CPU) cost the CPU default's
    # watch 132 of train_grpo's 341 s, and the same log-probs. Called beneath the model's own forward, which
    # accelerate's mixed precision wraps in bf16 autocast when the trainer runs it: ours decides
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone, head = inner.base_model, inner.get_output_embeddings()
    cap = getattr(inner.config.get_text_config(), "final_logit_softcapping", None)

    def log_probs():
        hidden = backbone(input_ids=ids).last_hidden_state  # the adapter's LoRA layers sit inside it
        logits = head(hidden.gather(1, at[:, :, None].expand(-1, -1, hidden.shape[-1])))
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits.float().log_softmax(-1)

    with float32_weights(model) if full else nullcontext(), \
            torch.autocast(sequences.device.type, dtype=torch.bfloat16, enabled=not full and native_bf16()):
        policy = log_probs()
        with model.disable_adapter():
            base = log_probs()
    kl_positions = (policy.exp() * (policy - base)).sum(-1).clamp(min=0) * answer_mask
    sums = kl_positions.sum(-1)
    return ([round(float(x), 5) for x in sums],
            [round(float(x) / n, 6) if n else 0.0 for x, n in zip(sums, lengths)])


def answers_and_kl(model, tokenizer, prompts: list, max_new_tokens: int, temperature: float = 0.0,
                   kl: bool = True, kl_dtype: str = "float32") -> tuple[list[str], dict[str, list]]:
    """`greedy_answers`, and (with `kl`) how far each answer's policy is from the base policy: per probe, the KL
    of the current policy from the adapter-free model (PEFT's disable_adapter: no second copy in memory), exact
    over the vocabulary at each position of the answer's own tokens, summed over the answer ("kl", nats per
    completion) and averaged ("kl_token"). A model without an adapter to switch off gives None."""
    import torch

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list) else p
             for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    enc = {k: v.to(model.device) for k, v in enc.items()}
    from mascot.precision import native_bf16

    torch.manual_seed(0)
    # bf16 autocast where native, as the trainer computes the policy (mascot/precision.py)
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=native_bf16()):
        sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else \
            {"do_sample": False}
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    width = enc["input_ids"].shape[1]
    answers = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    if not kl or not hasattr(model, "disable_adapter"):
        return answers, {}
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    # each answer's own tokens: up to and with the first stop token (what follows is padding)
    lengths = [next((k + 1 for k, tok in enumerate(row[width:].tolist()) if tok in stops), out.shape[1] - width)
               for row in out]
    per_completion, per_token = [], []
    # lifted once for all the batches (each batch's own lift then finds nothing to lift)
    with float32_weights(model) if kl_dtype == "float32" else nullcontext():
        for first in range(0, len(out), KL_BATCH):
            rows = slice(first, first + KL_BATCH)
            kl_sum, kl_mean = _kl_from_base(model, out[rows], enc["attention_mask"][rows], width, lengths[rows],
                                            kl_dtype)
            per_completion += kl_sum
            per_token += kl_mean
    return answers, {"kl": per_completion, "kl_token": per_token}
