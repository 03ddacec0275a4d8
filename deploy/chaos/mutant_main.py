"""`python -m kanal.deploy.chaos.mutant_main BROKER_DIR <kanal command args>`: runs a `kanal` command with
the package `kanal.broker` loaded from BROKER_DIR (a mutant made by mutation.py). Test use only."""

from __future__ import annotations

import sys

import kanal.broker


def main() -> int:
    if len(sys.argv) < 3:
        print("usage: python -m kanal.deploy.chaos.mutant_main BROKER_DIR COMMAND [ARGS...]", file=sys.stderr)
        return 2
    # Before any submodule of kanal.broker is imported: they are then found in the copy.
    kanal.broker.__path__[:] = [sys.argv[1]]
    from kanal.deploy.cli import main as kanal_main

    return kanal_main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
