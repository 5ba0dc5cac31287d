"""Train a method, then evaluate it beside BM25: ``python train.py method=dense backbone=splade_tiny``.

The same as ``retrieval-zoo-train`` once the package is installed (:mod:`retrieval_zoo.cli`).
"""

from retrieval_zoo.cli import train_main

if __name__ == "__main__":
    train_main()
