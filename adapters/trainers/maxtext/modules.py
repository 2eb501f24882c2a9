"""Which MaxText modules megadata's hook patches, and the mark it leaves on them."""

#: The MaxText module whose ``get_mmap_npy_dataset`` is replaced (the pipeline's).
TARGET = "maxtext.input_pipeline.grain_data_processing"
#: The module that defines MaxText's own functions (patched too, for direct callers).
SOURCE = "maxtext.input_pipeline._mmap_datasource"
#: The module of MaxText's ``MegatronSplitInputsTargets``, which lets megadata's own
#: samples (already split) through.
UTILS = "maxtext.input_pipeline.input_pipeline_utils"
#: Every module the hook patches.
PATCHED = (TARGET, SOURCE, UTILS)
#: The attribute set on what megadata put in place (functions, patched modules).
MARK = "__megadata__"
