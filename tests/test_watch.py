"""The watch: the judge looks at the policy during GRPO, and a reward that can be gamed is caught gaming."""
import json

import pytest
import yaml

from mascot.policy.watch.verdict import (IMPROVING, LENGTH, NOT_LEARNING, OVER, TOO_FEW, distinct_2, probe_row, should_stop,
                                         verdict)


def checks_of(rm_by_check, judge_by_check, n=12):
    return [probe_row(step, [f"a reply {i}" for i in range(n)], [rm + 0.01 * i for i in range(n)],
                      [j - 0.01 * i for i in range(n)])
            for step, (rm, j) in enumerate(zip(rm_by_check, judge_by_check))]


@pytest.mark.parametrize("rm, judge, expected", [
    ([0.0, 0.5, 1.0], [3.0, 3.2, 3.5], IMPROVING),
    ([0.0, 0.5, 1.0], [3.0, 3.0, 2.6], OVER),
    ([0.0, 0.5, 1.0], [3.0, 3.01, 3.02], OVER),  # judge flat: below watch.judge_margin
    ([0.0, 0.0, 0.0], [3.0, 3.5, 3.9], NOT_LEARNING),
])
def test_the_verdict_rule(rm, judge, expected):
    result = verdict(checks_of(rm, judge), judge_margin=0.05)
    assert result["verdict"] == expected, result
    assert result["n"] == 12 and result["change"]["reward_model"]["n"] == 12
    assert (result["rm_judge_spearman"] is None) == (expected == NOT_LEARNING)  # a constant series has no rank


def test_a_judge_gain_that_is_length_is_not_improving():
    """The judge pays 0.05 a word and nothing else; the policy's answers grew: raw, the judge rose, at equal length
    it did not. The same rise with lengths that grew unevenly, judge unmoved by them, stays `improving`."""
    n = 12
    first = probe_row(0, [f"p{i} " + "w " * 9 for i in range(n)], [0.0] * n, [3.0] * n)
    grew = [4 + (i % 5) for i in range(n)]  # every answer longer, by 4 to 8 words: no probe at equal length
    by_length = probe_row(4, [f"p{i} " + "w " * (9 + g) for i, g in enumerate(grew)], [1.0 + 0.01 * i for i in range(n)],
                          [3.0 + 0.05 * g for g in grew])
    result = verdict([first, by_length], judge_margin=0.05)
    assert result["verdict"] == LENGTH, result
    assert result["change"]["judge_equal_length"]["extrapolated"] and "the gain is length" in result["why"]
    moved = [(-3, 3)[i % 2] + (i % 3) for i in range(n)]  # some shorter, some longer
    better = probe_row(4, [f"p{i} " + "w " * (9 + m) for i, m in enumerate(moved)], [1.0 + 0.01 * i for i in range(n)],
                       [3.4 + 0.01 * i for i in range(n)])
    kept = verdict([first, better], judge_margin=0.05)
    assert kept["verdict"] == IMPROVING and kept["change"]["judge_equal_length"]["ci_low"] > 0, kept


def test_a_directors_length_is_its_blocks_not_its_directives():
    """The stage-2 positive control (2026-12-04): the trained Director's directives all grew (its Action line),
    the blocks the judge read did not; read on the directives' words the judge's rise was `gain is length`
    (EXTRAPOLATED). The length a stage passes (what the judge read) is the one the verdict regresses on."""
    n = 12
    blocks = [8 + (i % 4) for i in range(n)]
    first = probe_row(0, [f"Agent: X\nAction: {'a ' * 3}" for _ in range(n)], [0.0] * n, [1.0] * n,
                      {"length": blocks})
    last = probe_row(4, [f"Agent: Y\nAction: {'a ' * (9 + i % 3)}" for i in range(n)], [2.0 + 0.01 * i for i in range(n)],
                     [5.0] * n, {"length": blocks[::-1]})
    assert first["length"] == blocks and last["mean_length"] == sum(blocks) / n
    result = verdict([first, last], judge_margin=0.05)
    assert result["verdict"] == IMPROVING and not result["change"]["judge_equal_length"]["extrapolated"], result
    on_directives = verdict([probe_row(0, first["answers"], [0.0] * n, [1.0] * n),
                             probe_row(4, last["answers"], last["reward_model"], [5.0] * n)], judge_margin=0.05)
    assert on_directives["verdict"] == LENGTH  # what it said before


