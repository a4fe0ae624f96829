"""Load a GGUF model the way the engine does and print the memory it took, as JSON.

Run in a fresh process:
`python measure_load.py MODEL N_CTX N_PARALLEL N_BATCH KV_TYPE EMBEDDING(0|1) FLASH(0|1) [--log] [--no-decode]`.
The baseline RSS is taken after importing llama.cpp's bindings and msgspec (what a runner
has before it loads anything), so `growth` is what the model, its context,
one full micro-batch decode and (unless embedding) a JSON-mode grammar sampler added
(`grammar`: one token sampled inside a JSON string). `compute_buffer` is the compute buffer llama.cpp
reserved, as its log says. `--log` sends llama.cpp's log (with its buffer sizes) to stderr;
`--no-decode` stops once the context is made (the reserved sizes are known by then).
"""

from __future__ import annotations

import ctypes
import json
import re
import sys
from pathlib import Path

import msgspec  # noqa: F401  (a runner imports it; it belongs in the baseline)
import psutil

from spark.engine.bindings import lc
from spark.engine.grammar import schema_grammar

KV_TYPES = {"f16": lc.GGML_TYPE_F16, "q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}
SHOW_LOG = "--log" in sys.argv
DECODE = "--no-decode" not in sys.argv
COMPUTE_BUFFER = re.compile(r"compute buffer size = +([0-9.]+) MiB")
compute_buffer_mib: list[float] = []


@lc.llama_log_callback
def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", "replace")
    if found := COMPUTE_BUFFER.search(line):
        compute_buffer_mib.append(float(found[1]))
    if SHOW_LOG:
        sys.stderr.write(line)


def reset_peak_rss() -> None:
    """Start Linux's peak resident memory (VmHWM) over from the current resident memory."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    """VmHWM: the most resident memory since the start or the last `reset_peak_rss`."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def main(
    path: str, n_ctx: int, n_parallel: int, n_batch: int, kv_type: str, embedding: bool, flash: bool
) -> dict[str, int]:
    lc.llama_log_set(_log, ctypes.c_void_p(0))
    lc.llama_backend_init()
    proc = psutil.Process()
    before = proc.memory_info().rss

    mparams = lc.llama_model_default_params()
    mparams.n_gpu_layers = 0
    # No repacked weight copies (AMX / CPU_REPACK): on VMs that advertise AMX
    # without enabling it they die with SIGILL, and the copy would show the
    # weights twice in RSS (once as reclaimable page cache).
    mparams.use_extra_bufts = False
    model = lc.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        raise SystemExit(f"could not load {path}")
    loaded = proc.memory_info().rss

    # the context spark.engine creates: one KV stream per slot, per-slot n_ctx capped at training
    train = lc.llama_model_n_ctx_train(model)
    per_slot = min(n_ctx or train, train)
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = per_slot * n_parallel
    cparams.n_seq_max = n_parallel
    cparams.n_batch = max(n_batch, per_slot) if embedding else n_batch
    cparams.n_ubatch = cparams.n_batch if embedding else min(n_batch, 512)
    cparams.n_threads = cparams.n_threads_batch = 1
    cparams.type_k = cparams.type_v = KV_TYPES[kv_type]
    cparams.embeddings = embedding
    if embedding:
        cparams.pooling_type = lc.LLAMA_POOLING_TYPE_MEAN
    cparams.kv_unified = False
    cparams.swa_full = False  # sliding-window layers keep their window and a micro-batch, as the engine
    # the logits rows a decode fills (one per slot), so that the reserved size is what RSS can see
    cparams.n_outputs_max = 0 if embedding else n_parallel
    cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = lc.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("could not create the context")
    created = proc.memory_info().rss

    # a full micro-batch touches as much of the compute buffer as a long prompt does
    n = min(cparams.n_ubatch, per_slot) if DECODE else 0
    vocab = lc.llama_model_get_vocab(model)
    text = b"The quick brown fox jumps over the lazy dog. " * 8
    piece = (lc.llama_token * 256)()
    got = lc.llama_tokenize(vocab, text, len(text), piece, 256, False, False)
    tokens = (lc.llama_token * n)(*[piece[i % got] for i in range(n)])
    if n and lc.llama_decode(ctx, lc.llama_batch_get_one(tokens, n)) < 0:
        raise SystemExit("decode failed")
    after = proc.memory_info().rss
    if n and not embedding:
        # JSON mode's grammar samples a token inside a string, where nearly every token can follow:
        # the most the grammar sampler's candidate lists take (and glibc then keeps)
        grammar = schema_grammar(None)
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        lc.llama_sampler_chain_add(
            chain, lc.llama_sampler_init_grammar(vocab, grammar.text.encode(), grammar.root.encode())
        )
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        for char in (b"{", b'"'):
            lc.llama_tokenize(vocab, char, 1, piece, 256, False, False)
            lc.llama_sampler_accept(chain, piece[0])
        reset_peak_rss()  # its lists are freed by the end: the peak sees them whatever glibc keeps
        lc.llama_sampler_sample(chain, ctx, -1)
        lc.llama_sampler_free(chain)
    grammar_rss = max(peak_rss(), after) if n and not embedding else after
    return {
        "growth": grammar_rss - before,
        "model": loaded - before,
        "context": created - loaded,
        "decode": after - created,
        "grammar": grammar_rss - after,
        "tokens": n,
        "compute_buffer": round(compute_buffer_mib[-1] * 2**20) if compute_buffer_mib else 0,
    }


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--log", "--no-decode")]
    if len(args) != 7:
        raise SystemExit(__doc__)
    p, ctx_, par, batch, kv, emb, fa = args
    print(json.dumps(main(p, int(ctx_), int(par), int(batch), kv, emb == "1", fa == "1")))
