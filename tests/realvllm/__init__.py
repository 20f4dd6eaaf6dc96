"""Support for the real-vLLM test tier (tests/test_realvllm.py): a pinned CPU vLLM environment and a
tiny local model, both built on demand and cached outside the checkout (see env.py)."""