def test_a_collapsed_policy_is_read_where_its_answers_were_still_distinct():
    """The negative control's GRPO (2026-12-03): the policy's 31 answers collapsed to 2 texts, and the noise judge's
    one draw for them read as a rise 'over 31 probes'. A check of fewer than stats.min_n distinct answers is not read;
    the verdict rests on the last one that had enough, or says too few to tell."""
    n = 12
    start = probe_row(0, [f"answer {i}" for i in range(n)], [0.0] * n, [3.0 - 0.01 * i for i in range(n)])
    distinct = probe_row(30, [f"better {i}" for i in range(n)], [1.0 + 0.01 * i for i in range(n)],
                         [3.5 - 0.01 * i for i in range(n)])
    collapsed = probe_row(60, ["aaaa"] * n, [1.02] * n, [4.5] * n)
    read = verdict([start, distinct, collapsed], 0.05)
    assert read["verdict"] == IMPROVING and read["collapsed_at_step"] == 60 and "collapsed by step 60" in read["why"]
    assert read["change"]["judge"]["mean"] == 0.5  # step 30's change, not the collapsed 4.5's
    only = verdict([start, collapsed], 0.05)
    assert only["verdict"] == TOO_FEW and "1 distinct answers to 12 probes" in only["why"] and only["n"] == 12


def test_too_few_probes_or_checks_is_too_few_to_tell():
    assert verdict(checks_of([0.0, 1.0], [3.0, 2.0], n=4), 0.05)["verdict"] == TOO_FEW  # n 4 < stats.min_n
    assert verdict(checks_of([0.0], [3.0]), 0.05)["verdict"] == TOO_FEW
    assert verdict(checks_of([0.0, 1.0], [3.0, 2.0]), 0.05, min_checks=3)["verdict"] == TOO_FEW


def test_early_stop_waits_for_patience_checks():
    assert not should_stop(checks_of([0.0, 1.0], [3.0, 2.0]), 0.05, patience=2)
    assert should_stop(checks_of([0.0, 1.0, 2.0], [3.0, 2.0, 1.5]), 0.05, patience=2).kind == "over_optimising"
    assert not should_stop(checks_of([0.0, 1.0, 2.0], [3.0, 2.0, 3.9]), 0.05, patience=2)


def test_distinct_2_falls_with_repetition():
    assert distinct_2("one two three four") == 1.0 and distinct_2("a b a b a b") == 0.4 and distinct_2("word") == 1.0


@pytest.fixture(autouse=True)
def fp32_watch(monkeypatch):
    """These tests check the watch's logic on a tiny random policy whose greedy lengths sit at the cap: they pin
    fp32 so that a bf16 rounding of its near-tied logits cannot decide what the test measures."""
    import mascot.precision

    monkeypatch.setattr(mascot.precision, "native_bf16", lambda: False)


def length_paying_setup(tiny_model_dir, tmp_path, **watch):
    """A deliberately hackable reward (it pays for the first line's length) and a judge that wants concise
    replies: GRPO makes the replies longer, and the watch sees the reward rise while the judge falls."""
    from mascot.config import WatchParams, parse_params
    from mascot.policy.rewards import first_line
    from mascot.policy.watch.callback import Watch
    from mascot.policy.watch.kl import answers_and_kl

    prompts = [f"Person: I feel sad about thing {i}.\nThe Anchor:" for i in range(12)]

    def length_reward(prompts, completions, **_):
        return [float(len(first_line(c))) for c in completions]

    def answer(model, tokenizer):
        raw, kl = answers_and_kl(model, tokenizer, prompts, 32)
        replies = [first_line(x) for x in raw]
        return replies, [float(len(r)) for r in replies], [5.0 - min(4.0, len(r) / 10) for r in replies], kl

    raw = yaml.safe_load(open("params.yaml"))
    raw["grpo"] = {"base_model": str(tiny_model_dir), "num_generations": 4, "prompts_per_step": 2,
                   "max_completion_length": 32, "max_steps": 10, "learning_rate": 3e-2, "temperature": 1.0,
                   "lora": {"r": 8, "alpha": 16}, "watch": {"every_steps": 2, **watch}}
    raw["mlflow"] = {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "artifact_root": str(tmp_path / "art")}
    params = parse_params(raw)
    w: WatchParams = params.grpo.watch
    return (params, [{"prompt": p} for p in prompts], length_reward,
            Watch(answer, w.every_steps, w.judge_margin, w.stop_when_over_optimising, w.patience,
                  probes=[{"probe": f"p{i}", "persona": "The Anchor", "prompt": p} for i, p in enumerate(prompts)],
                  max_kl=w.max_kl))


