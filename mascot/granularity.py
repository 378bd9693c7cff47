"""Stage 1 and stage 2 run one paradigm (rubric scores -> preference pairs -> gate -> reward model ->
promotion) at two granularities: a persona's reply, or a block of group turns. Everything that differs
between them lives here, as data and as methods, so the stage modules never branch on which one they run:
the unit's id and comparison group, its params blocks and files, how the judge and the reward model read a
unit, the reference comparisons its judge is measured on and the probes that follow its reward model.

The split rule is one for both: a unit belongs to its query's split, drawn per conversation (mascot/splits.py).
A third granularity is a third instance; the rubric a granularity is judged on is a data file its params
block names (score.rubric, score_group.rubric)."""
from __future__ import annotations

from dataclasses import dataclass, field
import hashlib

from mascot import transcript
from mascot.annotate.director import roster
from mascot.annotate.reference_set import as_candidates, build_block_reference_set, build_reference_set
from mascot.annotate.rubric import load_rubric
from mascot.config import Params
from mascot.data.personas import resolve_persona

CUT_MARK = "[earlier turns cut] "


@dataclass(frozen=True)
class Granularity:
    name: str  # what one unit is: "reply" (stage 1) or "block" (stage 2)
    unit_id: str  # the id field of a unit's records (candidates/episodes, scores)
    group_fields: tuple[str, ...]  # units comparable with each other share these fields (pairs stay within one)
    units_table: str  # what the units file holds, in the gate's words
    score_block: str  # the params block whose `rubric` names the rubric file
    pairs_block: str  # the params block of the pairing rule (margin, balance, eval fraction)
    rm_block: str  # the reward-model stage and its params block
    promote_block: str
    judge_gate_block: str  # the params block with this judge's min_judge_accuracy
    rm_experiment: str  # the MlflowParams field naming the reward model's experiment
    rm_label: str  # the reward model in words, and its run-name prefix
    judge_check_stage: str  # the stage that measures this granularity's judge (its figures, the gate's input)
    # (figure, better variant, worse variant, item kind) of the judge's reference set; `gated` ones are held to
    # the gate's min_judge_accuracy
    judge_comparisons: tuple[tuple[str, str, str, str], ...] = ()
    gated: tuple[str, ...] = ()
    judge_figure_words: dict[str, str] = field(default_factory=dict)
    default_rubric: str = ""  # the shipped rubric file (the params block's default)
    # what people rated in the corpus: one unit each (ESConv's per-turn feedback: the human set, human pairs), or
    # only the whole conversation (ESConv's survey)
    human_ratings: bool = False
    survey_ratings: bool = False

    # ---- params and rubric ----
    def rubric(self, params: Params=None):
        """The rubric the params block names (without params: the shipped one)."""
        return load_rubric(params_block(params, self.score_block).rubric if params is not None else self.default_rubric)

    def judge_figure_hint(self, name: str) -> str:
        return f"{self.judge_figure_words.get(name, name)} ({self.judge_check_stage}'s figures; bar: {self.judge_gate_block}.min_judge_accuracy)"

    def pairs_params(self, params: Params):
        return params_block(params, self.pairs_block)

    def rm_params(self, params: Params):
        return params_block(params, self.rm_block)

    def min_judge_accuracy(self, params: Params) -> float:
        return params_block(params, self.judge_gate_block).min_judge_accuracy

    def split_limits(self, params: Params) -> dict[str, int]:
        """Each split's bar: the gate block's own where it sets one (validate_group may), else validate's."""
        own, shared = params_block(params, self.judge_gate_block), params.validate_
        return {name: getattr(shared, name) if getattr(own, name, None) is None else getattr(own, name)
                for name in ("min_train_pairs", "min_eval_pairs", "min_heldout_queries")}

    # ---- what the judge and the reward model read (one per granularity) ----
    def judge_units(self, records: list[dict], queries: dict[str, dict], personas: dict) -> list[dict]:
        raise NotImplementedError

    def unit_text(self, unit: dict) -> str:
        """The text of a unit as the pairing rule compares two (identical texts never pair) and length counts."""
        raise NotImplementedError

    def reward_text(self, persona: dict | None, context: list[dict], side) -> str:
        raise NotImplementedError

    def pair_sides(self, pair: dict, personas: dict) -> tuple:
        """(persona fields or None, dialogue without the system message, chosen side, rejected side)."""
        raise NotImplementedError

    def probe_items(self, personas: dict) -> list[tuple]:
        """Fixed (persona, context, side) items whose reward scores must survive a registry round trip."""
        raise NotImplementedError

    def reference_set(self, dialogues, personas: dict, budget: int, count, block, exclude: set[str]) -> list[dict]:
        raise NotImplementedError

    def reference_units(self, items: list[dict], personas: dict) -> tuple[list[dict], list[dict]]:
        """(variants {query_id, reply_type, kind, text}, judge units) of a reference set, in one order."""
        raise NotImplementedError

    def reference_sides(self, item: dict, personas: dict) -> list[tuple[str, tuple]]:
        """(variant, reward-model item) of one reference item."""
        raise NotImplementedError

    @property
    def reward_template(self) -> str:
        raise NotImplementedError

    @property
    def template_hash(self) -> str:
        """A digest of how the reward text is built: the template, and a fixed sample rendered through it (the
        transcript renderer, the persona fields, the cut mark, a named speaker), so that a change to any of them
        changes the hash and a reward model trained on the old text is refused at load (RewardScorer.from_dir)."""
        context = [{"role": "user", "content": CUT_MARK + "first words"},
                   {"role": "assistant", "name": "Sample Speaker", "content": "a reply"},
                   {"role": "user", "content": "the last message"}]
        side = ("the reply" if self.name == "reply" else
                [{"role": "assistant", "name": "Sample Speaker", "content": "a block turn"}])
        rendered = self.reward_text(persona_fields(_EveryField()), context, side)
        return hashlib.sha256(f"{self.reward_template}\0{rendered}".encode()).hexdigest()[:12]


