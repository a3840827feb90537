"""The base of every table read from recipes.toml: an unknown key is refused and a parsed table is frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
