"""Speculative decoding as the server is told it (--speculative-config, vLLM 0.32's --spec-* shortcuts, the fork's
--num-speculative-tokens, a space's options): the release's decode buckets read the draft tokens, and a hybrid's
states make room for them (the conv state keeps them; a request holds a state block for each)."""

from types import SimpleNamespace

import pytest

from tuner.perfmodel import predict_startup
from tuner.perfmodel.costs import ServerInputs, SimSettings
from tuner.perfmodel.target import DeviceModel, model_inputs
from tuner.serve.backends import server_flags, server_options
from tuner.sim.serve import build_parser, settings_from_args

QWEN35_MOE = SimSettings(model="Qwen/Qwen3.5-35B-A3B", device="gaudi3")


def predict(speculative=None, sim=QWEN35_MOE, release="gaudi-main"):
    return predict_startup(release, sim, ServerInputs(max_model_len=8192, max_num_seqs=32,
                                                      speculative_config=speculative), {})


def test_draft_tokens_reach_the_buckets_and_a_hybrids_states():
    plain, mtp = predict(), predict('{"method": "mtp", "num_speculative_tokens": 2}')
    assert (plain.config.num_speculative_tokens, mtp.config.num_speculative_tokens) == (0, 2)
    assert len(mtp.plan.decode) != len(plain.plan.decode)  # main's decode buckets make room for the drafts
    # the conv state keeps kernel - 1 + 2 positions: 2 more rows of 8,192 bf16 channels
    assert mtp.hybrid.state_bytes == plain.hybrid.state_bytes + 2 * 8192 * 2 == 2_179_072
    # a state block per draft token in each of the 3 state groups, beside the one for the state
    assert (plain.state_blocks, mtp.state_blocks) == (3, 9)
    # an MTP draft without a count proposes one per MTP layer of the model (Qwen3.5: mtp_num_hidden_layers 1)
    assert predict('{"method": "mtp"}').config.num_speculative_tokens == 1


def test_a_config_vllm_refuses_fails_the_start_with_its_reason():
    pred = predict('{"method": "eagle3", "model": "some/draft"}')
    assert pred.failure.phase == "config" and "`num_speculative_tokens` was not provided" in pred.failure.message


def _sim_args(*flags):
    return build_parser().parse_args(["Qwen/Qwen3.5-35B-A3B", *flags])


def test_the_simulator_takes_every_spelling():
    _, inputs = settings_from_args(_sim_args("--speculative-config", '{"method": "mtp", "num-speculative-tokens": 3}'))
    assert inputs.speculative_config is not None and '"num_speculative_tokens":3' in inputs.speculative_config
    _, inputs = settings_from_args(_sim_args("--spec-method", "mtp", "--spec-tokens", "2"))
    assert inputs.speculative_config == '{"method":"mtp","num_speculative_tokens":2}'
    _, inputs = settings_from_args(_sim_args("--num-speculative-tokens", "4"))  # the fork releases' flag
    assert inputs.speculative_config == '{"num_speculative_tokens":4}'
    with pytest.raises(ValueError, match=r"--spec-tokens and --speculative-config\['num_speculative_tokens'\] are "
                                         "mutually exclusive"):
        settings_from_args(_sim_args("--speculative-config", '{"num_speculative_tokens": 1}', "--spec-tokens", "2"))


def test_a_space_or_server_args_may_set_it_and_it_is_passed_on_as_vllm_takes_it():
    server = {"speculative_config": {"method": "mtp"}, "spec_tokens": 2}
    flags = server_flags(server)
    assert flags == ["--speculative-config", '{"method":"mtp"}', "--spec-tokens", "2"]
    assert server_options(flags) == {"speculative_config": '{"method":"mtp"}', "spec_tokens": 2}
    settings = SimpleNamespace(server=server)
    _, inputs = model_inputs(DeviceModel(model="Qwen/Qwen3.5-35B-A3B"), settings)
    assert inputs.speculative_config == '{"method":"mtp","num_speculative_tokens":2}' and inputs.refused is None
    clash = SimpleNamespace(server={"speculative_config": {"num_speculative_tokens": 1}, "spec_tokens": 2})
    _, inputs = model_inputs(DeviceModel(model="Qwen/Qwen3.5-35B-A3B"), clash)
    failed = predict_startup("gaudi-main", QWEN35_MOE, inputs, {})
    assert failed.failure.phase == "config" and "mutually exclusive" in failed.failure.message


def test_an_mtp_draft_loads_the_models_own_mtp_layers_after_it():
    from tuner.explain.reading import read_log
    from tuner.logparse.events import ServerNotice
    from tuner.sim.startup import startup_events

    r1 = SimSettings(model="deepseek-ai/DeepSeek-R1", device="gaudi3", tp=8, dtype="fp8")
    shape = r1.shape
    # one MTP layer: latent attention, 256 routed experts and a shared one, enorm / hnorm, eh_proj (2h x h), the
    # head's norm. With the embedding and the head it shares with the model (2 x 129,280 x 7,168) it is the "14B"
    # MTP module DeepSeek-V3's report counts beside the 671B
    assert shape.mtp_layers == 1 and shape.mtp_params == 11_610_067_968
    assert (shape.mtp_params + 2 * 129280 * 7168) / 1e9 == pytest.approx(14, rel=0.05)
    plain = predict_startup("gaudi-main", r1, ServerInputs(max_model_len=8192, max_num_seqs=32), {})
    mtp = predict_startup("gaudi-main", r1, ServerInputs(max_model_len=8192, max_num_seqs=32,
                                                         speculative_config='{"method": "mtp"}'), {})
    drafted = shape.weight_bytes("fp8", 8) * shape.mtp_params // shape.total_params
    assert mtp.draft_weights == drafted and mtp.memory.weights == plain.memory.weights + drafted
    assert mtp.num_blocks < plain.num_blocks
    ngram = predict_startup("gaudi-main", r1, ServerInputs(max_model_len=8192, max_num_seqs=32, speculative_config=(
        '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}')), {})
    assert ngram.draft_weights == 0  # no draft model: the prompt is its own draft
    lines = [ev[3] for ev in startup_events(mtp) if ev[0] == "log"]
    said = [t.event for t in read_log(lines).events if isinstance(t.event, ServerNotice)]
    assert any(n.kind == "drafter_weights" for n in said)
    assert f"Loading drafter model weights took {drafted / 2**30:.4f} GB" in lines


def test_a_logs_speculative_config_is_read_back_for_its_prediction():
    from tuner.explain import explain
    from tuner.sim.serve import non_default_args
    from tuner.study.logcalibration import settings_from_log

    args = _sim_args("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}')
    line = f"INFO 11-29 02:40:01 [api_server.py:1896] non-default args: {non_default_args(args)}"
    assert "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 2}" in line  # as vLLM prints it
    x = explain([line])
    assert x.server.speculative_config == '{"method":"mtp","num_speculative_tokens":2}'
    settings, _ = settings_from_log(x, {}, "gaudi-main")
    assert settings.server["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
