"""Stage 2's conversation parts: the Director's directive (format, prompt, parser), the speaker's prompt under
a directive, the simulated user, and the group conversation's rendering.

A directive is three lines, as in the method: `Agent: <speaker name>` / `Action: <instruction>` /
`Tone: <tone>`. One that does not parse is an error with the reason, never replaced by a guess.
"""
from __future__ import annotations

from dataclasses import dataclass
import hashlib
import re

from mascot import transcript
from mascot.data.personas import Persona
from mascot.llm.backend import Prompt

FIELDS = ("agent", "action", "tone")
# A field label anywhere in the text: on its own line, or inline as the method writes it
# ("Agent: Anchor / Action: ... / Tone: ..."); markdown emphasis and a plural "Tones" are read too.
LABEL = re.compile(r"(?:^|(?<=[\s/|*_#>.-]))[*_]*(agent|action|tones?)[*_]*\s*[:：][*_]*", re.IGNORECASE)
GENERIC_ACTION, GENERIC_TONE = "Reply to the person's last message.", "Natural"


@dataclass(frozen=True)
class Directive:
    agent: str
    action: str
    tone: str

    def as_dict(self) -> dict:
        return {"agent": self.agent, "action": self.action, "tone": self.tone}


class DirectiveError(ValueError):
    pass


def _canonical(name: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", name.lower()).removeprefix("the ").strip()


def parse_directive(text: str, agents: list[str]) -> Directive:
    """The first Agent, Action and Tone fields of `text`, each running to the next label or the end of its
    line. The agent must name a known speaker (case, a leading "The" and punctuation aside: "Agent: Anchor"
    names The Anchor). Anything missing or unknown raises DirectiveError with the reason."""
    found: dict[str, str] = {}
    labels = list(LABEL.finditer(text))
    for m, nxt in zip(labels, labels[1:] + [None]):
        name = m.group(1).lower().rstrip("s") if m.group(1).lower() != "tones" else "tone"
        value = text[m.end(): nxt.start() if nxt else len(text)].split("\n", 1)[0]
        value = value.strip().strip("/|*_").strip()
        if name not in found:
            found[name] = value
        if len(found) == 3:
            break
    missing = [f for f in FIELDS if not found.get(f)]
    if missing:
        raise DirectiveError(f"missing or empty field(s): {', '.join(missing)}")
    known = {_canonical(a): a for a in agents}
    agent = known.get(_canonical(found["agent"]))
    if agent is None:
        raise DirectiveError(f"unknown agent '{found['agent']}' (known: {', '.join(agents)})")
    return Directive(agent, found["action"], found["tone"])


def roster(personas: dict[str, Persona]) -> str:
    return ", ".join(f"{p.name} ({p.role})" for p in personas.values())


def conversation_text(context: list[dict], turns: list[dict]) -> str:
    """The whole group conversation: the corpus prefix (its supporter turns as "Companion"), then the group's
    turns under their speakers' names."""
    return transcript.render([*context, *transcript.turn_messages(turns)])


def block_messages(turns: list[dict]) -> list[dict]:
    """A branch's turns as messages (speaker in `name`): what the judge and the group reward model read."""
    return transcript.turn_messages(turns)


def director_prompt(personas: dict[str, Persona], context: list[dict], turns: list[dict], style: str,
                    prefill: bool = True) -> tuple[Prompt, tuple[str, ...]]:
    """The Director's prompt and stop strings. `chat` for an instruct model; `transcript` for a small base
    model. With `prefill` both end in a written "Agent:" (a chat prompt as the start of the assistant's
    message), so the completion starts with the agent's name: a small model then keeps the three-line form.
    A chat prompt for GRPO is built without it: TRL renders conversational prompts with a generation prompt,
    which would close the prefill as a message of its own, so there the policy writes the whole directive."""
    team = "".join(f"- {p.name}: {p.role}\n" for p in personas.values())
    task = ("You are the Director of a team of companions talking with a person. The team:\n" + team +
            "At each turn you choose which companion speaks next, what they should do and in what tone. Choose "
            "the one whose role helps most at this point; do not let companions repeat or merely agree with "
            "each other.")
    conversation = conversation_text(context, turns)
    example = example_directive(personas, conversation)
    if style == "chat":
        messages = [{"role": "system", "content": task + " Answer with exactly three lines:\nAgent: <one of: "
                     + ", ".join(personas) + ">\nAction: <one short instruction>\nTone: <tone>\n\nExample:\n"
                     + example},
                    {"role": "user", "content": f"Conversation so far:\n{conversation}\n\nThe directive for the "
                                                "next turn:"}]
        return (messages + [{"role": "assistant", "content": "Agent:"}] if prefill else messages), ()
    return (f"{task}\n\nExample directive:\n{example}\n\nConversation so far:\n{conversation}\n\n"
            "Directive for the next turn:\nAgent:"), ("\n\n",)


def directive_pattern(agents: list[str], after_agent_label: bool = True) -> str:
    """The three-line directive as a regular expression, for decoding under a grammar (vLLM's structured
    outputs, xgrammar in-process): the agent is one of `agents`, so a directive parses and names a real
    speaker by construction. `after_agent_label`: the prompt already ends in "Agent:"."""
    names = "|".join(_regex_literal(a) for a in agents)
    head = " " if after_agent_label else "Agent: "
    # bounded so that a whole directive fits a Director budget of 48 tokens (Qwen's tokenizer: about 30); one cut
    # at max_tokens still fails to parse and is recorded as invalid
    return head + "(" + names + ")\\nAction: [^\\n]{1,60}\\nTone: [^\\n]{1,20}"


def _regex_literal(text: str) -> str:
    return "".join("\\" + ch if ch in r".^$*+?()[]{}|\/" else ch for ch in text)


def example_directive(personas: dict[str, Persona], conversation: str) -> str:
    """A worked example keeps a small model in the three-line form, but it also pulls the choice towards the
    agent it names: the example's agent rotates with the conversation (a hash), so no speaker is favoured
    across prefixes."""
    names = list(personas)
    p = personas[names[int(hashlib.sha1(conversation.encode()).hexdigest(), 16) % len(names)]]
    return f"Agent: {p.name}\nAction: {p.description.split(';')[0].rstrip('.')}.\nTone: {p.tone.capitalize()}"


def directive_text(completion, prefilled: bool = True) -> str:
    """The directive a completion holds. Plain text continues after the prompt's "Agent:" (`prefilled`), or is
    the whole directive; a conversational completion (TRL passes a list of messages) is the assistant's whole
    message."""
    if isinstance(completion, list):
        return "\n".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")
    return "Agent:" + completion if prefilled else completion


def speaker_prompt_under(persona: Persona, directive: Directive, context: list[dict], turns: list[dict]) -> Prompt:
    """The speaker in its persona, told the Director's action and tone, shown the whole group conversation."""
    system = (persona.system_prompt() + f" You are one of several companions in a group conversation. The "
              f"Director asks you to: {directive.action} Tone: {directive.tone}.")
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Conversation so far:\n{conversation_text(context, turns)}\n\nWrite "
                                        f"your next turn as {persona.name}, without your name in front."}]


