"""Floor 0: the hand-over of batches between a worker process and its consumer.

Transport, not data: :mod:`~megadata_core.handover.pack` (a batch packed for the trip:
the text once, constants as recipes; output buffers reused once dropped, which the
datasets assemble their batches in too), :mod:`~megadata_core.handover.shm` (shared
memory: one file per batch or a ring of reused slots, and their clean-up) and
:mod:`~megadata_core.handover.orphans` (workers that end with their parent). Imports
numpy and the standard library only, nothing else from the core; the Grain and torch
adapters wrap it.
"""
