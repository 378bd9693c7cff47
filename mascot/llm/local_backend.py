"""In-process transformers backend: the embedded CPU default and the tests' tiny models."""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
import json
from pathlib import Path
import sys
import weakref

import torch

from mascot import precision
from mascot.llm.backend import (BackendStats, ChoiceDistribution, Completion, Prompt, SampleRequest, ends_in_assistant,
                                strip_thinking)
from mascot.llm.identity import local_identity
from mascot.llm.nucleus import NucleusSampler
from mascot.precision import dtype_name


@dataclass
class TokenCounts:
    """Tokens a backend has run: prompt tokens sent and computed (a prefix run once for several prompts counts
    once; padding is not counted), and generated tokens. Benchmarks and cost reports read differences."""
    prompt_sent: int = 0
    prompt_computed: int = 0
    generated: int = 0

    def add(self, sent: int, computed: int, generated: int = 0) -> None:
        self.prompt_sent += sent
        self.prompt_computed += computed
        self.generated += generated

    def since(self, before: "TokenCounts") -> "TokenCounts":
        return TokenCounts(self.prompt_sent - before.prompt_sent, self.prompt_computed - before.prompt_computed,
                           self.generated - before.generated)

    def snapshot(self) -> "TokenCounts":
        return replace(self)


# (model folder, its weights' digest, dtype) -> the model loaded from it: a speaker and a judge on one model share one copy (held
# weakly: it goes when the last backend using it does)
_LOADED: "weakref.WeakValueDictionary[tuple[str, str], torch.nn.Module]" = weakref.WeakValueDictionary()


