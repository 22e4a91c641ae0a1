"""`python -m bench`: see bench/cli.py, or run with --help."""
import sys

from bench.cli import main

sys.exit(main())
