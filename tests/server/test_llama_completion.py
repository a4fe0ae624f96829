"""llama-server's own completion routes (`POST /completion`, `/completions`, `/infill`) on a real server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server.helpers import LiveServer, Models, openai_error
from server.test_log import logged_request

GREEDY = {"temperature": 0, "seed": 7}


def complete(live: LiveServer, body: dict[str, Any], path: str = "/completion") -> dict[str, Any]:
    response = live.http().post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def streamed(live: LiveServer, body: dict[str, Any], path: str = "/completion") -> list[dict[str, Any]]:
    with live.http().stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), "llama-server's stream has no [DONE] and no events"
    return [json.loads(line.removeprefix("data: ")) for line in lines]


def test_a_completion_answers_as_llama_server_does(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "prompt": "Once upon a time", "n_predict": 5, **GREEDY}
    answer = complete(live, body)
    prompt_tokens = len(
        live.http()
        .post("/tokenize", json={"model": models.chat, "content": "Once upon a time", "add_special": True})
        .json()["tokens"]
    )
    assert answer["stop"] is True and answer["stop_type"] == "limit" and answer["stopping_word"] == ""
    assert answer["tokens_predicted"] == 5 and answer["tokens_evaluated"] == prompt_tokens
    assert answer["model"] == models.chat and answer["prompt"] == "Once upon a time" and answer["content"]
    assert answer["tokens_cached"] == prompt_tokens + 5 and answer["id_slot"] >= 0
    assert answer["has_new_line"] == ("\n" in answer["content"])
    timings = answer["timings"]
    assert timings["predicted_n"] == 5 and timings["prompt_n"] + timings["cache_n"] == prompt_tokens
    assert timings["predicted_ms"] > 0 and timings["predicted_per_second"] > 0
    assert "completion_probabilities" not in answer  # only when n_probs asks for them
    # the same answer streamed: a piece per token, then the counts with "stop": true
    chunks = streamed(live, body)
    *pieces, last = chunks
    assert all(p.get("stop") is None and p["content"] for p in pieces) and last["stop"] is True
    assert "".join(p["content"] for p in pieces) == answer["content"] and last["content"] == ""
    assert 0 < pieces[-1]["tokens_predicted"] <= 5 and last["tokens_predicted"] == 5  # (a piece may hold several)
    # the alias answers the same
    assert complete(live, body, "/completions")["content"] == answer["content"]


def test_a_stop_string_ends_the_answer_and_is_named(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "prompt": "The story", "n_predict": 12, **GREEDY}
    whole = complete(live, body)["content"]
    word = whole[len(whole) // 2 :][:3]
    stopped = complete(live, {**body, "stop": [word]})
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word
    assert stopped["content"] == whole[: whole.index(word)]


def test_n_predict_0_caches_the_prompt_for_the_next_request(live: LiveServer, models: Models) -> None:
    prompt = "A prompt that a code editor sends ahead of time, so that its next request is quick."
    warmed = complete(live, {"model": models.chat, "prompt": prompt, "n_predict": 0})
    assert (warmed["content"], warmed["tokens_predicted"], warmed["stop_type"]) == ("", 0, "limit")
    then = complete(live, {"model": models.chat, "prompt": prompt + " And more.", "n_predict": 1, **GREEDY})
    assert then["timings"]["cache_n"] >= warmed["tokens_evaluated"] - 1


def test_cache_prompt_false_evaluates_the_whole_prompt(live: LiveServer, models: Models) -> None:
    """llama-server's `cache_prompt: false` (on its OpenAI routes too): none of the prompt comes from
    a cache, so the answer cannot depend on what was evaluated before."""
    prompt = "A prompt evaluated again and again, for an answer that depends on nothing cached."
    body = {"model": models.chat, "prompt": prompt, "n_predict": 4, **GREEDY}
    cached = complete(live, body)
    again = complete(live, body)
    assert again["timings"]["cache_n"] > 0, "a prompt sent again is read from the cache by default"
    fresh = complete(live, {**body, "cache_prompt": False})
    assert fresh["timings"]["cache_n"] == 0 and fresh["timings"]["prompt_n"] == cached["tokens_evaluated"]
    assert fresh["content"] == cached["content"]
    chat = {"model": models.chat, "messages": [{"role": "user", "content": prompt}], "max_tokens": 2, **GREEDY}
    response = live.http().post("/v1/chat/completions", json=chat)
    assert response.status_code == 200, response.text
    response = live.http().post("/v1/chat/completions", json={**chat, "cache_prompt": False})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0 and response.json()["timings"]["cache_n"] == 0
    response = live.http().post("/completion", json={**body, "cache_prompt": "no"})
    assert openai_error(response, 400)["param"] == "cache_prompt"


def test_n_probs_and_logit_bias(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "prompt": "Hello", "n_predict": 3, "n_probs": 2, **GREEDY}
    answer = complete(live, body)
    probabilities = answer["completion_probabilities"]
    assert len(probabilities) == 3 and "".join(p["token"] for p in probabilities) == answer["content"]
    assert all(len(p["top_logprobs"]) == 2 and p["top_logprobs"][0]["token"] == p["token"] for p in probabilities)
    first_piece = streamed(live, body)[0]["completion_probabilities"]  # the tokens of the first piece
    assert first_piece and first_piece == probabilities[: len(first_piece)]
    # post_sampling_probs: what greedy sampling drew from, the chosen token alone and certain
    drawn = complete(live, {**body, "post_sampling_probs": True})["completion_probabilities"]
    assert [(p["id"], p["prob"], p["top_probs"]) for p in drawn] == [
        (p["id"], 1.0, [{"id": p["id"], "token": p["token"], "bytes": p["bytes"], "prob": 1.0}]) for p in probabilities
    ]
    # `false` bars a token: the greedy first token is never chosen, in either of llama-server's forms
    first = live.http().post("/tokenize", json={"model": models.chat, "content": probabilities[0]["token"]}).json()
    token = first["tokens"][0]
    for bias in ([[token, False]], {str(token): False}):
        barred = complete(live, {**body, "logit_bias": bias})["completion_probabilities"][0]["token"]
        assert barred != probabilities[0]["token"]


def test_n_indent_and_t_max_predict_ms_end_an_editors_completion(live: LiveServer, models: Models) -> None:
    ids = live.http().post("/tokenize", json={"model": models.chat, "content": "\nx"}).json()["tokens"]
    assert len(ids) == 2
    # the model may write only line breaks and x's: any x that starts a line after the first is a dedent
    only = {"logit_bias": {str(t): 100 for t in ids}, "n_predict": 200, "temperature": 1, "seed": 3}
    free = complete(live, {"model": models.chat, "prompt": "def f():", **only})
    assert free["stop_type"] == "limit" and free["tokens_predicted"] == 200 and "\nx" in free["content"]
    cut = complete(live, {"model": models.chat, "prompt": "def f():", "n_indent": 1, **only})
    assert cut["stop_type"] == "limit" and cut["tokens_predicted"] < 200
    assert cut["content"] == free["content"][: free["content"].index("\nx", free["content"].index("\n")) + 1]
    pieces = streamed(live, {"model": models.chat, "prompt": "def f():", "n_indent": 1, **only})
    assert "".join(p["content"] for p in pieces) == cut["content"] and pieces[-1]["stop_type"] == "limit"
    # after 1 ms, the answer ends at its next line break
    late = complete(live, {"model": models.chat, "prompt": "def f():", "t_max_predict_ms": 1, **only})
    assert late["stop_type"] == "limit" and late["tokens_predicted"] < 200 and "\n" in late["content"]


def test_response_fields_pick_the_answers_fields_by_path(live: LiveServer, models: Models) -> None:
    # llama.vim asks for these and reads them under their paths
    fields = ["content", "timings/prompt_n", "timings/predicted_ms", "truncated", "tokens_cached", "timings/nope"]
    body = {"model": models.chat, "prompt": "Hi", "n_predict": 3, "response_fields": fields, **GREEDY}
    answer = complete(live, body)
    assert set(answer) == set(fields) - {"timings/nope"}
    whole = complete(live, {**body, "response_fields": []})
    assert answer["content"] == whole["content"] and answer["timings/predicted_ms"] > 0
    assert answer["timings/prompt_n"] + whole["timings"]["cache_n"] >= whole["tokens_evaluated"]
    assert answer["truncated"] is False and answer["tokens_cached"] == whole["tokens_cached"]
    assert streamed(live, body)[-1].keys() == answer.keys()  # the last streamed object too


def test_a_grammar_or_a_json_schema_constrains_the_answer(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "prompt": "Answer:", "n_predict": 40, **GREEDY}
    answer = complete(live, {**body, "grammar": 'root ::= ("yes" | "no") "."'})
    assert answer["content"] in ("yes.", "no.") and answer["stop_type"] == "eos"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert isinstance(json.loads(complete(live, {**body, "json_schema": schema})["content"])["ok"], bool)
    assert complete(live, {**body, "json_schema": {}})["content"].startswith("{")  # any object (maybe cut short)
    # an empty grammar is none (SillyTavern sends "" when it has no grammar), as llama-server reads it
    assert (
        complete(live, {**body, "grammar": "", "n_predict": 5})["content"]
        == complete(live, {**body, "n_predict": 5})["content"]
    )
    streamed_text = "".join(p["content"] for p in streamed(live, {**body, "grammar": 'root ::= "a"+ "b"'}))
    assert streamed_text.rstrip("b").strip("a") == "" and streamed_text.endswith("b")


def test_several_prompts_are_answered_side_by_side(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "n_predict": 4, **GREEDY}
    alone = [complete(live, {**body, "prompt": p})["content"] for p in ("Once upon a time", "The cat")]
    ids = live.http().post("/tokenize", json={"model": models.chat, "content": "The cat"}).json()["tokens"]
    answers: Any = complete(live, {**body, "prompt": ["Once upon a time", ids]})
    assert [a["index"] for a in answers] == [0, 1] and [a["content"] for a in answers] == alone
    assert answers[0]["prompt"] == "Once upon a time" and answers[1]["tokens_evaluated"] == len(ids)
    # streamed: each object carries its prompt's index
    objects = streamed(live, {**body, "prompt": ["Once upon a time", "The cat"]})
    for index, text in enumerate(alone):
        mine = [o for o in objects if o["index"] == index]
        assert "".join(o["content"] for o in mine) == text and mine[-1]["stop"] is True
    # a list of one prompt is answered alone, not as a list
    assert complete(live, {**body, "prompt": ["The cat"]})["content"] == alone[1]


def test_n_cmpl_answers_each_prompt_several_times(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "prompt": "Once", "n_predict": 4, "temperature": 1, "seed": 5}
    answers: Any = complete(live, {**body, "n_cmpl": 2})
    # the i-th answer samples with seed + i, as OpenAI's `n` choices do
    alone = [complete(live, {**body, "seed": seed})["content"] for seed in (5, 6)]
    assert [a["index"] for a in answers] == [0, 1] and [a["content"] for a in answers] == alone
    assert [a["content"] for a in complete(live, {**body, "n": 2})] == alone  # its alias
    two_prompts: Any = complete(live, {**body, "prompt": ["Once", "Twice"], "n_cmpl": 2})
    assert len(two_prompts) == 4 and two_prompts[1]["content"] == alone[1] and two_prompts[2]["prompt"] == "Twice"
    error = openai_error(live.http().post("/completion", json={**body, "prompt": ["a"] * 33, "n_cmpl": 2}), 400)
    assert error["param"] == "n_cmpl"


def test_a_prompt_may_mix_token_ids_and_texts(live: LiveServer, models: Models) -> None:
    body = {"model": models.chat, "n_predict": 4, **GREEDY}
    text = complete(live, {**body, "prompt": "Once upon a time"})
    ids = live.http().post("/tokenize", json={"model": models.chat, "content": " time"}).json()["tokens"]
    mixed = complete(live, {**body, "prompt": ["Once upon a", *ids]})
    assert (mixed["content"], mixed["tokens_evaluated"]) == (text["content"], text["tokens_evaluated"])


def test_a_front_ends_whole_body_is_answered(live: LiveServer, models: Models) -> None:
    # as SillyTavern sends it to llama-server: its fields for every backend, an empty grammar, pairs of
    # logit biases, max_tokens beside n_predict
    body = {
        "prompt": "User: Tell me a story.\nAssistant:",
        "max_new_tokens": 6,
        "max_tokens": 6,
        "n_predict": 6,
        "temperature": 0.7,
        "top_p": 0.9,
        "typical_p": 1,
        "sampler_seed": -1,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "repeat_penalty": 1.1,
        "top_k": 40,
        "add_bos_token": True,
        "dry_allowed_length": 2,
        "dry_multiplier": 0,
        "dry_base": 1.75,
        "dry_sequence_breakers": ["\n", ":"],
        "dry_penalty_last_n": 0,
        "stop": ["\nUser:"],
        "samplers": ["penalties", "dry", "top_k", "top_p", "min_p", "temperature"],
        "ban_eos_token": False,
        "stopping_strings": ["\nUser:"],
        "mirostat": 0,
        "tfs_z": 1,
        "repeat_last_n": 0,
        "ignore_eos": False,
        "grammar": "",
        "cache_prompt": True,
        "dynatemp_range": 0,
        "logit_bias": [],
        "n_probs": 0,
        "min_keep": 0,
        "xtc_probability": 0,
        "stream": False,
    }
    answer = complete(live, {**body, "model": models.chat})
    assert answer["tokens_predicted"] == 6 and answer["stop_type"] == "limit"
    # its creative samplers are llama-server's: mirostat 2.0 with a target surprise near 0 leaves
    # only the likeliest token, whatever the seed
    creative = {**body, "model": models.chat, "temperature": 1.0, "repeat_penalty": 1.0}
    greedy = complete(live, {**creative, "temperature": 0})["content"]
    for seed in (1, 2):
        narrowed = complete(live, {**creative, "seed": seed, "mirostat": 2, "mirostat_tau": 0.01})
        assert narrowed["content"] == greedy
        # `samplers` says which run: top-k 1 leaves the likeliest token only where it is named
        for order, same in ((["top_k", "temperature"], True), ("pt", False)):
            chosen = complete(live, {**creative, "seed": seed, "top_k": 1, "samplers": order})
            assert (chosen["content"] == greedy) is same, order


def test_the_default_model_answers_when_none_is_named(live: LiveServer, models: Models) -> None:
    answer = complete(live, {"prompt": "Hi", "n_predict": 1})
    assert answer["model"] == live.state.library.get(live.state.settings.default_model).id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "grammar": 'root ::= ( "a"'}, "grammar"),
        ({"prompt": "x", "grammar": "root ::= other"}, "grammar"),
        ({"prompt": "x", "grammar": 'start ::= "a"'}, "grammar"),
        ({"prompt": "x", "grammar": 'root ::= "a"', "json_schema": {}}, "grammar"),
        ({"prompt": "x", "json_schema": {"type": "text"}}, "json_schema"),
        ({"prompt": "x", "json_schema": "object"}, "json_schema"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, [2]]}, "prompt[0]"),
        ({"prompt": [["a", "b"]]}, "prompt[0]"),
        ({"prompt": ["a", ""]}, "prompt[1]"),
        ({"prompt": ["a", []]}, "prompt[1]"),
        ({"prompt": ["a"] * 65}, "prompt"),
        ({"prompt": [1, 10**9]}, "prompt"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"prompt": "x", "n_predict": -3}, "n_predict"),
        ({"prompt": "x", "n_predict": 10**9}, "n_predict"),
        ({"prompt": "x", "n_probs": 21}, "n_probs"),
        ({"prompt": "x", "stop": "no list"}, "stop"),
        ({"prompt": "x", "logit_bias": [["a", 1]]}, "logit_bias[0][0]"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "mirostat": 3}, "mirostat"),
        ({"prompt": "x", "xtc_threshold": 1.5}, "xtc_threshold"),
        ({"prompt": "x", "typical_p": -0.1}, "typical_p"),
        ({"prompt": "x", "dry_sequence_breakers": []}, "dry_sequence_breakers"),
        ({"prompt": "x", "n_indent": -1}, "n_indent"),
        ({"prompt": "x", "t_max_predict_ms": -5}, "t_max_predict_ms"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(
    live: LiveServer, models: Models, body: dict[str, Any], param: str
) -> None:
    error = openai_error(live.http().post("/completion", json={"model": models.chat, **body}), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_unknown_models_and_missing_keys(live: LiveServer) -> None:
    assert openai_error(live.http().post("/completion", json={"model": "nope", "prompt": "x"}), 404)["code"] == (
        "model_not_found"
    )
    assert live.http(key=None).post("/completion", json={"prompt": "x"}).status_code == 401
    # llama-server's routes answer in OpenAI's shape, whatever headers the client adds
    anthropic = live.http().post("/completion", json={"prompt": ""}, headers={"anthropic-version": "2023-06-01"})
    assert set(openai_error(anthropic, 400)) == {"message", "type", "param", "code"}


def test_a_completion_is_in_the_request_log(live: LiveServer, models: Models) -> None:
    response = live.http().post("/completion", json={"model": models.chat, "prompt": "logged", "n_predict": 2})
    record = logged_request(live, response)
    assert record.route == "/completion" and record.completion_tokens == 2 and record.model == models.chat


def test_infill_fills_in_the_middle_as_a_suffix_does(fim_server: tuple[LiveServer, str]) -> None:
    live, model = fim_server
    prefix, line, suffix = "def add(a, b):\n", "    return ", "\n\nprint(add(1, 2))"
    body = {"model": model, "input_prefix": prefix, "prompt": line, "input_suffix": suffix, "n_predict": 6, **GREEDY}
    middle = complete(live, body, "/infill")
    same = live.openai().completions.create(model=model, prompt=prefix + line, suffix=suffix, max_tokens=6, **GREEDY)  # type: ignore[call-overload]
    assert middle["content"] == same.choices[0].text and middle["tokens_evaluated"] == same.usage.prompt_tokens
    assert middle["tokens_predicted"] == 6 and middle["stop"] is True
    # other files' chunks (llama.vscode's ring buffer) come before, between snippet markers on this model
    extra = [{"filename": "util.py", "text": "x = 1\n"}, {"text": "y = 2\n"}]
    snippets = "".join(f"\n\n--- snippet ---\n\n{chunk['text']}" for chunk in extra)
    n_snippets = len(live.http().post("/tokenize", json={"model": model, "content": snippets}).json()["tokens"])
    with_extra = complete(live, {**body, "input_extra": extra}, "/infill")
    assert with_extra["tokens_evaluated"] == middle["tokens_evaluated"] + n_snippets
    # a grammar holds the middle too
    assert complete(live, {**body, "grammar": 'root ::= "a + b"'}, "/infill")["content"] == "a + b"
    pieces = streamed(live, {**body, "stream": True}, "/infill")
    assert "".join(p["content"] for p in pieces) == middle["content"] and pieces[-1]["stop"] is True
    # a cursor at the end of the file: an empty suffix still fills in the middle
    at_end = complete(live, {"model": model, "input_prefix": prefix, "n_predict": 2}, "/infill")
    prefix_tokens = live.http().post("/tokenize", json={"model": model, "content": prefix}).json()["tokens"]
    assert at_end["tokens_evaluated"] >= len(prefix_tokens) + 3  # the prefix and the three FIM tokens


def test_infill_on_a_model_without_fim_tokens_names_the_suffix(live: LiveServer, models: Models) -> None:
    response = live.http().post("/infill", json={"model": models.chat, "input_prefix": "a", "input_suffix": "b"})
    error = openai_error(response, 400)
    assert error["param"] == "input_suffix" and "fill-in-the-middle" in error["message"]
    assert "SPARK_DEFAULT_MODEL" not in error["message"]
    # an editor names no model: the default model answers, and the error says how to make it a code model
    unnamed = openai_error(live.http().post("/infill", json={"input_prefix": "a", "input_suffix": "b"}), 400)
    assert unnamed["param"] == "input_suffix" and "set SPARK_DEFAULT_MODEL to a code model" in unnamed["message"]
    bad = live.http().post("/infill", json={"model": models.chat, "input_extra": [{"name": "x"}]})
    assert openai_error(bad, 400)["param"].startswith("input_extra")