class LocalBackend:
    def __init__(self, endpoint):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(endpoint.model)
        dtype = precision.compute_dtype(endpoint.dtype)
        identity = local_identity(endpoint.model, dtype_name(dtype))
        key = (str(Path(endpoint.model).resolve()), identity["weights"], dtype_name(dtype))  # new weights, new model
        model = _LOADED.get(key)
        if model is None:
            print(f"llm: {endpoint.model} in-process in {dtype_name(dtype)} (dtype: {endpoint.dtype})", file=sys.stderr)
            model = _LOADED[key] = precision.load_causal_lm(endpoint.model, dtype)
        self._setup(model, tokenizer, endpoint.model, endpoint.batch_size, endpoint.chat_template_kwargs)
        self.identity = identity

    @classmethod
    def from_model(cls, model, tokenizer, name: str, batch_size: int = 8,
                   chat_template_kwargs: dict | None = None, identity: dict | None = None) -> "LocalBackend":
        """Wrap a model already in memory (e.g. a base model with a merged policy adapter). `identity`: what
        computes (mascot/llm/identity.py); without it the name stands in, so such a backend is not for a journal."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name, batch_size, chat_template_kwargs)
        self.identity = identity or {"backend": "local", "in_memory": name, "dtype": dtype_name(model.dtype)}
        return self

    identity: dict  # what computes: weights' digest and dtype (mascot/llm/identity.py); journals key on it

    def _setup(self, model, tokenizer, name: str, batch_size: int, chat_template_kwargs: dict | None = None) -> None:
        self.model_name, self.batch_size = name, batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model
        self.model.eval()
        self.token_counts = TokenCounts()
        self.stats = BackendStats()  # requests by kind, all "in-process"

    def close(self) -> None:
        pass

    def _text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        prefill = ends_in_assistant(prompt)
        return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=not prefill,
                                                  continue_final_message=prefill, **self.chat_template_kwargs)

    def _encode(self, texts: list[str]):
        # Chat templates already hold the BOS; plain prompts get it from the tokenizer (never both).
        has_bos = [self.tokenizer.bos_token is not None and t.startswith(self.tokenizer.bos_token) for t in texts]
        if any(has_bos) and not all(has_bos):
            raise ValueError("mixed chat and plain prompts in one batch")
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not any(has_bos))

    @torch.inference_mode()
    def sample(self, requests: list[SampleRequest], progress=None) -> list[list[Completion]]:
        # Expand n and group requests with the same sampling settings into batches.
        self.stats.count("in-process", len(requests))
        flat = [(i, r) for i, r in enumerate(requests) for _ in range(r.n)]
        out: list[list[Completion]] = [[] for _ in requests]
        for start in range(0, len(flat), self.batch_size):
            chunk = flat[start: start + self.batch_size]
            groups: dict[tuple, list[tuple[int, SampleRequest]]] = {}
            for i, r in chunk:
                key = (r.temperature, r.top_p, r.max_tokens, r.stop, r.regex, isinstance(r.prompt, str))
                groups.setdefault(key, []).append((i, r))
            for (temperature, top_p, max_tokens, stop, regex, _), items in groups.items():
                # a private stream: sampling here (e.g. inside a GRPO reward function) never moves the caller's RNG
                batch_seed = items[0][1].seed + start
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(batch_seed)
                    done = self._generate([self._text(r.prompt) for _, r in items], temperature, top_p, max_tokens,
                                          stop, regex)
                members = [r.seed for _, r in items]
                for j, ((i, _), completion) in enumerate(zip(items, done)):
                    scope = ({"scope": "batch", "batch_seed": batch_seed, "batch_members": members, "batch_index": j}
                             if temperature > 0 else {"scope": "greedy"})
                    out[i].append(replace(completion, seed_scope=scope))
            if progress:
                progress(len(chunk))
        return out

    def _shared_prefill(self, texts: list[str]):
        """Encode `texts` and prefill each distinct prompt once (n samples of one prompt share it): returns
        the encoding and a KV cache of all but the last prompt token, one row per text, or None when every
        prompt is distinct (nothing to share)."""
        enc = self._encode(texts)
        real = enc["attention_mask"].sum(-1).tolist()
        unique = list(dict.fromkeys(texts))
        if len(unique) == len(texts) or enc["input_ids"].shape[1] < 2:
            self.token_counts.add(sum(real), sum(real))
            return enc, None
        rows = [texts.index(t) for t in unique]
        # Each distinct prompt but its last token once, then every row's last token in generate.
        self.token_counts.add(sum(real), sum(real[r] - 1 for r in rows) + len(texts))
        ids, mask = enc["input_ids"][rows, :-1], enc["attention_mask"][rows, :-1]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens count from 0
        cache = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           logits_to_keep=1).cache
        cache.reorder_cache(torch.tensor([unique.index(t) for t in texts]))
        return enc, cache

    def _generate(self, texts, temperature, top_p, max_tokens, stop, regex: str | None = None) -> list[Completion]:
        enc, cache = self._shared_prefill(texts)
        kwargs = dict(max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id)
        processors = []
        if regex:
            from xgrammar.contrib.hf import LogitsProcessor

            # xgrammar's processor keeps matcher state: one per generate call
            processors.append(LogitsProcessor(self._compiled("regex", regex)))
        if cache is not None:
            kwargs["cache"] = cache
        if temperature > 0:
            # temperature and top-p, no top-k cut (as vLLM and TRL sample), drawn among the most probable tokens by
            # the last processor (mascot/llm/nucleus.py); generate then takes the drawn token greedily
            processors.append(NucleusSampler(temperature, top_p))
        kwargs.update(do_sample=False)
        if processors:
            kwargs["logits_processor"] = processors
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
            ended = bool(ids) and ids[-1] in self._eos_ids()
            if hit_stop:
                text = text[: min(text.index(s) for s in hit_stop)]
            finish = "stop" if hit_stop or ended or len(ids) < max_tokens else "length"
            text, thought = strip_thinking(text.strip())
            results.append(Completion(text, int(enc["attention_mask"][row].sum()), len(ids), finish, thought))
        self.token_counts.add(0, 0, sum(c.completion_tokens for c in results))  # prompts: in _shared_prefill
        return results

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}

    def _compiled(self, kind: str, source: str):
        """Compile a grammar ("json" schema or "regex") for this tokenizer once per backend (it takes seconds on
        a large vocabulary)."""
        cache = self.__dict__.setdefault("_grammars", {})
        if (kind, source) not in cache:
            cache[kind, source] = compile_grammar(self.tokenizer, self.model.config.vocab_size, kind, source)
        return cache[kind, source]

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
    def choice_distribution(self, prompts: list[Prompt], choices: list[str], progress=None,
                            min_shared_prefix: int = 32) -> list[ChoiceDistribution]:
        """Next-token distribution over single-token `choices` after each prompt.

        Two levels of KV reuse: the head all prompts share (rubric, anchors) runs once; then each run of
        consecutive prompts that share more (one candidate's five dimension prompts) runs its own middle
        (persona, dialogue, reply) once, and only the short tails are batched.
        """
        ids = torch.tensor(self.choice_token_ids(choices))
        self.stats.count("in-process", len(prompts))
        prompts = [self._text(p) for p in prompts]
        encoded = [self._token_ids(p) for p in prompts]
        shared = _common_prefix_len(encoded)
        if shared < min_shared_prefix:
            return self._choice_distribution_plain(prompts, ids, choices, progress)
        # logits of the head's last position only: the head is a few hundred tokens of a 150k-260k vocabulary
        head_cache = self.model(input_ids=torch.tensor([encoded[0][:shared]]), use_cache=True, logits_to_keep=1).cache
        self.token_counts.add(sum(len(e) for e in encoded), shared)
        results = []
        for start, end in _runs_sharing_more(encoded, shared):
            group = encoded[start:end]
            middle_end = _common_prefix_len(group) if len(group) > 1 else shared
            self.token_counts.add(0, middle_end - shared + sum(len(e) - middle_end for e in group))
            cache = copy.deepcopy(head_cache)
            if middle_end > shared:
                self.model.base_model(input_ids=torch.tensor([group[0][shared:middle_end]]), cache=cache,
                                      use_cache=True)
            for b in range(0, len(group), self.batch_size):
                tails = [e[middle_end:] for e in group[b: b + self.batch_size]]
                results.extend(self._tails(cache, middle_end, tails, ids, choices))
                if progress:
                    progress(len(tails))
        return results

    def _tails(self, cache, cached_len: int, tails: list[list[int]], ids, choices) -> list[ChoiceDistribution]:
        width = max(len(t) for t in tails)
        pad = self.tokenizer.pad_token_id
        # Right padding: pads sit after each row's last real token, so causal attention never sees them.
        input_ids = torch.tensor([t + [pad] * (width - len(t)) for t in tails])
        mask = torch.tensor([[1] * (cached_len + len(t)) + [0] * (width - len(t)) for t in tails])
        batch_cache = copy.deepcopy(cache)
        batch_cache.batch_repeat_interleave(len(tails))
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask, cache=batch_cache,
                                       use_cache=True).last_hidden_state
        last = hidden[torch.arange(len(tails)), torch.tensor([len(t) - 1 for t in tails])]
        return self._distributions(last, ids, choices)

    @torch.inference_mode()
    def _choice_distribution_plain(self, prompts, ids, choices, progress=None) -> list[ChoiceDistribution]:
        results = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start: start + self.batch_size]
            enc = self._encode(batch)
            real = int(enc["attention_mask"].sum())
            self.token_counts.add(real, real)
            hidden = self.model.base_model(**enc).last_hidden_state[:, -1, :]  # left padding: last is real
            results.extend(self._distributions(hidden, ids, choices))
            if progress:
                progress(len(batch))
        return results

    @torch.inference_mode()
    def json_complete(self, prompts: list[str], schema: dict, max_tokens: int, seed: int = 0,
                      progress=None, temperature: float = 0.0) -> list[Completion]:
        """Grammar-constrained decoding (xgrammar): the output always parses under `schema`."""
        from xgrammar.contrib.hf import LogitsProcessor

        compiled = self._compiled("json", json.dumps(schema, sort_keys=True))
        self.stats.count("in-process", len(prompts))
        prompts = [self._text(p) for p in prompts]
        results = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start: start + self.batch_size]
            enc = self._encode(batch)
            sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0} if temperature > 0 else {
                "do_sample": False}
            with torch.random.fork_rng(devices=[]):  # a retry's sampling never moves the caller's stream
                torch.manual_seed(seed + start)
                # xgrammar's processor keeps matcher state: one per generate call.
                gen = self.model.generate(**enc, max_new_tokens=max_tokens, **sampling,
                                          logits_processor=[LogitsProcessor(compiled)],
                                          pad_token_id=self.tokenizer.pad_token_id)
            prompt_len = enc["input_ids"].shape[1]
            for row in range(len(batch)):
                ids = [t for t in gen[row, prompt_len:].tolist() if t != self.tokenizer.pad_token_id]
                text, thought = strip_thinking(self.tokenizer.decode(ids, skip_special_tokens=True))
                finish = "length" if len(ids) >= max_tokens else "stop"
                results.append(Completion(text, int(enc["attention_mask"][row].sum()), len(ids), finish, thought))
                self.token_counts.add(results[-1].prompt_tokens, results[-1].prompt_tokens, len(ids))
            if progress:
                progress(len(batch))
        return results


def compile_grammar(tokenizer, vocab_size: int, kind: str, source: str, stop_token_ids: list[int] | None = None):
    """An xgrammar grammar ("json" schema or "regex") compiled for `tokenizer` (seconds on a large vocabulary:
    compile once, make a LogitsProcessor of it per generate call). `stop_token_ids`: what ends a match (default:
    the tokenizer's own, as xgrammar reads them)."""
    import xgrammar

    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
    compiler = xgrammar.GrammarCompiler(info)
    return (compiler.compile_json_schema(source, any_whitespace=False) if kind == "json"
            else compiler.compile_regex(source))


def _runs_sharing_more(seqs: list[list[int]], shared: int, min_extra: int = 8) -> list[tuple[int, int]]:
    """Runs [start, end) of consecutive sequences whose common prefix goes at least `min_extra` tokens
    beyond the `shared` head (e.g. the prompts of one candidate)."""
    runs, start = [], 0
    for i in range(1, len(seqs) + 1):
        if i == len(seqs) or _common_prefix_len([seqs[start], seqs[i]]) < shared + min_extra:
            runs.append((start, i))
            start = i
    return runs


def _common_prefix_len(seqs: list[list[int]]) -> int:
    """Length of the token prefix all sequences share, leaving each at least one token of its own."""
    first, n = seqs[0], min(len(s) for s in seqs) - 1
    for i in range(n):
        if any(s[i] != first[i] for s in seqs):
            return i
    return max(n, 0)