def run_stage(params, rows, reward, watch, tmp_path):
    import mlflow

    from mascot import registry
    from mascot.policy.engine import PolicyStage, run_policy_stage

    registry.setup_tracking(params)
    mlflow.set_tracking_uri(params.mlflow.tracking_uri)
    tags = {**registry.git_state(), "reward_model": "length", "reward_model_version": "0"}
    stage = PolicyStage("grpo", params.grpo, "watch-test", "a speaker trained on a reward that pays for length",
                        [reward], [1.0], tags, str(tmp_path / "policy"), str(tmp_path / "metrics.json"), {},
                        watch=watch, watch_plot=str(tmp_path / "watch.csv"))
    return run_policy_stage(params, stage, rows)


def test_a_length_paying_reward_is_caught_and_left_without_champion(tiny_model_dir, tmp_path, repo_root, monkeypatch,
                                                                   capsys):
    from mlflow import MlflowClient

    monkeypatch.chdir(repo_root)
    params, rows, reward, watch = length_paying_setup(tiny_model_dir, tmp_path)
    metrics, version = run_stage(params, rows, reward, watch, tmp_path)
    out = capsys.readouterr().out
    print(out[-1500:])
    assert metrics["watch_verdict"] == OVER, metrics["watch_why"]
    assert metrics["watch_reward_model_change_ci_low"] > 0 and metrics["watch_judge_change"] < 0
    assert metrics["champion"] is False and "registered without @champion" in out and "over-optimising" in out
    client = MlflowClient()
    mv = client.get_model_version(version.name, version.version)
    assert "champion" not in (mv.aliases or []) and "over-optimising" in mv.tags["champion_refused"]
    assert mv.tags["watch_verdict"] == OVER
    rows_csv = (tmp_path / "watch.csv").read_text().splitlines()
    assert rows_csv[0] == "step,mean_reward_model,mean_judge,mean_length,mean_distinct_2,mean_kl,mean_kl_token"
    assert [r.split(",")[0] for r in rows_csv[1:]] == ["0", "2", "4", "6", "8", "10"]
    history = client.get_metric_history(version.run_id, "watch/judge")
    assert [m.step for m in history] == [0, 2, 4, 6, 8, 10]
    # the policy's distance from the base policy: none at step 0 (LoRA's B starts at zero), then it grows
    kl = [float(r.split(",")[5]) for r in rows_csv[1:]]
    assert kl[0] < 1e-4 and kl[-1] > 0.1 and metrics["watch_kl_change"] > 0, kl
    assert [m.step for m in client.get_metric_history(version.run_id, "watch/kl")] == [0, 2, 4, 6, 8, 10]
    peak = metrics["watch_judge_peak_step"]
    assert peak == 0 and metrics["watch_judge_peak_kl"] == kl[0] and "the judge peaked at step 0" in metrics["watch_why"]
    # every probe answer of every check, in the run as an MLflow table
    run = client.get_run(version.run_id)
    table = client.load_table(run.info.experiment_id, "watch_completions.json", run_ids=[version.run_id])
    assert len(table) == 6 * 12 and {"step", "probe", "persona", "prompt", "completion", "reward_model",
                                     "judge_total", "kl", "kl_token"} <= set(table.columns)
    assert table[table.step == 10].kl.mean() == pytest.approx(kl[-1], abs=1e-3)


