"""Rollouts decoded under a grammar, in-process (xgrammar): the Director's directive form for every sample, and,
with `train_director.explore_choices: stratified`, one agent a row so that each group of rollouts compares the
agents on the same state (docs/results.md, issue 64). Behind vLLM the one grammar is its structured outputs."""
from __future__ import annotations

import random

from mascot.llm.local_backend import compile_grammar


def stratified_choices(rows: int, group_size: int, choices: int, first_row: int = 0, offset=lambda group: 0) -> list[int]:
    """The choice each of `rows` consecutive rollout rows is given: the rows of one group (TRL repeats a prompt
    `group_size` times in a row) take the choices in turn, from the group's `offset`, so a group of 8 over 4 agents
    holds each twice and a group smaller than the choices covers them over the groups. `first_row`: this process's
    first row in the whole batch (a group may span processes)."""
    picks = []
    for row in range(first_row, first_row + rows):
        group, within = divmod(row, group_size)
        picks.append((offset(group) + within) % choices)
    return picks


def constrain_generation(model, tokenizer, regex: str, rollout_regexes: list[str] | None = None,
                         group_size: int = 1, seed: int = 0, first_row=lambda rows: 0) -> dict:
    """Have `model.generate` (TRL's rollouts without vLLM) decode under `regex` (xgrammar): each completion
    matches it, then ends in the tokenizer's EOS, the stop token TRL's completion mask looks for. The loss is
    the policy's own log-probability of the tokens it sampled, as TRL trains with vLLM's structured outputs. The
    watch samples from this same model object, so it decodes under the grammar too, as the rollouts do.
    `rollout_regexes`: while the returned state's `rollout` is set (TRL's rollouts, not the watch), the rows decode
    under these in turn (`stratified_choices`, a seeded offset a group and call). The loss is still the
    log-probability of what each row decoded: within a group whose rows hold every choice once, GRPO's advantages
    sum to 0, so the gradient on the choice's logits is the advantage of each choice (uniform exploration)."""
    from xgrammar.contrib.hf import LogitsProcessor

    def compiled_of(source: str):
        return compile_grammar(tokenizer, model.config.vocab_size, "regex", source,
                               stop_token_ids=[tokenizer.eos_token_id])
    compiled = compiled_of(regex)
    per_choice = [compiled_of(r) for r in rollout_regexes or []]
    state = {"rollout": False, "calls": 0}
    generate = model.generate

    def constrained(*args, **kwargs):
        grammar = compiled
        if per_choice and state["rollout"]:
            rows = (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]).shape[0]
            call = state["calls"]
            state["calls"] += 1
            # the same offset on every process for the same group (each process counts the same calls)
            picks = stratified_choices(rows, group_size, len(per_choice), first_row(rows),
                                       lambda group: random.Random(f"{seed}:{call}:{group}").randrange(len(per_choice)))
            grammar = [per_choice[i] for i in picks]
        # xgrammar's processor keeps matcher state: a fresh one per call
        kwargs["logits_processor"] = [*(kwargs.get("logits_processor") or []), LogitsProcessor(grammar)]
        return generate(*args, **kwargs)
    model.generate = constrained
    return state


def constrain_trainer(trainer, tokenizer, regex: str, rollout_regexes: list[str] | None, group_size: int,
                      seed: int) -> dict:
    """`constrain_generation` on a GRPOTrainer's model, with the stratified rows switched on inside TRL's own
    rollout call only: the watch and the choice probe call the same model's `generate` outside it and keep the one
    grammar (the policy's own choice). Returns the state (`calls`: stratified rollout batches so far)."""
    state = constrain_generation(trainer.model, tokenizer, regex, rollout_regexes, group_size, seed,
                                 lambda rows: trainer.accelerator.process_index * rows)
    if rollout_regexes:
        rollouts = trainer._generate_single_turn

        def stratified_rollouts(*args, **kwargs):
            state["rollout"] = True
            try:
                return rollouts(*args, **kwargs)
            finally:
                state["rollout"] = False
        trainer._generate_single_turn = stratified_rollouts
    return state
