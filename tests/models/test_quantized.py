"""A quantized checkpoint's weights from its quantization_config, against published checkpoint sizes.

The sizes are the GPTQ branch tables of TheBloke's model cards (README.md, column "Size", decimal GB), one
per base model the catalogue has the config of: Llama-2-7b-Chat-GPTQ, Mixtral-8x7B-Instruct-v0.1-GPTQ,
CodeLlama-34B-Instruct-GPTQ, StableBeluga2-70B-GPTQ and vigogne-2-70B-chat-GPTQ (Llama-2-70B shape),
zephyr-7B-beta-GPTQ (Mistral-7B shape). Before quantized.py every one was counted at 16 bits (3.5x).
"""

from __future__ import annotations

import json

import pytest

from tuner.models import catalogue, read_config, shape_from_config
from tuner.models.quantized import linear_format

PUBLISHED_GPTQ = [  # (base config, bits, group size, published GB)
    ("meta-llama/Llama-2-7b-hf", 4, 128, 3.90), ("meta-llama/Llama-2-7b-hf", 4, 64, 4.02),
    ("meta-llama/Llama-2-7b-hf", 4, 32, 4.28),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 4, 128, 24.70), ("mistralai/Mixtral-8x7B-Instruct-v0.1", 4, 32, 27.42),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 4, -1, 23.81), ("mistralai/Mixtral-8x7B-Instruct-v0.1", 3, -1, 18.01),
    ("meta-llama/CodeLlama-34b-Instruct-hf", 4, 128, 18.33), ("meta-llama/CodeLlama-34b-Instruct-hf", 4, 64, 18.98),
    ("meta-llama/CodeLlama-34b-Instruct-hf", 4, 32, 20.28),
    ("meta-llama/Llama-2-70b-hf", 4, 32, 40.66), ("meta-llama/Llama-2-70b-hf", 4, 64, 37.99),
    ("meta-llama/Llama-2-70b-hf", 4, 128, 36.65), ("meta-llama/Llama-2-70b-hf", 4, -1, 35.33),
    ("meta-llama/Llama-2-70b-hf", 3, -1, 26.77),
    ("mistralai/Mistral-7B-v0.1", 4, 128, 4.16), ("mistralai/Mistral-7B-v0.1", 4, 32, 4.57),
    ("mistralai/Mistral-7B-v0.1", 8, -1, 7.52),
]


def _with(model_id: str, quantization: dict):
    config = json.loads(catalogue()[model_id].read_text())
    config["quantization_config"] = quantization
    return shape_from_config(read_config(config), model_id, "test")


@pytest.mark.parametrize(("model_id", "bits", "group", "published_gb"), PUBLISHED_GPTQ)
def test_gptq_checkpoints_weigh_what_their_model_cards_publish(model_id, bits, group, published_gb):
    shape = _with(model_id, {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": True,
                             "sym": True, "true_sequential": True})
    assert shape.quantization == "gptq"
    assert shape.checkpoint_bytes() / 1e9 == pytest.approx(published_gb, rel=0.005)
    # served as stored: one card's share, not the 16-bit figure
    assert shape.weight_bytes("bf16", 2) == shape.checkpoint_bytes() // 2


def test_every_format_stores_fewer_bytes_than_16_bits_and_more_than_its_bits():
    formats = {
        "awq": {"quant_method": "awq", "zero_point": True, "group_size": 128, "bits": 4, "version": "gemm"},
        "awq (AutoAWQ's own names)": {"quant_method": "awq", "w_bit": 4, "q_group_size": 64},
        "compressed-tensors W4A16": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                               "symmetric": True}}}},
        "compressed-tensors W8A8 int": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}},
        "compressed-tensors FP8 dynamic": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}},
        "compressed-tensors NVFP4": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
            "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}},
        "bitsandbytes nf4": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                             "bnb_4bit_use_double_quant": True},
        "bitsandbytes int8": {"quant_method": "bitsandbytes", "load_in_8bit": True},
        "modelopt NVFP4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
        "fp8 blocks": {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
    }
    bf16 = _with("meta-llama/Llama-3.1-8B-Instruct", {}).checkpoint_bytes()
    for name, q in formats.items():
        fmt = linear_format(q, 4096)
        assert fmt is not None, name
        bits = int(fmt.name[-1]) if fmt.name[-1].isdigit() else 4
        assert bits / 8 <= fmt.bytes_per_weight < bits / 8 * 1.13, name
        stored = _with("meta-llama/Llama-3.1-8B-Instruct", q).checkpoint_bytes()
        assert stored < bf16, name


def test_a_format_not_known_is_counted_at_16_bits_and_named():
    shape = _with("meta-llama/Llama-3.1-8B-Instruct", {"quant_method": "hqq", "nbits": 4})
    assert shape.quantization == "hqq" and shape.linear_bytes is None
    assert shape.checkpoint_bytes() == shape.total_params * 2


def test_a_packed_format_is_named_by_its_method_not_the_kernel_a_server_picks():
    named = {m: linear_format({"quant_method": m, "bits": 4, "group_size": 128}, 4096).method
             for m in ("gptq", "gptq_marlin", "awq-marlin", "awq_hpu", "auto-round")}
    assert named == {"gptq": "gptq", "gptq_marlin": "gptq", "awq-marlin": "awq", "awq_hpu": "awq",
                     "auto-round": "auto_round"}
