"""Training data: the DataModule over (query, positive, negatives) groups, negative sampling, and score lookups."""
