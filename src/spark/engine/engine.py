"""The engine: one model, N slots, one continuous-batching decode loop.

`Engine` runs inside a runner process. Requests are prepared (templated,
tokenized, validated: `prepare`) on the caller's thread in `submit`, queued FIFO, and
admitted by the decode-loop thread into free slots. Each loop step builds one
`llama_batch` from every active slot -- the next token of each generating slot
first, then prompt chunks up to `n_batch` -- decodes it, and samples every slot
that produced logits with that slot's own sampler chain.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Self

import psutil

from spark.engine import embeddings
from spark.engine.adapters import AdapterTurns
from spark.engine.checkpoints import Checkpoints
from spark.engine.draft_model import DraftModel
from spark.engine.drafting import Drafting
from spark.engine.echo import PromptEcho
from spark.engine.grammar import create_sampler
from spark.engine.info import EngineInfo
from spark.engine.line_limits import line_limits
from spark.engine.logprobs import Logprobs
from spark.engine.native import Batch, Context, Model
from spark.engine.output import StopAtStrings, merged, parser_for
from spark.engine.prepare import EmbeddingJob, Emit, GenerationJob, Job, Preparer
from spark.engine.reasoning import ThinkBudget
from spark.engine.sampling import SamplerChain
from spark.engine.slots import Generation, Slot
from spark.engine.snapshot_cache import PERSIST_IDLE_SECONDS, SnapshotCache
from spark.engine.snapshot_disk import disk_store
from spark.engine.snapshots import SnapshotStore
from spark.engine.text import TextStream
from spark.engine.vision import Projector
from spark.errors import RunnerFailed, SparkError, as_spark_error
from spark.types import (
    Answer,
    ChatRequest,
    CompletionRequest,
    Done,
    Embeddings,
    Event,
    Failed,
    FinishReason,
    LoadOptions,
    PromptDone,
    Question,
    Request,
    SlotInfo,
    Usage,
)

log = logging.getLogger(__name__)

# Most drafted tokens in one batch, all slots together: prompt chunks keep the rest.
MAX_BATCH_DRAFT = 64


def _safe_emit(emit: Emit, event: Event, request_id: str) -> None:
    """Deliver a final event; a broken callback is logged, never raised into the loop."""
    try:
        emit(event)
    except Exception:
        log.exception("the event callback of request %s failed", request_id)


class Engine:
    """A loaded model serving chat, completion or embedding requests with continuous batching."""

    def __init__(self, options: LoadOptions) -> None:
        """Load the model and its context and start the decode loop.

        Raises `ModelFileError` for a file llama.cpp cannot load and
        `RunnerFailed` for other load failures (bad options, out of memory).
        """
        if options.n_parallel < 1 or options.n_ctx < 0 or options.n_batch < 1:
            raise RunnerFailed(
                f"bad load options: n_parallel={options.n_parallel}, n_ctx={options.n_ctx}, "
                f"n_batch={options.n_batch} (need n_parallel >= 1, n_ctx >= 0, n_batch >= 1)"
            )
        self._options = options
        self._n_threads = options.n_threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
        model = Model(
            options.path,
            n_gpu_layers=options.n_gpu_layers,
            main_gpu=options.main_gpu,
            tensor_split=options.tensor_split,
        )
        self._projector: Projector | None = None
        self._drafting: Drafting | None = None  # None: no speculative decoding
        try:
            if options.mmproj_path:
                self._projector = Projector(
                    options.mmproj_path, model, n_threads=self._n_threads, use_gpu=options.n_gpu_layers > 0
                )
            self._setup(model, options)
        except BaseException:
            for part in (self._projector, self._drafting):
                if part is not None:
                    part.close()
            model.close()
            raise
        self._model = model
        # Held while a caller's thread uses the model (tokenizing) so close() cannot free it meanwhile.
        self._model_lock = threading.Lock()
        self._cv = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._cancels: set[str] = set()
        self._stopping = False
        self._closed = False
        self._progress = 0
        self._n_active = 0
        self._thread = threading.Thread(target=self._loop, name="spark-engine", daemon=True)
        self._thread.start()

    def _setup(self, model: Model, options: LoadOptions) -> None:
        """Create the context, batch and template for `model`."""
        # Positions past the training context give garbage: never go beyond it.
        train = model.n_ctx_train
        per_slot = options.n_ctx or train or 4096
        if train > 0:
            per_slot = min(per_slot, train)
        self._n_ctx = per_slot
        self._n_slots = options.n_parallel
        self._embedding = options.embedding
        if options.embedding:
            mean_pooling = embeddings.pools_by_mean(model)
            # Non-causal models must see a whole input in one micro-batch.
            n_batch = max(options.n_batch, per_slot)
            n_ubatch = n_batch
        else:
            mean_pooling = False
            n_batch = options.n_batch
            n_ubatch = min(options.n_batch, 512)
        self._ctx = Context(
            model,
            n_ctx=per_slot * self._n_slots,
            n_seq_max=self._n_slots,
            n_batch=n_batch,
            n_ubatch=n_ubatch,
            n_threads=self._n_threads,
            kv_type=options.kv_type,
            flash_attention=options.flash_attention,
            embedding=options.embedding,
            mean_pooling=mean_pooling,
            lora=options.lora,
        )
        # Rejected draft tokens must leave the cache: a recurrent state cannot drop them.
        if options.speculative and not options.embedding and model.can_trim:
            draft_model = None
            if options.draft_path:
                draft_model = DraftModel(
                    options.draft_path,
                    model,
                    n_ctx=per_slot,
                    n_slots=self._n_slots,
                    n_threads=self._n_threads,
                    n_gpu_layers=-1 if options.n_gpu_layers else 0,  # beside the target's first layers
                    main_gpu=options.main_gpu,
                    kv_type=options.kv_type,
                    flash_attention=options.flash_attention,
                )
            self._drafting = Drafting(draft_model, per_slot)
        self._lora = AdapterTurns(model, self._ctx, options.lora)
        self._batch = Batch(self._ctx.n_batch)
        self._prompt_budget = self._batch.capacity
        self._slots = [Slot(i) for i in range(self._n_slots)]
        self._snapshots = SnapshotCache(
            SnapshotStore(0 if options.embedding else options.snapshot_ram_bytes),
            disk_store(options, per_slot),
            Checkpoints(self._ctx, self._n_slots),
        )
        self._prep = Preparer(model, options, n_ctx=per_slot, projector=self._projector)
        self._marker_pieces = self._prep.marker_pieces()
        think = self._prep.think
        self._think_close = model.tokenize(think.close, add_special=False, parse_special=True) if think else []

    # --- public API ---------------------------------------------------------

    @property
    def progress(self) -> int:
        """A counter bumped by every unit of work (decode step, admission, finish)."""
        return self._progress

    @property
    def busy(self) -> int:
        """Requests queued or holding a slot."""
        return len(self._queue) + self._n_active

    def info(self) -> EngineInfo:
        """What is loaded: context per slot, slots, vocabulary, template, ..."""
        m, template = self._model, self._prep.template
        return EngineInfo(
            model_id=self._options.model_id,
            n_ctx_per_slot=self._n_ctx,
            n_slots=self._n_slots,
            n_ctx_train=m.n_ctx_train,
            n_vocab=m.n_vocab,
            n_embd=m.n_embd_out if self._embedding else m.n_embd,
            n_params=m.n_params,
            model_bytes=m.size_bytes,
            embedding=self._embedding,
            n_threads=self._n_threads,
            n_batch=self._batch.capacity,
            chat_template=template.source,
            chat_template_source="fallback" if template.is_fallback else "gguf",
            bos_token=template.bos_token,
            eos_token=template.eos_token,
        )

    def count_tokens(self, request: ChatRequest | CompletionRequest) -> int:
        """Exact number of prompt tokens of `request` (through the chat template for chats)."""
        return self.answer(request).n_tokens

    def answer(self, question: Question) -> Answer:
        """The answer to a question about tokens (see `Preparer.answer`)."""
        with self._model_lock:
            self._check_open()
            return self._prep.answer(question)

    def submit(self, request_id: str, request: Request, emit: Emit) -> None:
        """Queue a request; events go to `emit` from the engine thread.

        Returns at once. A request that fails validation gets its `Failed`
        event right here, on the caller's thread. The last event of every
        request is exactly one of `Done`, `Embeddings` or `Failed`.
        """
        try:
            with self._model_lock:
                self._check_open()
                job = self._prep.prepare(request_id, request, emit)
                with self._cv:
                    self._queue.append(job)
                    self._cv.notify()
        except Exception as e:
            if not isinstance(e, SparkError):
                log.exception("preparing request %s failed", request_id)
            _safe_emit(emit, Failed(as_spark_error(e, "the engine").info()), request_id)

    def cancel(self, request_id: str) -> None:
        """Stop a request: it ends with `Done(finish_reason="cancelled")` and frees its slot."""
        with self._cv:
            self._cancels.add(request_id)
            self._cv.notify()

    def close(self) -> None:
        """Stop the loop (requests still in flight fail) and free everything llama.cpp holds."""
        with self._model_lock:
            if self._closed:
                return
            self._closed = True
        with self._cv:
            self._stopping = True
            self._cv.notify()
        # The loop frees llama.cpp's objects on its way out; from an event callback
        # (the loop's own thread) there is nothing to wait for.
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerFailed("the model was unloaded")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the decode loop (engine thread) ------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                persist = False
                while not (self._stopping or self._queue or self._cancels or self._n_active):
                    if not self._snapshots.unsaved(self._slots):
                        self._cv.wait()
                    elif not self._cv.wait(PERSIST_IDLE_SECONDS):
                        persist = True  # idle for a while: write what a crash would lose
                        break
                if self._stopping:
                    break
            if persist:
                self._persist()
                continue
            with self._cv:
                cancels, self._cancels = self._cancels, set()
                cancelled_jobs = [j for j in self._queue if j.request_id in cancels]
                for job in cancelled_jobs:
                    self._queue.remove(job)
            try:
                for job in cancelled_jobs:
                    usage = Usage(prompt_tokens=len(job.prompt) if isinstance(job, GenerationJob) else 0)
                    job.close()
                    _safe_emit(job.emit, Done("cancelled", usage), job.request_id)
                for slot in self._slots:
                    if slot.work is not None and slot.work.request_id in cancels:
                        self._finish(slot, "cancelled")
                self._admit()
                if self._n_active:
                    self._step()
            except Exception as e:
                # A bug in the loop must not kill the thread: fail what is running.
                log.exception("engine step failed")
                for slot in self._slots:
                    if slot.work is not None:
                        self._fail(slot, e)
        self._shutdown()

    def _shutdown(self) -> None:
        gone = RunnerFailed("the model was unloaded while this request ran").info()
        with self._cv:
            queued = list(self._queue)
            self._queue.clear()
        for job in queued:
            job.close()
            _safe_emit(job.emit, Failed(gone), job.request_id)
        for slot in self._slots:
            if slot.work is not None:
                gen = self._release(slot)
                _safe_emit(gen.emit, Failed(gone), gen.request_id)
        try:
            self._snapshots.close(self._ctx, self._slots)
        except Exception:
            log.exception("writing KV snapshots at unload failed")
        with self._model_lock:
            for part in (self._projector, self._drafting):
                if part is not None:
                    part.close()
            self._ctx.close()
            self._model.close()

    def _admit(self) -> None:
        """Move queued requests into free slots (FIFO); embedding requests run right here."""
        while True:
            with self._cv:
                if not self._queue:
                    return
                free = [s for s in self._slots if s.work is None]
                if not free and not self._embedding:
                    return
                job = self._queue.popleft()
            self._progress += 1
            if isinstance(job, EmbeddingJob):
                self._run_embedding(job)
            else:
                self._start(job, free)

    def _persist(self) -> None:
        try:
            self._snapshots.persist(self._ctx, self._slots)
        except Exception:
            log.exception("writing KV snapshots failed")

    def _start(self, job: GenerationJob, free: list[Slot]) -> None:
        prompt = job.prompt
        logprobs = Logprobs.of(self._model, job.request)
        echo = None if job.echo is None else PromptEcho(*job.echo, prompt=prompt, logprobs=logprobs)
        # An echo's log probabilities need logits at every prompt position, which no cache holds, and
        # `cache_prompt` false asks for none: nothing is reused (limit 0), but what the slot loses is
        # saved as for any prompt. Cached image positions may hold another image: only the text
        # before the first is reused.
        whole = (echo is not None and echo.needs_logits) or not job.request.cache_prompt
        limit = 0 if whole else job.media.first_image if job.media is not None else len(prompt)
        slot, n_keep, reuse = self._snapshots.place(self._ctx, free, prompt, limit, job.lora)
        slot.lora = job.lora
        # The cache now holds this request's tokens only: private (never on disk) exactly when it is.
        slot.private = job.request.zero_retention
        params, plan = job.params, job.plan
        try:
            grammar = create_sampler(self._model, plan.grammar) if plan.grammar is not None else None
            sampler = SamplerChain(params, self._model, grammar, keep_drawn=bool(logprobs and logprobs.post_sampling))
        except Exception as e:
            job.close()
            _safe_emit(job.emit, Failed(as_spark_error(e, "the engine").info()), job.request_id)
            return
        sampler.see_prompt(prompt)
        slot.work = Generation(
            request_id=job.request_id,
            emit=job.emit,
            prompt=prompt,
            n_cached=n_keep,
            sampler=sampler,
            max_tokens=params.max_tokens,
            stream=TextStream(),
            parser=parser_for(plan),
            stops=StopAtStrings(params.stop, turn_ends=job.turn_ends),
            started=time.perf_counter(),
            n_evaluated=n_keep,
            media=job.media,
            logit_bias=params.logit_bias,
            budget=(
                ThinkBudget(plan.reasoning_budget, self._think_close)
                if plan.reasoning_budget is not None and self._think_close
                else None
            ),
            drafter=self._drafting.drafter(prompt, job.prediction) if self._drafting else None,
            logprobs=logprobs,
            echo=echo,
            prediction=job.prediction,
            limits=line_limits(job.request),
        )
        self._n_active += 1
        try:
            job.emit(
                SlotInfo(
                    slot=slot.id,
                    prompt_tokens=len(prompt),
                    cached_tokens=n_keep,
                    cache="none" if n_keep == 0 else reuse.source if reuse is not None else "slot",
                    restore_seconds=None if reuse is None else round(reuse.seconds, 6),
                )
            )
        except Exception as e:
            self._fail(slot, e)

    def _step(self) -> None:
        """Build one batch from all active slots, decode it, sample."""
        batch = self._batch
        batch.clear()
        lora = self._lora.turn(self._slots)  # one set of LoRA scales per batch
        generating = [s for s in self._slots if s.work is not None and s.work.token >= 0 and s.lora == lora]
        chunks: list[tuple[Slot, int]] = []
        spare = min(batch.capacity - len(generating), MAX_BATCH_DRAFT)
        if self._ctx.small_window and self._n_active > 1:  # see checkpoints: drafts verified alone only
            spare = 0
        drafting = self._drafting
        proposals = drafting.propose(generating, spare) if drafting else {}
        drafted = 0
        for slot in generating:
            gen = slot.work
            assert gen is not None
            pos = len(slot.cached)
            gen.row = batch.add(gen.token, pos, slot.id, True)
            if drafting:
                gen.draft = drafting.draft(gen, pos, spare - drafted, len(generating), drafted, proposals.get(slot.id))
            if gen.draft:  # verified in this batch: logits at every drafted position
                batch.add_run(gen.draft, pos + 1, slot.id, "all")
                drafted += len(gen.draft)
                gen.drafted += len(gen.draft)
        budget = min(batch.room, self._prompt_budget)
        for slot in self._slots:
            gen = slot.work
            if budget <= 0:
                break
            if gen is None or gen.prompt_done or slot.lora != lora:
                continue
            if gen.media is not None and not self._evaluate_images(slot, gen):
                continue
            start = gen.n_evaluated
            take = min(budget, len(gen.prompt) - start)
            if gen.media is not None:  # text runs stop at the next image
                take = min(take, gen.media.next_image(start) - start)
            echo = gen.echo if gen.echo is not None and gen.echo.needs_logits else None
            take = take if echo is None else min(take, MAX_BATCH_DRAFT)  # logits at all: as many as drafts have
            last = start + take == len(gen.prompt)
            if last and gen.media is None:  # where a retry can go back to (see checkpoints)
                self._snapshots.checkpoints.before_last_chunk(self._ctx, slot.id, gen.prompt, start)
            row = batch.add_run(
                gen.prompt[start : start + take], start, slot.id, "all" if echo else "last" if last else "none"
            )
            if echo is not None:
                echo.chunk(start, row, take)
            gen.row = row if last else -1
            chunks.append((slot, take))
            budget -= take
        if batch.n == 0:
            return

        started = time.perf_counter()
        status = batch.decode(self._ctx)
        self._progress += 1
        if status != 0:
            self._decode_failed(status, generating, chunks)
            return

        for slot in generating:
            gen = slot.work
            assert gen is not None
            slot.cached.append(gen.token)
            gen.token = -1
        now = time.perf_counter()
        for slot, take in chunks:
            gen = slot.work
            assert gen is not None
            slot.cached.extend(gen.prompt[gen.n_evaluated : gen.n_evaluated + take])
            gen.n_evaluated += take
            try:
                if gen.echo is not None:
                    gen.echo.evaluated(self._ctx)
                if gen.prompt_done:
                    gen.emit(PromptDone(len(gen.prompt) - gen.n_cached, now - gen.started))
                    if gen.echo is not None:
                        gen.emit(gen.echo.event())
                    if gen.max_tokens == 0:  # the prompt scored or cached, no answer asked for
                        self._finish(slot, "length")
            except Exception as e:
                self._fail(slot, e)
        for slot in self._slots:
            gen = slot.work
            if gen is None or gen.row < 0:
                continue
            row, gen.row = gen.row, -1
            draft, gen.draft = gen.draft, []
            if not draft:
                self._next_token(slot, gen, row)
                continue
            emit, held = gen.emit, list[Event]()
            gen.emit = held.append  # the draft's events go out merged, once it is verified
            n = 0  # draft tokens confirmed: sampled at the position before them, as drafted
            try:
                while self._next_token(slot, gen, row + n) and n < len(draft) and gen.token == draft[n]:
                    slot.cached.append(draft[n])  # its KV is in the cache already
                    n += 1
                    gen.accepted += 1  # counted before the next token, which may end the request
            finally:
                gen.emit = emit
                for event in merged(held):
                    _safe_emit(emit, event, gen.request_id)
            assert drafting is not None
            drafting.verified(gen, len(draft), n)
            if n < len(draft):
                self._drop_rejected(slot, gen)
        if not chunks and drafting:  # a step of generation alone, its sampling included
            drafting.costs.observe(batch.n, time.perf_counter() - started)

    def _drop_rejected(self, slot: Slot, gen: Generation) -> None:
        """Remove the KV of draft tokens past `slot.cached` (rejected, or past the output's end)."""
        if self._ctx.keep(slot.id, len(slot.cached)):
            return
        self._ctx.forget(slot.id)
        slot.cached.clear()
        if slot.work is gen:
            self._fail(slot, RunnerFailed("llama.cpp could not drop rejected draft tokens from the KV cache"))

    def _next_token(self, slot: Slot, gen: Generation, row: int) -> bool:
        """Sample (or write) the slot's next token from output `row`; False once the request ended."""
        try:
            if gen.parser.call_ended and not gen.forced and not self._goes_on(gen, row):
                self._finish(slot, "stop")  # ends with its calls: "tool_calls"
                return False
            if gen.forced and not gen.sampler.allows(gen.forced[0]):
                gen.forced.clear()  # the grammar has moved on (e.g. into a call): let it lead
            if gen.forced:  # tokens the engine writes for the model (closing a thinking block)
                token = gen.forced.pop(0)
                gen.sampler.force(token)
            else:
                token = gen.sampler.sample(self._ctx.ptr, row)
            if gen.logprobs is not None:
                gen.logprobs.add(self._ctx, row, token, gen.sampler)
            self._on_token(slot, gen, token)
        except Exception as e:
            self._fail(slot, e)
        return slot.work is gen

    def _goes_on(self, gen: Generation, row: int) -> bool:
        """After a whole tool call: whether the model's own most likely next token (with the
        request's logit_bias) goes on in a way its grammar allows, e.g. another call.

        A grammar decides what a call looks like, not whether another one follows: a
        model that would end here, or write what the grammar forbids after a call,
        ends with the calls it made instead of being led on to max_tokens.
        """
        logits = self._ctx.logits(row, self._model.n_vocab)
        for token, bias in (gen.logit_bias or {}).items():
            logits[token] += bias
        best = logits.index(max(logits))
        return not self._model.is_eog(best) and gen.sampler.allows(best)

    def _evaluate_images(self, slot: Slot, gen: Generation) -> bool:
        """Evaluate the images the slot's prompt has reached, if any; False when the slot failed."""
        assert gen.media is not None and self._projector is not None
        while (image := gen.media.image_at(gen.n_evaluated)) is not None:
            try:
                self._projector.evaluate(self._ctx, image, seq=slot.id, n_batch=self._batch.capacity)
            except Exception as e:
                # The cache may hold part of the image: forget the sequence entirely.
                self._ctx.forget(slot.id)
                slot.cached.clear()
                self._fail(slot, e)
                return False
            self._progress += 1
            slot.cached.extend(gen.prompt[image.start : image.start + image.n_tokens])
            gen.n_evaluated += image.n_tokens
        return True

    def _on_token(self, slot: Slot, gen: Generation, token: int) -> None:
        gen.n_generated += 1
        gen.n_reasoning += gen.parser.in_reasoning  # a thinking block's tokens, its closing tag with them
        if gen.drafter is not None:
            gen.drafter.push(token)
        if gen.prediction is not None:
            gen.answer.append(token)
        if self._model.is_eog(token):
            self._finish(slot, "stop")
            return
        piece = self._marker_pieces.get(token) or self._model.piece(token)
        text = gen.stream.push(piece)
        if text:
            gen.output(gen.stops.filter(gen.parser.feed(text)))
        if gen.budget is not None:
            gen.forced += gen.budget.after(piece, in_reasoning=gen.parser.in_reasoning)
        if gen.stops.stopped or gen.parser.complete:  # a whole call ends it: "tool_calls"
            self._finish(slot, "stop")
        elif (
            (gen.max_tokens is not None and gen.n_generated >= gen.max_tokens)
            or len(slot.cached) + 1 >= self._n_ctx  # prompt + completion fill the slot's context
            or (gen.limits is not None and gen.limits.ended)
        ):
            # Calls made whole by the last token allowed end the answer as calls.
            self._finish(slot, "stop" if gen.parser.call_ended else "length")
        else:
            gen.token = token

    def _decode_failed(self, status: int, generating: list[Slot], chunks: list[tuple[Slot, int]]) -> None:
        if status == 1 and chunks and self._prompt_budget > 1:
            # No room in the KV cache for this batch (the cache is unchanged): retry smaller chunks.
            self._prompt_budget = max(1, self._prompt_budget // 2)
            log.warning("llama_decode found no KV room; prompt chunks now %d tokens", self._prompt_budget)
            for slot, _ in chunks:
                if slot.work is not None:
                    slot.work.row = -1
            return
        error = RunnerFailed(f"llama_decode failed with status {status}")
        for slot in {s.id: s for s in generating + [s for s, _ in chunks]}.values():
            if status != 1:
                # The cache may hold part of this batch: forget the sequence entirely.
                self._ctx.forget(slot.id)
                slot.cached.clear()
            self._fail(slot, error)

    def _finish(self, slot: Slot, reason: FinishReason) -> None:
        gen = self._release(slot)
        try:
            if reason != "cancelled":
                gen.stream.flush()
                gen.output(gen.stops.filter(gen.parser.finish()) + gen.stops.flush())
                if reason == "stop" and gen.parser.made_tool_calls:
                    reason = "tool_calls"
        except Exception as e:
            if not isinstance(e, SparkError):
                log.exception("finishing request %s failed", gen.request_id)
            _safe_emit(gen.emit, Failed(as_spark_error(e, "the engine").info()), gen.request_id)
            return
        _safe_emit(gen.emit, Done(reason, gen.usage(), gen.stops.stop_sequence), gen.request_id)

    def _fail(self, slot: Slot, exc: BaseException) -> None:
        if not isinstance(exc, SparkError):
            log.exception("request %s failed", slot.work.request_id if slot.work else "?")
        gen = self._release(slot)
        _safe_emit(gen.emit, Failed(as_spark_error(exc, "the engine").info()), gen.request_id)

    def _release(self, slot: Slot) -> Generation:
        """Free the slot (its cache stays for later prefix reuse) and the request's sampler."""
        gen = slot.work
        assert gen is not None
        slot.work = None
        slot.last_used = time.monotonic()
        gen.close()
        self._n_active -= 1
        self._progress += 1
        return gen

    def _run_embedding(self, job: EmbeddingJob) -> None:
        self._n_active += 1
        model, inputs, dimensions = self._model, job.inputs, job.request.dimensions
        try:
            if self._embedding:
                ranks = self._prep.ranks  # a reranker's head gives its scores in place of a vector
                width = model.n_cls_out if ranks else model.n_embd_out
                vectors = embeddings.embed(
                    self._ctx, self._batch, inputs, width, self._n_slots, dimensions, self._bump, scores=ranks
                )
            else:
                with embeddings.own_context(model, inputs, self._options, self._n_threads) as (ctx, batch):
                    vectors = embeddings.embed(ctx, batch, inputs, model.n_embd_out, 1, dimensions, self._bump)
        except Exception as e:
            if not isinstance(e, SparkError):
                log.exception("embedding request %s failed", job.request_id)
            _safe_emit(job.emit, Failed(as_spark_error(e, "the engine").info()), job.request_id)
        else:
            usage = Usage(prompt_tokens=sum(len(t) for t in job.inputs))
            _safe_emit(job.emit, Embeddings(vectors, usage), job.request_id)
        finally:
            self._n_active -= 1

    def _bump(self) -> None:
        self._progress += 1