class _EveryField:
    """A persona whose every attribute is its own name in brackets: whatever fields `persona_fields` takes, the
    sample rendering shows them."""

    def __getattr__(self, name: str) -> str:
        return f"<{name}>"


def params_block(params: Params, key: str):
    """The block of params.yaml named `key` (by its YAML key: `validate` is the field `validate_`)."""
    for name, info in type(params).model_fields.items():
        if key in (name, info.alias):
            return getattr(params, name)
    raise KeyError(f"params has no block '{key}'")


def persona_fields(persona) -> dict:
    return {"name": persona.name, "role": persona.role, "description": persona.description, "tone": persona.tone}


REWARD_REPLY_TEMPLATE = ("Persona: {name}, {role}. {description} Tone: {tone}.\n"
                         "Dialogue:\n{dialogue}\n"
                         "Reply of {name}: {reply}")
REWARD_BLOCK_TEMPLATE = ("Conversation so far:\n{dialogue}\n"
                         "Next turns of the companions:\n{block}")
# Fixed items scored at the end of training and again after a registry round trip: equal scores prove the
# registered adapter (score head included) is the trained one.
REPLY_PROBES = [
    ("I can't sleep before my exam tomorrow.", "That sounds exhausting, and it makes sense to feel wound up tonight."),
    ("My dog died this morning.", "Get a new one."),
    ("I got the job!", "What made you decide to apply in the first place?"),
]
BLOCK_PROBES = [
    ("I can't sleep before my exam tomorrow.",
     [("The Anchor", "That sounds exhausting; it makes sense to feel wound up tonight."),
      ("Action Guide", "One small thing: write tomorrow's first step on paper, then put the notes away.")]),
    ("My dog died this morning.", [("The Beacon", "Get a new one."), ("The Catalyst", "Yes, get a new one.")]),
]


