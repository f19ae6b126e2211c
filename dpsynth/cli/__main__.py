"""`python -m dpsynth.cli`."""
import sys

from . import main

sys.exit(main())
