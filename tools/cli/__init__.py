"""megadata's command line (installed as console scripts):

=========================  ==========================================================
``megadata-preprocess``     text to .bin/.idx corpora, Megatron's flags (preprocess_data)
``megadata-preprocess-fast``  Megatron-LM's ``preprocess_data_fast.py`` command line
``megadata-build-index``    every split's indices into the cache ahead of training
``megadata-inspect``        what a corpus or a config's splits hold (inspect_data)
``megadata-merge``          merge corpora (Megatron's merge_datasets.py)
``megadata-megatron``       run a Megatron-LM script with megatron.core.datasets served
``megadata-demo``           the demo: preprocess, build, blend, batch
=========================  ==========================================================
"""

# First of ours: when a command runs, Ctrl-C during its imports is one line, not a traceback.
from megadata_cli import interrupts  # noqa: E402, F401