class Replies(Granularity):
    def judge_item(self, persona, context: list[dict], reply: str) -> str:
        vocab = ", ".join(persona.vocabulary)
        return (f"Persona: {persona.name} ({persona.role}). Tone: {persona.tone}. "
                f"Typical words: {vocab}.\nConversation:\n{transcript.render(context, persona.name)}\n"
                f"Reply: {reply}\n")

    def unit(self, unit_id: str, fields: dict, persona, context: list[dict], reply: str) -> dict:
        """A judge unit: the rendered item an LLM judge reads, the subject a function judge reads (score.scorer)."""
        return {"id": unit_id, "item": self.judge_item(persona, context, reply), "fields": fields,
                "subject": {"granularity": self.name, "text": reply, "context": context, "persona": persona.name},
                "skip": None if reply.strip() else "empty reply"}

    def judge_units(self, records, queries, personas):
        units = []
        for cand in records:
            q = queries.get(cand["query_id"])
            if q is None:
                raise ValueError(f"candidate {cand['candidate_id']}: query {cand['query_id']} is not in the queries file")
            persona = resolve_persona(personas, cand["persona"], f"candidate {cand['candidate_id']}")
            units.append(self.unit(cand["candidate_id"], {"candidate_id": cand["candidate_id"], "query_id": cand["query_id"],
                                                          "persona": cand["persona"]}, persona, q["context"], cand["text"]))
        return units

    def unit_text(self, unit):
        return unit["text"]

    @property
    def reward_template(self):
        return REWARD_REPLY_TEMPLATE

    def reward_text(self, persona, context, side):
        return REWARD_REPLY_TEMPLATE.format(dialogue=transcript.render(context, persona["name"]), reply=side.strip(),
                                            **persona)

    def pair_sides(self, pair, personas):
        context = [m for m in pair["prompt"] if m["role"] != "system"]
        return (persona_fields(personas[pair["persona"]]), context, pair["chosen"][-1]["content"],
                pair["rejected"][-1]["content"])

    def probe_items(self, personas):
        first = persona_fields(next(iter(personas.values())))
        return [(first, [{"role": "user", "content": u}], r) for u, r in REPLY_PROBES]

    def reference_set(self, dialogues, personas, budget, count, block, exclude):
        return build_reference_set(dialogues, list(personas), budget, count, block.dialogue_items, block.qa_items,
                                   seed=block.seed, exclude=exclude)

    def reference_units(self, items, personas):
        candidates, queries = as_candidates(items)
        return candidates, self.judge_units(candidates, queries, personas)

    def reference_sides(self, item, personas):
        persona = persona_fields(personas[item["persona"]])
        return [(variant, (persona, item["context"], text)) for variant, text in item["replies"].items()]


