"""In-process transformers backend: the embedded CPU default and the tests' tiny models."""
from __future__ import annotations

import json

import torch

from mascot.llm.backend import ChoiceDistribution, Completion, Prompt, SampleRequest


class LocalBackend:
    def __init__(self, endpoint):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(endpoint.model)
        model = AutoModelForCausalLM.from_pretrained(endpoint.model, dtype=getattr(torch, endpoint.dtype))
        self._setup(model, tokenizer, endpoint.model, endpoint.batch_size)

    @classmethod
    def from_model(cls, model, tokenizer, name: str, batch_size: int = 8) -> "LocalBackend":
        """Wrap a model already in memory (e.g. a base model with a merged policy adapter)."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name, batch_size)
        return self

    def _setup(self, model, tokenizer, name: str, batch_size: int) -> None:
        self.model_name, self.batch_size = name, batch_size
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model
        self.model.eval()

    def close(self) -> None:
        pass

    def _text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def _encode(self, texts: list[str]):
        # Chat templates already hold the BOS; plain prompts get it from the tokenizer (never both).
        has_bos = [self.tokenizer.bos_token is not None and t.startswith(self.tokenizer.bos_token) for t in texts]
        if any(has_bos) and not all(has_bos):
            raise ValueError("mixed chat and plain prompts in one batch")
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not any(has_bos))

    @torch.inference_mode()
    def sample(self, requests: list[SampleRequest], progress=None) -> list[list[Completion]]:
        # Expand n and group requests with the same sampling settings into batches.
        flat = [(i, r) for i, r in enumerate(requests) for _ in range(r.n)]
        out: list[list[Completion]] = [[] for _ in requests]
        for start in range(0, len(flat), self.batch_size):
            chunk = flat[start: start + self.batch_size]
            groups: dict[tuple, list[tuple[int, SampleRequest]]] = {}
            for i, r in chunk:
                key = (r.temperature, r.top_p, r.max_tokens, r.stop, isinstance(r.prompt, str))
                groups.setdefault(key, []).append((i, r))
            for (temperature, top_p, max_tokens, stop, _), items in groups.items():
                torch.manual_seed(items[0][1].seed + start)
                for i, completion in zip([i for i, _ in items], self._generate(
                        [self._text(r.prompt) for _, r in items], temperature, top_p, max_tokens, stop)):
                    out[i].append(completion)
            if progress:
                progress(len(chunk))
        return out

    def _generate(self, texts, temperature, top_p, max_tokens, stop) -> list[Completion]:
        enc = self._encode(texts)
        kwargs = dict(max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kwargs.update(do_sample=False)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        gen = self.model.generate(**enc, **kwargs)
        prompt_len = enc["input_ids"].shape[1]
        results = []
        for row in range(len(texts)):
            ids = gen[row, prompt_len:].tolist()
            ids = [t for t in ids if t != self.tokenizer.pad_token_id]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            hit_stop = [s for s in stop if s in text]
            ended = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
            if hit_stop:
                text = text[: min(text.index(s) for s in hit_stop)]
            finish = "stop" if hit_stop or ended or len(ids) < max_tokens else "length"
            results.append(Completion(text.strip(), int(enc["attention_mask"][row].sum()), len(ids), finish))
        return results

    def _compiled_schema(self, schema_json: str):
        """Compile a JSON schema for this tokenizer once per backend (it takes seconds on a large vocab)."""
        cache = self.__dict__.setdefault("_grammars", {})
        if schema_json not in cache:
            import xgrammar

            info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size)
            cache[schema_json] = xgrammar.GrammarCompiler(info).compile_json_schema(schema_json, any_whitespace=False)
        return cache[schema_json]

    def choice_token_ids(self, choices: list[str]) -> list[int]:
        ids = []
        for c in choices:
            enc = self.tokenizer.encode(c, add_special_tokens=False)
            if len(enc) != 1:
                raise ValueError(f"choice {c!r} is {len(enc)} tokens for {self.model_name}; choices must be single tokens")
            ids.append(enc[0])
        return ids

    def _token_ids(self, text: str) -> list[int]:
        with_bos = self.tokenizer.bos_token is not None and text.startswith(self.tokenizer.bos_token)
        return self.tokenizer(text, add_special_tokens=not with_bos)["input_ids"]

    def _distributions(self, hidden: torch.Tensor, ids: torch.Tensor, choices: list[str]) -> list[ChoiceDistribution]:
        logits = self.model.lm_head(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        probs = torch.softmax(logits, dim=-1)[:, ids]
        out = []
        for row in probs:
            mass = float(row.sum())
            out.append(ChoiceDistribution({c: float(p) / mass for c, p in zip(choices, row)}, mass))
        return out

    @torch.inference_mode()
    def choice_distribution(self, prompts: list[str], choices: list[str], progress=None,
                            min_shared_prefix: int = 32) -> list[ChoiceDistribution]:
        """Next-token distribution over single-token `choices` after each prompt.

        Judge prompts share a long head (rubric, anchors); it is run once and its KV cache reused for
        every prompt, so each prompt costs only its own tail.
        """
        ids = torch.tensor(self.choice_token_ids(choices))
        encoded = [self._token_ids(p) for p in prompts]
        shared = _common_prefix_len(encoded)
        if shared < min_shared_prefix:
            return self._choice_distribution_plain(prompts, ids, choices, progress)
        import copy

        prefix_cache = self.model(input_ids=torch.tensor([encoded[0][:shared]]), use_cache=True).cache
        results = []
        for start in range(0, len(encoded), self.batch_size):
            tails = [e[shared:] for e in encoded[start: start + self.batch_size]]
            width = max(len(t) for t in tails)
            pad = self.tokenizer.pad_token_id
            # Right padding: pads sit after each row's last real token, so causal attention never sees them.
            input_ids = torch.tensor([t + [pad] * (width - len(t)) for t in tails])
            mask = torch.tensor([[1] * (shared + len(t)) + [0] * (width - len(t)) for t in tails])
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(tails))
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask, cache=cache,
                                           use_cache=True).last_hidden_state
            last = hidden[torch.arange(len(tails)), torch.tensor([len(t) - 1 for t in tails])]
            results.extend(self._distributions(last, ids, choices))
            if progress:
                progress(len(tails))
        return results

    @torch.inference_mode()
    def _choice_distribution_plain(self, prompts, ids, choices, progress=None) -> list[ChoiceDistribution]:
        results = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start: start + self.batch_size]
            enc = self._encode(batch)
            hidden = self.model.base_model(**enc).last_hidden_state[:, -1, :]  # left padding: last is real
            results.extend(self._distributions(hidden, ids, choices))
            if progress:
                progress(len(batch))
        return results

    @torch.inference_mode()
    def json_complete(self, prompts: list[str], schema: dict, max_tokens: int, seed: int = 0,
                      progress=None) -> list[Completion]:
        """Grammar-constrained decoding (xgrammar): the output always parses under `schema`."""
        from xgrammar.contrib.hf import LogitsProcessor

        compiled = self._compiled_schema(json.dumps(schema, sort_keys=True))
        results = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start: start + self.batch_size]
            enc = self._encode(batch)
            torch.manual_seed(seed + start)
            # xgrammar's processor keeps matcher state: one per generate call.
            gen = self.model.generate(**enc, max_new_tokens=max_tokens, do_sample=False,
                                      logits_processor=[LogitsProcessor(compiled)],
                                      pad_token_id=self.tokenizer.pad_token_id)
            prompt_len = enc["input_ids"].shape[1]
            for row in range(len(batch)):
                ids = [t for t in gen[row, prompt_len:].tolist() if t != self.tokenizer.pad_token_id]
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                finish = "length" if len(ids) >= max_tokens else "stop"
                results.append(Completion(text, int(enc["attention_mask"][row].sum()), len(ids), finish))
            if progress:
                progress(len(batch))
        return results


def _common_prefix_len(seqs: list[list[int]]) -> int:
    """Length of the token prefix all sequences share, leaving each at least one token of its own."""
    first, n = seqs[0], min(len(s) for s in seqs) - 1
    for i in range(n):
        if any(s[i] != first[i] for s in seqs):
            return i
    return max(n, 0)
