"""`spark pull / search / ls / show / rm`, run as a user would (fake Hub, real files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import msgspec
import pytest
from typer.testing import CliRunner, Result

import tiny_gguf
from fakehub import FakeHub
from spark.cli import app
from spark.errors import DownloadError, InvalidRequest, ModelFileError, ModelNotFound
from spark.library import BUNDLED_ID, Library
from spark.library.bundled import BUNDLED_SETTINGS
from spark.settings import load_settings
from spark.types import LoraAdapter

runner = CliRunner()


def spark(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input, env={"COLUMNS": "200"})


def test_ls_shows_the_bundled_model() -> None:
    for command in ("ls", "list"):
        out = spark(command)
        assert out.exit_code == 0, out.output
        assert BUNDLED_ID in out.output
        assert "Q4_1" in out.output and "135M" in out.output and "8,192" in out.output
        assert "bundled" in out.output


def test_ls_rows_fit_an_80_column_terminal() -> None:
    out = runner.invoke(app, ["ls"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if BUNDLED_ID in line)
    assert row.split()[-1] == "bundled" and len(out.output.splitlines()) == 2, out.output


def test_ls_cuts_a_local_files_path_to_fit_80_columns(tiny_llama: Path, tmp_path: Path) -> None:
    deep = tmp_path / "a" / "rather" / "long" / "folder" / "of" / "models" / "tiny-llama-chatml.gguf"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(tiny_llama.read_bytes())
    assert spark("pull", str(deep)).exit_code == 0
    lines = runner.invoke(app, ["ls"], env={"COLUMNS": "80"}).output.splitlines()
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines), lines  # a line a model: nothing folded
    assert lines[2].startswith("tiny-llama-chatml ") and lines[2].rstrip().endswith("…")
    assert spark("rm", "tiny-llama-chatml", "-y").exit_code == 0


def test_show_lists_the_bundled_models_sampling_defaults() -> None:
    out = spark("show", BUNDLED_ID)
    assert out.exit_code == 0, out.output
    for name, value in msgspec.to_builtins(BUNDLED_SETTINGS.sampling).items():
        assert f"{name}={value}" in out.output


def test_pull_show_rm_round_trip(fake_hub: FakeHub) -> None:
    out = spark("pull", "tiny/TinyLlama-GGUF")
    assert out.exit_code == 0, out.output
    assert "picked Q4_K_M (also available: Q8_0, F16" in out.output
    assert "Added tinyllama-q4_k_m" in out.output

    listing = spark("ls").output
    assert "tinyllama-q4_k_m" in listing and "hf:tiny/TinyLlama-GGUF" in listing.split()  # the repo, not the file

    shown = spark("show", "TinyLlama-Q4_K_M")
    assert shown.exit_code == 0, shown.output
    for text in (
        "architecture      llama",
        "quantization      F32",
        "training context  512",
        "source            hf:tiny/TinyLlama-GGUF/TinyLlama-Q4_K_M.gguf",
        "owned by spark    yes",
    ):
        assert text in shown.output

    again = spark("pull", "tiny/TinyLlama-GGUF")
    assert "already installed" in again.output

    path = Library(load_settings()).get("tinyllama-q4_k_m").path
    kept = spark("rm", "tinyllama-q4_k_m", input="n\n")
    assert kept.exit_code == 0 and "Kept tinyllama-q4_k_m" in kept.output
    assert Path(path).is_file()
    gone = spark("rm", "tinyllama-q4_k_m", input="y\n")
    assert "Removed tinyllama-q4_k_m" in gone.output
    assert not Path(path).exists()
    assert "tinyllama-q4_k_m" not in spark("ls").output


def test_pull_with_quant_option_and_projector(fake_hub: FakeHub) -> None:
    out = spark("pull", "tiny/TinyLlama-GGUF", "--quant", "q8_0")
    assert out.exit_code == 0, out.output
    assert "Added tinyllama-q8_0" in out.output and "picked" not in out.output
    vision = spark("pull", "hf.co/tiny/Vision-GGUF")
    assert "with vision projector mmproj-TinyVision-F16.gguf" in vision.output
    assert "tinyvision-q8_0 (vision)" in spark("ls").output
    assert "mmproj-TinyVision-F16.gguf" in spark("show", "tinyvision-q8_0").output


def test_pull_local_file_with_and_without_copy(tmp_path: Path, tiny_llama: Path) -> None:
    out = spark("pull", str(tiny_llama))
    assert out.exit_code == 0, out.output
    assert "Added tiny-llama-chatml" in out.output and "Try: spark run tiny-llama-chatml" in out.output
    assert "no (spark rm keeps the file)" in spark("show", "tiny-llama-chatml").output
    assert spark("rm", "tiny-llama-chatml", "--yes").exit_code == 0
    assert tiny_llama.is_file()

    copied = spark("pull", str(tiny_llama), "--copy")
    assert copied.exit_code == 0, copied.output
    entry = Library(load_settings()).get("tiny-llama-chatml")
    assert entry.owned and Path(entry.path) != tiny_llama


def test_show_template(tiny_llama_tools: Path) -> None:
    spark("pull", str(tiny_llama_tools))
    out = spark("show", "tiny-llama-tools", "--template")
    assert "{%- if tools -%}" in out.output
    assert "tool calling      yes" in spark("show", "tiny-llama-tools").output


def test_show_and_rm_know_a_draft_model(tiny_llama: Path, tiny_llama_tools: Path) -> None:
    spark("pull", str(tiny_llama))
    spark("pull", str(tiny_llama_tools))
    with Library(load_settings()) as library:
        entry = library.get("tiny-llama-tools")
        library.update_settings(entry.id, msgspec.structs.replace(entry.settings, draft_model="tiny-llama-chatml"))
    assert "draft model       tiny-llama-chatml" in spark("show", "tiny-llama-tools").output
    refused = spark("rm", "tiny-llama-chatml", "--yes")  # `spark` prints a SparkError as one line
    assert isinstance(refused.exception, InvalidRequest) and "draft model of tiny-llama-tools" in str(refused.exception)
    with Library(load_settings()) as library:
        assert library.exists("tiny-llama-chatml")


def test_search_table(fake_hub: FakeHub) -> None:
    out = spark("search", "tiny", "--limit", "2")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "repository" in lines[0]
    assert "tiny/TinyLlama-GGUF" in lines[1] and "5,000" in lines[1] and "140K" in lines[1]
    assert "tiny/TinyTools-GGUF" in lines[2]
    assert "spark pull tiny/TinyLlama-GGUF" in out.output
    assert "No GGUF models found" in spark("search", "zzz").output


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("show", "nope"), ModelNotFound, "model 'nope' is not installed"),
        (("show", "smollm2"), ModelNotFound, "did you mean smollm2-135m-instruct-q4_1?"),
        (("rm", "nope", "--yes"), ModelNotFound, "not installed"),
        (("show", "../etc/passwd"), ModelNotFound, "model '../etc/passwd' is not installed"),
        (("pull", "justaword"), InvalidRequest, "not an installed model nor a model spec"),
        (("pull", "org/repo/notes.txt"), InvalidRequest, "not a .gguf file"),
        (("pull", "missing.gguf"), ModelFileError, "no such file"),
        (("pull", "nobody/Nothing-GGUF"), DownloadError, "repository 'nobody/Nothing-GGUF' not found"),
        (("pull", "tiny/NoGGUF"), DownloadError, "has no GGUF files"),
        (("pull", "tiny/TinyLlama-GGUF:Q3_K_S"), DownloadError, "available quantizations: Q4_K_M, Q8_0, F16"),
    ],
)
def test_errors(fake_hub: FakeHub, args: tuple[str, ...], error: type[Exception], message: str) -> None:
    out = spark(*args)
    assert out.exit_code != 0
    assert isinstance(out.exception, error)
    assert message in str(out.exception)


def test_bad_file_is_refused(tmp_path: Path, tiny_llama: Path) -> None:
    cut = tiny_gguf.write_truncated(tiny_llama, tmp_path / "cut.gguf")
    out = spark("pull", str(cut))
    assert isinstance(out.exception, ModelFileError)
    assert "truncated" in str(out.exception)


def test_rm_removes_several_and_checks_all_first(tiny_llama: Path, tiny_bert: Path) -> None:
    spark("pull", str(tiny_llama))
    spark("pull", str(tiny_bert))
    assert "tiny-bert-embed (embedding)" in spark("ls").output
    failed = spark("rm", "tiny-llama-chatml", "nope", "--yes")
    assert isinstance(failed.exception, ModelNotFound)
    assert "tiny-llama-chatml" in spark("ls").output  # nothing removed when one id is wrong
    out = spark("rm", "tiny-llama-chatml", "tiny-bert-embed", "-y")
    assert out.output.count("Removed") == 2


def test_cp_copies_a_model_under_another_id_and_rm_says_its_files_stay(tiny_llama: Path) -> None:
    spark("pull", str(tiny_llama), "--copy")
    assert "Copied tiny-llama-chatml to claude-haiku" in spark("cp", "tiny-llama-chatml", "Claude-Haiku").output
    assert "claude-haiku" in spark("ls").output
    asked = spark("rm", "tiny-llama-chatml", input="n\n").output
    assert "Remove tiny-llama-chatml from the library (its files stay: claude-haiku uses them)?" in asked
    assert "Kept tiny-llama-chatml" in asked
    assert "Removed claude-haiku" in spark("rm", "claude-haiku", "-y").output
    assert "Delete tiny-llama-chatml" in spark("rm", "tiny-llama-chatml", input="y\n").output


def test_real_command_prints_one_red_line_and_exits_1(fake_hub: FakeHub) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", "from spark.cli import main; main()", "show", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: model 'nope' is not installed; see `spark ls`, or get it with `spark pull`"
    ]
    pulled = subprocess.run(
        [sys.executable, "-c", "from spark.cli import main; main()", "pull", "tiny/TinyTools-GGUF"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "Added tinytools.q8_0" in pulled.stdout


def test_attach_a_projector_later(tiny_llama: Path, tiny_mmproj: Path) -> None:
    model = Library(load_settings()).add_local(tiny_llama).id
    attached = spark("attach", model, str(tiny_mmproj))
    assert attached.exit_code == 0, attached.output
    assert "reads images now" in attached.output
    assert Library(load_settings()).get(model).mmproj_path == str(tiny_mmproj)
    assert "tiny-mmproj-mlp.gguf" in spark("show", model).output

    not_a_projector = spark("attach", model, str(tiny_llama))
    assert isinstance(not_a_projector.exception, ModelFileError), not_a_projector.output
    assert "neither a vision projector (mmproj) nor a LoRA adapter" in str(not_a_projector.exception)
    unknown = spark("attach", "nope", str(tiny_mmproj))
    assert isinstance(unknown.exception, ModelNotFound)


def test_detach_takes_the_projector_off_when_asked(tiny_llama: Path, tiny_mmproj: Path) -> None:
    model = Library(load_settings()).add_local(tiny_llama, mmproj=tiny_mmproj).id
    no_adapter = spark("detach", model)
    assert isinstance(no_adapter.exception, InvalidRequest)
    assert str(no_adapter.exception) == (
        f"{model} has no LoRA adapter: there is nothing to detach "
        f"(its vision projector comes off with `spark detach {model} --projector`)"
    )
    detached = spark("detach", model, "--projector")
    assert detached.exit_code == 0, detached.output
    assert f"Took the vision projector {tiny_mmproj} off {model}: it reads no images now." in detached.output
    assert Library(load_settings()).get(model).mmproj_path is None and tiny_mmproj.is_file()
    again = spark("detach", model, "--projector")
    assert isinstance(again.exception, InvalidRequest)
    assert str(again.exception) == f"{model} has no vision projector: there is nothing to detach"


def test_attach_and_detach_a_lora_adapter(tiny_llama: Path, tiny_lora: Path, tiny_mmproj: Path) -> None:
    model = Library(load_settings()).add_local(tiny_llama).id
    attached = spark("attach", model, str(tiny_lora), "--scale", "0.5")
    assert attached.exit_code == 0, attached.output
    assert f"Attached LoRA adapter {tiny_lora} to {model} at scale 0.5" in attached.output
    assert Library(load_settings()).get(model).lora == [LoraAdapter(path=str(tiny_lora), scale=0.5)]
    assert f"{tiny_lora} (scale 0.5)" in spark("show", model).output
    assert f"{model} (+LoRA)" in spark("ls").output
    scaled_projector = spark("attach", model, str(tiny_mmproj), "--scale", "2")
    assert isinstance(scaled_projector.exception, InvalidRequest), scaled_projector.output

    detached = spark("detach", model)
    assert detached.exit_code == 0 and f"Took 1 LoRA adapter(s) off {model}" in detached.output
    assert Library(load_settings()).get(model).lora == []
    again = spark("detach", model)
    # a state of the model, not a usage error: one line and exit 1 from `spark`, as other refusals
    assert isinstance(again.exception, InvalidRequest) and "has no LoRA adapter" in str(again.exception)


def test_attach_a_lora_adapter_from_the_hub(fake_hub: FakeHub, tiny_llama: Path) -> None:
    model = Library(load_settings()).add_local(tiny_llama).id
    attached = spark("attach", model, "tiny/TinyLlama-SQL-LoRA-GGUF", "--scale", "0.25")
    assert attached.exit_code == 0, attached.output
    assert "pulling tiny/TinyLlama-SQL-LoRA-GGUF/TinyLlama-SQL-LoRA-F32.gguf" in attached.output
    assert "Attached LoRA adapter" in attached.output and "at scale 0.25" in attached.output
    (adapter,) = Library(load_settings()).get(model).lora
    assert Path(adapter.path).name == "TinyLlama-SQL-LoRA-F32.gguf" and Path(adapter.path).is_file()
    a_model = spark("attach", model, "tiny/TinyLlama-GGUF:Q8_0")
    assert isinstance(a_model.exception, DownloadError) and "not a LoRA adapter" in str(a_model.exception)


def test_pulling_an_embedding_model_or_a_reranker_says_how_to_use_it(tmp_path: Path, tiny_bert: Path) -> None:
    assert "Use it with POST /v1/embeddings." in spark("pull", str(tiny_bert)).output
    reranker = tiny_gguf.write_tiny_bert(tmp_path / "tiny-rerank.gguf", pooling=gguf.PoolingType.RANK)
    out = spark("pull", str(reranker))
    assert out.exit_code == 0 and "Use it with POST /v1/rerank." in out.output and "spark run" not in out.output
    shown = spark("show", "tiny-rerank").output
    assert "reranker" in shown
    assert "(reranker)" in spark("ls").output
