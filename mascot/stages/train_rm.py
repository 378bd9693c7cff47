"""The `train_rm` and `train_group_rm` stages: a LoRA scalar reward model, logged and registered in MLflow."""
from __future__ import annotations

import json
import os
from pathlib import Path
import time

from mascot import checkpoints, registry
from mascot.config import Params
from mascot.data.personas import load_personas
from mascot.annotate.survey import describe_survey
from mascot.granularity import GRANULARITIES, Granularity
from mascot.io import load_jsonl, write_json, write_jsonl
from mascot.launch import is_main_process, world_size
from mascot.llm.identity import folder_digest
from mascot.pairs import chosen_longer_fraction
from mascot.reward.evaluation import describe_human, untrained_human, plot_distributions
from mascot.reward.train import train_reward_model, write_curves


def main(params: Params, *, pairs_path: str, model_dir: str, figures_path: str, plots_dir: str, reference_path: str | None = None,
         human_items_path: str | None = None, human_scores_path: str | None = None,
         granularity: str = "reply") -> None:
    """`reference_path`: the judge's reference set, which the reward model is also measured on (where it exists);
    the human set's items and the judge's scores of them: the reward model against people (reply granularity)."""
    import mlflow

    g = GRANULARITIES[granularity]
    stage, p = g.rm_block, g.rm_params(params)
    os.environ.setdefault("HF_MLFLOW_LOG_ARTIFACTS", "0")  # our own artifacts: the adapter, once
    registry.setup_tracking(params)
    pairs, personas = load_jsonl(pairs_path), load_personas(params.prepare.personas_file)
    # what shapes the run: a rerun with all of it the same resumes from the last checkpoint, anything else starts over
    ckpt = checkpoints.checkpoint_dir(stage, checkpoints.params_key(params), registry.file_md5(pairs_path), granularity,
                                      folder_digest(p.base_model), world_size())
    if not is_main_process():  # a DDP rank other than the main one: train, then leave the rest to rank 0
        train_reward_model(pairs, personas, p, Path(model_dir), ckpt, None, granularity)
        return
    exp = registry.experiment_id(getattr(params.mlflow, g.rm_experiment), params.mlflow.artifact_root)
    lineage = {**registry.lineage_tags(pairs_path, p.base_model, g.template_hash),
               "granularity": granularity, "rubric_aggregate": g.rubric(params).aggregation}
    run_name = (f"{g.rm_label}-rm-{Path(p.base_model).name}-r{p.lora.r}-lr{p.learning_rate:g}-"
                f"{lineage['git_commit'][:7]}")
    out, plots = Path(model_dir), Path(plots_dir)
    plots.mkdir(parents=True, exist_ok=True)
    abandoned = registry.abandon_incomplete(p.registered_model)
    if abandoned:
        print(f"{stage}: versions {', '.join(abandoned)} of {p.registered_model} were left half-registered by an "
              "earlier crash; tagged abandoned (never promoted)")
    resumed_run = checkpoints.remembered_run(ckpt)  # a resumed training goes on in its own MLflow run
    with (mlflow.start_run(run_id=resumed_run) if resumed_run else
          mlflow.start_run(experiment_id=exp, run_name=run_name, tags={**lineage, **registry.dvc_experiment_tags()})) as run:
        checkpoints.remember_run(ckpt, run.info.run_id)
        registry.log_input_file(pairs_path, "train")
        if reference_path and Path(reference_path).exists():
            registry.log_input_file(reference_path, "eval")  # the judge's reference set, on the reward model
        margin = g.pairs_params(params).score_margin
        mlflow.log_params({f"{stage}.{k}": v for k, v in p.model_dump().items() if k != "lora"}
                          | {f"{stage}.lora.{k}": v for k, v in p.lora.model_dump().items()}
                          | {"pairs.score_margin": margin, "score.mode": params.score.mode, "granularity": granularity,
                             "world_size": world_size()})
        reference = load_jsonl(reference_path) if reference_path and Path(reference_path).exists() else None
        human = (untrained_human(params, human_items_path, human_scores_path)
                 if g.human_ratings and human_items_path else None)
        result = train_reward_model(pairs, personas, p, out, ckpt, reference, granularity, human=human,
                                    min_n=params.stats.min_n,
                                    survey_min_gap=params.judge_check_group.survey_min_gap if g.survey_ratings else 2)
        metrics = result["metrics"]

        metrics["pairs_chosen_longer_fraction"] = chosen_longer_fraction(pairs)
        mlflow.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        plot_distributions(result["chosen_scores"], result["rejected_scores"], plots / "reward_distributions.png")
        write_json(figures_path, {**metrics, "probe_scores": result["probe_scores"]})
        mlflow.log_artifact(figures_path)
        mlflow.log_artifact(str(plots / "reward_distributions.png"))
        t = time.perf_counter()
        mlflow.log_artifacts(str(out), artifact_path="reward_model")
        tracking = {"time_mlflow_artifacts_s": round(time.perf_counter() - t, 3)}
        tags = {**lineage, **{k: v for k, v in metrics.items()
                              if k.startswith(("eval_", "reference_", "human_")) and v is not None},
                "probe_scores": json.dumps(result["probe_scores"])}
        version = registry.register_version(p.registered_model, run.info.run_id, "reward_model", tags,
                                            f"LoRA {g.rm_label} reward model (sequence "
                                            "classification, one label)")
        tracking["time_register_s"] = round(time.perf_counter() - t - tracking["time_mlflow_artifacts_s"], 3)
        mlflow.log_metrics(tracking)
    write_json(figures_path, {**metrics, **tracking, "probe_scores": result["probe_scores"]})
    write_json(out / "registered.json", {"name": version.name, "version": version.version, "run_id": version.run_id,
                                         "granularity": granularity, "probe_scores": result["probe_scores"]})
    write_curves(result["log_history"], plots)
    registry.mark_complete(version.name, version.version)
    checkpoints.finished(ckpt)
    write_jsonl(plots / "eval_scores.jsonl", [{"chosen": c, "rejected": r} for c, r in
                                              zip(result["chosen_scores"], result["rejected_scores"])])
    print(describe_training(stage, metrics, g, version, reference is not None, human is not None,
                            params.stats.min_n))


