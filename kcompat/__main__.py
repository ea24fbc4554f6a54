import sys

from kcompat.cli.main import main

sys.exit(main())
