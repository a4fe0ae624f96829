"""Slots: the sequences of one context, what each holds in its KV cache, and which one a prompt gets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from spark.engine.echo import PromptEcho
from spark.engine.line_limits import LineLimits
from spark.engine.logprobs import Logprobs
from spark.engine.output import OutputParser, StopAtStrings
from spark.engine.reasoning import ThinkBudget
from spark.engine.sampling import SamplerChain
from spark.engine.speculative import NgramDrafter
from spark.engine.text import TextStream
from spark.engine.vision import PromptMedia
from spark.types import Event, Usage

Scales = tuple[float, ...]  # LoRA scales, one per adapter of the model (see `adapters`)


@dataclass(slots=True, eq=False)
class Generation:
    """One chat or completion request while it holds a slot."""

    request_id: str
    emit: Callable[[Event], None]
    prompt: list[int]
    n_cached: int  # prompt tokens whose KV was reused
    sampler: SamplerChain
    max_tokens: int | None
    stream: TextStream  # whole UTF-8 characters
    parser: OutputParser
    stops: StopAtStrings  # on the parser's events
    started: float  # when it got the slot (time.perf_counter)
    n_evaluated: int = 0  # prompt tokens in the KV cache so far
    n_generated: int = 0
    n_reasoning: int = 0  # of the generated tokens, those of the reasoning
    token: int = -1  # sampled, to be fed in the next batch
    row: int = -1  # its output row in the batch being decoded, -1 for none
    media: PromptMedia | None = None  # the prompt's images (IMAGE_TOKEN in `prompt`)
    budget: ThinkBudget | None = None  # closes a thinking block that runs too long
    forced: list[int] = field(default_factory=list)  # next output tokens, written instead of sampled
    logit_bias: dict[int, float] | None = None  # the request's, for the model's own next choice
    drafter: NgramDrafter | None = None  # n-gram drafting (None: none, or the draft model's)
    draft: list[int] = field(default_factory=list)  # tokens drafted after `token` in the batch being decoded
    drafted: int = 0  # tokens drafted over the whole generation
    accepted: int = 0  # of which the model confirmed
    logprobs: Logprobs | None = None  # the tokens' log probabilities, when the request asks
    echo: PromptEcho | None = None  # the prompt, sent back before the answer (a completion's echo)
    prediction: list[int] | None = None  # the predicted answer's tokens (OpenAI's Predicted Outputs)
    answer: list[int] = field(default_factory=list)  # the answer's tokens, kept with a prediction only
    limits: LineLimits | None = None  # an editor's completion: ends at a dedent or after a time

    @property
    def prompt_done(self) -> bool:
        return self.n_evaluated == len(self.prompt)

    def output(self, events: Sequence[Event]) -> None:
        """Send the output events of the tokens so far, with their log probabilities if asked."""
        if self.limits is not None:
            events = self.limits.filter(list(events))
        for event in events if self.logprobs is None else self.logprobs.attach(events):
            self.emit(event)

    def close(self) -> None:
        """Free what the request holds in llama.cpp: its sampler, its images."""
        self.sampler.close()
        if self.media is not None:
            self.media.close()

    def usage(self) -> Usage:
        kept = 0 if self.prediction is None else predicted_tokens_kept(self.prediction, self.answer)
        return Usage(
            prompt_tokens=len(self.prompt),
            completion_tokens=self.n_generated,
            reasoning_tokens=self.n_reasoning,
            cached_tokens=self.n_cached,
            drafted_tokens=self.drafted,
            accepted_tokens=self.accepted,
            accepted_prediction_tokens=kept,
            rejected_prediction_tokens=0 if self.prediction is None else len(self.prediction) - kept,
        )


def predicted_tokens_kept(prediction: Sequence[int], answer: Sequence[int]) -> int:
    """How many of the prediction's tokens the answer holds in the same order (the matching blocks
    of a diff: what an edit kept of the text it was predicted to repeat). difflib's "autojunk"
    keeps it to milliseconds where a few tokens repeat everywhere (seconds without, in the engine's
    loop), at the price of an approximate count there."""
    matcher = SequenceMatcher(None, prediction, answer)
    return sum(block.size for block in matcher.get_matching_blocks())


@dataclass(slots=True, eq=False)
class Slot:
    """One sequence of the context. `cached` is exactly the tokens in its KV cache, in order
    (`IMAGE_TOKEN` for image positions, which never match a text prompt).

    `private`: the cache holds part of a zero-retention conversation (never
    written to disk). `persisted`: the tokens of its cache last written to
    disk (or restored from there); the cache needs writing while they differ.
    `lora`: the LoRA scales its cache was computed under (None: as attached).
    `floor`: the shortest start of its cache a prompt can reuse; above 0 when it
    was put back from a snapshot that holds only its last sliding window
    (`Context.restored_floor`).
    """

    id: int
    cached: list[int] = field(default_factory=list)
    last_used: float = 0.0
    work: Generation | None = None
    private: bool = False
    persisted: list[int] = field(default_factory=list)
    lora: Scales | None = None
    floor: int = 0


_PREFIX_CHUNK = 256  # tokens compared at once by common_prefix


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    # Slices compare at C speed: find the chunk where they part, then the token.
    for i in range(0, n, _PREFIX_CHUNK):
        j = min(i + _PREFIX_CHUNK, n)
        if a[i:j] != b[i:j]:
            for k in range(i, j):
                if a[k] != b[k]:
                    return k
    return n


def shared(slot: Slot, prompt: Sequence[int], lora: Scales | None = None) -> int:
    """How many of `prompt`'s first tokens the slot's cache holds for a request under `lora`
    (0 when they stop short of its `floor`: then it serves none)."""
    n = common_prefix(slot.cached, prompt) if slot.lora == lora else 0
    return n if n >= slot.floor else 0


def pick_slot(free: list[Slot], prompt: Sequence[int], lora: Scales | None = None) -> tuple[Slot, int]:
    """The free slot for `prompt` (under LoRA scales `lora`) and how many of its tokens that slot
    already holds.

    The slot sharing the longest prefix wins where that prefix is at least
    half of the prompt (a regenerated answer, the next turn: llama-server's
    rule) or at least half of the slot's cache. A short shared start (a common
    system prompt) does not evict another conversation when an emptier slot is
    free: then the least recently used slot is taken.
    """
    best: Slot | None = None
    best_len = 0
    for slot in free:
        n = shared(slot, prompt, lora)
        if n > best_len and (2 * n >= len(prompt) or 2 * n >= len(slot.cached)):
            best, best_len = slot, n
    if best is None:
        best = min(free, key=lambda s: s.last_used)
        best_len = shared(best, prompt, lora)
    return best, best_len
