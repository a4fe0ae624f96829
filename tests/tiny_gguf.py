"""Tiny, deterministic, random-weight GGUF models for tests (numpy + `gguf` only).

- `write_tiny_llama`: LLaMA with a byte-level BPE ("gpt2") vocab and a ChatML or
  Hermes-style tools template (a Gemma 3 when given a sliding window). Its
  output head is biased so that it only ever samples printable ASCII (or
  newline) tokens and never a control token: every generation runs to
  max_tokens unless a test biases EOS up on purpose.
- `write_tiny_bert`: BERT (non-causal, mean pooling) for embeddings.
- `write_tiny_mmproj`: CLIP vision tower + LLaVA "mlp" projector whose
  projection_dim equals the tiny LLaMA's n_embd.
- `tiny_png`: a small RGB PNG to feed the projector.
- `write_tiny_llama_split` and `write_truncated`: sharded and broken files for
  the library's own tests.

Same arguments and seed give a byte-identical file. llama.cpp aborts on
duplicate token strings, so every vocab here is deduplicated.
"""

from __future__ import annotations

import itertools
import re
import struct
import zlib
from collections import Counter
from pathlib import Path
from typing import Literal

import gguf
import numpy as np

WeightType = Literal["f32", "f16", "q8_0"]

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

# Hermes / Qwen2.5 style: tools listed in the system turn, calls rendered as
# <tool_call>{json}</tool_call>, results as <tool_response>.
TOOLS_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\n' -}}"
    "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\n\n' -}}{%- endif -%}"
    "{{- '# Tools\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    '{{- \'\n</tools>\nReturn calls as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n\' -}}'
    "{%- elif messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{{- '<|im_start|>assistant' -}}"
    "{%- if message['content'] -%}{{- '\n' + message['content'] -}}{%- endif -%}"
    "{%- for tc in message['tool_calls'] -%}"
    "{%- set f = tc['function'] if tc['function'] is defined else tc -%}"
    "{{- '\n<tool_call>\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' -}}"
    "{%- if f['arguments'] is string -%}{{- f['arguments'] -}}{%- else -%}{{- f['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

# ChatML whose generation prompt opens a thinking block (off with `enable_thinking=False`), as Qwen3's does.
THINK_TEMPLATE = CHATML_TEMPLATE.replace(
    "{{- '<|im_start|>assistant\n' -}}",
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}"
    "{%- else -%}{{- '<think>\n' -}}{%- endif -%}",
)
TEMPLATES = {"chatml": CHATML_TEMPLATE, "tools": TOOLS_TEMPLATE, "think": THINK_TEMPLATE}

# BPE merges are "trained" on this fixed text, so the vocab is deterministic.
_CORPUS = """
The quick brown fox jumps over the lazy dog. Hello world! This is a tiny test
model for unit tests. It has random weights, so the text it writes is garbage,
but the tokenizer, the chat template and the sampling code paths are real.
You are a helpful assistant. What is the weather like today in Paris?
The user asks a question and the assistant answers. Call the function with
the arguments in JSON: {"name": "get_weather", "arguments": {"city": "Paris"}}.
def main():\n    print("hello")\n    return 0\n
Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 and some punctuation , . ; : ! ? ( ) [ ] { }
"""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Fill-in-the-middle tokens as Qwen2.5-Coder names them (`write_tiny_llama(fim=True)`), with the keys
# that tell llama.cpp which is which.
FIM_TOKENS = {
    "<|fim_prefix|>": "tokenizer.ggml.fim_pre_token_id",
    "<|fim_suffix|>": "tokenizer.ggml.fim_suf_token_id",
    "<|fim_middle|>": "tokenizer.ggml.fim_mid_token_id",
}
# Repository-level FIM tokens, Qwen2.5-Coder's too (`write_tiny_llama(fim=True, fim_repo=True)`).
FIM_REPO_TOKENS = {
    "<|repo_name|>": "tokenizer.ggml.fim_rep_token_id",
    "<|file_sep|>": "tokenizer.ggml.fim_sep_token_id",
}
# OpenAI's harmony format (gpt-oss); llama.cpp makes <|return|> and <|call|> end generation, not <|end|>.
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")
_FILLER = "<|unused_"
_PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
_SUPPRESS = -30.0  # output-head bias that keeps a token from ever being sampled

