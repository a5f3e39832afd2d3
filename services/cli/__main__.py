"""`python -m services.cli` is `hifi`."""

import sys

from services.cli.app import main

sys.exit(main())
