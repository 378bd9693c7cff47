"""The `promote` and `promote_group` stages and `mascot promote`: move the `champion` alias only through the gate.

The stage measures the new version and the current champion on the same eval pairs, each loaded from the
registry (which also proves the round trip: the new version's probe scores must equal those computed in
training), then moves `champion` or gives the new version `challenger`. By hand, `mascot promote
--version N --reason ...` moves an alias to any version (promotion or rollback), recorded the same way.
"""
from __future__ import annotations

import json
import os
import subprocess

from mascot import registry
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.io import InputError, load_jsonl, read_json, write_json
from mascot.promote import FROM_EXPERIMENT_ENV, ROUNDTRIP_TOLERANCE, chance_gate, human_gate, measure, parse_model_uri
from mascot.reward.evaluation import held_out_human, human_set_metrics
from mascot.reward.scorer import RewardScorer
from mascot.stage_args import dvc_cmd_options


def main(params: Params, *, registered_path: str, pairs_path: str, figures_path: str, human_items_path: str | None = None,
         human_scores_path: str | None = None, block: str = "promote") -> None:
    """The gate for either reward model: the registered.json it reads names the model and its granularity;
    `block` names the params block with the thresholds (promote, promote_group); the human set's items and the
    judge's scores of them hold a reply reward model to people."""
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
    new_metrics = measure(new_scorer, eval_pairs, personas, params.stats.min_n)
    champion_version = registry.alias_version(name, p.alias)
    champion_metrics = None
    if champion_version is not None and champion_version != version:
        champion_metrics = measure(RewardScorer.from_registry(f"models:/{name}@{p.alias}"), eval_pairs, personas,
                                   params.stats.min_n)
    promoted, reason = registry.decide_promotion(new_metrics, champion_metrics, p.min_eval_accuracy,
                                                 p.require_beat_length_baseline, p.bar_on, params.stats.min_n)
    promoted, reason = chance_gate(promoted, reason, new_metrics, p.max_null_p)
    human_metrics = {}
    if new_scorer.granularity.human_ratings and human_items_path:  # people rated a supporter turn, not a block
        human = held_out_human(params, human_items_path, human_scores_path)
        human_metrics = human_set_metrics(new_scorer, human, personas) if human is not None else {}
        promoted, reason = human_gate(promoted, reason, human_metrics, p.min_human_agreement, p.bar_on,
                                      params.stats.min_n)
    too_few = len(eval_pairs) < params.stats.min_n
    figures = {"eval_pairs": len(eval_pairs), "eval_conversations": new_metrics.get("conversations"),
               "accuracy": new_metrics["accuracy"], "accuracy_ci_low": new_metrics.get("accuracy_ci_low"),
               "accuracy_ci_high": new_metrics.get("accuracy_ci_high"), "bar_on": p.bar_on,
               "accuracy_null_p": new_metrics.get("accuracy_null_p"),
               "too_few_to_tell": too_few,
               "length_baseline_accuracy": new_metrics.get("length_baseline_accuracy"),
               "accuracy_not_longer": new_metrics.get("accuracy_not_longer"),
               "mean_margin": new_metrics["mean_margin"], "compared_with_version": champion_version,
               "champion_accuracy": champion_metrics and champion_metrics["accuracy"],
               "champion_mean_margin": champion_metrics and champion_metrics["mean_margin"],
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
              "too_few_to_tell": too_few, "min_n": params.stats.min_n, "experiment": experiment,
              "team_champion_version": champion_version if experiment else champion,
              "champion_version": champion, "champion_alias": champion_alias,
              "champion_digest": registry.version_digest(name, champion) if champion is not None else None,
              "roundtrip_max_abs_diff": drift, **{f"new_{k}": v for k, v in new_metrics.items()},
              **{f"new_{k}": v for k, v in human_metrics.items()}, "min_human_agreement": p.min_human_agreement,
              **({f"champion_{k}": v for k, v in champion_metrics.items()} if champion_metrics else {})}
    write_json(figures_path, result)
    where = f" (DVC experiment {experiment}; the team's @{p.alias} stays at v{champion_version})" if experiment else ""
    print(f"{block}: {name} v{version} -> {'@' + alias if alias else 'no alias'}{where}: {reason}")


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
    registry.setup_tracking(params)
    name = name or params.train_rm.registered_model
    state = registry.registration_state(name, version)
    if state != "complete":
        raise RuntimeError(f"{name} v{version}: registration is '{state}'; only completely registered versions "
                           "can hold an alias")
    previous = registry.alias_version(name, alias)
    registry.set_alias(name, alias, version, f"by hand: {reason}", {"previous_version": previous})
    print(f"promote: {name} @{alias}: v{previous} -> v{version} ({reason})")


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
