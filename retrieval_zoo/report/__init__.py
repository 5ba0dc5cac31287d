"""``python -m retrieval_zoo.report``: output directories as one self-contained HTML page (see ``__main__``)."""