def test_early_stop_keeps_the_judges_best_adapter(tiny_model_dir, tmp_path, repo_root, monkeypatch):
    from safetensors.torch import load_file

    monkeypatch.chdir(repo_root)
    params, rows, reward, watch = length_paying_setup(tiny_model_dir, tmp_path, stop_when_over_optimising=True,
                                                      patience=1)
    metrics, version = run_stage(params, rows, reward, watch, tmp_path)
    print(json.dumps({k: v for k, v in metrics.items() if k.startswith("watch_")}, indent=1))
    assert metrics["watch_stopped_early"] and metrics["watch_stopped_at_step"] < 10
    assert metrics["steps"] == metrics["watch_stopped_at_step"] and metrics["watch_kept_step"] == 0
    # the kept adapter is step 0's, before any update: LoRA's B matrices start at zero
    weights = load_file(tmp_path / "policy/adapter_model.safetensors")
    assert all(float(v.abs().sum()) == 0.0 for k, v in weights.items() if "lora_B" in k)


def test_an_answer_without_a_reward_model_score_is_left_out_of_the_change():
    """A Director's directive that does not parse leaves no block: no reward-model score, the judge's floor."""
    first = probe_row(0, ["x"] * 12, [0.0] * 11 + [None], [3.0] * 12)
    last = probe_row(4, ["x"] * 12, [1.0] * 12, [1.0] + [3.0] * 11)
    assert first["reward_model"][-1] is None and first["mean_reward_model"] == 0.0
    result = verdict([first, last], 0.05)
    assert result["change"]["reward_model"]["n"] == 11 and result["change"]["judge"]["n"] == 12


def test_the_watch_judges_each_distinct_answer_once_and_nothing_at_the_floor():
    from mascot.policy.watch.callback import JudgeMemo

    asked = []

    def score_units(units):
        asked.extend(u["item"] for u in units)
        return [{"status": "unscored" if u["item"] == "broken" else "scored", "total_reward": len(u["item"])}
                for u in units]

    memo = JudgeMemo(score_units, floor=1.0)
    units = [{"item": "hello", "skip": None}, {"item": "", "skip": "empty reply"}, {"item": "hello", "skip": None},
             {"item": "broken", "skip": None}]
    assert memo(units) == [5, 1.0, 5, None]
    assert memo([{"item": "hello", "skip": None}, {"item": "hi there", "skip": None}]) == [5, 8]
    assert asked == ["hello", "broken", "hi there"]  # a repeat, within a check or across checks, is not asked again


def test_the_watch_stops_where_the_kl_passes_its_bar(tiny_model_dir, tmp_path, repo_root, monkeypatch):
    """watch.max_kl: training stops at the first check whose mean KL from the base policy passes it (the
    over-optimising stop off), and keeps the adapter of the check the judge scored best."""
    monkeypatch.chdir(repo_root)
    params, rows, reward, watch = length_paying_setup(tiny_model_dir, tmp_path, max_kl=0.05)
    metrics, version = run_stage(params, rows, reward, watch, tmp_path)
    assert metrics["watch_stopped_early"] and metrics["watch_stopped_at_step"] < 10
    assert metrics["watch_stop_reason"].startswith("the KL from the base policy")
    kl_at_stop = [c["mean_kl"] for c in watch.checks if c["step"] == metrics["watch_stopped_at_step"]][0]
    assert kl_at_stop > 0.05 and all(c["mean_kl"] <= 0.05 for c in watch.checks[:-1])
    assert metrics["watch_kept_step"] == metrics["watch_judge_peak_step"]


def test_the_judge_peak_and_a_kl_stop_are_pure_functions_of_the_checks():
    from mascot.policy.watch.verdict import judge_peak

    checks = checks_of([0.0, 1.0, 2.0], [3.0, 3.6, 3.2])
    for c, kl in zip(checks, [0.0, 0.4, 1.2]):
        c["mean_kl"] = kl
    assert judge_peak(checks) == {"step": 1, "judge": checks[1]["mean_judge"], "kl": 0.4, "kl_token": None}
    why = should_stop(checks, 0.05, patience=5, max_kl=1.0)
    assert why.kind == "kl" and why.words.startswith("the KL from the base policy 1.2")
    assert should_stop(checks, 0.05, patience=5, max_kl=2.0) is None


