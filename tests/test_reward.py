import json

import pytest
import torch

from mascot.config import LoraParams, TrainRMParams
from mascot.reward.evaluation import pair_metrics
from mascot.granularity import CUT_MARK, REPLY, persona_fields
from mascot.reward.prompt import reward_input_ids
from mascot.reward.scorer import RewardScorer
from mascot.reward.train import check_score_head, train_reward_model
from mascot.registry import decide_promotion


def make_pairs(personas, n=12):
    pairs = []
    names = list(personas)
    for i in range(n):
        persona = names[(i // 4) % len(names)]  # every persona in both splits
        pairs.append({
            "pair_id": f"p{i}", "query_id": f"q{i}", "persona": persona, "split": "eval" if i % 4 == 0 else "train",
            "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"I feel sad about thing {i}."}],
            "chosen": [{"role": "assistant", "content": "That sounds hard, I hear you."}],
            "rejected": [{"role": "assistant", "content": "Whatever."}],
            "score_chosen": 4.0, "score_rejected": 2.0 + (i % 3) * 0.5, "margin": 2.0 - (i % 3) * 0.5})
    return pairs


def test_reward_input_cuts_context_from_the_left_keeping_the_reply(tiny_model_dir, personas):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    persona = persona_fields(personas["The Anchor"])
    context = [{"role": "user", "content": f"old turn {i} " * 30} for i in range(4)] + \
              [{"role": "user", "content": "the last thing I said"}]
    full, cut = reward_input_ids(tok, REPLY, persona, context, "my reply", 100000)
    assert not cut and full[-1] == tok.eos_token_id
    short, cut = reward_input_ids(tok, REPLY, persona, context, "my reply", len(full) // 2)
    assert cut and len(short) <= len(full) // 2
    text = tok.decode(short)
    # the reply is last and whole: the cut input ends with the same reply tokens and end of sequence as the full one
    tail = len(tok("Reply of The Anchor: my reply", add_special_tokens=False)["input_ids"]) + 1
    assert short[-1] == tok.eos_token_id and short[-tail:] == full[-tail:]
    assert tok.decode(short[-tail:-1]).replace(" ", "").endswith("myreply")
    assert CUT_MARK.strip() in text and "the last thing I said" in text and "old turn 0" not in text
    with pytest.raises(ValueError, match="raise max_length"):
        reward_input_ids(tok, REPLY, persona, context, "my reply", 10)


def test_pair_metrics_buckets():
    pairs = [{"margin": 0.1}, {"margin": 0.3}, {"margin": 2.0}, {"margin": 2.5}]
    m = pair_metrics(pairs, [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0])
    assert m["accuracy"] == 0.5 and m["gap_0_0.25_accuracy"] == 1.0 and m["gap_0.25_0.5_accuracy"] == 0.0
    assert m["gap_1_5_pairs"] == 2 and m["gap_1_5_accuracy"] == 0.5 and m["gap_0.5_1_accuracy"] is None


def test_promotion_gate():
    def m(acc, margin=0.1):
        return {"accuracy": acc, "mean_margin": margin}
    assert decide_promotion(m(0.7), None, 0.5)[0]
    assert decide_promotion(m(0.7), m(0.6), 0.5)[0]
    assert decide_promotion(m(0.7, 0.2), m(0.7, 0.1), 0.5)[0]
    ok, why = decide_promotion(m(0.7, 0.05), m(0.7, 0.1), 0.5)
    assert not ok and "ties the champion" in why
    ok, why = decide_promotion(m(0.6), m(0.7), 0.5)
    assert not ok and "worse than the champion" in why
    ok, why = decide_promotion(m(0.4), None, 0.5)
    assert not ok and "below the threshold" in why
    assert not decide_promotion(m(None), None, 0.0)[0]


def test_train_changes_lora_and_head_and_reloads_identically(tiny_model_dir, personas, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")  # HF's callback logs here
    from safetensors.torch import load_file

    params = TrainRMParams(base_model=str(tiny_model_dir), batch_size=2, gradient_accumulation_steps=1,
                           learning_rate=5e-3, epochs=2, max_length=512, eval_steps=2, checkpoint_steps=1000,
                           lora=LoraParams(r=4, alpha=8))
    out = tmp_path / "rm"
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    with mlflow.start_run():
        result = train_reward_model(make_pairs(personas), personas, params, out, tmp_path / "ckpt")
    m = result["metrics"]
    assert m["train_pairs"] == 9 and m["eval_pairs"] == 3 and m["cut_pairs"] == 0
    assert m["train_steps"] == 10 and m["eval_accuracy"] is not None
    weights = load_file(out / "adapter_model.safetensors")
    assert check_score_head(out)
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # LoRA B starts at zero: it really trained
    # reload from the folder in this process: identical probe scores
    again = RewardScorer.from_dir(out)
    from mascot.reward.train import probe_items
    assert again.score(probe_items(personas)) == pytest.approx(result["probe_scores"], abs=1e-5)
    # the easy preference (empathetic vs dismissive) is learned on train pairs
    assert m["eval_mean_margin"] > 0


def test_a_shallow_reward_model_trains_on_the_bases_first_layers_and_reloads_as_trained(tiny_model_dir, personas,
                                                                                         tmp_path, monkeypatch):
    """train_rm.keep_layers: the reward model reads only the base's first N decoder layers; the adapter's meta says
    N and every load takes the same N (the reload scores as training did); a base with fewer layers keeps all."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    import json

    import mlflow

    from mascot.reward.scorer import load_base_classifier
    from mascot.reward.train import probe_items

    params = TrainRMParams(base_model=str(tiny_model_dir), batch_size=2, learning_rate=5e-3, epochs=1, max_length=512,
                           eval_steps=50, checkpoint_steps=1000, lora=LoraParams(r=4, alpha=8), keep_layers=1)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    with mlflow.start_run():
        result = train_reward_model(make_pairs(personas), personas, params, tmp_path / "rm", tmp_path / "ckpt")
    assert json.loads((tmp_path / "rm/mascot_reward.json").read_text())["keep_layers"] == 1
    again = RewardScorer.from_dir(tmp_path / "rm")
    assert again.model.get_base_model().config.num_hidden_layers == 1
    assert again.score(probe_items(personas)) == pytest.approx(result["probe_scores"], abs=1e-5)
    tokenizer = again.tokenizer
    assert load_base_classifier(str(tiny_model_dir), tokenizer, keep_layers=8).config.num_hidden_layers == 2


def test_length_grouped_batches_pad_less_and_keep_every_row_once():
    from mascot.reward.train import length_grouped

    rows = [{"chosen_ids": [0] * n, "rejected_ids": [0] * (n // 2), "k": k} for k, n in
            enumerate([5, 90, 7, 88, 12, 70, 6, 95, 9, 80, 11, 60] * 4)]
    grouped = length_grouped(rows, batch_size=4, seed=0, megabatch=12)
    assert sorted(r["k"] for r in grouped) == sorted(r["k"] for r in rows)

    def padded(order):
        return sum(max(len(r["chosen_ids"]) for r in order[i: i + 4]) * 4 for i in range(0, len(order), 4))
    assert padded(grouped) < 0.75 * padded(rows)
    assert length_grouped(rows, 4, seed=0, megabatch=12) == grouped  # seeded


def test_training_throughput_counts_pairs_trained_per_second_of_training():
    from mascot.config import TrainRMParams
    from mascot.reward.train import training_throughput

    params = TrainRMParams(batch_size=4, gradient_accumulation_steps=1, epochs=2)
    # 10 pairs x 2 epochs = 20 pairs in 6 steps of up to 4 (the last batch of each epoch holds 2), 12 s of which
    # 2 s were evaluation passes
    out = training_throughput(10, params, 6, 1, 12.0, [{"loss": 1.0}, {"eval_runtime": 1.5}, {"eval_runtime": 0.5}])
    assert out == {"trained_pairs": 20, "time_eval_in_train_s": 2.0, "train_pairs_per_s": 2.0}


def test_a_reward_model_is_refused_on_what_it_was_not_trained_with(tiny_model_dir, personas, tmp_path, monkeypatch):
    """The adapter's meta is checked at load: its granularity is required, the reward text must be built as in
    training (template hash), and the base folder must hold the weights it was trained on. Each refusal is one
    line that names the adapter, what it was trained with, what is here and what to run."""
    import shutil

    import mlflow

    from mascot.io import InputError
    from mascot.llm.base_model import build_tiny_model
    from tests.conftest import REPO

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    base = tmp_path / "small"
    shutil.copytree(tiny_model_dir, base)
    params = TrainRMParams(base_model=str(base), batch_size=2, epochs=1, max_length=512, eval_steps=2,
                           lora=LoraParams(r=4, alpha=8))
    out = tmp_path / "rm"
    with mlflow.start_run():
        train_reward_model(make_pairs(personas, 8), personas, params, out, tmp_path / "ckpt")
    RewardScorer.from_dir(out)  # as trained: loads
    meta_path = out / "mascot_reward.json"
    meta = json.loads(meta_path.read_text())

    def refused(**changed) -> str:
        meta_path.write_text(json.dumps({k: v for k, v in {**meta, **changed}.items() if v is not None}))
        with pytest.raises(InputError) as exc:
            RewardScorer.from_dir(out)
        meta_path.write_text(json.dumps(meta))
        assert "\n" not in str(exc.value)
        return str(exc.value)

    assert "names no known granularity (None" in refused(granularity=None)
    assert "retrain it (`dvc repro train_rm`" in refused(granularity=None)
    assert f"built by template 0123abcd, but this code builds {REPLY.template_hash}" in refused(template_hash="0123abcd")
    # other weights at the same path (another source, a re-conversion): refused, not silently put under the adapter
    lines = (REPO / "data/demo/dialogues.jsonl").read_text().splitlines()
    build_tiny_model(base, lines, seed=5)
    with pytest.raises(InputError, match=f"trained on base weights {meta['base_model_digest']} .* but '{base}' holds"):
        RewardScorer.from_dir(out)


def test_the_template_hash_follows_every_part_of_the_reward_text(monkeypatch):
    """The template, the transcript renderer and the cut mark all change it (the persona fields likewise)."""
    import mascot.granularity as granularity
    from mascot import transcript

    before = REPLY.template_hash, granularity.BLOCK.template_hash
    monkeypatch.setattr(granularity, "REWARD_REPLY_TEMPLATE", granularity.REWARD_REPLY_TEMPLATE + " ")
    assert REPLY.template_hash != before[0]
    monkeypatch.undo()
    real_render = transcript.render
    monkeypatch.setattr(transcript, "render", lambda *a, **k: real_render(*a, **k).upper())
    assert (REPLY.template_hash, granularity.BLOCK.template_hash) != before
    monkeypatch.undo()
    monkeypatch.setattr(granularity, "persona_fields", lambda p: {"name": p.name, "role": p.role,
                                                                  "description": p.description, "tone": p.role})
    assert REPLY.template_hash != before[0]
    monkeypatch.undo()
    assert (REPLY.template_hash, granularity.BLOCK.template_hash) == before


def test_probe_takes_the_registered_model_name_from_the_uri():
    from mascot.io import InputError
    from mascot.promote import parse_model_uri

    assert parse_model_uri("models:/mascot-group-rm@champion") == ("mascot-group-rm", "@champion")
    assert parse_model_uri("models:/mascot-group-rm/3") == ("mascot-group-rm", "3")
    with pytest.raises(InputError, match="expected models:/NAME@ALIAS"):
        parse_model_uri("runs:/abc/model")


def test_a_point_bar_decides_only_where_the_interval_can_tell():
    """Under bar_on point an accuracy whose interval holds the threshold is "too few to tell": promoted, in those
    words, whichever side of the bar the point falls (the CPU default's 10 judge pairs, 0.4 [0.0, 0.8], stopped
    `make repro` on one machine and not another); an interval wholly below the bar is refused; one wholly above
    passes without the words. The same for the length baseline, which needs the interval above it."""
    from mascot.registry import gate_decision

    def m(acc, low, high, n=40, baseline=None):
        return {"accuracy": acc, "accuracy_ci_low": low, "accuracy_ci_high": high, "pairs": n, "mean_margin": 0.1,
                "length_baseline_accuracy": baseline}

    ok, why, untold = gate_decision(m(0.4, 0.0, 0.8, n=10), None, 0.5, bar_on="point", min_n=10)
    assert ok and untold == ["the threshold 0.5000"] and "too few to tell" in why and "its interval holds it" in why
    ok, why, untold = gate_decision(m(0.62, 0.45, 0.78), None, 0.5, bar_on="point", min_n=10)
    assert ok and untold and "too few to tell" in why
    ok, why, untold = gate_decision(m(0.3, 0.2, 0.42), None, 0.5, bar_on="point", min_n=10)
    assert not ok and "below the threshold 0.5000, its whole interval too" in why
    ok, why, untold = gate_decision(m(0.7, 0.6, 0.8), None, 0.5, bar_on="point", min_n=10)
    assert ok and not untold and "too few" not in why
    # the baseline: an interval that holds it is said, one at or below it refuses, one above it passes
    ok, why, untold = gate_decision(m(0.7, 0.6, 0.8, baseline=0.65), None, 0.5, True, "point", 10)
    assert ok and "whether it learned length" in why and len(untold) == 1
    assert not gate_decision(m(0.7, 0.6, 0.8, baseline=0.85), None, 0.5, True, "point", 10)[0]
    assert gate_decision(m(0.7, 0.6, 0.8, baseline=0.55), None, 0.5, True, "point", 10)[2] == []
    # under lower_bound nothing changed: the interval's lower bound holds the bar, and too few refuses
    assert not gate_decision(m(0.62, 0.45, 0.78), None, 0.5, bar_on="lower_bound", min_n=10)[0]
    assert not gate_decision(m(0.9, 0.6, 1.0, n=8), None, 0.5, bar_on="lower_bound", min_n=10)[0]
    assert gate_decision(m(0.7, 0.6, 0.8), None, 0.5, bar_on="lower_bound", min_n=10)[0]
    # against the champion, point against point; on pairs that cannot tell, said
    ok, why, _ = gate_decision(m(0.4, 0.0, 0.8, n=10), {"accuracy": 0.5, "mean_margin": 0.1}, 0.0, bar_on="point",
                               min_n=10)
    assert not ok and "too few to tell on 10 pairs: the champion stays" in why


def test_promotion_on_too_few_pairs_says_so_and_the_interval_bar_refuses():
    """Eight eval pairs, seven right: on the point estimate the version is promoted, and the reason says it was
    on too few pairs to tell; with the bar on the interval's lower bound it is refused, in those words."""
    pairs = [{"margin": 1.0, "chosen": [{"content": "a b"}], "rejected": [{"content": "c d"}]} for _ in range(8)]
    m = pair_metrics(pairs, [1.0] * 7 + [0.0], [0.0] * 7 + [1.0])
    assert m["pairs"] == 8 and m["accuracy"] == 0.875 and m["accuracy_too_few_to_tell"]
    assert m["accuracy_ci_low"] is not None and m["accuracy_ci_low"] < 0.875 < m["accuracy_ci_high"] + 1e-9
    ok, why = decide_promotion(m, None, 0.5, bar_on="point", min_n=10)
    assert ok and "promoted, too few to tell against the threshold 0.5000 (n 8 < stats.min_n 10" in why
    assert "on 8 pairs" in why
    ok, why = decide_promotion(m, None, 0.5, bar_on="lower_bound", min_n=10)
    assert not ok and "too few to tell (n 8 < stats.min_n 10)" in why
    many = pair_metrics(pairs * 3, [1.0] * 21 + [0.0] * 3, [0.0] * 21 + [1.0] * 3)
    ok, why = decide_promotion(many, None, 0.5, bar_on="lower_bound", min_n=10)
    assert ok and "eval accuracy lower bound" in why and "too few" not in why


def test_reward_model_training_resumes_from_its_last_checkpoint_to_the_same_adapter(tiny_model_dir, personas,
                                                                                     tmp_path, monkeypatch, capsys):
    """A run cut after its step-2 checkpoint (what a kill leaves: the checkpoints written so far) resumes there,
    optimizer, scheduler and RNG included, and ends with the adapter of the run that was never cut."""
    import shutil

    import mlflow
    from safetensors.torch import load_file

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    params = TrainRMParams(base_model=str(tiny_model_dir), batch_size=2, epochs=2, max_length=512, eval_steps=2,
                           checkpoint_steps=2, save_total_limit=10, lora=LoraParams(r=4, alpha=8))
    with mlflow.start_run():
        train_reward_model(make_pairs(personas), personas, params, tmp_path / "whole", tmp_path / "ckpt")
    steps = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "ckpt").glob("checkpoint-*"))
    assert steps[:2] == [2, 4] and all((tmp_path / f"ckpt/checkpoint-{s}/mascot_complete.json").exists() for s in steps)
    for s in steps[1:]:  # the kill came after the step-2 checkpoint
        shutil.rmtree(tmp_path / f"ckpt/checkpoint-{s}")
    capsys.readouterr()
    with mlflow.start_run():
        train_reward_model(make_pairs(personas), personas, params, tmp_path / "resumed", tmp_path / "ckpt")
    assert "train_rm[rank 0/1]: resuming from step 2" in capsys.readouterr().out
    a = load_file(tmp_path / "whole/adapter_model.safetensors")
    b = load_file(tmp_path / "resumed/adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_human_pairs_train_with_each_sides_context_and_held_out_people_measure_the_model(tiny_model_dir, personas,
                                                                                        tmp_path, monkeypatch):
    """pairs.human's pairs (two moments of one conversation) train beside the judge's; the held-out human items
    measure the trained model against the seekers' ratings, beside the judge's scores on the same items."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    from mascot.reward.evaluation import HumanCheck

    warm, cold = "That sounds hard, I hear you.", "Whatever."
    human_pairs = [{"pair_id": f"h{i}", "pair_source": "human", "query_id": f"h{i}", "persona": "The Anchor",
                    "split": "train", "conversation_id": f"c{i}",
                    "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"moment A {i}"}],
                    "rejected_prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": f"moment B {i}"}],
                    "chosen": [{"role": "assistant", "content": warm}], "rejected": [{"role": "assistant", "content": cold}],
                    "score_chosen": 5.0, "score_rejected": 1.0, "margin": 4.0} for i in range(4)]
    items = [{"item_id": f"x{c}-{k}", "conversation_id": f"x{c}", "persona": "The Anchor", "rating": r, "words": len(t.split()),
              "context": [{"role": "user", "content": f"I lost my job {c}."}], "reply": t, "source": "esconv"}
             for c in range(6) for k, (t, r) in enumerate([(warm, 5), (cold, 1)])]
    judge = {i["item_id"]: float(i["rating"]) for i in items[:6]}
    params = TrainRMParams(base_model=str(tiny_model_dir), batch_size=2, learning_rate=5e-3, epochs=2, max_length=512,
                           eval_steps=2, checkpoint_steps=1000, lora=LoraParams(r=4, alpha=8))
    result = train_reward_model(make_pairs(personas) + human_pairs, personas, params, tmp_path / "rm", tmp_path / "ckpt",
                                report_to=(), human=HumanCheck(items, 2, judge))
    m = result["metrics"]
    assert m["train_pairs"] == 13
    assert m["human_pairs_n"] == 6 and m["human_pairs_conversations"] == 6 and m["human_items"] == 12
    assert m["human_pairs"] is not None and m["human_length_baseline"] == 1.0  # the warm reply is the longer one
    assert m["human_judge_pairs_n"] == 3 and m["human_judge_pairs"] == 1.0


def test_chance_level_of_a_pair_set_counts_shared_replies():
    """All pairs of 6 replies of each of 4 queries (15 pairs a query share their replies): a scorer that learned
    nothing spreads far wider here than 60 independent pairs would let a sign test think. The chance figure says
    how often a random score per reply is at least as far from 0.5; the interval resamples conversations."""
    import itertools

    from mascot.promote import chance_gate
    from mascot.reward.evaluation import random_scorer_p

    pairs = [{"margin": 1.0, "conversation_id": f"c{q}", "chosen_id": f"{q}-{a}", "rejected_id": f"{q}-{b}",
              "chosen": [{"content": "x"}], "rejected": [{"content": "y"}]}
             for q in range(4) for a, b in itertools.combinations(range(6), 2)]
    assert random_scorer_p(pairs, 0.5) == 1.0
    assert random_scorer_p(pairs, 1.0) < 0.01  # every pair right: out of chance's reach
    p_shared = random_scorer_p(pairs, 0.65)
    independent = [{**p, "chosen_id": f"c{i}", "rejected_id": f"r{i}"} for i, p in enumerate(pairs)]
    assert p_shared > random_scorer_p(independent, 0.65)  # shared replies: more room for chance
    right = [1.0] * 39 + [0.0] * 21  # 0.65
    m = pair_metrics(pairs, right, [0.5] * 60)
    assert m["accuracy"] == 0.65 and m["conversations"] == 4 and m["accuracy_null_p"] == p_shared
    ok, why = chance_gate(True, "eval accuracy ok", m, 0.01)
    assert not ok and "learned nothing" in why and "promote.max_null_p 0.01" in why
    assert chance_gate(True, "eval accuracy ok", m, None) == (True, "eval accuracy ok")
    perfect = pair_metrics(pairs, [1.0] * 60, [0.0] * 60)
    assert chance_gate(True, "ok", perfect, 0.01)[0]


def test_odin_loss_pays_a_length_head_that_takes_length_and_a_quality_head_that_leaves_it():
    from mascot.reward.odin import odin_loss, pearson

    words = torch.tensor([3.0, 9.0, 5.0, 12.0, 4.0, 8.0, 6.0, 10.0])
    quality = torch.tensor([1.0, 0.9, 0.8, 0.7, -1.0, -0.9, -0.8, -0.7])  # chosen rows first: ranks, no length
    disentangled = torch.stack([quality, 0.1 * words], dim=1)
    entangled = torch.stack([quality + 0.3 * words, torch.zeros(8)], dim=1)
    good, parts = odin_loss(disentangled, words, None, 1.0, 1.0)
    bad, _ = odin_loss(entangled, words, None, 1.0, 1.0)
    assert parts["length_head_corr"] == pytest.approx(1.0) and abs(parts["quality_head_corr"]) < 0.2
    assert parts["quality_accuracy"] == 1.0 and good < bad
    assert pearson(torch.ones(4), torch.arange(4.0)) == 0.0  # a constant head: no correlation, no nan
    # the gradient of the length penalty reaches the length head only through its correlation
    logits = disentangled.clone().requires_grad_(True)
    odin_loss(logits, words, None, 0.0, 1.0)[0].backward()
    assert logits.grad[:, 0].abs().sum() > 0


def test_an_odin_reward_model_trains_two_heads_and_scores_with_the_quality_head(tiny_model_dir, personas, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    import mlflow
    from safetensors.torch import load_file

    from mascot.config import LengthHeadParams

    pairs = make_pairs(personas, n=16)
    for i, p in enumerate(pairs):  # lengths that vary, so that a correlation means something
        p["chosen"][0]["content"] += " I am here." * (i % 4)
        p["rejected"][0]["content"] += " ok" * (i % 3)
    params = TrainRMParams(base_model=str(tiny_model_dir), batch_size=4, learning_rate=5e-3, epochs=3, max_length=512,
                           eval_steps=2, checkpoint_steps=1000, lora=LoraParams(r=4, alpha=8),
                           length_head=LengthHeadParams(enabled=True))
    out = tmp_path / "rm"
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    with mlflow.start_run():
        result = train_reward_model(pairs, personas, params, out, tmp_path / "ckpt")
    meta = json.loads((out / "mascot_reward.json").read_text())
    assert meta["num_labels"] == 2 and meta["heads"] == ["quality", "length"]
    head = [v for k, v in load_file(out / "adapter_model.safetensors").items() if "score" in k and "weight" in k]
    assert head and all(v.shape[0] == 2 for v in head)
    logged = [h for h in result["log_history"] if "length_head_corr" in h]
    assert logged and all(-1.0 <= h["length_head_corr"] <= 1.0 for h in logged)
    again = RewardScorer.from_dir(out)  # reloads as two labels; a reward is column 0, the quality head
    from mascot.reward.train import probe_items
    items = probe_items(personas)
    assert again.score(items) == pytest.approx(result["probe_scores"], abs=1e-5)
    ids = [reward_input_ids(again.tokenizer, REPLY, *item, again.max_length)[0] for item in items[:1]]
    with torch.no_grad():
        both = again.model(input_ids=torch.tensor(ids)).logits[0]
    assert again.score_ids(ids)[0] == pytest.approx(float(both[0]), abs=1e-5) and both.shape[0] == 2
    assert result["metrics"]["eval_score_length_pearson"] is not None


def test_a_length_head_on_too_small_a_batch_is_refused_by_its_key():
    from pydantic import ValidationError

    from mascot.config import LengthHeadParams

    with pytest.raises(ValidationError, match="length_head.*batch_size"):
        TrainRMParams(batch_size=2, length_head=LengthHeadParams(enabled=True))
