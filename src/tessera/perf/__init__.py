"""Performance model: per-layer compute, collectives and p2p, pipeline time, whole-plan estimates.

Imports only ``hardware``, ``models``, ``memory`` (peak bytes) and ``plan``; never ``planning`` or above.
"""