def user_prompt(context: list[dict], turns: list[dict]) -> Prompt:
    return [{"role": "system", "content": "You are the Person in this conversation, talking with a group of "
             "companions about your own situation. Reply to them in one or two sentences, as yourself."},
            {"role": "user", "content": f"Conversation so far:\n{conversation_text(context, turns)}\n\nWrite "
                                        "the Person's next message, without a name in front."}]


NAME_PREFIX = re.compile(r"^\s*\**\s*([A-Z][\w ]{0,20}):\s*")


def clean_turn(text: str, names: list[str]) -> str:
    """Drop speaker labels the model wrote in front of its own turn ("The Anchor: Companion: ...")."""
    labels = {_canonical(n) for n in names} | {"person", "user", "companion"}
    for _ in range(3):
        m = NAME_PREFIX.match(text)
        if not (m and _canonical(m.group(1)) in labels):
            break
        text = text[m.end():]
    return text.strip()


def render_episode(episode: dict, context: list[dict], score: dict | None) -> str:
    """One episode for a reader: the prefix, then each turn with the directive that produced it."""
    head = f"### {episode['episode_id']}"
    if score and score.get("status") == "scored":
        dims = ", ".join(f"{d} {v:.2f}" for d, v in score["scores"].items())
        head += f": collective total {score['total_reward']:.2f} ({dims})"
    lines = [head, "", "```", transcript.render(context), "--- branch point ---"]
    for t in episode["turns"]:
        if t["role"] == "agent":
            d = t["directive"]
            lines.append(f"[Director] Agent: {d['agent']} | Action: {d['action']} | Tone: {d['tone']}")
            lines.append(f"{t['speaker']}: {t['text']}")
        else:
            lines.append(f"Person: {t['text']}")
    if not episode["valid"]:
        lines.append(f"[invalid] {episode['invalid_reason']}\n[raw directive] {episode['invalid_raw']}")
    return "\n".join(lines + ["```", ""])


def example_episodes(episodes: list[dict], scores: list[dict], queries: dict[str, dict]) -> str:
    """The highest, median and lowest scored episodes (by collective total), and one invalid one if any."""
    by_id = {s["episode_id"]: s for s in scores}
    scored = sorted((e for e in episodes if by_id.get(e["episode_id"], {}).get("status") == "scored"),
                    key=lambda e: by_id[e["episode_id"]]["total_reward"])
    picks = []
    if scored:
        picks = [("Highest", scored[-1]), ("Median", scored[len(scored) // 2]), ("Lowest", scored[0])]
    invalid = next((e for e in episodes if not e["valid"]), None)
    if invalid:
        picks.append(("Invalid (its directive did not parse)", invalid))
    return "\n".join(f"## {label}\n\n" + render_episode(e, queries[e["query_id"]]["context"], by_id.get(e["episode_id"]))
                     for label, e in picks)
