"""Floor 0 (ground): files, for every floor that writes or trusts one.

:mod:`.identity` (what says a file is still the one checked, and the racy-time rule),
:mod:`.atomic` (write a temporary, then ``os.replace``), :mod:`.locks` (``flock``),
:mod:`.temporary` (temporary names that say their writer; removal of dead writers'
leftovers). May import ``errors`` only (numpy and the standard library).
"""
