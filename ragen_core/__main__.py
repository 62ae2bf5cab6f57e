"""``python -m ragen_core ARGS`` runs ``ragen ARGS``: for an interpreter whose ``ragen`` script is
not on PATH (a second virtual environment that sees this one's packages, a bare ``pip --target``)."""

import sys

from ragen_core.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
