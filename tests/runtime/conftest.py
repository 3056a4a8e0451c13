"""Runtime tests: spawned gloo process groups on CPU; tiny models from the zoo (or the local stand-in)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import models / helpers from here
