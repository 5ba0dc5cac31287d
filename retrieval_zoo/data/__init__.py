"""Collections and run files: reading, checking and writing corpora, queries, qrels and TREC runs (no training here)."""
