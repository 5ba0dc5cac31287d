"""Evaluation: trec_eval's metrics, the stages of a model's evaluation, and the comparisons and summaries of runs.

The metrics and comparisons sit low in the import graph (anything may measure); the pipeline and its stages, which
build indexes over methods, sit at the top (``tests/test_layers.py``).
"""
