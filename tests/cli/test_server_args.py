"""A study's --server-args are part of the server's command line, after the space's flags: the prediction reads
them as the server does (they win), so a 70B served at TP 2 through them is not predicted at TP 1."""

from __future__ import annotations

import optuna
import pytest
import yaml

from tuner.cli import main

FAST = ["--num-prompts", "8", "--num-warmups", "1", "--max-concurrency", "4", "--random-input-len", "200",
        "--random-output-len", "16", "--time-scale", "0.2", "--startup-time-scale", "0.002", "--no-report"]


@pytest.mark.parametrize("server_args", ["--tensor-parallel-size 2", "--config serve.yaml", "-tp 2",
                                         "--tensor-parallel 2"])
def test_server_args_are_read_by_the_prediction_as_the_server_reads_them(tmp_path, monkeypatch, server_args):
    # Llama-3.1-70B in bf16 does not fit one Gaudi 2: at TP 1 every proposal is refused before a boot (out of
    # memory); --server-args "--tensor-parallel-size 2" (or a vllm serve --config YAML saying so) is what the
    # server runs, and what is predicted
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.yaml").write_text("tensor_parallel_size: 2\nenable-chunked-prefill: true\n")
    (tmp_path / "tp.yaml").write_text(yaml.safe_dump({
        "name": "tp", "release": "gaudi-main", "server": {"max_model_len": 8192},
        "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4, 8]}}}))
    assert main(["tune", "--space", "tp.yaml", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--n-trials", "1",
                 "--server-args", server_args, *FAST]) == 0
    study = optuna.load_study(study_name="tp", storage=f"sqlite:///{tmp_path / 'results' / 'tp' / 'study.db'}")
    booted = [t for t in study.trials if t.user_attrs.get("booted")]
    assert booted and booted[0].user_attrs["status"] == "ok"
    assert not [t for t in study.trials if "PT_DEVMEM" in str(t.user_attrs.get("reason", ""))]


def test_server_args_vllm_would_refuse_are_refused_before_a_boot(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "--space", "demo", "--n-trials", "1", "--server-args", "--max 8", *FAST]) == 2
    err = capsys.readouterr().err
    assert "--server-args: ambiguous option: --max could match" in err and "--max-num-seqs" in err
    db = tmp_path / "results" / "demo" / "study.db"
    assert not db.exists() or not optuna.load_study(study_name="demo", storage=f"sqlite:///{db}").trials


def test_server_args_that_set_a_tuned_option_are_refused(tmp_path, monkeypatch, capsys):
    # the demo space tunes max_num_seqs; a production line's -... --max-num-seqs 64 would pin every trial to 64
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "--space", "demo", "--n-trials", "1", "--server-args", "--max_num_seq=64 -tp 1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "--server-args sets --max-num-seqs 64, which the space demo tunes (max_num_seqs)" in err
    assert "--tensor-parallel-size" not in err   # a setting the space does not tune stays the user's to give


def test_a_length_in_server_args_is_the_one_judged(tmp_path, monkeypatch, capsys):
    # the space's 65,536 is past Qwen3-8B's 40,960, but --server-args' --max-model-len comes last and wins
    monkeypatch.chdir(tmp_path)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump({
        "name": "long", "release": "gaudi-main", "server": {"max_model_len": 65536},
        "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4, 8]}}}))
    assert main(["tune", "--space", "long.yaml", "--model", "Qwen/Qwen3-8B", "--n-trials", "1",
                 "--server-args", "--max-model-len 16k", *FAST]) == 0
    assert main(["tune", "--space", "long.yaml", "--model", "Qwen/Qwen3-8B", "--n-trials", "1", "--study", "x",
                 "--server-args", "--max-model-len 128k", *FAST]) == 2
    assert "--server-args: --max-model-len 128000 is longer than --model Qwen/Qwen3-8B serves: 40,960 tokens" in \
        capsys.readouterr().err


def test_the_weights_and_kv_cache_formats_a_configuration_sets_are_predicted():
    # a space (or --server-args) that sets --kv-cache-dtype fp8_inc holds a byte a value: twice the KV blocks; one
    # that sets --quantization fp8 loads half the weights, as the simulator reads the same flags
    from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
    from tuner.space.schema import TrialSettings

    target = ModelTarget("gaudi-main", DeviceModel(device="gaudi2", model="meta-llama/Llama-3.1-8B-Instruct"))

    def blocks(**server) -> int:
        return predict(target, TrialSettings(server={"max_model_len": 8192, "max_num_seqs": 8, **server}, env={},
                                             params={})).memory.num_blocks

    def simulated(*flags: str) -> int:
        from tuner.perfmodel import predict_startup
        from tuner.sim.serve import build_parser, settings_from_args

        sim, inputs = settings_from_args(build_parser().parse_args(
            ["meta-llama/Llama-3.1-8B-Instruct", "--release", "gaudi-main", "--max-model-len", "8192",
             "--max-num-seqs", "8", *flags]))
        return predict_startup("gaudi-main", sim, inputs, {}).memory.num_blocks

    bf16 = blocks()
    assert blocks(kv_cache_dtype="fp8_inc") in (2 * bf16, 2 * bf16 + 1)
    assert blocks(kv_cache_dtype="fp8_inc") == simulated("--kv-cache-dtype", "fp8_inc")
    assert blocks(quantization="fp8") > bf16 and blocks(quantization="fp8") == simulated("--quantization", "fp8")
    told = ModelTarget("gaudi-main", DeviceModel(device="gaudi2", model="meta-llama/Llama-3.1-8B-Instruct",
                                                 server_args=(("kv_cache_dtype", "fp8"),)))
    assert predict(told, TrialSettings(server={"max_model_len": 8192, "max_num_seqs": 8}, env={},
                                       params={})).memory.num_blocks == blocks(kv_cache_dtype="fp8")


def test_a_logs_kv_cache_and_weight_formats_are_the_ones_its_calibration_predicts():
    # a log of a server run with --kv-cache-dtype fp8_inc --quantization inc: explain's model advice and a study's
    # --calibrate-from predict with them, not with bf16 KV blocks
    from tuner.explain import explain
    from tuner.study.logcalibration import settings_from_log

    line = ("INFO 11-29 00:08:40 [utils.py:326] non-default args: {'model_tag': 'm', 'model': 'm', "
            "'kv_cache_dtype': 'fp8_inc', 'quantization': 'inc'}")
    x = explain([line])
    assert (x.server.kv_cache_dtype, x.server.quantization) == ("fp8_inc", "inc")
    settings, _ = settings_from_log(x, {"block_size": 128}, "gaudi-main")
    assert settings.server["kv_cache_dtype"] == "fp8_inc" and settings.server["quantization"] == "inc"
    plain = explain(["INFO 11-29 00:08:40 [utils.py:326] non-default args: {'model_tag': 'm', 'model': 'm'}"])
    assert "kv_cache_dtype" not in settings_from_log(plain, {}, "gaudi-main")[0].server