_FILE_TYPES = {
    "f32": (gguf.LlamaFileType.ALL_F32, None),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, None),
    "q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, gguf.GGMLQuantizationType.Q8_0),
}


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, as llama.cpp's BPE expects."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _bpe_vocab(
    vocab_size: int, specials: tuple[str, ...] = SPECIAL_TOKENS
) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """256 byte tokens, merges learned on the corpus, fillers, then the specials."""
    b2u = _byte_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    n_merges = vocab_size - 256 - len(specials)
    if n_merges < 0:
        raise ValueError(f"vocab_size must be at least {256 + len(specials)}")

    words = Counter("".join(b2u[b] for b in w.encode()) for w in _PRETOKENIZE.findall(_CORPUS))
    splits = {w: list(w) for w in words}
    merges: list[str] = []
    seen = set(tokens)
    while len(merges) < n_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            parts = splits[word]
            for pair in itertools.pairwise(parts):
                pairs[pair] += count
        if not pairs:
            break
        # most frequent pair, ties broken by the pair itself: deterministic
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append(f"{a} {b}")
        joined = a + b
        if joined not in seen:
            tokens.append(joined)
            seen.add(joined)
        for word, parts in splits.items():
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(joined)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            splits[word] = out
    n_fill = vocab_size - len(specials) - len(tokens)
    tokens += [f"{_FILLER}{k}|>" for k in range(n_fill)]
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    special_ids = {}
    for tok in specials:
        special_ids[tok] = len(tokens)
        tokens.append(tok)
        types.append(int(gguf.TokenType.CONTROL))
    return tokens, types, merges, special_ids


def _printable(token: str, u2b: dict[str, int]) -> bool:
    return all(0x20 <= u2b[c] < 0x7F or u2b[c] == 0x0A for c in token)


def _add_weight(w: gguf.GGUFWriter, name: str, data: np.ndarray, weight_type: WeightType) -> None:
    """A 2-D weight in the requested type; 1-D tensors (norms) stay F32 like real models."""
    if data.ndim < 2 or weight_type == "f32":
        w.add_tensor(name, data)
    elif weight_type == "f16":
        w.add_tensor(name, data.astype(np.float16))
    else:
        qtype = _FILE_TYPES[weight_type][1]
        assert qtype is not None
        w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _llama_writer(
    path: Path,
    *,
    vocab_size: int,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    n_ctx: int,
    seed: int,
    template: str | None,
    weight_type: WeightType,
    name: str,
    split_max_tensors: int = 0,
    fim: bool = False,
    fim_repo: bool = False,
    add_bos: bool = False,
    harmony: bool = False,
    sliding_window: int = 0,
) -> gguf.GGUFWriter:
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head
    fim_tokens = {**(FIM_TOKENS if fim else {}), **(FIM_REPO_TOKENS if fim_repo else {})}
    specials = SPECIAL_TOKENS + tuple(fim_tokens) + (HARMONY_TOKENS if harmony else ())
    tokens, types, merges, special = _bpe_vocab(vocab_size, specials)
    n_vocab = len(tokens)

    # A sliding window makes it a Gemma 3: LLaMA's blocks with normed q/k and normed sublayer outputs.
    gemma = sliding_window > 0
    w = gguf.GGUFWriter(str(path), "gemma3" if gemma else "llama", split_max_tensors=split_max_tensors)
    if gemma:
        w.add_sliding_window(sliding_window)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_name(name)
    w.add_description("Random-weight test model. Output is meaningless.")
    w.add_file_type(_FILE_TYPES[weight_type][0])
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(special["<|endoftext|>"])
    w.add_eos_token_id(special["<|im_end|>"])
    w.add_pad_token_id(special["<|endoftext|>"])
    w.add_add_bos_token(add_bos)
    for token, key in fim_tokens.items():
        w.add_uint32(key, special[token])
    if template is not None:
        w.add_chat_template(TEMPLATES.get(template, template))

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # Residual dimension 0 carries a constant feature; the output head reads it
    # as a per-token bias that rules out control, filler and non-printable tokens.
    embeddings = rand(n_vocab, n_embd, std=1.0)
    embeddings[:, 0] = 4.0
    _add_weight(w, "token_embd.weight", embeddings, weight_type)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        _add_weight(w, p + "attn_q.weight", rand(n_head * head_dim, n_embd, std=0.1), weight_type)
        _add_weight(w, p + "attn_k.weight", rand(n_head_kv * head_dim, n_embd, std=0.1), weight_type)
        _add_weight(w, p + "attn_v.weight", rand(n_head_kv * head_dim, n_embd, std=0.1), weight_type)
        _add_weight(w, p + "attn_output.weight", rand(n_embd, n_head * head_dim, std=0.1), weight_type)
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        if gemma:
            norms = {
                "attn_q_norm": head_dim,
                "attn_k_norm": head_dim,
                "post_attention_norm": n_embd,
                "post_ffw_norm": n_embd,
            }
            for norm, width in norms.items():
                w.add_tensor(f"{p}{norm}.weight", np.ones(width, dtype=np.float32))
        _add_weight(w, p + "ffn_gate.weight", rand(n_ff, n_embd, std=0.1), weight_type)
        _add_weight(w, p + "ffn_up.weight", rand(n_ff, n_embd, std=0.1), weight_type)
        _add_weight(w, p + "ffn_down.weight", rand(n_embd, n_ff, std=0.1), weight_type)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    # Large output weights give peaky logits: greedy decoding has no near-ties,
    # so results agree across CPUs and SIMD paths.
    output = rand(n_vocab, n_embd, std=1.0)
    u2b = {u: b for b, u in _byte_to_unicode().items()}
    output[:, 0] = [
        _SUPPRESS if tok in special or tok.startswith(_FILLER) or not _printable(tok, u2b) else 0.0 for tok in tokens
    ]
    _add_weight(w, "output.weight", output, weight_type)
    return w