def test_a_saved_history_from_before_kl_is_padded_at_load_and_tabled(tmp_path):
    """A checkpoint's watch state written before the watch measured KL and the judge's dimensions loads with
    None per probe there, so the completions table has every column for every check."""
    from mascot.policy.watch.callback import Watch

    old = [{k: v for k, v in c.items() if k not in ("kl", "kl_token", "judge_dimensions")}
           for c in checks_of([0.0, 1.0], [3.0, 3.2], n=3)]
    (tmp_path / Watch.STATE_FILE).write_text(json.dumps({"checks": old, "stopped_at": None, "best": None}))
    watch = Watch(None, 1, 0.05, probes=[{"probe": f"q{k}", "persona": "The Anchor", "prompt": "hi"} for k in range(3)])
    assert watch.load_from(tmp_path)
    new = probe_row(2, ["a reply"] * 3, [2.0] * 3, [3.4] * 3, {"kl": [0.1, 0.2, 0.3]})
    watch.checks.append(new)
    table = watch.completions()
    assert table["step"] == [0, 0, 0, 1, 1, 1, 2, 2, 2] and table["probe"][:3] == ["q0", "q1", "q2"]
    assert table["kl"] == [None] * 6 + [0.1, 0.2, 0.3] and len(table["kl_token"]) == 9


PROBE_PROMPTS = ["Person: hi.\nThe Anchor:", "Person: I lost my job and I do not know what to do next.\nThe Anchor:",
                 "Person: my sister is ill, and the doctors say little.\nThe Catalyst:"]


def lora_policy(tiny_model_dir, dtype=None):
    """The tiny model with a LoRA adapter whose B is drawn at a fixed seed (a policy that moved)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype or torch.float32),
                           LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "v_proj"])).eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5)
    return model


def padded_batch(tokenizer, prompts: list[str], lengths: list[int]):
    """The batch as generate leaves it: prompts padded on the left, answers of `lengths` tokens, then padding."""
    import torch

    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    width, longest, pad = max(map(len, prompt_ids)), max(lengths), tokenizer.pad_token_id
    answer_ids = torch.randint(5, tokenizer.vocab_size, (len(prompts), longest), generator=torch.Generator().manual_seed(1))
    rows = [[pad] * (width - len(ids)) + ids + answer_ids[k, :lengths[k]].tolist() + [pad] * (longest - lengths[k])
            for k, ids in enumerate(prompt_ids)]
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
    alone = [(torch.tensor([ids + answer_ids[k, :lengths[k]].tolist()]), torch.ones(1, len(ids), dtype=torch.long),
              len(ids)) for k, ids in enumerate(prompt_ids)]
    return torch.tensor(rows), mask, width, alone


def test_the_kl_of_a_batch_of_left_padded_probes_is_each_probes_kl_alone(tiny_model_dir):
    """The watch's KL runs probes in batches (left-padded prompts of different lengths, answers that stop at
    different tokens): in fp32 each probe's figure is the one it gets alone; an adapter that is zero gives 0."""
    import torch
    from transformers import AutoTokenizer

    from mascot.policy.watch.kl import _kl_from_base, answers_and_kl

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = lora_policy(tiny_model_dir)
    with torch.no_grad():
        drawn = {n: w.clone() for n, w in model.named_parameters() if "lora_B" in n}
        for n, w in model.named_parameters():
            if n in drawn:
                w.zero_()
        assert answers_and_kl(model, tokenizer, PROBE_PROMPTS, 8)[1]["kl"] == [0.0] * 3  # LoRA's B at zero
        for n, w in model.named_parameters():
            if n in drawn:
                w.copy_(drawn[n])
        assert all(k > 0 for k in answers_and_kl(model, tokenizer, PROBE_PROMPTS, 8)[1]["kl"])
        lengths = [6, 2, 4]
        rows, mask, width, alone_inputs = padded_batch(tokenizer, PROBE_PROMPTS, lengths)
        batched = _kl_from_base(model, rows, mask, width, lengths)
        alone = [_kl_from_base(model, ids, m, w, [n]) for (ids, m, w), n in zip(alone_inputs, lengths)]
    assert all(k > 0 for k in batched[0])
    assert batched[0] == pytest.approx([a[0][0] for a in alone], rel=1e-5, abs=2e-5)
    assert batched[1] == pytest.approx([a[1][0] for a in alone], rel=1e-5, abs=2e-6)


