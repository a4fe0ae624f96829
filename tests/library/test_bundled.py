"""The bundled model's settings answer the README's question the same way on every CPU.

Greedy decoding takes the larger logit. Another machine's SIMD kernels round differently,
and so do flash attention on or off and a q8_0 cache: a token that leads the next by a
tenth of a logit on one machine can lose on another (with the earlier system prompt the
README's question began "The" on one CPU and "Le Grand Paris, ..." on another). The three
arithmetic variants here stand in for other machines; at every token of the answer the
chosen token must lead by more than any of them moves a logit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.engine.native import Batch, Context, Model
from spark.engine.template import ChatTemplate
from spark.library.bundled import BUNDLED_SETTINGS
from spark.types import Message

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"  # the README's
ANSWER = "The capital of France is Paris."  # what the README says it answers
LEAD = 1.0  # logits; these variants move the README answer's logits by up to 0.3


def greedy_answer(model: Model, ctx: Context, prompt: list[int]) -> tuple[str, list[float]]:
    """The greedy answer to `prompt` and, per token, how far its logit led the runner-up's."""
    batch = Batch(len(prompt) + 64)
    tokens, leads, row, pos = [], [], batch.add_run(prompt, 0, 0, "last"), len(prompt)
    for _ in range(64):
        assert batch.decode(ctx) == 0
        logits = ctx.logits(row, model.n_vocab)
        best, second = sorted(range(len(logits)), key=logits.__getitem__)[-1:-3:-1]
        leads.append(logits[best] - logits[second])
        if model.is_eog(best):
            break
        tokens.append(best)
        batch.clear()
        row = batch.add(best, pos, 0, output=True)
        pos += 1
    return b"".join(model.piece(t) for t in tokens).decode(), leads


@pytest.mark.parametrize(("flash_attention", "kv_type"), [("on", "f16"), ("off", "f16"), ("on", "q8_0")])
def test_the_readme_answer_leads_at_every_token(smollm2: Path, flash_attention: str, kv_type: str) -> None:
    model = Model(str(smollm2))
    try:
        template = ChatTemplate(model.chat_template())
        text = template.render([Message("user", QUESTION)], system_prompt=BUNDLED_SETTINGS.system_prompt)
        assert not model.add_bos  # (the engine would add one)
        prompt = model.tokenize(text, add_special=False, parse_special=True)
        ctx = Context(
            model,
            n_ctx=256,
            n_seq_max=1,
            n_batch=256,
            n_ubatch=256,
            n_threads=1,
            kv_type=kv_type,
            flash_attention=flash_attention,
            embedding=False,
        )
        try:
            answer, leads = greedy_answer(model, ctx, prompt)
        finally:
            ctx.close()
    finally:
        model.close()
    assert answer == ANSWER
    assert min(leads) > LEAD, [round(lead, 2) for lead in leads]