def write_tiny_llama(
    path: str | Path,
    *,
    template: str | None = "chatml",
    seed: int = 0,
    n_ctx: int = 512,
    vocab_size: int = 512,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    weight_type: WeightType = "f32",
    name: str = "tiny-llama-random",
    fim: bool = False,
    fim_repo: bool = False,
    add_bos: bool = False,
    harmony: bool = False,
    sliding_window: int = 0,
) -> Path:
    """Write a tiny LLaMA, or with a `sliding_window` (in tokens) a tiny Gemma 3 whose layers all
    attend over that window only (llama.cpp's sliding-window KV cache). `template`: "chatml",
    "tools", a Jinja text, or None for none; `fim`: with fill-in-the-middle tokens
    (`FIM_TOKENS`), `fim_repo` with the repository ones too
    (`FIM_REPO_TOKENS`); `add_bos`: llama.cpp puts BOS before a prompt;
    `harmony`: with gpt-oss's special tokens (`HARMONY_TOKENS`).

    The model never samples a control token, so generations run to max_tokens;
    to test a natural stop, bias its EOS (<|im_end|>) up with logit_bias.
    """
    path = Path(path)
    w = _llama_writer(
        path,
        vocab_size=vocab_size,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_ctx=n_ctx,
        seed=seed,
        template=template,
        weight_type=weight_type,
        name=name,
        fim=fim,
        fim_repo=fim_repo,
        add_bos=add_bos,
        harmony=harmony,
        sliding_window=sliding_window,
    )
    _finish(w)
    return path


SLOW_CONTEXT = 16384
TINY_WINDOW = 16  # the sliding window of the tests' tiny Gemma 3 (`tiny_swa`), in tokens


def write_slow_llama(path: str | Path) -> Path:
    """A random LLaMA wide enough (4 layers, 256 wide), with a context long enough (16k), that a
    generation runs for many seconds: a test can act on a stream that is certainly still running."""
    return write_tiny_llama(path, n_ctx=SLOW_CONTEXT, n_embd=256, n_layer=4, n_ff=512, name="slow-llama")