def test_the_kl_of_a_bf16_policy_is_computed_in_fp32_and_the_policy_left_as_it_was(tiny_model_dir):
    """watch.kl_dtype float32 (the default): a bf16 policy's KL is the one an fp32 copy of the same weights gives
    (rounding moved the CPU default's figure by 4% in bf16), and afterwards every parameter is back in its own
    dtype, bit for bit, in the same Parameter object (the optimizer holds them)."""
    import copy

    import torch
    from transformers import AutoTokenizer

    from mascot.policy.watch.kl import _kl_from_base

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    policy = lora_policy(tiny_model_dir, torch.bfloat16)
    reference = copy.deepcopy(policy)
    for t in (*reference.parameters(), *reference.buffers()):
        t.data = t.data.float()
    before = {n: (t, t.detach().clone()) for n, t in policy.named_parameters()}
    assert {t.dtype for t, _ in before.values()} == {torch.bfloat16, torch.float32}  # base bf16, adapter fp32
    lengths = [6, 2, 4]
    rows, mask, width, _ = padded_batch(tokenizer, PROBE_PROMPTS, lengths)
    with torch.no_grad():
        kl = _kl_from_base(policy, rows, mask, width, lengths)
        expected = _kl_from_base(reference, rows, mask, width, lengths)
    assert all(k > 0 for k in kl[0]) and kl[0] == pytest.approx(expected[0], rel=1e-5, abs=2e-5)
    after = dict(policy.named_parameters())
    assert all(after[n] is t and t.dtype == old.dtype and torch.equal(t, old) for n, (t, old) in before.items())
    # inside the trainer: accelerate's mixed precision wraps the forward in bf16 autocast (as it does, with the
    # forward beneath kept in _original_forward); the KL is still the fp32 one
    policy._original_forward = policy.forward
    policy.forward = torch.autocast("cpu", dtype=torch.bfloat16)(policy.forward)
    with torch.no_grad():
        assert _kl_from_base(policy, rows, mask, width, lengths)[0] == pytest.approx(expected[0], rel=1e-5, abs=2e-5)


def test_the_kl_scores_only_the_answer_positions_and_gives_the_full_heads_figure(tiny_model_dir):
    """The head runs over the answer's positions alone (over every position it cost the CPU default's watch 132 of
    train_grpo's 341 s): the KL is the one the whole-sequence logits give."""
    import torch
    from transformers import AutoTokenizer

    from mascot.policy.watch.kl import _kl_from_base

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = lora_policy(tiny_model_dir)
    lengths = [6, 2, 4]
    rows, mask, width, alone = padded_batch(tokenizer, PROBE_PROMPTS, lengths)

    def full_head_kl(ids, n_prompt, n_answer):  # the causal LM's own logits at every position, then the answer's
        logits = model(input_ids=ids).logits[0, n_prompt - 1: n_prompt - 1 + n_answer].float()
        with model.disable_adapter():
            base = model(input_ids=ids).logits[0, n_prompt - 1: n_prompt - 1 + n_answer].float()
        p, q = logits.log_softmax(-1), base.log_softmax(-1)
        return float((p.exp() * (p - q)).sum(-1).clamp(min=0).sum())

    with torch.no_grad():
        kl = _kl_from_base(model, rows, mask, width, lengths)[0]
        expected = [full_head_kl(ids, n_prompt, n) for (ids, _, n_prompt), n in zip(alone, lengths)]
    assert all(k > 0 for k in kl) and kl == pytest.approx(expected, rel=1e-5, abs=2e-5)
