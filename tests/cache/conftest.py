"""megatron-core 0.16.1 as the oracle of indices built into the cache's spill files."""

from index_oracle import megatron_gpt  # noqa: F401 (a fixture)
