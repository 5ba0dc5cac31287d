"""retrieval_zoo: hybrid lexical + semantic first-stage retrievers."""
