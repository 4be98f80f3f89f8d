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


class NotATool:
    pass


LOADS.append(1)
