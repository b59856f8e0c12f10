"""`python -m kappa.cli`: what the `kappa` script runs (deployments start their jobs this way)."""

import sys

from kappa.cli.main import main

sys.exit(main())
