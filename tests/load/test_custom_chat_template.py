"""vLLM 0.32's custom dataset sends each prompt rendered in the model's chat template (unless
--skip-chat-template), with --chat-template-kwargs: bench has the server render it (/tokenize with the
message, /detokenize), counts it as vLLM's client does, and says when the server cannot."""

from __future__ import annotations

import json

import pytest

from tests.fake_openai_server import GENERATION_PROMPT, THINKING_OFF, FakeServerConfig, chat_prompt_text
from tests.load.test_bench_chat_auth import ServerThread, _bench, _texts, write_bos_tokenizer
from tests.load.test_bench_cli import sim_server  # noqa: F401
from tuner.cli import main
from tuner.load.datasets import custom
from tuner.load.servertok import chat_template

PROMPTS = ["What is the capital of India?", "Name three rivers of Europe.", "Why is the sky blue?"]


def _dataset(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"prompt": t, "output_tokens": 3}) + "\n" for t in PROMPTS))
    return p


def _run(tmp_path, *extra):
    """bench over the chat API (the fake server takes text there) on a custom dataset: (exit, texts sent,
    result, the server's tokenizer)."""
    from tokenizers import Tokenizer

    tok_dir = tmp_path / "tok"
    write_bos_tokenizer(tok_dir)
    with ServerThread(FakeServerConfig(model="m", tokenizer_dir=str(tok_dir))) as srv:
        code = _bench(srv, tmp_path, "--backend", "openai-chat", "--model", "m", "--dataset-name", "custom",
                      "--dataset-path", str(_dataset(tmp_path)), "--num-prompts", "3", "--custom-output-len", "-1",
                      *extra)
        sent = sorted(_texts(srv))
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    return code, sent, json.loads((tmp_path / "r.json").read_text()), tok


def test_custom_prompts_are_sent_in_the_chat_template_as_vllm_sends_them(tmp_path):
    code, sent, d, tok = _run(tmp_path)
    assert code == 0 and d["completed"] == 3
    # rendered by the client, and the server renders the chat request again (vLLM's client does the same)
    assert sent == sorted(f"<s>user: {t}\n{GENERATION_PROMPT}" for t in PROMPTS)
    served = [chat_prompt_text([{"role": "user", "content": t}]) for t in sent]
    assert sorted(d["input_lens"]) == sorted(len(tok.encode(t, add_special_tokens=False).ids) for t in served)
    assert d["tuner_custom_prompts"]["chat_template"].startswith("rendered by the server")


def test_rendered_prompts_are_counted_as_vllms_prompt_len(tmp_path):
    """vLLM's prompt_len: the rendered text tokenized with the specials added (a BOS on top of the
    template's own); without a tokenizer on disk the server's /tokenize counts it."""
    from tokenizers import Tokenizer

    tok_dir = tmp_path / "tok"
    write_bos_tokenizer(tok_dir)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    with ServerThread(FakeServerConfig(model="m", tokenizer_dir=str(tok_dir))) as srv:
        template, why = chat_template(srv.base_url, "m")
        assert template is not None, why
        w = custom(_dataset(tmp_path), 3, 0, None, -1, template=template)
    assert sorted(w.prompts) == sorted(f"<s>user: {t}\n{GENERATION_PROMPT}" for t in PROMPTS)
    assert w.prompt_lens == [len(tok.encode(t).ids) for t in w.prompts]
    assert all(n == len(tok.encode(t, add_special_tokens=False).ids) + 1 for n, t in zip(w.prompt_lens, w.prompts))


def test_template_kwargs_reach_the_rendering(tmp_path):
    code, sent, _, _ = _run(tmp_path, "--chat-template-kwargs", '{"enable_thinking": false}')
    assert code == 0 and all(t.endswith(GENERATION_PROMPT + THINKING_OFF) for t in sent) and len(sent) == 3


def test_skip_chat_template_sends_the_prompts_as_written(tmp_path):
    code, sent, d, _ = _run(tmp_path, "--skip-chat-template")
    assert code == 0 and sent == sorted(PROMPTS)
    assert d["tuner_custom_prompts"]["chat_template"].startswith("not applied (--skip-chat-template)")


def test_a_server_without_tokenize_gets_the_prompts_as_written_and_says_so(tmp_path, capsys):
    with ServerThread(FakeServerConfig(model="m", accept_text=True)) as srv:  # no tokenizer: no /tokenize
        assert _bench(srv, tmp_path, "--model", "m", "--dataset-name", "custom", "--dataset-path",
                      str(_dataset(tmp_path)), "--num-prompts", "3") == 0
        sent = sorted(r.body["prompt"] for r in srv.log)
    err = capsys.readouterr().err
    assert err.count("custom prompts: sent as written, not in the model's chat template") == 1
    assert "/tokenize answered HTTP 404" in err and sent == sorted(PROMPTS)
    assert json.loads((tmp_path / "r.json").read_text())["tuner_custom_prompts"]["chat_template"].startswith(
        "not applied: the server's /tokenize cannot render it")


def test_the_simulator_renders_its_own_template(sim_server, tmp_path, capsys):  # noqa: F811
    """The simulator serves /tokenize too (tuner/sim/tokens.py): its template is 4 tokens around each message."""
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--dataset-name", "custom",
                 "--dataset-path", str(_dataset(tmp_path)), "--num-prompts", "3", "--custom-output-len", "-1",
                 "--disable-tqdm", "--save-detailed", "--result-file", str(tmp_path / "r.json")]) == 0
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["tuner_custom_prompts"]["chat_template"].startswith("rendered by the server")
    from tuner.sim.http import count_text_tokens

    assert sorted(d["input_lens"]) == sorted(4 + count_text_tokens(t) for t in PROMPTS)
    assert "sent as written" not in capsys.readouterr().err


def test_template_kwargs_outside_custom_point_at_extra_body(sim_server, tmp_path, capsys):  # noqa: F811
    assert main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "2", "--disable-tqdm",
                 "--random-input-len", "8", "--random-output-len", "2", "--vocab-size", "1000",
                 "--chat-template-kwargs", '{"enable_thinking": false}']) == 0
    assert "pass --extra-body '{\"chat_template_kwargs\": ...}'" in capsys.readouterr().err


def test_template_kwargs_must_be_a_json_object(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--dataset-name", "custom", "--dataset-path", str(_dataset(tmp_path)),
              "--chat-template-kwargs", "enable_thinking=false"])
    assert e.value.code == 2
    assert "--chat-template-kwargs: not JSON" in capsys.readouterr().err