def write_tiny_llama_split(
    path: str | Path,
    *,
    n_shards: int = 3,
    seed: int = 0,
    weight_type: WeightType = "f32",
    name: str = "tiny-llama-random",
) -> list[Path]:
    """Write the tiny LLaMA as `n_shards` files named `<stem>-0000i-of-0000n.gguf`.

    `path` names the model (e.g. `dir/Tiny-Q8_0.gguf`); the shard paths are returned in order.
    """
    path = Path(path)
    n_layer = 2
    n_tensors = 3 + 9 * n_layer  # embeddings, output norm, output + 9 per layer
    per_shard = -(-n_tensors // n_shards)
    w = _llama_writer(
        path,
        vocab_size=512,
        n_embd=64,
        n_layer=n_layer,
        n_head=4,
        n_head_kv=2,
        n_ff=128,
        n_ctx=512,
        seed=seed,
        template="chatml",
        weight_type=weight_type,
        name=name,
        split_max_tensors=per_shard,
    )
    _finish(w)
    shards = [path.with_name(f"{path.stem}-{i:05d}-of-{n_shards:05d}.gguf") for i in range(1, n_shards + 1)]
    missing = [p for p in shards if not p.is_file()]
    if missing:
        raise RuntimeError(f"gguf wrote a different shard layout than expected; missing {missing}")
    return shards


def write_truncated(source: str | Path, path: str | Path, *, keep: float = 0.5) -> Path:
    """Copy the first `keep` fraction of `source` to `path` (a download cut short)."""
    data = Path(source).read_bytes()
    path = Path(path)
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def move_tensor_offset(path: str | Path, offset: int | None = None) -> Path:
    """Rewrite, in place, where `path`'s first tensor says its data starts: `offset` (relative to
    the data section), or past the end of the file. The header stays valid; it lies."""
    reader = gguf.GGUFReader(path, "r+")
    reader.tensors[0].field.parts[-1][0] = Path(path).stat().st_size if offset is None else offset
    reader.data.flush()
    return Path(path)


_BERT_WORDS = [
    "the",
    "a",
    "an",
    "and",
    "or",
    "of",
    "to",
    "in",
    "on",
    "for",
    "with",
    "is",
    "are",
    "was",
    "be",
    "this",
    "that",
    "it",
    "you",
    "i",
    "he",
    "she",
    "we",
    "they",
    "hello",
    "world",
    "cat",
    "dog",
    "fox",
    "quick",
    "brown",
    "lazy",
    "jumps",
    "over",
    "weather",
    "paris",
    "london",
    "city",
    "test",
    "model",
    "embedding",
    "sentence",
    "vector",
    "search",
    "query",
    "document",
]


def _wordpiece_vocab(vocab_size: int) -> tuple[list[str], list[int]]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    # "\u2581" marks a word-initial piece; bare pieces continue a word ("##x" in HF vocabs)
    tokens = specials + ["\u2581" + c for c in chars + punct] + chars + ["\u2581" + wd for wd in _BERT_WORDS]
    tokens = list(dict.fromkeys(tokens))
    tokens += [f"[unused{k}]" for k in range(vocab_size - len(tokens))]
    tokens = tokens[:vocab_size]
    types = [
        int(gguf.TokenType.CONTROL if t.startswith("[") and t.endswith("]") else gguf.TokenType.NORMAL) for t in tokens
    ]
    return tokens, types


def write_tiny_bert(
    path: str | Path,
    *,
    seed: int = 0,
    n_ctx: int = 512,
    vocab_size: int = 256,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    pooling: gguf.PoolingType = gguf.PoolingType.MEAN,
    name: str = "tiny-bert-random",
    rerank_template: str | None = None,
) -> Path:
    """Write a tiny BERT embedding model (non-causal, `pooling` over tokens, n_embd dims). With
    `pooling` RANK it is a reranker: a classification head (`cls`, `cls.output`) scores each sequence,
    and `rerank_template` is its `tokenizer.chat_template.rerank` (with `{query}` and `{document}`)."""
    path = Path(path)
    rng = np.random.default_rng(seed + 1)
    tokens, types = _wordpiece_vocab(vocab_size)

    w = gguf.GGUFWriter(str(path), "bert")
    w.add_name(name)
    w.add_description("Random-weight test embedding model. Vectors are meaningless.")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(pooling)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(2)
    w.add_pad_token_id(tokens.index("[PAD]"))
    w.add_unk_token_id(tokens.index("[UNK]"))
    w.add_bos_token_id(tokens.index("[CLS]"))  # llama.cpp uses BOS as [CLS]
    w.add_sep_token_id(tokens.index("[SEP]"))
    w.add_mask_token_id(tokens.index("[MASK]"))
    w.add_add_bos_token(True)
    w.add_add_sep_token(True)

    def rand(*shape: int, std: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int = n_embd) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int = n_embd) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    w.add_tensor("token_embd.weight", rand(len(tokens), n_embd, std=1.0))
    w.add_tensor("token_types.weight", rand(2, n_embd))
    w.add_tensor("position_embd.weight", rand(n_ctx, n_embd))
    w.add_tensor("token_embd_norm.weight", ones())
    w.add_tensor("token_embd_norm.bias", zeros())
    for i in range(n_layer):
        p = f"blk.{i}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + part + ".weight", rand(n_embd, n_embd, std=0.1))
            w.add_tensor(p + part + ".bias", zeros())
        w.add_tensor(p + "attn_output_norm.weight", ones())
        w.add_tensor(p + "attn_output_norm.bias", zeros())
        w.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd, std=0.1))
        w.add_tensor(p + "ffn_up.bias", zeros(n_ff))
        w.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff, std=0.1))
        w.add_tensor(p + "ffn_down.bias", zeros())
        w.add_tensor(p + "layer_output_norm.weight", ones())
        w.add_tensor(p + "layer_output_norm.bias", zeros())
    if pooling == gguf.PoolingType.RANK:
        w.add_tensor("cls.weight", rand(n_embd, n_embd, std=0.3))
        w.add_tensor("cls.bias", zeros())
        w.add_tensor("cls.output.weight", rand(1, n_embd, std=1.0))
        w.add_tensor("cls.output.bias", zeros(1))
        if rerank_template is not None:
            w.add_string("tokenizer.chat_template.rerank", rerank_template)
    _finish(w)
    return path


