"""A tool package as a deployer would write one: installed, it exposes ``word_count`` through the
``agentwake.tools`` entry-point group (see the .dist-info beside it, which pip would have written)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentwake.agent.tools import Tool, ToolContext

LOADS = []  # one entry per time this module was imported


class WordCountArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="The text to count words in.")


class WordCount(Tool):
    name = "word_count"
    description = "Count the words of a text."
    Args = WordCountArgs
    side_effect = False  # it only computes: a replay may call it

    def invoke(self, args: WordCountArgs, ctx: ToolContext) -> str:
        return f"{len(args.text.split())} words"


class LookupArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1)


class BrokenLookup(Tool):
    """A tool whose backend is down: every call raises (a background call's task ends ``failed``)."""

    name = "broken_lookup"
    description = "Look a key up in a service that is down."
    Args = LookupArgs
    side_effect = False

    def invoke(self, args: LookupArgs, ctx: ToolContext) -> str:
        raise RuntimeError(f"the lookup service is down (key {args.key})")


class NotATool:
    pass


LOADS.append(1)
