"""Reproductions as a command: the README's tables re-run from their registry and compared cell by cell."""
