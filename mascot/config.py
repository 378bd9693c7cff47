"""One typed schema of params.yaml, validated at the start of every stage.

Every block forbids unknown keys, so a typo stops the stage with the key's dotted path instead of being
silently ignored.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
import yaml

from mascot import reads
from mascot.trainer_args import check_trainer_args


class Block(BaseModel):
    """A params.yaml block. While a stage records its reads (mascot/reads.py), reading a field records the field's
    dotted path (`train_rm.learning_rate`); `model_dump()` and `__dict__` read every field."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    _path: str = PrivateAttr("")

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if reads.recording() and (name == "__dict__" or not name.startswith("_")):
            # a block of params.yaml has its dotted path; one a stage builds for itself has none, and is not a read
            path = (object.__getattribute__(self, "__pydantic_private__") or {}).get("_path")
            if not path:
                pass
            elif name == "__dict__":
                _read_all(self)
            elif name in type(self).model_fields and not isinstance(value, Block):
                reads.param_read(_field_path(self, name))
        return value

    def model_dump(self, **kwargs) -> dict[str, Any]:
        if reads.recording():
            _read_all(self)
        with reads.paused():
            return super().model_dump(**kwargs)


def _field_path(block: Block, name: str) -> str:
    field = type(block).model_fields[name]
    return ".".join(x for x in (block._path, field.alias or name) if x)


def _read_all(block: Block) -> None:
    for name in type(block).model_fields:
        value = getattr(block, name)
        if isinstance(value, Block):
            _read_all(value)


def _name_blocks(block: Block, path: str = "") -> None:
    """Give every block its dotted path in params.yaml (recorded when a stage reads one of its fields)."""
    block._path = path
    for name in type(block).model_fields:
        value = super(Block, block).__getattribute__(name)
        sub = _field_path(block, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Block):
                _name_blocks(item, sub)


def _trainer_args_check(kind: str):
    """A block's trainer_args checked against TRL's config class of `kind` (mascot/trainer_args.py)."""
    def check(cls, value):
        check_trainer_args(value, kind)
        return value
    return field_validator("trainer_args")(classmethod(check))


