import sys

from fedrun.report.cli import main

sys.exit(main())
