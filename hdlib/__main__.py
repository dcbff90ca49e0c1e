import sys

from hdlib.cli import main

sys.exit(main())
