"""``python -m amv_calib`` runs the command line."""

import sys

from amv_calib.cli import main

sys.exit(main())
