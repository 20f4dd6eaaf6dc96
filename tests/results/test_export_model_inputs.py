"""An export completes the env file with the buckets the release builds for the study's own model: what its runner
takes from the model (a hybrid's mamba chunk size, main's whole decode block range, a speculative config's draft
tokens), not a dense model's build."""

import optuna
import pytest

from tuner.results.export import ExportError, complete_env, study_model_inputs

SERVER = {"max_model_len": 8192, "max_num_seqs": 32, "max_num_batched_tokens": 8192}


def _study(model: str) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("device_model", {"device": "gaudi3", "model": model, "dtype": "bf16", "hf_overrides": None})
    return study


def test_the_studys_model_gives_the_runners_inputs():
    hybrid = study_model_inputs(_study("Qwen/Qwen3.5-35B-A3B"), "gaudi-main", SERVER)
    assert hybrid == {"mamba_chunk_size": 128, "mamba_chunk_size_explicit": False, "skip_decode_block_clamp": True}
    spec = study_model_inputs(_study("deepseek-ai/DeepSeek-R1"), "fork-1.22",
                              {**SERVER, "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}})
    assert spec == {"num_speculative_tokens": 2}
    assert study_model_inputs(_study("Qwen/Qwen3-8B"), "gaudi-main", SERVER) == {}  # a dense model: as before
    assert study_model_inputs(_study("no-such/model"), "gaudi-main", SERVER) == {}
    assert study_model_inputs(_study("Qwen/Qwen3-8B"), None, SERVER) == {}


def test_a_release_that_refuses_the_models_inputs_is_said_at_export():
    # fork-1.22 refuses speculative decoding with its default contiguous PA: the env file would not start
    with pytest.raises(ExportError, match="Speculative decoding is not supported with contiguous PA"):
        complete_env("fork-1.22", {}, SERVER, 5000, {"num_speculative_tokens": 2})
    env, _ = complete_env("fork-1.22", {"VLLM_CONTIGUOUS_PA": "false"}, SERVER, 5000, {"num_speculative_tokens": 2})
    assert env["VLLM_CONTIGUOUS_PA"] == "false"
