import logging
import sys

from coolsd.theory.sweeps import main

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
raise SystemExit(main())
