"""What trainers consume: Grain data sources, torch datasets and loaders, JAX global arrays
over a device mesh (MaxText's batch key names: ``trainers.maxtext.keys``). Each module
imports its framework itself."""
