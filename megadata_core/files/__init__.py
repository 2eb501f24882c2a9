"""Floor 0 (ground): files, for every floor that writes or trusts one.

:mod:`.identity` (what says a file is still the one checked, and the racy-time rule),
:mod:`.atomic` (temporaries named after their writer, ``os.replace``, ``flock`` locks,
Ctrl-C held off while a pair is published). May import ``errors`` only (numpy and the
standard library).
"""
