"""Any OpenAI-compatible server (vLLM in real use): async, bounded concurrency, retries with backoff.

Plain-text prompts go to /v1/completions, message lists to /v1/chat/completions. Structured outputs use
vLLM's current `structured_outputs` field (the old `guided_json` is silently ignored by vLLM 0.32).
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import urllib.request

import openai

from mascot.llm.backend import (BackendStats, ChoiceDistribution, Completion, SampleRequest, ServerError,
                                ends_in_assistant, strip_thinking)
from mascot.llm.servers import server_device

# logprobs asked for with an expected-mode judge call: enough that the five digits are in the list (vLLM's default
# --max-logprobs is 20), so the choice mass means what it means in-process (the digits' share of the distribution)
TOP_LOGPROBS = 20
RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError)


class Replicas:
    """The servers of one endpoint: each request goes to the live replica with the fewest requests in flight;
    a replica that refuses connections is dropped and its requests go to the others. The last one left is
    never dropped: it gets the ordinary retries with backoff, then the stage fails."""

    def __init__(self, urls: list[str]):
        self.urls = list(urls)
        self.in_flight = {u: 0 for u in urls}
        self.sent = {u: 0 for u in urls}
        self.lost: dict[str, str] = {}  # url -> why it was dropped

    def pick(self) -> str:
        live = [u for u in self.urls if u not in self.lost]
        if not live:
            raise ServerError(f"no replica left of {self.urls}: {self.lost}")
        # fewest in flight; ties go to the one sent fewer so far, so that an idle start still spreads
        return min(live, key=lambda u: (self.in_flight[u], self.sent[u]))

    def drop(self, url: str, why: str) -> bool:
        """Drop a replica that refused a connection; False (kept) when it is the last one."""
        if len(self.urls) - len(self.lost) <= 1:
            return False
        self.lost[url] = why
        return True


def backoff_delay(backoff_s: float, attempt: int, jitter: float) -> float:
    """Seconds before retry `attempt` (1, 2, ...): exponential from `backoff_s`, capped at 30 s, times a jitter
    factor in [0.5, 1.5) (`jitter` in [0, 1)) so that many clients do not retry in lockstep."""
    return min(30.0, backoff_s * 2 ** (attempt - 1)) * (0.5 + jitter)


class OpenAIBackend:
    def __init__(self, endpoint):
        self.model_name = endpoint.model
        self.replicas = Replicas(endpoint.base_urls)
        self.base_url = ", ".join(endpoint.base_urls)  # for messages
        self.api_key = os.environ.get(endpoint.api_key_env, "EMPTY")
        self.max_concurrency = endpoint.max_concurrency
        self.timeout_s = endpoint.timeout_s
        self.max_retries = endpoint.max_retries
        self.backoff_s = endpoint.backoff_s
        self._send_seed = endpoint.send_seed
        self.chat_template_kwargs = dict(endpoint.chat_template_kwargs)
        self.stats = BackendStats()
        self._identity: dict | None = None
        self.on_request = None  # optional callable(body: dict): sees every request body (tests, debugging)

    def close(self) -> None:
        if len(self.replicas.urls) > 1:
            lost = "; ".join(f"{u} ({why})" for u, why in self.replicas.lost.items()) or "none"
            print(f"llm {self.model_name}: requests per replica {self.replicas.sent}; replicas lost: {lost}",
                  flush=True)

    @property
    def send_seed(self) -> bool:
        """auto: seeds off for vLLM's CPU build (its engine died on concurrent seeded sampling), on otherwise.
        The build is known from `mascot serve`'s record of the servers it started here, or from a version
        string marked +cpu."""
        if self._send_seed == "auto":
            url = self.replicas.urls[0]
            device = server_device(url) or ("cpu" if "cpu" in (self.server_version() or "") else None)
            self._send_seed = device != "cpu"
        return bool(self._send_seed)

    @property
    def identity(self) -> dict:
        """What computes behind the endpoint, for the journals: the served name, and what the server reports
        the name stands for (vLLM's /v1/models `root`: the weights' path or repo, which changes when another model
        is served under the same name) and its version. Asked once, of the first replica."""
        if self._identity is None:
            served = None
            try:
                with urllib.request.urlopen(f"{self.replicas.urls[0].rstrip('/')}/models",
                                            timeout=min(self.timeout_s, 10)) as resp:
                    listed = json.loads(resp.read()).get("data") or []
                served = next((m.get("root") or m.get("id") for m in listed if m.get("id") == self.model_name), None)
            except (OSError, ValueError, AttributeError):
                pass
            self._identity = {"backend": "openai", "model": self.model_name, "served": served,
                              "version": self.server_version()}
        return self._identity

    def server_version(self) -> str | None:
        """The server's self-reported version (vLLM's /version), or None where it has none."""
        root = self.replicas.urls[0].removesuffix("/v1")  # the first replica speaks for the endpoint
        try:
            with urllib.request.urlopen(f"{root}/version", timeout=min(self.timeout_s, 10)) as resp:
                return str(json.loads(resp.read()).get("version"))
        except (OSError, ValueError):
            return None

    def _chat_kwargs(self, messages: list[dict]) -> dict:
        """Messages plus vLLM's chat-template switches: a final assistant message is continued (a prefill)."""
        extra = {}
        if self.chat_template_kwargs:
            extra["chat_template_kwargs"] = self.chat_template_kwargs
        if ends_in_assistant(messages):
            extra.update(continue_final_message=True, add_generation_prompt=False)
        return {"messages": messages, "extra_body": extra}

    def _http_client(self):
        if self.on_request is None:
            return None

        async def hook(request):
            self.on_request(json.loads(request.content or b"{}"))
        # the openai package's own HTTP client class (it brings its HTTP library along)
        return openai.DefaultAsyncHttpxClient(event_hooks={"request": [hook]}, timeout=self.timeout_s)

    def _run(self, coros_factory, progress):
        async def main():
            clients = {u: openai.AsyncOpenAI(base_url=u, api_key=self.api_key, timeout=self.timeout_s,
                                             max_retries=0,  # retries are ours: bounded, with jitter, counted
                                             http_client=self._http_client())
                       for u in self.replicas.urls}
            sem = asyncio.Semaphore(self.max_concurrency)
            try:
                async def guarded(coro_fn):
                    async with sem:
                        result = await self._with_retries(coro_fn, clients)
                    if progress:
                        progress(1)
                    return result
                return await asyncio.gather(*(guarded(fn) for fn in coros_factory()))
            finally:
                for client in clients.values():
                    await client.close()
        return asyncio.run(main())

    async def _with_retries(self, coro_fn, clients):
        attempt = 0
        while True:
            url = self.replicas.pick()
            self.replicas.in_flight[url] += 1
            self.replicas.sent[url] += 1
            self.stats.requests += 1
            try:
                return await coro_fn(clients[url])
            except RETRYABLE as exc:
                refused = isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)
                if refused and self.replicas.drop(url, f"{type(exc).__name__}: {exc}"):
                    print(f"llm: replica {url} refused a connection ({exc}); its requests go to the others",
                          flush=True)
                    continue  # not an attempt: the request never reached a server
                if attempt == self.max_retries:
                    raise ServerError(f"{url}: {type(exc).__name__} after {attempt + 1} attempts: {exc}") from exc
                attempt += 1
                self.stats.retries += 1
                await asyncio.sleep(backoff_delay(self.backoff_s, attempt, random.random()))
            except (openai.APIError, ValueError) as exc:  # 4xx, or a body that is not what the API promises
                raise ServerError(f"{url}: {type(exc).__name__} (not retried): {exc}") from exc
            finally:
                self.replicas.in_flight[url] -= 1

    def sample(self, requests: list[SampleRequest], progress=None) -> list[list[Completion]]:
        def factory():
            for r in requests:
                yield lambda client, r=r: self._sample_one(client, r)
        return self._run(factory, (lambda k: progress(requests[0].n * k)) if progress else None)

    async def _sample_one(self, client, r: SampleRequest) -> list[Completion]:
        common = dict(model=self.model_name, n=r.n, temperature=r.temperature, top_p=r.top_p,
                      max_tokens=r.max_tokens, stop=list(r.stop) or None)
        if r.temperature > 0 and self.send_seed:  # a seed means nothing to greedy decoding
            common["seed"] = r.seed
        # vLLM returns each choice's token ids when asked (other servers ignore the field): the real
        # per-candidate count. Without them only the request's total is known, so n > 1 records None.
        extra = {"return_token_ids": True, **({"structured_outputs": {"regex": r.regex}} if r.regex else {})}
        self.stats.count("/v1/completions" if isinstance(r.prompt, str) else "/v1/chat/completions")
        if isinstance(r.prompt, str):
            resp = await client.completions.create(prompt=r.prompt, **common, extra_body=extra)
            texts = [(c.text, c.finish_reason, c) for c in resp.choices]
        else:
            kwargs = self._chat_kwargs(r.prompt)
            kwargs["extra_body"].update(extra)
            resp = await client.chat.completions.create(**kwargs, **common)
            texts = [(c.message.content or "", c.finish_reason, c) for c in resp.choices]
        prompt_tokens = resp.usage.prompt_tokens if resp.usage else 0
        out = []
        for text, finish, choice in texts:
            ids = (getattr(choice, "model_extra", None) or {}).get("token_ids")
            count = len(ids) if ids is not None else (
                resp.usage.completion_tokens if resp.usage and len(texts) == 1 else None)
            text, thought = strip_thinking(text.strip())
            scope = {"scope": "greedy" if r.temperature == 0 else "request" if "seed" in common else "unseeded"}
            out.append(Completion(text, prompt_tokens, count, finish or "stop", thought, scope))
        return out

    def choice_distribution(self, prompts: list[str], choices: list[str], progress=None) -> list[ChoiceDistribution]:
        """The distribution over `choices` and their mass, as in-process. Two calls per prompt (the second finds
        the prompt in vLLM's prefix cache): under vLLM's `choice` constraint the logprobs come after the mask, so
        they give the distribution over the choices exactly but a mass of 1 whatever the model thinks; the
        unconstrained call's top TOP_LOGPROBS give the mass (the choices' share of the whole distribution: exact
        when they are among the top, a lower bound otherwise, so a judge that does not answer still reads low)."""
        async def top_logprobs(client, prompt, constrained: bool) -> dict[str, float]:
            self.stats.count("/v1/completions" if isinstance(prompt, str) else "/v1/chat/completions")
            extra = {"structured_outputs": {"choice": choices}} if constrained else {}
            if isinstance(prompt, str):
                resp = await client.completions.create(
                    model=self.model_name, prompt=prompt, max_tokens=1, temperature=0.0,
                    logprobs=max(len(choices), TOP_LOGPROBS), extra_body=extra)
                return dict((resp.choices[0].logprobs.top_logprobs or [{}])[0])
            kwargs = self._chat_kwargs(prompt)
            kwargs["extra_body"].update(extra)
            resp = await client.chat.completions.create(
                model=self.model_name, max_tokens=1, temperature=0.0, logprobs=True,
                top_logprobs=max(len(choices), TOP_LOGPROBS), **kwargs)
            content = resp.choices[0].logprobs.content or []
            return {t.token: t.logprob for t in content[0].top_logprobs} if content else {}

        async def one(client, prompt):
            masked = await top_logprobs(client, prompt, constrained=True)
            probs = {c: math.exp(masked[c]) if c in masked else 0.0 for c in choices}
            total = sum(probs.values())
            if total <= 0:
                raise ServerError(f"{self.base_url}: no probability on any of {choices} in {masked}")
            free = await top_logprobs(client, prompt, constrained=False)
            mass = sum(math.exp(free[c]) for c in choices if c in free)
            return ChoiceDistribution({c: p / total for c, p in probs.items()}, mass)

        def factory():
            for p in prompts:
                yield lambda client, p=p: one(client, p)
        return self._run(factory, progress)

    def json_complete(self, prompts: list[str], schema: dict, max_tokens: int, seed: int = 0,
                      progress=None, temperature: float = 0.0) -> list[Completion]:
        # a sampled retry sends its seed only where seeds are safe (see send_seed); greedy needs none
        seeded = {"seed": seed} if temperature > 0 and self.send_seed else {}

        async def one(client, prompt):
            constraint = {"structured_outputs": {"json": schema}}
            self.stats.count("/v1/completions" if isinstance(prompt, str) else "/v1/chat/completions")
            if isinstance(prompt, str):
                resp = await client.completions.create(
                    model=self.model_name, prompt=prompt, max_tokens=max_tokens, temperature=temperature, **seeded,
                    extra_body=constraint)
                text = resp.choices[0].text
            else:
                kwargs = self._chat_kwargs(prompt)
                kwargs["extra_body"].update(constraint)
                resp = await client.chat.completions.create(
                    model=self.model_name, max_tokens=max_tokens, temperature=temperature, **seeded, **kwargs)
                text = resp.choices[0].message.content or ""
            usage = resp.usage
            text, thought = strip_thinking(text)
            return Completion(text, usage.prompt_tokens if usage else 0,
                              usage.completion_tokens if usage else 0, resp.choices[0].finish_reason or "stop",
                              thought)

        def factory():
            for p in prompts:
                yield lambda client, p=p: one(client, p)
        return self._run(factory, progress)
