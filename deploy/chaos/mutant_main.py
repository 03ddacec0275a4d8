"""`python -m kanal.deploy.chaos.mutant_main MUTANT_DIR <kanal command args>`: runs a `kanal` command with
each package copied into MUTANT_DIR (`broker/`, `raft/`, `metadata/`: a mutant made by mutation.py) loaded
from its copy. Test use only."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 3:
        print("usage: python -m kanal.deploy.chaos.mutant_main MUTANT_DIR COMMAND [ARGS...]", file=sys.stderr)
        return 2
    # Before any submodule of a copied package is imported: they are then found in the copy. A package
    # whose __init__ imports its own submodules (kanal.metadata) is imported afresh from the copy.
    for copy in sorted(p for p in Path(sys.argv[1]).iterdir() if (p / "__init__.py").is_file()):
        name = f"kanal.{copy.name}"
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
        spec = importlib.util.spec_from_file_location(name, copy / "__init__.py",
                                                      submodule_search_locations=[str(copy)])
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load {copy}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    from kanal.deploy.cli import main as kanal_main

    return kanal_main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
