"""`python -m tuner.sim MODEL [flags]`: the simulated vLLM-on-Gaudi server (see serve.py)."""

import sys

from .serve import main

sys.exit(main())
