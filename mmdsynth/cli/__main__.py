"""`python -m mmdsynth.cli`."""
import sys

from . import main

sys.exit(main())
