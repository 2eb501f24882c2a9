"""Tokenizers for preprocessing: Megatron's and Hugging Face's tokenizer types
(``text_tokenizers``, ``megatron_tokenizers``), the gigatoken fast path and the proofs that
it gives the reference ids (``gigatoken_encoders``, ``byte_level_bpe``, ``unicode_14``,
``proof_cache``), and Megatron's sentence splitting (``sentence_splitters``)."""
