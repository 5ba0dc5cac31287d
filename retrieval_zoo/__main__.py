"""``python -m retrieval_zoo train|evaluate|search ...``: the installed command lines.

The command is kept in ``RETRIEVAL_ZOO_COMMAND`` as well as taken off the arguments (Hydra reads the rest as
overrides): Lightning's DDP launcher starts each further rank as ``python -m retrieval_zoo <the same arguments>``,
and the rank finds its command there.
"""

import os
import sys

from retrieval_zoo.cli import evaluate_main, search_main, train_main

COMMANDS = {"train": train_main, "evaluate": evaluate_main, "search": search_main}
VARIABLE = "RETRIEVAL_ZOO_COMMAND"

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
        os.environ[VARIABLE] = sys.argv.pop(1)
    if os.environ.get(VARIABLE) not in COMMANDS:
        sys.exit(f"usage: python -m retrieval_zoo {{{','.join(COMMANDS)}}} [Hydra overrides ...]")
    COMMANDS[os.environ[VARIABLE]]()
