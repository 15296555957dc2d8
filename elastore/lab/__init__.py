"""The real local labs (the lab issue): each store's in a subpackage of its own
(:mod:`elastore.lab.cassandra`, :mod:`elastore.lab.swift`), what both use here. Not in the
operator's image (.dockerignore); nothing outside the lab imports it but ``elastore.cli``,
which registers its command groups only where it is there."""
