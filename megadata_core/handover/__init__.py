"""Floor 0: the hand-over of batches between a worker process and its consumer.

Transport, not data: :mod:`~megadata_core.handover.pack` (a batch packed for the trip:
the text once, constants as recipes), :mod:`~megadata_core.handover.shm_ring` (reused
shared-memory slots) and :mod:`~megadata_core.handover.buffers` (output buffers reused
once dropped; the datasets assemble their batches in them too). Imports numpy and the
standard library only, nothing else from the core; the Grain and torch adapters wrap it.
"""
