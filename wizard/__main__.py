"""``python -m wizard`` runs the command line."""

import sys

from wizard.cli import main

sys.exit(main())