def describe_training(stage: str, metrics: dict, g: Granularity, version, with_reference: bool, with_human: bool,
                      min_n: int) -> str:
    """The trained reward model in one line: eval accuracy beside the length baseline, the reference set, people."""
    return (f"{stage}: {metrics['train_pairs']} train pairs, eval accuracy {metrics.get('eval_accuracy')} "
            f"on {metrics['eval_pairs']} pairs (longer-reply-wins baseline {metrics.get('eval_length_baseline_accuracy')}, "
            f"accuracy where the chosen reply is not longer {metrics.get('eval_accuracy_not_longer')} on "
            f"{metrics.get('eval_not_longer_pairs')}; reference set: "
            + (", ".join(f"{g.judge_figure_words[name]} {metrics.get('reference_' + name)}" for name in g.gated)
               if with_reference else "none")
            + (f"; {describe_human(metrics, min_n=min_n)}" if with_human else "")
            + (f"; against the seekers' survey: {describe_survey(metrics, 'reference_survey', min_n)}"
               if g.survey_ratings and with_reference else "")
            + f"); registered {version.name} v{version.version} (run {version.run_id})")


def main_group(params: Params, *, pairs_path: str, reference_path: str, model_dir: str, figures_path: str,
               plots_dir: str) -> None:
    """Stage 2: the group reward model on block pairs, registered as `train_group_rm.registered_model`."""
    main(params, pairs_path=pairs_path, reference_path=reference_path, model_dir=model_dir, figures_path=figures_path,
         plots_dir=plots_dir, granularity="block")
