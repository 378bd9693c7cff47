"""Persona records (the MASCOT speakers), loaded from a YAML file under data/."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mascot.io import InputError, read_yaml


class ExampleExchange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    user: str = Field(min_length=1)
    reply: str = Field(min_length=1)


class Persona(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    role: str = Field(min_length=1)  # e.g. "emotional validator"
    description: str = Field(min_length=1)
    tone: str = Field(min_length=1)
    vocabulary: list[str] = Field(min_length=1)
    example: ExampleExchange  # one exchange shown to the speaker (transcript prompts) and the judge

    def system_prompt(self) -> str:
        words = ", ".join(f'"{w}"' for w in self.vocabulary)
        return (f"You are {self.name}, a companion persona: {self.role}. {self.description} "
                f"Your tone is {self.tone}. Words and phrases you typically use: {words}. "
                "Reply to the user's last message in one to three sentences, in your own voice.")


def load_personas(path: str | Path) -> dict[str, Persona]:
    path = Path(path)
    raw = read_yaml(path, "personas file")
    entries = raw.get("personas") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: expected a top-level key 'personas' holding a non-empty list")
    personas: dict[str, Persona] = {}
    for i, entry in enumerate(entries):
        try:
            persona = Persona.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(entry)"
            raise InputError(f"{path}: personas[{i}] field '{field}': {err['msg']}") from None
        if persona.name in personas:
            raise InputError(f"{path}: personas[{i}]: duplicate persona name '{persona.name}'")
        personas[persona.name] = persona
    return personas


def resolve_persona(personas: dict[str, Persona], name: str, where: str) -> Persona:
    try:
        return personas[name]
    except KeyError:
        raise InputError(f"{where}: unknown persona '{name}' (known: {', '.join(personas)})") from None
