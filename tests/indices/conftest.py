"""megatron-core 0.16.1 as the oracle for the index functions (fixtures in helpers/)."""

from index_oracle import (  # noqa: F401 (fixtures)
    megatron_gpt,
    megatron_helpers,
    megatron_sample_index,
    megatron_trio,
)