class Blocks(Granularity):
    def judge_item(self, roster: str, context: list[dict], block: list[dict]) -> str:
        """The companions (name and role), the conversation before the block, then the block's turns."""
        return (f"Companions: {roster}.\nConversation so far:\n{transcript.render(context)}\n"
                f"Block:\n{transcript.render(block)}\n")

    def unit(self, unit_id: str, fields: dict, roster: str, context: list[dict], block: list[dict],
             skip: str | None = None) -> dict:
        """A judge unit: the rendered item an LLM judge reads, the subject a function judge reads (score.scorer)."""
        return {"id": unit_id, "item": self.judge_item(roster, context, block), "fields": fields,
                "subject": {"granularity": self.name, "text": transcript.render(block), "context": context,
                            "persona": None, "block": block}, "skip": skip}

    def judge_units(self, records, queries, personas):
        """Each branch's block (its turns after the shared prefix). An invalid branch is not judged: its
        record says why."""
        team, units = roster(personas), []
        for e in records:
            q = queries.get(e["query_id"])
            if q is None:
                raise ValueError(f"episode {e['episode_id']}: query {e['query_id']} is not in the queries file")
            skip = None
            if not e["valid"]:
                skip = f"invalid branch: {e['invalid_reason']}"
            elif not any(t["text"].strip() for t in e["turns"]):
                skip = "empty block"
            units.append(self.unit(e["episode_id"], {"episode_id": e["episode_id"], "query_id": e["query_id"],
                                                     "prefix_id": e["prefix_id"], "branch": e["branch"]},
                                   team, q["context"], transcript.turn_messages(e["turns"]), skip))
        return units

    def unit_text(self, unit):
        return transcript.render(transcript.turn_messages(unit["turns"]))

    @property
    def reward_template(self):
        return REWARD_BLOCK_TEMPLATE

    def reward_text(self, persona, context, side):
        return REWARD_BLOCK_TEMPLATE.format(dialogue=transcript.render(context), block=transcript.render(side))

    def pair_sides(self, pair, personas):
        context = [m for m in pair["prompt"] if m["role"] != "system"]
        return None, context, pair["chosen"], pair["rejected"]

    def probe_items(self, personas):
        return [(None, [{"role": "user", "content": u}],
                 [{"role": "assistant", "name": name, "content": text} for name, text in turns])
                for u, turns in BLOCK_PROBES]

    def reference_set(self, dialogues, personas, budget, count, block, exclude):
        return build_block_reference_set(dialogues, list(personas), budget, count, block.items, block.turns,
                                         seed=block.seed, exclude=exclude, survey_items=block.survey_items)

    def reference_units(self, items, personas):
        team, variants, units = roster(personas), [], []
        for item in items:
            for k, (variant, turns) in enumerate(item["blocks"].items()):
                unit_id = f"{item['item_id']}|{variant}"
                variants.append({"query_id": item["item_id"], "reply_type": variant, "kind": item["kind"],
                                 "text": transcript.render(turns), "candidate_index": k})
                units.append(self.unit(unit_id, {"episode_id": unit_id, "query_id": item["item_id"],
                                                 "prefix_id": item["item_id"], "branch": k}, team, item["context"], turns))
        return variants, units

    def reference_sides(self, item, personas):
        return [(variant, (None, item["context"], turns)) for variant, turns in item["blocks"].items()]


REPLY = Replies(
    "reply", "candidate_id", ("query_id", "persona"), "candidates", "score", "pairs", "train_rm", "promote", "validate",
    "reward_experiment", "persona", "judge_check",
    judge_comparisons=(("ref_gt_off_topic", "reference", "off_topic", "dialogue"),
                       ("ref_gt_cold", "reference", "cold", "dialogue"),
                       ("qa_ref_gt_off_topic", "reference", "off_topic", "qa")),
    gated=("ref_gt_off_topic", "ref_gt_cold"),
    judge_figure_words={"ref_gt_off_topic": "human reply > off-topic", "ref_gt_cold": "human reply > cold",
                        "qa_ref_gt_off_topic": "gold answer > another meeting's"},
    default_rubric="data/rubrics/persona.yaml", human_ratings=True)
BLOCK = Blocks(
    "block", "episode_id", ("prefix_id",), "episodes", "score_group", "group_pairs", "train_group_rm", "promote_group",
    "validate_group", "group_reward_experiment", "group", "judge_check_group",
    judge_comparisons=(("ref_gt_echo", "reference", "echo", "dialogue"),
                       ("ref_gt_off_topic", "reference", "off_topic", "dialogue"),
                       ("ref_gt_redundant", "reference", "redundant", "dialogue")),
    gated=("ref_gt_echo", "ref_gt_off_topic", "ref_gt_redundant"),
    judge_figure_words={"ref_gt_echo": "human block > echo chamber", "ref_gt_off_topic": "human block > off-topic",
                        "ref_gt_redundant": "human block > redundant"},
    default_rubric="data/rubrics/collective.yaml", survey_ratings=True)
GRANULARITIES = {g.name: g for g in (REPLY, BLOCK)}
