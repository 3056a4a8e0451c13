"""``python -m tessera``: the CLI (the service runs its profiler child processes this way)."""

from tessera.cli import app

if __name__ == "__main__":
    app(prog_name="tessera")
