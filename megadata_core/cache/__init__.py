"""Floor 2 (beside indices): everything megadata keeps under ``path_to_cache``.

Entries (:mod:`.entries`: content-addressed ``.npy`` files, a CRC-32 of every byte
checked before use, flock + atomic rename) in the files of :mod:`.npy_files` (many small
arrays packed as one entry too), keyed as :mod:`.keys` says (the descriptions, their
hashes, the inputs' identities, every version in one table); arrays built straight into
an entry's files (:mod:`.spill`, shuffled in memory where it fits); records that a corpus
passed a full validation (:mod:`.corpus_trust`); the blend record and the corpora it
describes (:mod:`.blend_record`). May import the ground (errors, checks, files) and
format; never indices, datasets or above (a description takes the config's fields as
given).
"""

from megadata_core.cache.corpus_trust import open_corpus

__all__ = ["open_corpus"]