def write_tiny_mmproj(
    path: str | Path,
    *,
    seed: int = 0,
    text_n_embd: int = 64,
    image_size: int = 32,
    patch_size: int = 8,
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 64,
    name: str = "tiny-clip-mmproj-random",
) -> Path:
    """Write a random ViT + 2-layer MLP projector (libmtmd projector_type "mlp", LLaVA-1.5).

    `text_n_embd` must equal the paired text model's n_embd; each image becomes
    (image_size / patch_size)^2 tokens (16 by default).
    """
    path = Path(path)
    rng = np.random.default_rng(seed + 2)
    n_patches = (image_size // patch_size) ** 2

    def rand(*shape: int, std: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int = n_embd) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int = n_embd) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name(name)
    w.add_description("Random-weight test vision projector. Image features are meaningless.")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_llava_projector", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.projection_dim", text_n_embd)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    w.add_tensor("v.patch_embd.weight", rand(n_embd, 3, patch_size, patch_size))  # (out, in, kh, kw)
    w.add_tensor("v.class_embd", rand(n_embd))
    w.add_tensor("v.position_embd.weight", rand(n_patches + 1, n_embd))
    w.add_tensor("v.pre_ln.weight", ones())
    w.add_tensor("v.pre_ln.bias", zeros())
    for i in range(n_layer):
        p = f"v.blk.{i}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + part + ".weight", rand(n_embd, n_embd, std=0.1))
            w.add_tensor(p + part + ".bias", zeros())
        for norm in ("ln1", "ln2"):
            w.add_tensor(p + norm + ".weight", ones())
            w.add_tensor(p + norm + ".bias", zeros())
        w.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd, std=0.1))
        w.add_tensor(p + "ffn_up.bias", zeros(n_ff))
        w.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff, std=0.1))
        w.add_tensor(p + "ffn_down.bias", zeros())
    w.add_tensor("mm.0.weight", rand(text_n_embd, n_embd, std=0.1))
    w.add_tensor("mm.0.bias", zeros(text_n_embd))
    w.add_tensor("mm.2.weight", rand(text_n_embd, text_n_embd, std=0.1))
    w.add_tensor("mm.2.bias", zeros(text_n_embd))
    _finish(w)
    return path


def tiny_png(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    """A small deterministic RGB PNG (zlib only)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def png_declaring(width: int, height: int) -> bytes:
    """A small PNG whose header declares `width` x `height` (the shape of a decompression bomb)."""
    png = tiny_png()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + header) & 0xFFFFFFFF)
    return png[:16] + header + crc + png[33:]


def write_tiny_lora(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    rank: int = 4,
    architecture: str = "llama",
    name: str = "tiny-lora-random",
    token_embd: int = 0,
    invocation: list[int] | None = None,
) -> Path:
    """Write a random LoRA adapter (llama.cpp's GGUF adapter format) for `write_tiny_llama`'s model
    of the same shape: low-rank deltas on every layer's attention query and output, and with
    `token_embd` (the vocabulary's size) on the token embeddings. Its deltas are large enough to
    change what the model answers. `invocation` makes it an activated LoRA with those invocation tokens."""
    path = Path(path)
    rng = np.random.default_rng(seed + 3)
    head_dim = n_embd // n_head
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name(name)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    if invocation is not None:
        w.add_array("adapter.alora.invocation_tokens", invocation)
    for i in range(n_layer):
        for part, n_in, n_out in (("attn_q", n_embd, n_head * head_dim), ("attn_output", n_head * head_dim, n_embd)):
            # ggml's shapes: A is (n_in, rank), B is (rank, n_out); numpy's are reversed
            w.add_tensor(f"blk.{i}.{part}.weight.lora_a", (rng.standard_normal((rank, n_in)) * 0.5).astype(np.float32))
            w.add_tensor(f"blk.{i}.{part}.weight.lora_b", (rng.standard_normal((n_out, rank)) * 0.5).astype(np.float32))
    if token_embd:  # llama.cpp takes this pair flipped: A is (rank, n_vocab), B (rank, n_embd)
        w.add_tensor("token_embd.weight.lora_a", (rng.standard_normal((token_embd, rank)) * 0.5).astype(np.float32))
        w.add_tensor("token_embd.weight.lora_b", (rng.standard_normal((n_embd, rank)) * 0.5).astype(np.float32))
    _finish(w)
    return path
