"""`python -m kanal`: the `kanal` command."""

import sys

from kanal.deploy.cli import main

sys.exit(main())