class BaseModelParams(Block):
    source: Literal["qwen2.5-coder-0.5b-instruct-gguf", "qwen2.5-coder-1.5b-instruct-gguf", "qwen2.5-0.5b-instruct-gguf",
                    "gemma3-270m-gguf", "tiny", "path", "hub"] = \
        "qwen2.5-coder-0.5b-instruct-gguf"
    path: str | None = None  # source path: a local model folder, copied as is
    # source hub: downloaded once into out_dir at this revision (a tag, a branch or a commit); the commit it
    # resolved to is recorded (reports/figures/<stage>.json, the folder's mascot_source.json, every training run)
    repo: str | None = None
    revision: str | None = None
    out_dir: str = "models/base"
    tiny_hidden_size: int = Field(64, ge=16)
    # the tiny model's weight initialisation (std); None: Qwen3's 0.02, whose near-uniform next-token
    # distribution no fine-tuning moves far (docs/controls.md); the controls use a larger one
    tiny_init_std: float | None = Field(None, gt=0, le=2)
    # keep only the model's first N decoder layers (null: all): the same pretrained trunk, shallower and about
    # layers/N times faster; the length control's reward model (profiles/control-length.yaml)
    keep_layers: int | None = Field(None, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _source_fields(self):
        if self.source == "path" and not self.path:
            raise ValueError("source 'path' needs path (a local model folder; a hub model is source 'hub')")
        if self.source == "hub" and not (self.repo and self.revision):
            raise ValueError("source 'hub' needs repo and revision (a tag or a commit: the download is pinned, so "
                             "two runs train on the same weights)")
        return self


class SmallModelParams(BaseModelParams):
    """The small base LM (the reward-model and GRPO base): BaseModelParams with its own defaults."""
    source: Literal["qwen2.5-coder-0.5b-instruct-gguf", "qwen2.5-coder-1.5b-instruct-gguf", "qwen2.5-0.5b-instruct-gguf",
                    "gemma3-270m-gguf", "tiny", "path", "hub"] = "gemma3-270m-gguf"
    out_dir: str = "models/small"


class SourceSpec(Block):
    format: Literal["esconv", "qmsum", "empathetic", "jsonl", "hub-esconv"]
    path: str
    limit: int | None = Field(None, ge=1)  # dialogues read from this source at most
    max_queries: int | None = Field(None, ge=1)  # queries sampled from this source at most (seeded)
    # true: every conversation of this source is held out (a corpus's own validation split, e.g. the hub's ESConv
    # valid.jsonl); false: none is; null: each conversation by the hash rule (heldout.fraction; mascot/splits.py)
    heldout: bool | None = None


class PrepareParams(Block):
    sources: list[SourceSpec] = Field(min_length=1)
    personas_file: str = "data/personas.yaml"
    tokenizer: str = "models/base"  # counts tokens for the context budget
    max_context_tokens: int = Field(96, ge=16)
    min_user_chars: int = Field(2, ge=1)
    max_queries: int | None = Field(None, ge=1)
    queries_per_dialogue: int = Field(2, ge=1)
    personas_per_query: int = Field(1, ge=1)
    seed: int = 0
    skip_bad_rows: bool = False


class LLMEndpoint(Block):
    backend: Literal["local", "openai"] = "local"
    model: str = "models/base"  # a local folder (local) or the served model name (openai)
    # openai: e.g. http://127.0.0.1:8000/v1, or a list of replicas of one model (requests go to the one with
    # the fewest in flight; one that dies is dropped and its requests go to the others)
    base_url: str | list[str] | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = Field(128, ge=1)  # requests in flight; vLLM batches them (see benchmarks/)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)  # per request, for refused connections, timeouts, 429 and 5xx
    backoff_s: float = Field(0.5, ge=0)  # first retry delay; doubles each retry (with jitter), capped at 30 s
    batch_size: int = Field(8, ge=1)  # local backend: sequences per forward pass
    # openai: send each request's seed when sampling (reproducible replies); auto: yes, unless the server says
    # it is vLLM's CPU build, whose engine died on concurrent seeded sampling (its /version ends in +cpu)
    send_seed: bool | Literal["auto"] = "auto"
    # local backend: auto = bf16 where the hardware computes it natively, else fp32 (mascot/precision.py)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # extra variables for the chat template, e.g. {enable_thinking: false} for Qwen3 (a reasoning model would
    # otherwise spend its token budget inside <think>...</think>); sent as vLLM's chat_template_kwargs
    chat_template_kwargs: dict[str, Any] = {}

    @model_validator(mode="after")
    def _url_needed(self):
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs base_url (the server's /v1 address)")
        if isinstance(self.base_url, list) and (not self.base_url or len(set(self.base_url)) != len(self.base_url)):
            raise ValueError(f"base_url: a list of replicas must be non-empty and without repeats, got {self.base_url}")
        return self

    @property
    def base_urls(self) -> list[str]:
        urls = self.base_url if isinstance(self.base_url, list) else [self.base_url] if self.base_url else []
        return [u.rstrip("/") for u in urls]


class SpeakerEndpoint(LLMEndpoint):
    batch_size: int = Field(64, ge=1)  # sampling: many sequences per pass pay on a CPU


class JudgeEndpoint(LLMEndpoint):
    batch_size: int = Field(10, ge=1)  # one candidate's five rubric prompts, twice


class LLMParams(Block):
    speaker: SpeakerEndpoint = SpeakerEndpoint()
    judge: JudgeEndpoint = JudgeEndpoint()
    director: LLMEndpoint | None = None  # stage 2's episode Director; default: the speaker's model


class GenerateParams(Block):
    num_agents_per_query: int = Field(3, ge=1)
    prompt_style: Literal["transcript", "chat"] = "chat"
    temperature: float = Field(0.9, ge=0)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(48, ge=1)
    seed: int = 1234
    # true: held-out queries get no candidates (no stage ever pairs them), which saves their judging in `score`
    skip_heldout: bool = False


class EpisodesParams(Block):
    max_queries: int | None = Field(6, ge=1)  # prefixes (queries) that get episodes; the rest are held out
    branches: int = Field(3, ge=2)  # K: directives sampled at the branch point
    agent_turns: int = Field(1, ge=1)  # N: agent turns each branch rolls forward
    user_turns: bool = False  # a simulated user turn (same LLM, user role) between agent turns
    # llm: the Director model writes each directive; random / round_robin: a scripted order with a generic
    # directive (the ablations; and the tiny profile, whose random-weight model cannot write a directive)
    director: Literal["llm", "random", "round_robin"] = "llm"
    director_style: Literal["chat", "transcript"] = "chat"
    # llm: decode each directive under its grammar (vLLM structured outputs, xgrammar in-process), so it parses
    # and names a known agent by construction; measure_unconstrained also samples the branch points freely and
    # reports that parse rate beside it (reports/figures/episodes.json)
    constrain_directives: bool = True
    measure_unconstrained: bool = False
    director_temperature: float = Field(1.0, ge=0)
    director_max_tokens: int = Field(48, ge=8)
    temperature: float = Field(0.9, ge=0)  # speakers and the simulated user
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(32, ge=1)  # per turn
    seed: int = 7


class ScorerParams(Block):
    """What judges a unit on the rubric: the LLM judge (`llm.judge`), or a Python function named by `target`
    ("module:function", called as function(subject, rubric, **kwargs) -> {dimension: 1..5}) for the dimensions
    it lists (all of the rubric's when `dimensions` is null; the LLM judge scores the others). It judges
    wherever the LLM judge does: judge_check, score, the watches, evaluate and the group stages."""
    kind: Literal["llm", "function"] = "llm"
    target: str | None = None
    dimensions: list[str] | None = Field(None, min_length=1)
    kwargs: dict[str, Any] = {}  # passed to the function: e.g. a control's pattern or seed

    @model_validator(mode="after")
    def _target_for_function(self):
        if self.kind == "function" and not (self.target and ":" in self.target):
            raise ValueError("kind is 'function': set target to 'module:function'")
        if self.kind == "llm" and (self.target or self.dimensions or self.kwargs):
            raise ValueError("target/dimensions/kwargs apply to kind 'function' only")
        return self


class ScoreParams(Block):
    scorer: ScorerParams = ScorerParams()
    # the rubric file (data/rubrics/*.yaml: dimensions, wording, strictness, anchors); relative to the working
    # directory, else to the project
    rubric: str = "data/rubrics/persona.yaml"
    mode: Literal["expected", "json"] = "expected"
    # plain: one text prompt (base models); chat: the judge's chat template (instruct models); auto: the
    # format judge_check measured as better for this judge
    prompt_style: Literal["plain", "chat", "auto"] = "plain"
    few_shot: bool = True
    max_tokens: int = Field(320, ge=16)  # json mode
    # json mode: a reply that does not parse is asked again, with twice the budget when it was cut at max_tokens,
    # otherwise sampled at retry_temperature (a greedy retry would repeat the failure)
    max_parse_retries: int = Field(2, ge=0)
    retry_temperature: float = Field(0.7, gt=0)
    # expected mode: below this probability on the digits 1-5 the judge did not answer: unscored
    min_choice_mass: float = Field(0.2, ge=0, le=1)


class JudgeCheckParams(Block):
    dialogue_items: int = Field(8, ge=0)  # ESConv-like items: reference vs off-topic vs cold (+ length probe)
    qa_items: int = Field(2, ge=0)  # QMSum items: gold answer vs another meeting's answer
    # formats measured when score.prompt_style is auto (otherwise only the configured one)
    prompt_styles: list[Literal["plain", "chat"]] = Field(["plain", "chat"], min_length=1)
    # judge modes measured (default: score.mode); both give their agreement
    modes: list[Literal["expected", "json"]] | None = Field(None, min_length=1, max_length=2)
    seed: int = 0


class HumanParams(Block):
    """The human reference set (mascot/data/human_ratings.py): supporter turns the seekers rated 1-5, from every
    ESConv-like source of prepare.sources (and JSONL messages with a `rating`)."""
    min_gap: int = Field(2, ge=1, le=4)  # two turns of one conversation form a pair when their ratings differ this much
    persona: str = "The Anchor"  # the persona slot the judge and the reward models read a supporter's turn under
    # judge_check scores at most this many items, whole conversations, held-out ones first (null: all of them)
    judge_items: int | None = Field(48, ge=1)


class ScoreGroupParams(Block):
    """Stage 2's judge: the collective rubric's file; mode, format and retries are score's. `scorer`: what judges
    a block, where it is not score.scorer (null): a stage-2 control plants its preference on blocks here and
    leaves stage 1's judge, and every stage-1 output DVC cached, as they are."""
    rubric: str = "data/rubrics/collective.yaml"
    scorer: ScorerParams | None = None


class JudgeCheckGroupParams(Block):
    """The collective judge's reference set: ESConv blocks (the supporter's actual next turns) against the same
    turns as an echo chamber, turns from another conversation, and the turns said twice."""
    items: int = Field(3, ge=0)
    turns: int = Field(3, ge=2)  # turns per block (at least two companion turns, so that one can echo another)
    # the survey set: this many more conversations that carry the seeker's survey (ESConv's empathy, relevance and
    # emotion intensity before and after), their human block alone, where the judge and the group reward model are
    # held to the survey (mascot/annotate/survey.py); 0: the reference items' own surveys only
    survey_items: int = Field(0, ge=0)
    survey_min_gap: float = Field(2, gt=0)  # two conversations whose survey differs by this much form a pair
    seed: int = 0


class PairsParams(Block):
    score_margin: float = Field(0.1, ge=0, le=4)
    # drop pairs of the majority length direction (smallest margins first) so that the chosen reply is the
    # longer one in about half of the pairs: a reward model cannot then score well on length alone
    balance_length: bool = True
    eval_fraction: float = Field(0.25, ge=0, lt=1)
    split_seed: int = 0
    # add the human pairs (data/human/items.jsonl) of train-split conversations to the reward model's train
    # pairs, marked `pair_source: human` (the judge's are `judge`); held-out and eval conversations never. On: over
    # all 292 human pairs (k folds, docs/performance.md) they lift the CPU default's reward model +0.072 [+0.006,
    # +0.141] at equal length
    human: bool = True
    # each human pair trained on this many times (by repetition: train_rm repeats a pair of `weight` W W times)
    human_weight: int = Field(1, ge=1, le=16)

    @model_validator(mode="after")
    def _weight_needs_human(self):
        if self.human_weight != 1 and not self.human:
            raise ValueError(f"human_weight {self.human_weight} weighs the human pairs, which pairs.human false leaves "
                             "out: set pairs.human true, or human_weight 1")
        return self


class GroupPairsParams(PairsParams):
    """Stage 2's pairing rule: block totals spread less, and a handful of block pairs cannot be balanced."""
    human: Literal[False] = False  # human ratings rate one reply, not a block of group turns
    score_margin: float = Field(0.05, ge=0, le=4)
    balance_length: bool = False
    eval_fraction: float = Field(0.5, ge=0, lt=1)


class ValidateParams(Block):
    min_pairs: int = Field(1, ge=0)
    min_scored_fraction: float = Field(0.5, ge=0, le=1)
    # judge_check's accuracies (human reply above an off-topic one, above a cold one) must reach this, compared
    # with their bootstrap interval's lower bound (judge_bar_on: lower_bound) or the point estimate (point)
    min_judge_accuracy: float = Field(0.5, ge=0, le=1)
    judge_bar_on: Literal["lower_bound", "point"] = "lower_bound"
    # stop: a judge below the bar stops the pipeline; warn: it goes on, and validate and every later stage say,
    # in words, that the judge cannot be told from chance (the other expectations always stop)
    judge_gate: Literal["stop", "warn"] = "warn"
    # a judge whose totals are identical across a query's candidates is not judging
    max_constant_group_fraction: float = Field(0.5, ge=0, le=1)
    max_empty_reason_fraction: float = Field(0.2, ge=0, le=1)  # json mode: reasons shorter than a phrase
    # each split's size, so that a run that could never be measured or promoted stops here, before training:
    # train pairs (the reward model's), eval pairs (promote's gate), held-out queries (the watch, evaluate)
    min_train_pairs: int = Field(1, ge=0)
    min_eval_pairs: int = Field(1, ge=0)
    min_heldout_queries: int = Field(1, ge=0)
    # the judge's agreement with people (judge_check, human pairs: the higher-rated turn scored higher), against
    # this bar at judge_bar_on, under the same judge_gate; null: not gated
    min_human_agreement: float | None = Field(0.5, ge=0, le=1)


class ValidateGroupParams(Block):
    """Stage 2's gate: the collective judge's own bar (judge_check_group's accuracies) and, where set, its own
    split sizes (block pairs are far fewer than reply pairs); null takes validate's. The other bars and the
    stop/warn level (judge_gate, judge_bar_on) are validate's."""
    min_judge_accuracy: float = Field(0.5, ge=0, le=1)
    min_train_pairs: int | None = Field(None, ge=0)
    min_eval_pairs: int | None = Field(None, ge=0)
    min_heldout_queries: int | None = Field(None, ge=0)


class MlflowParams(Block):
    # MLFLOW_TRACKING_URI in the environment wins (a team server); default: embedded sqlite in the repo.
    tracking_uri: str = "sqlite:///mlflow.db"
    artifact_root: str = "mlartifacts"
    reward_experiment: str = "mascot-reward-model"
    judge_experiment: str = "mascot-judge"
    policy_experiment: str = "mascot-speaker"
    group_reward_experiment: str = "mascot-group-reward-model"
    director_experiment: str = "mascot-director"


class LoraParams(Block):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]


class PolicyLoraParams(LoraParams):
    dropout: float = Field(0.0, ge=0, lt=1)  # GRPO: TRL's log-probs of the old and new policy must agree


class LaunchFields(Block):
    """How many training processes a training stage runs as (mascot/launch.py)."""
    # training processes: N > 1 runs the stage under `accelerate launch --multi_gpu --num_processes N` (DDP: nccl
    # on GPUs, gloo on a CPU); `accelerate_config` names a launcher file (profiles/accelerate/) instead
    num_processes: int = Field(1, ge=1)
    accelerate_config: str | None = None


class LengthHeadParams(Block):
    """ODIN (Chen et al., ICML 2024; mascot/reward/odin.py): a second head on the reward model's trunk that takes
    length. The ranking loss is on the sum of the two heads; `length_weight` pulls the length head's Pearson
    correlation with the reply's words towards 1, `quality_weight` the quality head's towards 0. Only the
    quality head scores downstream (promote, GRPO, evaluate, the watch). The correlations are over each batch's
    chosen and rejected replies: 2 x batch_size of them, at least `min_batch_replies`."""
    enabled: bool = False
    length_weight: float = Field(1.0, ge=0)
    quality_weight: float = Field(1.0, ge=0)
    min_batch_replies: int = Field(8, ge=4)


class TrainRMParams(LaunchFields):
    base_model: str = "models/small"
    registered_model: str = "mascot-persona-rm"
    lora: LoraParams = LoraParams()
    batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    learning_rate: float = Field(2e-4, ge=0)
    epochs: float = Field(1, gt=0)
    max_length: int = Field(512, ge=32)
    eval_steps: int = Field(25, ge=1)  # the trainer's eval curve (dvc plots): the stage measures its eval pairs after
    # a checkpoint every N steps under .mascot/checkpoints/<stage>/<key of the inputs>: a rerun with the same
    # inputs resumes from the last one (mascot/checkpoints.py)
    checkpoint_steps: int = Field(10, ge=1)
    save_total_limit: int = Field(3, ge=1)
    use_margin: bool = False  # TRL's margin loss: -logsigmoid(r_c - r_r - margin)
    length_head: LengthHeadParams = LengthHeadParams()  # ODIN: a length head beside the quality head
    # the reward model reads at most the base's first N decoder layers (null: all): the same pretrained trunk,
    # shallower, and about layers/N times faster to train and to score wherever it scores (promote, GRPO's reward,
    # the watch, the evaluations); the adapter's meta records N and every load takes the same N
    keep_layers: int | None = Field(6, ge=1)
    # batches of pairs of about one length (seeded), so that a batch pads to little more than its own pairs
    group_by_length: bool = True
    seed: int = 0
    # passed through to TRL's RewardConfig (bf16, gradient_checkpointing, deepspeed, warmup_ratio, ...): checked
    # against it at start-up; a key this block already has (batch_size, learning_rate, ...) is refused
    trainer_args: dict[str, Any] = {}

    _trainer_args = _trainer_args_check("reward")

    @model_validator(mode="after")
    def _batch_for_the_length_head(self):
        if self.length_head.enabled and 2 * self.batch_size < self.length_head.min_batch_replies:
            raise ValueError(f"length_head: a correlation over {2 * self.batch_size} replies (2 x batch_size) means "
                             f"little; raise batch_size to at least {(self.length_head.min_batch_replies + 1) // 2} or "
                             "lower length_head.min_batch_replies")
        return self


class TrainGroupRMParams(TrainRMParams):
    registered_model: str = "mascot-group-rm"
    max_length: int = Field(768, ge=32)  # a block of turns after the conversation


class PromoteParams(Block):
    alias: str = "champion"
    challenger_alias: str = "challenger"
    min_eval_accuracy: float = Field(0.5, ge=0, le=1)
    # the new version's eval accuracy must be above the "longer reply wins" baseline on the same pairs
    require_beat_length_baseline: bool = True
    # point: the accuracy's point estimate meets the bar, where its interval can tell (on fewer than stats.min_n pairs,
    # or with the bar inside its 95% interval, the version is promoted and the reason and the version's tags say
    # "too few to tell"); lower_bound: its interval's lower bound meets the bar, and never below min_n
    bar_on: Literal["point", "lower_bound"] = "point"
    # the reward model's agreement with people on the held-out conversations' human pairs (train_rm), at bar_on;
    # null: reported, not required
    min_human_agreement: float | None = Field(None, ge=0, le=1)
    # the chance that a scorer that learned nothing (a random score per reply) reaches the eval accuracy on the
    # same pairs must be at most this; null: reported, not required
    max_null_p: float | None = Field(None, gt=0, le=1)
    # the pairs the gate's accuracy, interval and length baseline are measured on: the judge's eval pairs; the
    # seekers' pairs of conversations no reward model trained on (held out and eval split: `human`); or both
    # together, one interval over their conversations (`judge_and_human`). The other figures are reported anyway
    gate_pairs: Literal["judge", "human", "judge_and_human"] = "judge_and_human"


class PromoteGroupParams(PromoteParams):
    """Stage 2's gate on the CPU default: a handful of block pairs measures nothing yet (profiles/real.yaml: 0.5
    and the length baseline)."""
    min_eval_accuracy: float = Field(0.0, ge=0, le=1)
    require_beat_length_baseline: bool = False
    gate_pairs: Literal["judge", "human", "judge_and_human"] = "judge"

    @field_validator("gate_pairs")
    @classmethod
    def _blocks_have_no_human_pairs(cls, value):
        if value != "judge":
            raise ValueError("people rated single supporter turns, not blocks of group turns: the group gate measures "
                             "the judge's block pairs ('judge')")
        return value


class WatchParams(Block):
    """The judge watches the policy during GRPO (mascot/policy/watch/verdict.py: the rule of the verdict)."""
    enabled: bool = True
    every_steps: int = Field(6, ge=1)  # and at step 0 and the last step
    # probes: the first probe_queries held-out queries (the evaluation's rule), each under probe_personas personas
    probe_queries: int = Field(5, ge=1)
    probe_personas: int = Field(2, ge=1)
    max_tokens: int | None = Field(None, ge=1)  # default: the block's max_completion_length
    # 0: greedy answers; above 0: sampled at a fixed seed (a small or random model's greedy answer loops on one
    # token and hides what its sampling distribution learned)
    temperature: float = Field(0.0, ge=0)
    judge_margin: float = Field(0.05, ge=0)  # a judge change below this, with the reward model up: over-optimising
    min_checks: int = Field(2, ge=2)
    # a version whose verdict is over-optimising is registered but does not get the `champion` alias
    refuse_over_optimising: bool = True
    # stop when the verdict has been over-optimising for `patience` consecutive checks; keep the adapter of the
    # check the judge scored best
    stop_when_over_optimising: bool = False
    patience: int = Field(2, ge=1)
    # stop when the policy's mean KL from the base policy (nats per probe completion, measured at each check)
    # passes this; the adapter kept is the check the judge scored best (None: off)
    max_kl: float | None = Field(None, gt=0)
    # the KL's two forward passes: float32 (a bf16 or fp16 policy is lifted to fp32 for them and put back bit for
    # bit), or the policy's own precision (auto: bf16 where native; rounding put the CPU default's KL off by 4-75%,
    # docs/results.md; for a policy too large for an fp32 copy, or sharded weights)
    kl_dtype: Literal["float32", "auto"] = "float32"


class LengthCalibrationParams(Block):
    """A length calibration of the reward model's score in GRPO (mascot/policy/rewards.py). `base_policy_fit`
    (Huang et al., ICLR 2025): the base policy answers `samples` training prompts before any update, a polynomial
    of `degree` in the reply's words is fitted to the reward model's scores of those answers, and GRPO is paid the
    score minus that fit. `within_group`: each prompt's group of completions has its own least-squares slope of
    score on words taken off, so no completion gains advantage by its words within its group (no fit to go stale
    as the policy leaves the base policy's lengths; `samples` and `degree` unused). On by default: it only takes
    pay off a rising trend, so where the reward model pays no word it costs `samples` base answers and nothing else.
    `pay_shorter` (base_policy_fit): whether a reply shorter than the base policy's mean is credited the fit's pay for
    the words it lacks (Huang et al.'s symmetric form). Off by default: the lever takes pay off words beyond the base
    policy's mean and never pays a reply for being short, because a reward model's hole at short replies, credited
    the line's slope for every missing word, pays a collapse to one-word answers (the length control, 2026-12-07:
    docs/controls.md)."""
    enabled: bool = True
    method: Literal["base_policy_fit", "within_group"] = "base_policy_fit"
    samples: int = Field(16, ge=4)
    degree: int = Field(1, ge=1, le=3)
    pay_shorter: bool = False


class PolicyGRPOParams(LaunchFields):
    """What the speaker's GRPO (grpo) and the Director's (train_director) share."""
    base_model: str = "models/small"
    registered_model: str = "mascot-speaker"
    reward_alias: str = "champion"
    prompt_style: Literal["transcript", "chat"] = "transcript"
    lora: PolicyLoraParams = PolicyLoraParams()
    num_generations: int = Field(4, ge=2)
    prompts_per_step: int = Field(1, ge=1)
    max_completion_length: int = Field(24, ge=1)
    max_steps: int = Field(4, ge=1)
    beta: float = Field(0.0, ge=0)
    learning_rate: float = Field(5e-5, ge=0)
    temperature: float = Field(0.9, gt=0)
    reward_weight: float = 1.0
    format_weight: float = 0.5
    max_prompts: int | None = Field(None, ge=1)
    seed: int = 0
    # a checkpoint every N steps (the adapter, optimizer, scheduler, RNG and the watch's history): a rerun with the
    # same inputs resumes from the last one (mascot/checkpoints.py)
    checkpoint_steps: int = Field(4, ge=1)
    watch: WatchParams = WatchParams()
    # passed through to TRL's GRPOConfig (bf16, gradient_checkpointing, use_vllm, vllm_mode, num_iterations,
    # loss_type, deepspeed, ...): checked against it at start-up; a key this block already has is refused
    trainer_args: dict[str, Any] = {}

    _trainer_args = _trainer_args_check("grpo")


class GRPOParams(PolicyGRPOParams):
    # the reward model's taste for length taken off before GRPO sees its score (the speaker's only)
    length_calibration: LengthCalibrationParams = LengthCalibrationParams()


class DirectorLengthParams(Block):
    """The Director's lever against length. A directive's own words are not what the group reward model reads (the
    block rolled forward from it is), so no fit on them: within each group of one prompt's directives the reward
    model's least-squares slope on the rolled-forward block's words is measured (`length_within_group_*` in the
    stage's figures), and with `enabled` taken off the group's scores (mascot/policy/rewards.py
    within_group_length_removed), so that no directive gains advantage by the length of the block it led to."""
    enabled: bool = False
    method: Literal["within_group"] = "within_group"


class DirectorParams(PolicyGRPOParams):
    # its own lever: the speaker's base_policy_fit would calibrate the directive's words, not the block's
    length_calibration: DirectorLengthParams = DirectorLengthParams()
    base_model: str = "models/small"
    registered_model: str = "mascot-director"
    prompt_style: Literal["transcript", "chat"] = "transcript"
    max_completion_length: int = Field(40, ge=8)
    max_steps: int = Field(2, ge=1)
    temperature: float = Field(1.0, gt=0)
    format_weight: float = 1.0  # a parseable directive naming a known agent
    diversity_weight: float = 0.2  # penalty for naming the previous turn's speaker again
    rollout_turns: int = Field(1, ge=1)  # agent turns rolled forward from the directive before the group RM scores
    rollout_max_tokens: int = Field(24, ge=1)
    # rollouts decode under the directive's grammar (the agent one of the team's, three lines), as evaluate_group
    # decodes the trained Director: the policy learns whom to choose and what to ask, not the form (false: it
    # samples freely and its format reward teaches the form; a small random model never finds it)
    constrain_rollouts: bool = False
    # a diagnostic: every step, the policy's probability of each agent at the directive's choice point on this many
    # of its training states (mascot/policy/choice_probe.py; 0: off). A forward pass of 4 names a state a step
    choice_probe: int = Field(0, ge=0)
    # whom a rollout names at the choice point. sampled: the policy draws it. stratified: the rows of each group
    # are given the agents in turn (a row's grammar admits one name; the action and tone are sampled), so every
    # group compares every agent on the same state and no agent loses its gradient by never being drawn
    # (mascot/policy/rollout_grammar.py; docs/results.md, issue 64). Needs constrain_rollouts and
    # in-process rollouts (vLLM's structured outputs take one grammar a request batch)
    explore_choices: Literal["sampled", "stratified"] = "sampled"

    @model_validator(mode="after")
    def _stratified_needs_grammar(self):
        if self.explore_choices == "stratified":
            if not self.constrain_rollouts:
                raise ValueError("explore_choices 'stratified' needs constrain_rollouts: true (each row's grammar "
                                 "names its agent)")
            if self.trainer_args.get("use_vllm"):
                raise ValueError("explore_choices 'stratified' needs in-process rollouts: drop trainer_args.use_vllm "
                                 "or set explore_choices: sampled")
        return self


class EvaluateGroupParams(Block):
    max_queries: int | None = Field(3, ge=1)  # held-out queries (not given episodes), one conversation each
    agent_turns: int = Field(1, ge=1)
    user_turns: bool = False
    director_temperature: float = Field(0.0, ge=0)
    # the trained and base Directors decode under the directive grammar: the conditions differ in whom they
    # choose and what they ask, not in whether they keep the format (train_director's metrics report that)
    constrain_directives: bool = True
    # and, beside the comparison, each language-model Director's first directive sampled without the grammar at
    # train_director's temperature, unconstrained_samples a conversation: the format it keeps on its own
    measure_unconstrained: bool = False
    unconstrained_samples: int = Field(1, ge=1)
    max_tokens: int = Field(32, ge=1)
    conditions: list[Literal["trained", "base", "random", "round_robin"]] = Field(
        ["trained", "base", "random", "round_robin"], min_length=1)
    seed: int = 0


class EvaluateParams(Block):
    max_queries: int | None = Field(8, ge=1)
    max_tokens: int = Field(40, ge=1)
    temperature: float = Field(0.0, ge=0)
    seed: int = 0


class HeldOutParams(Block):
    """The queries no model trains on, which evaluate and evaluate_group use (mascot/splits.py: one rule)."""
    fraction: float = Field(0.25, gt=0, lt=1)
    seed: int = 0


class StatsParams(Block):
    # below this many items a comparison prints the exact sign test's p-value and "too few to tell"
    min_n: int = Field(10, ge=2)


class Params(Block):
    base_model: BaseModelParams = BaseModelParams()  # the speaker (an instruct model)
    # a small base LM, for the parts that must be fast on a CPU: the embedded judge, the reward-model base
    # and the GRPO policy base
    small_model: SmallModelParams = SmallModelParams()
    prepare: PrepareParams
    llm: LLMParams = LLMParams()
    generate: GenerateParams = GenerateParams()
    score: ScoreParams = ScoreParams()
    pairs: PairsParams = PairsParams()
    judge_check: JudgeCheckParams = JudgeCheckParams()
    human: HumanParams = HumanParams()
    validate_: ValidateParams = Field(ValidateParams(), alias="validate")
    mlflow: MlflowParams = MlflowParams()
    train_rm: TrainRMParams = TrainRMParams()
    promote: PromoteParams = PromoteParams()
    grpo: GRPOParams = GRPOParams()
    evaluate: EvaluateParams = EvaluateParams()
    # stage 2: the same paradigm one level up (a block of group turns instead of one reply)
    episodes: EpisodesParams = EpisodesParams()
    score_group: ScoreGroupParams = ScoreGroupParams()
    judge_check_group: JudgeCheckGroupParams = JudgeCheckGroupParams()
    group_pairs: GroupPairsParams = GroupPairsParams()
    validate_group: ValidateGroupParams = ValidateGroupParams()
    promote_group: PromoteGroupParams = PromoteGroupParams()  # the same gate, its own thresholds
    train_group_rm: TrainGroupRMParams = TrainGroupRMParams()
    train_director: DirectorParams = DirectorParams()
    evaluate_group: EvaluateGroupParams = EvaluateGroupParams()
    heldout: HeldOutParams = HeldOutParams()
    stats: StatsParams = StatsParams()
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ConfigError(ValueError):
    pass


def _describe(err: dict) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key (check its spelling; see params.yaml for the known keys)"
    if err["type"] == "missing":
        return f"{key}: required key is missing"
    return f"{key}: {err['msg']} (got {err.get('input')!r})"


def parse_params(raw: dict, source: str = "params.yaml") -> Params:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        lines = "\n".join("  - " + _describe(e) for e in exc.errors())
        raise ConfigError(f"{source}: invalid parameters:\n{lines}") from None
    _name_blocks(params)
    return params


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: parameters file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_params(raw, str(path))
