"""Every version of what megadata writes under ``path_to_cache``, in one table.

A version is part of the description (so of the key) or of the record it versions:
bumping one makes the entries or records of the old version miss (they are rebuilt,
or read again, never served as if they were of this version). Bump the one whose
output changes, say why beside it, and expect ``tests/cache/test_keys_stable.py`` to
fail until its table of keys is updated on purpose.
"""

#: The entry format: a description record and one .npy file per array.
CACHE_FORMAT = "megadata-index-cache"
#: 3: a CRC-32 of each whole file, checked before use (2 checked sampled bytes only: an
#: entry of version 2 is rebuilt rather than served unverified).
CACHE_VERSION = 3
#: An entry's list of files verified whole, by file identity (unversioned: a list it
#: does not understand vouches for nothing).
VERIFIED_FORMAT = "megadata-verified-files"

#: A GPT dataset's index arrays (document, sample and shuffle index; Feistel's sample
#: index and split): bumped whenever an index algorithm changes its output.
INDEX_ALGORITHM_VERSION = 3
#: The best_fit index (in best_fit keys only: concat keys stay as they were).
PACKING_ALGORITHM_VERSION = 1
#: A blend's dataset_index / dataset_sample_index / dataset_counts.
BLEND_ALGORITHM_VERSION = 4
#: A blend schedule's dataset_index / dataset_sample_index / dataset_counts.
SCHEDULE_ALGORITHM_VERSION = 1
#: The build bundle (one entry per build with a blend). 2: per-prefix lists as digests.
BUNDLE_VERSION = 2
#: The blend record (every corpus of a blend in one file). 2: identities as an array,
#: prefixes as a digest.
BLEND_RECORD_VERSION = 2
#: A corpus's record of a full .idx validation; bumped whenever validation checks more
#: (older records then vouch for nothing).
CORPUS_RECORD_FORMAT = "megadata-validated-corpus"
CORPUS_RECORD_VERSION = 1
#: The Megatron drop-in's blend of mid-level datasets that are not GPT datasets.
MEGATRON_BLEND_VERSION = 1
