"""The real local labs (the lab issue): each store's in a subpackage of its own
(:mod:`elastore.lab.cassandra`, :mod:`elastore.lab.swift`), what both use here."""
