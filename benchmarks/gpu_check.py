"""One short check of the training code on a CUDA GPU, with the settings the real profile trains with there:
bf16 where the GPU computes it (`precision.native_bf16`), gradient checkpointing with LoRA, the base in bf16.

    bash benchmarks/gpu_check.sh            # on the GPU machine (no network: wheels travel, see the .sh)
    python benchmarks/gpu_check.py --cpu    # the same steps on a CPU, fp32: a rehearsal of the script itself

It builds the tiny models (offline, seconds), then runs, each timed, with CUDA's peak memory:
1. the reward-model training core (`mascot.reward.train.train_reward_model`: TRL's RewardTrainer, LoRA with the
   score head) on planted pairs, and reloads the adapter as every later stage does;
2. a few GRPO steps of the speaker stage's engine (`mascot.policy.engine.train_policy`: the trained reward model
   as reward, the format reward) and the watch once on the trained policy (answers, the KL from the base policy);
3. a few GRPO steps of the Director stage (its prompts and its three rewards: the group reward model after a
   rollout by the speaker, directive format, speaker diversity).
The report (markdown) says what ran, on what, in what dtype, how long and how much memory; a step that fails
is reported with its error and the check goes on to the next. Exit 1 when a step failed.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import platform
import sys
import tempfile
import time
import traceback

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def device_line(torch) -> str:
    if torch.cuda.is_available():
        return (f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, capability "
                f"{'.'.join(map(str, torch.cuda.get_device_capability(0)))}, bf16 {torch.cuda.is_bf16_supported()})")
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


class Steps:
    """Each step timed, with the GPU's peak memory; an error is recorded and the next step runs."""

    def __init__(self, torch, report: str, header: list[str]):
        self.torch, self.rows, self.failed, self.report, self.header = torch, [], False, Path(report), header

    def write(self) -> None:
        """The report so far: a run stopped at its time limit still leaves the steps that finished."""
        lines = [*self.header, "| step | status | seconds | peak GPU memory (GiB) | what it says |",
                 "| --- | --- | ---: | ---: | --- |"]
        for name, status, seconds, peak, detail in self.rows:
            lines.append(f"| {name} | {status} | {seconds:.1f} | {'' if peak is None else f'{peak:.2f}'} | {detail} |")
        self.report.parent.mkdir(parents=True, exist_ok=True)
        self.report.write_text("\n".join(lines) + "\n")

    def run(self, name: str, fn):
        torch = self.torch
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            detail = fn() or ""
            status = "ok"
        except Exception as exc:  # the report says what failed, and the other steps still run
            detail, status, self.failed = f"{type(exc).__name__}: {exc}".splitlines()[0][:400], "FAILED", True
            traceback.print_exc()
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        self.rows.append((name, status, time.perf_counter() - start, peak, detail))
        print(f"gpu_check: {name}: {status} in {time.perf_counter() - start:.1f} s {detail}", flush=True)
        self.write()


