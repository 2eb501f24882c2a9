"""Floor 1: the .bin/.idx pair and the byte sources it is read from.

Reader, writer and merge, the ``.idx`` layout, token dtypes, byte sources (local mmap or
pread; a URL-scheme registry the adapters fill). May import the ground (errors, checks,
files, handover) only.
"""

from megadata_core.format.idx_layout import optimal_dtype
from megadata_core.format.reader import IndexedDataset, bin_path_of, idx_path_of
from megadata_core.format.sources import ByteSource, open_source, register_scheme
from megadata_core.format.writer import IndexedDatasetWriter, merge_datasets

__all__ = [
    "ByteSource",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "bin_path_of",
    "idx_path_of",
    "merge_datasets",
    "open_source",
    "optimal_dtype",
    "register_scheme",
]
