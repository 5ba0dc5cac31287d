"""``python -m retrieval_zoo.export run_dir=... out=...``: :mod:`retrieval_zoo.export.folder`'s command."""

from retrieval_zoo.export.folder import main

if __name__ == "__main__":
    main()
