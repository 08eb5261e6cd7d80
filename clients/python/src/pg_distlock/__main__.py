"""`python -m pg_distlock`: the `pg-distlock` command."""

import sys

from .cli import main

sys.exit(main())