def planted_pairs(queries: list[dict], personas: dict) -> list[dict]:
    """Pairs whose chosen reply asks the seeker a question and whose rejected one does not (a learnable rule)."""
    pairs = []
    for i, q in enumerate(queries):
        persona = list(personas)[i % len(personas)]
        ctx = q["context"]
        pairs.append({"pair_id": f"p{i}", "query_id": q["query_id"], "conversation_id": q["query_id"],
                      "persona": persona, "split": "eval" if i % 4 == 0 else "train",
                      "prompt": ctx, "chosen": [{"role": "assistant", "content": "What happened next? I am listening."}],
                      "rejected": [{"role": "assistant", "content": "That happens. Moving on."}],
                      "score_chosen": 4.0, "score_rejected": 2.0, "margin": 2.0})
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (a rehearsal of this script)")
    parser.add_argument("--report", default="reports/gpu_check.md")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps of each policy stage")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available() and not args.cpu:
        print("gpu_check: no GPU (torch sees no CUDA device); nothing to check. `--cpu` rehearses the steps here.")
        return 0
    from mascot import precision
    from mascot.config import DirectorParams, GRPOParams, TrainRMParams
    from mascot.data.personas import load_personas
    from mascot.data.queries import build_queries
    from mascot.data.sources.jsonl import load_jsonl_dialogues
    from mascot.io import BadRows
    from mascot.llm.base_model import build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    on_gpu = torch.cuda.is_available()
    header = [f"# GPU check ({time.strftime('%Y-%m-%d %H:%M')})", "",
              f"- device: {device_line(torch)}", f"- torch {torch.__version__}; native bf16 "
              f"(`precision.native_bf16`): {precision.native_bf16()}; python {platform.python_version()}",
              f"- mode: {'GPU' if on_gpu else 'CPU rehearsal (fp32 where bf16 is not native)'}", ""]
    steps = Steps(torch, args.report, header)
    personas = load_personas(str(ROOT / "data/personas.yaml"))
    dialogues = load_jsonl_dialogues(ROOT / "data/demo/dialogues.jsonl", BadRows())
    queries = build_queries(dialogues, list(personas), 128, lambda t: len(t.split()), max_queries=16,
                            personas_per_query=1)
    lines = (ROOT / "data/demo/dialogues.jsonl").read_text().splitlines()
    lines += (ROOT / "data/personas.yaml").read_text().splitlines()
    model_dir = work / "tiny"
    state: dict = {}
    steps.run("build the tiny models", lambda: build_tiny_model(model_dir, lines))
    lora_gpu = {"gradient_checkpointing": True} if on_gpu else {}  # the real profile's GPU settings (trainer_args)
    # both policy stages' block: chat prompts, 4 completions of 2 prompts a step, a fast learning rate
    policy_block = dict(base_model=str(model_dir), prompt_style="chat", num_generations=4, prompts_per_step=2,
                        max_steps=args.steps, learning_rate=1e-3, trainer_args=lora_gpu)

    def reward_model():
        from mascot.reward.scorer import RewardScorer
        from mascot.reward.train import train_reward_model

        params = TrainRMParams(base_model=str(model_dir), batch_size=4, epochs=2, learning_rate=5e-3,
                               max_length=256, eval_steps=100, checkpoint_steps=100, trainer_args=lora_gpu)
        result = train_reward_model(planted_pairs(queries, personas), personas, params, work / "rm",
                                    work / "rm-ckpt", report_to=())
        scorer = RewardScorer.from_dir(work / "rm")
        state["scorer"] = scorer
        m = result["metrics"]
        return (f"{m['train_steps']} steps, loss {m['train_loss']}, eval accuracy {m['eval_accuracy']} on "
                f"{m['eval_pairs']} pairs; reloaded, scores in {next(scorer.model.parameters()).dtype}")
    steps.run("reward model: train (TRL RewardTrainer, LoRA + score head), reload", reward_model)

    def speaker():
        from mascot.annotate.generate import speaker_prompt
        from mascot.granularity import persona_fields
        from mascot.policy.engine import build_trainer
        from mascot.policy.rewards import make_format_reward, make_reward_model_reward, stop_token_ids
        from mascot.policy.watch.callback import Watch
        from mascot.policy.watch.kl import answers_and_kl

        params = GRPOParams(**policy_block, max_completion_length=32)
        rows = [{"prompt": speaker_prompt(personas[p], q["context"], "chat")[0], "query_id": q["query_id"],
                 "persona": p, "context": json.dumps(q["context"])} for q in queries for p in [list(personas)[0]]]
        rewards = [make_reward_model_reward(state["scorer"], personas), make_format_reward(stop_token_ids(str(model_dir)))]
        trainer, tokenizer = build_trainer(rows, rewards, [1.0, 0.5], params, work / "grpo-ckpt", report_to=())  # logs nowhere
        base_dtype = next(p for n, p in trainer.model.named_parameters() if "lora" not in n).dtype
        result = trainer.train()
        probes = rows[:8]

        def answer(model, tok):
            texts, kl = answers_and_kl(model, tok, [r["prompt"] for r in probes], 24)
            rm = state["scorer"].score([(persona_fields(personas[r["persona"]]), q["context"], t)
                                        for r, q, t in zip(probes, queries, texts)])
            return texts, rm, [None] * len(texts), kl
        row = Watch(answer, 1, 0.05, log=None).check(trainer.model, tokenizer, result.global_step)
        return (f"{result.global_step} steps, base weights {base_dtype}, bf16 {trainer.args.bf16}, gradient "
                f"checkpointing {trainer.args.gradient_checkpointing}; watch: {len(row['answers'])} answers, reward "
                f"model {row['mean_reward_model']}, KL from the base {row['mean_kl']} nats a completion")
    steps.run("speaker: GRPO steps + the watch once", speaker)

    def director():
        from mascot.annotate.director import director_prompt
        from mascot.annotate.episodes import Sampling
        from mascot.granularity import BLOCK
        from mascot.llm.local_backend import LocalBackend
        from mascot.policy.director import make_director_rewards
        from mascot.policy.engine import build_trainer
        from mascot.reward.scorer import RewardScorer

        params = DirectorParams(**policy_block, max_completion_length=24)
        rows = [{"prompt": director_prompt(personas, q["context"], [], "chat", prefill=False)[0],
                 "query_id": q["query_id"], "context": json.dumps(q["context"]), "turns": "[]",
                 "previous_speaker": ""} for q in queries]
        group_rm = RewardScorer(state["scorer"].model, state["scorer"].tokenizer, 256, granularity=BLOCK)
        speaker_model = precision.load_causal_lm(str(model_dir), None)
        from transformers import AutoTokenizer

        speaker_backend = LocalBackend.from_model(speaker_model, AutoTokenizer.from_pretrained(model_dir), "tiny", 8)
        rewards = make_director_rewards(group_rm, speaker_backend, personas, params, Sampling(1.0, 1.0, 16, 0))
        trainer, _ = build_trainer(rows, rewards, [1.0, 1.0, 0.2], params, work / "director-ckpt",
                                   report_to=())
        result = trainer.train()
        fmt = [h.get("rewards/directive_format/mean") for h in trainer.state.log_history if "reward" in h]
        return f"{result.global_step} steps, directive format by step {fmt}"
    steps.run("Director: GRPO steps (rollout, group reward model, format, diversity)", director)

    print(steps.report.read_text())
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())
