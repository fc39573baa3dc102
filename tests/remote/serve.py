#!/usr/bin/python3
"""The same CLI as remote_servers.py (serve.py nginx|s3|proxy ...): see tests/remote/README.md."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from remote_servers import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
