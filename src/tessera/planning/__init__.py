"""Planning: stage partition, hardware-aware balance, Cells and the tuner. Builds on ``perf`` and ``memory``."""
