"""``python -m tests._envdump``: print the names of the environment's variables as one JSON
list (tests of what the children that run untrusted code see)."""

import json
import os

print(json.dumps(sorted(os.environ)))
