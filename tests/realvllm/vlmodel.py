"""A tiny vision-language model that vLLM 0.32.0 serves on this tier's CPU: Idefics3 (SigLIP tower, pixel
shuffle, Llama text), random weights (`--load-format dummy`), tokenizer and processor built here.

Why Idefics3 and not Qwen2-VL/Qwen2.5-VL: the tier's venv has no torchvision (the PyPI wheel is a CUDA
build that breaks `import torch` against torch+cpu; no CPU build is reachable here, docs/real-vllm-cpu.md
§1), and vLLM 0.32's qwen2_vl.py (which qwen2_5_vl.py and qwen3_vl.py import) imports transformers'
torchvision image processor at module level: `vllm serve` of a Qwen2-VL config fails while inspecting
the architecture with "ModuleNotFoundError: No module named 'torchvision'" (so do llava, llava_next,
gemma3_mm, mistral3, internvl, glm4_1v). idefics3, smolvlm, paligemma, phi3v and kimi_vl import;
Idefics3's processor falls back to its PIL image processor.

Its image tokens depend on the image's size (the processor splits an image into 56-pixel tiles, up to
4x4, plus a global view; 4 tokens each after the pixel shuffle), so "counted as the server counts them"
is a real question. The tokenizer is Llama-3-shaped: byte-level BPE (vocab 2,500 trained on the
standard library's package modules), `<|begin_of_text|>` added to a text (one special token), image
tokens and `<row_i_col_j>` tags as added tokens, Idefics3's chat template.

Built by tests/realvllm/env.py beside the venv (`<env>-tiny-idefics3`), like the other tiny models.

Standard library plus `tokenizers` (run under the vLLM venv's python).
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
from pathlib import Path

VL_VOCAB = 2500      # trained; the added tokens come after
IMAGE_SIZE, PATCH, SCALE = 56, 14, 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2  # <image> tokens per tile
MAX_EDGE = 4 * IMAGE_SIZE                               # images are resized to fit, then tiled
TEMPLATE = ("<|begin_of_text|>{% for message in messages %}{{message['role'] | capitalize}}"
            "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
            "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
            "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
            "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<fake_token_around_image>", "<image>", "<end_of_utterance>",
            "<global-img>"]
NAMED = {"bos_token": "<|begin_of_text|>", "eos_token": "<end_of_utterance>", "pad_token": "<|end_of_text|>",
         "additional_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]}


def write_vl_model(out: Path, recipe: int) -> None:
    """Write the model into ``out`` (an existing, empty folder): about 80 KB, a few seconds."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    out = Path(out)
    corpus = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*", "*.py")))[200:400]
    if not corpus:
        raise RuntimeError("no standard-library package modules to train the tokenizer on")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(corpus, trainers.BpeTrainer(vocab_size=VL_VOCAB, special_tokens=[], show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in SPECIALS])
    tok.add_tokens([AddedToken(f"<row_{i}_col_{j}>", normalized=False, special=False)
                    for i in range(1, 7) for j in range(1, 7)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(str(out / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}

    def dump(name, data):
        (out / name).write_text(json.dumps(data, indent=1) + "\n")

    dump("tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", **NAMED, "model_max_length": 16384,
                                   "clean_up_tokenization_spaces": False, "chat_template": TEMPLATE,
                                   "processor_class": "Idefics3Processor"})
    dump("special_tokens_map.json", NAMED)
    (out / "chat_template.jinja").write_text(TEMPLATE)  # the processor's own copy
    dump("preprocessor_config.json", {
        "image_processor_type": "Idefics3ImageProcessor", "processor_class": "Idefics3Processor",
        "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True, "do_rescale": True,
        "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 1,
        "rescale_factor": 1 / 255, "max_image_size": {"longest_edge": IMAGE_SIZE}, "size": {"longest_edge": MAX_EDGE}})
    dump("processor_config.json", {"image_seq_len": IMAGE_SEQ_LEN, "processor_class": "Idefics3Processor"})
    vocab, eos, pad = tok.get_vocab_size(), ids["<end_of_utterance>"], ids["<|end_of_text|>"]
    dump("config.json", {
        "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
        "image_token_id": ids["<image>"], "scale_factor": SCALE, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "pad_token_id": pad,
        "text_config": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab,
                        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                        "max_position_embeddings": 16384, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": bos,
                        "eos_token_id": eos, "pad_token_id": pad, "torch_dtype": "bfloat16"},
        "vision_config": {"model_type": "idefics3_vision", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "num_channels": 3,
                          "image_size": IMAGE_SIZE, "patch_size": PATCH}})
    dump("generation_config.json", {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad})
    dump("bucket-tuner-model.json", {"recipe": recipe, "vocab_size": vocab, "load_format": "dummy",
                                     "trained_on": f"{len(corpus)} stdlib package .py files"})
