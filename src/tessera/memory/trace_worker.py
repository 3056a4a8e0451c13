"""The trace worker process: load the fake CUDA device, then import torch and serve one trace request.

A process of its own because the fake device must be loaded before ``import torch`` (:mod:`.fakecuda`); kept
apart from both modules so that neither imports the other (fakecuda knows nothing of traces).
"""

from __future__ import annotations

import sys


def main() -> int:
    """Load the shim, then serve one JSON request from stdin (see ``trace._serve``)."""
    from tessera.memory import fakecuda

    fakecuda.load()
    from tessera.memory.trace import _serve

    return _serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
