"""The `promote` and `promote_group` stages and `mascot promote`: move the `champion` alias only through the gate.

The stage measures the new version and the current champion on the same eval pairs, each loaded from the
registry (which also proves the round trip: the new version's probe scores must equal those computed in
training), then moves `champion` or gives the new version `challenger`. By hand, `mascot promote
--version N --reason ...` moves an alias to any version (promotion or rollback), recorded the same way.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import time

import yaml

from mascot import registry
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.io import InputError, load_jsonl, read_json, write_json
from mascot.data.human_ratings import human_pairs
from mascot.promote import FROM_EXPERIMENT_ENV, ROUNDTRIP_TOLERANCE, chance_gate, human_gate, parse_model_uri, score_pairs
from mascot.reward.evaluation import (human_gate_pairs, human_item_scores, human_set_metrics, pair_metrics,
                                      untrained_human)
from mascot.reward.scorer import RewardScorer
from mascot.headline import write_headline
from mascot.stage_args import dvc_cmd_options, metrics_file


GATE_PAIRS_WORDS = {"judge": "the judge's eval pairs",
                    "human": "the seekers' pairs of conversations it never trained on",
                    "judge_and_human": "the judge's eval pairs and the seekers' pairs of conversations it never trained on"}


def main(params: Params, *, registered_path: str, pairs_path: str, figures_path: str, human_items_path: str | None = None,
         human_scores_path: str | None = None, block: str = "promote") -> None:
    """The gate for either reward model: the registered.json it reads names the model and its granularity;
    `block` names the params block with the thresholds (promote, promote_group); the human set's items and the
    judge's scores of them hold a reply reward model to people, and are the gate's own pairs where
    `gate_pairs` says so."""
    registry.setup_tracking(params)
    p = getattr(params, block)
    new = read_json(registered_path, "run the training stage first")
    name, version = new["name"], new["version"]
    state = registry.registration_state(name, version)
    if state != "complete":
        raise RuntimeError(f"{name} v{version}: registration is '{state}' (its training run did not finish); "
                           "rerun train_rm")
    personas = load_personas(params.prepare.personas_file)
    eval_pairs = [x for x in load_jsonl(pairs_path) if x["split"] == "eval"]

    new_scorer = RewardScorer.from_registry(f"models:/{name}/{version}")
    probe = new_scorer.score(new_scorer.granularity.probe_items(personas))
    drift = max(abs(a - b) for a, b in zip(probe, new["probe_scores"]))
    if drift > ROUNDTRIP_TOLERANCE:
        raise RuntimeError(f"{name} v{version}: registry copy scores differ from training by {drift:.2e}; "
                           "refusing to promote a model that does not reload as trained")
    human = None
    if new_scorer.granularity.human_ratings and human_items_path:  # people rated a supporter turn, not a block
        human = untrained_human(params, human_items_path, human_scores_path)
    gate_pairs, fallback = p.gate_pairs, ""
    if gate_pairs != "judge" and not (human and human_pairs(human.items, human.min_gap)):
        if gate_pairs == "human":
            raise InputError(f"{block}.gate_pairs: human, but there are no seekers' pairs of untrained conversations "
                             f"({human_items_path or 'no human set'}): run human_set with rated ESConv sources, or set "
                             f"{block}.gate_pairs: judge")
        # judge_and_human on a corpus without the seekers' ratings: the judge's pairs are what there is, and said
        gate_pairs, fallback = "judge", "; no seekers' pairs of an untrained conversation here: the judge's alone"
    new_metrics, new_gate, human_metrics = measure_version(new_scorer, eval_pairs, human, personas, gate_pairs,
                                                          params.stats.min_n)
    champion_version = registry.alias_version(name, p.alias)
    champion_metrics = champion_gate = None
    champion_unscored = None
    if champion_version is not None and champion_version != version:
        try:
            champion_scorer = RewardScorer.from_registry(f"models:/{name}@{p.alias}")
        except InputError as exc:  # trained on another base or reward text: nothing here scores as it did
            champion_unscored = str(exc)
        else:
            champion_metrics, champion_gate, _ = measure_version(champion_scorer, eval_pairs, human, personas,
                                                                 gate_pairs, params.stats.min_n)
    promoted, reason, untold = registry.gate_decision(new_gate, champion_gate, p.min_eval_accuracy,
                                                      p.require_beat_length_baseline, p.bar_on, params.stats.min_n)
    if gate_pairs != "judge":
        reason = f"on {GATE_PAIRS_WORDS[gate_pairs]}: {reason}"
    reason += fallback + length_words(new_gate, params.stats.min_n)
    if champion_unscored:
        reason += (f"; the champion v{champion_version} was not compared: it cannot score here ({champion_unscored})")
    promoted, reason = chance_gate(promoted, reason, new_gate, p.max_null_p)
    if new_scorer.granularity.human_ratings and human_items_path:
        promoted, reason = human_gate(promoted, reason, human_metrics, p.min_human_agreement, p.bar_on,
                                      params.stats.min_n)
    if gate_pairs == "human" and eval_pairs:
        reason += f"; the judge's eval pairs (reported, not deciding): {new_metrics['accuracy']} on {len(eval_pairs)}"
    too_few = bool(untold)
    figures = {"gate_pairs": gate_pairs, "gate_n": new_gate.get("pairs"),
               "eval_pairs": len(eval_pairs), "eval_conversations": new_metrics.get("conversations"),
               "accuracy": new_gate["accuracy"], "accuracy_ci_low": new_gate.get("accuracy_ci_low"),
               "accuracy_ci_high": new_gate.get("accuracy_ci_high"), "bar_on": p.bar_on,
               "accuracy_null_p": new_gate.get("accuracy_null_p"),
               "too_few_to_tell": too_few, "untold": "; ".join(untold) or None,
               "length_baseline_accuracy": new_gate.get("length_baseline_accuracy"),
               "accuracy_not_longer": new_gate.get("accuracy_not_longer"),
               "accuracy_equal_length": new_gate.get("accuracy_equal_length"),
               "judge_eval_accuracy": new_metrics["accuracy"],
               "mean_margin": new_gate["mean_margin"], "compared_with_version": champion_version,
               "champion_accuracy": champion_gate and champion_gate["accuracy"],
               "champion_mean_margin": champion_gate and champion_gate["mean_margin"],
               **{k: v for k, v in human_metrics.items() if k.startswith(("human_pairs", "human_length", "human_judge"))}}
    experiment = registry.current_experiment()
    if experiment is None and os.environ.get(FROM_EXPERIMENT_ENV):
        reason = f"from DVC experiment {os.environ[FROM_EXPERIMENT_ENV]}: {reason}"
    alias, champion_alias = record_decision(name, version, promoted, reason, figures, p.alias, p.challenger_alias,
                                            experiment)
    champion = version if promoted else champion_version
    # the decision as a DVC output: later stages use the version it names, through the alias it names, and refuse
    # an alias that no longer resolves to it
    result = {"version": version, "promoted": promoted, "alias": alias, "reason": reason, "bar_on": p.bar_on,
              "too_few_to_tell": too_few, "untold": untold, "min_n": params.stats.min_n, "experiment": experiment,
              "gate_on": gate_pairs, "team_champion_version": champion_version if experiment else champion,
              "champion_version": champion, "champion_alias": champion_alias,
              "champion_digest": registry.version_digest(name, champion) if champion is not None else None,
              "roundtrip_max_abs_diff": drift, **{f"new_{k}": v for k, v in new_metrics.items()},
              **{f"gate_{k}": v for k, v in new_gate.items()},
              **{f"new_{k}": v for k, v in human_metrics.items()}, "min_human_agreement": p.min_human_agreement,
              **({f"champion_{k}": v for k, v in champion_metrics.items()} if champion_metrics else {}),
              **({f"champion_gate_{k}": v for k, v in champion_gate.items()} if champion_gate else {})}
    write_json(figures_path, result)
    where = f" (DVC experiment {experiment}; the team's @{p.alias} stays at v{champion_version})" if experiment else ""
    print(f"{block}: {name} v{version} -> {'@' + alias if alias else 'no alias'}{where}: {reason}")


def length_words(gate: dict, min_n: int) -> str:
    """The gate's pairs at equal length beside "the longer one wins", where their n can tell (a reward model that
    learned length reads well raw and at chance here)."""
    if gate.get("accuracy_equal_length") is None or (gate.get("accuracy_equal_length_n") or 0) < min_n:
        return ""
    return (f"; at equal length {gate['accuracy_equal_length']} [{gate.get('accuracy_equal_length_ci_low')}, "
            f"{gate.get('accuracy_equal_length_ci_high')}] on {gate['accuracy_equal_length_n']} pairs"
            + (" (extrapolated)" if gate.get("accuracy_equal_length_extrapolated") else "")
            + f", the longer one wins {gate.get('length_baseline_accuracy')}")


def measure_version(scorer: RewardScorer, eval_pairs: list[dict], human, personas: dict, gate_pairs: str,
                    min_n: int) -> tuple[dict, dict, dict]:
    """One version on the same pairs: (the judge's eval pairs' figures, the gate's figures on `gate_pairs`, its
    agreement with people on the untrained seekers' pairs, or {} without a human set)."""
    chosen, rejected = score_pairs(scorer, eval_pairs, personas)
    judge = pair_metrics(eval_pairs, chosen, rejected, min_n)
    if human is None:
        return judge, judge, {}
    rm = human_item_scores(scorer, human, personas)
    people = human_set_metrics(scorer, human, personas, rm)
    if gate_pairs == "judge":
        return judge, judge, people
    rows, h_chosen, h_rejected = human_gate_pairs(human, rm)
    if gate_pairs == "human":
        return judge, pair_metrics(rows, h_chosen, h_rejected, min_n), people
    return judge, pair_metrics(eval_pairs + rows, chosen + h_chosen, rejected + h_rejected, min_n), people


def record_decision(name: str, version: str, promoted: bool, reason: str, figures: dict, team_alias: str,
                    challenger_alias: str, experiment: str | None) -> tuple[str | None, str]:
    """Record the gate's decision in the registry; (the alias `version` got, the alias later stages use).

    A plain `dvc repro` moves the team's alias (`champion`) or gives `challenger`. Inside a DVC experiment a sweep
    compares candidates, and promoting one to the team is a decision taken after (`mascot promote
    --from-experiment NAME`): a promoted version gets the experiment's own alias (`exp-<name>`), which the
    experiment's later stages use; a refused one gets no alias; both get the decision as `exp-<name>_*` tags."""
    if experiment is None:
        alias = team_alias if promoted else challenger_alias
        registry.set_alias(name, alias, version, reason, figures)
        return alias, team_alias
    scoped = registry.experiment_alias(experiment)
    if promoted:
        registry.set_alias(name, scoped, version, reason, figures)
        return scoped, scoped
    registry.tag_decision(name, version, scoped, f"refused: {reason}", figures)
    return None, team_alias


def main_group(params: Params, *, registered_path: str, pairs_path: str, figures_path: str) -> None:
    """Stage 2: the group reward model through the same gate, on the block eval pairs."""
    main(params, registered_path=registered_path, pairs_path=pairs_path, figures_path=figures_path,
         block="promote_group")


def promote_from_experiment(params: Params, experiment: str) -> None:
    """After a sweep: make the reward models DVC experiment `experiment` promoted (their `exp-<name>` alias) the
    team's. `dvc exp apply` brings the experiment's params and outputs into the workspace, then each gate that
    promoted in the experiment runs again as a plain stage (`dvc repro --force --single-item promote ...`): it
    measures the version against the team's champion on the same eval pairs and moves `champion` only if it
    passes, recorded with its reason like every move; the stages after it are then stale, and `dvc repro` runs
    them against it."""
    registry.setup_tracking(params)
    scoped = registry.experiment_alias(experiment)
    gates = {stage: (model, registry.alias_version(model, scoped))
             for stage, model in (("promote", params.train_rm.registered_model),
                                  ("promote_group", params.train_group_rm.registered_model))}
    gates = {stage: found for stage, found in gates.items() if found[1] is not None}
    if not gates:
        raise InputError(f"promote --from-experiment {experiment}: no reward model holds @{scoped}: the experiment's "
                         "gates promoted none (its reports/figures/promote.json says why), or it did not run promote")
    subprocess.run(["dvc", "exp", "apply", experiment], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV")}
    subprocess.run(["dvc", "repro", "--force", "--single-item", *gates], check=True,
                   env={**env, FROM_EXPERIMENT_ENV: experiment})
    for stage, (model, version) in gates.items():
        decision = read_json(dvc_cmd_options(stage)["figures_path"])  # where dvc.yaml has the gate write it
        if str(decision["version"]) != str(version):
            raise InputError(f"promote --from-experiment {experiment}: the applied workspace registers {model} "
                             f"v{decision['version']}, but @{scoped} is v{version}: the experiment's outputs are not "
                             "the ones its alias names")
        print(f"promote: from DVC experiment {experiment}: {model} v{version} "
              f"{'is now @' + getattr(params, stage).alias if decision['promoted'] else 'was refused: ' + decision['reason']}")
    print("promote: `dvc repro` runs the later stages against the champion")


def promote_by_hand(params: Params, version: str, alias: str, reason: str, name: str | None = None) -> None:
    """Move `alias` to `version` by hand (a promotion past a refusal, or a rollback), recorded on the version; where
    it is the alias a gate of this repository decides (promote's or promote_group's), also in that gate's decision
    record, so that `dvc repro` goes on with it (`record_hand_move`)."""
    registry.setup_tracking(params)
    name = name or params.train_rm.registered_model
    state = registry.registration_state(name, version)
    if state != "complete":
        raise RuntimeError(f"{name} v{version}: registration is '{state}'; only completely registered versions "
                           "can hold an alias")
    if not reason.strip():
        raise InputError("promote --version: say why with --reason '...': it is recorded on the version and in the "
                         "gate's decision, where the runs that train against it show it")
    previous = registry.alias_version(name, alias)
    registry.set_alias(name, alias, version, f"by hand: {reason}", {"previous_version": previous})
    print(f"promote: {name} @{alias}: v{previous} -> v{version} ({reason})")
    record_hand_move(params, name, str(version), alias, reason, previous)


def record_hand_move(params: Params, name: str, version: str, alias: str, reason: str, previous: str | None) -> None:
    """Write a hand move of a gate's alias into that gate's decision record (its DVC output: the file the stages
    after it read) and commit it to dvc.lock (`dvc commit`): the gate's own decision stays in the record
    (`gate_decision`), the champion is the version moved to, and `dvc repro` runs the stages after the gate
    against it, their runs tagged with the hand move. Nothing to write where the gate has not decided yet (it
    then decides itself), where this is not a gate's alias, or where the gate's inputs changed since its decision
    (`dvc repro` lets it decide on the new version first)."""
    gates = {params.train_rm.registered_model: "promote", params.train_group_rm.registered_model: "promote_group"}
    stage = gates.get(name)
    if stage is None or alias != getattr(params, stage).alias:
        return
    options = dvc_cmd_options(stage)
    path, registered_path = options.get("figures_path"), options.get("registered_path")
    if not path or not Path(path).exists():
        print(f"promote: no decision of the {stage} stage here yet ({path or 'dvc.yaml names none'}): it decides when "
              "`dvc repro` runs it")
        return
    decision = read_json(path)
    registered = read_json(registered_path) if registered_path and Path(registered_path).exists() else {}
    if registered and str(registered.get("version")) != str(decision.get("version")):
        print(f"promote: {registered_path} names v{registered.get('version')}, which {stage} has not decided on yet "
              f"({path} is about v{decision.get('version')}): `dvc repro` runs the gate on it first; the alias "
              "moved, the decision record did not")
        return
    gate = decision.get("gate_decision") or {k: decision.get(k) for k in ("version", "promoted", "alias", "reason",
                                                                          "champion_version")}
    decision.update(by_hand=True, by_hand_reason=reason, by_hand_previous_version=previous, gate_decision=gate,
                    by_hand_since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    champion_version=version, champion_alias=alias, team_champion_version=version,
                    champion_digest=registry.version_digest(name, version),
                    reason=f"by hand: {reason} (the gate decided: {gate.get('reason')})")
    write_json(path, decision)
    write_headline(stage, path, metrics_file(stage))
    lock = Path("dvc.lock")
    if lock.exists() and stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}):
        # the record is the gate's output: committed, the gate stays done and the stages after it are stale
        subprocess.run([sys.executable, "-m", "dvc", "commit", "--force", "--quiet", stage], check=True)
    print(f"promote: {path} records v{version} as @{alias} by hand; `dvc repro` runs the stages after {stage} "
          "against it")


def probe_main(params: Params, uri: str | None = None) -> None:
    """Score the probe texts with a registry model in this (fresh) process, beside the scores the training
    process computed (kept on the version as the `probe_scores` tag)."""
    from mlflow.tracking import MlflowClient

    registry.setup_tracking(params)
    uri = uri or f"models:/{params.train_rm.registered_model}@{params.promote.alias}"
    name, ref = parse_model_uri(uri)
    client = MlflowClient()
    mv = client.get_model_version_by_alias(name, ref[1:]) if ref.startswith("@") else client.get_model_version(name, ref)
    scorer = RewardScorer.from_registry(uri)
    scores = scorer.score(scorer.granularity.probe_items(load_personas(params.prepare.personas_file)))
    trained = json.loads(mv.tags.get("probe_scores", "null"))
    print(json.dumps({"uri": uri, "version": str(mv.version), "scores_now": scores, "scores_in_training": trained,
                      "max_abs_diff": max(abs(a - b) for a, b in zip(scores, trained)) if trained else None},
                     indent=2))
