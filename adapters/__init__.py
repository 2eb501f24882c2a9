"""Adapters: thin skins over outside systems (Grain, torch, JAX, TensorStore, tokenizers)."""
