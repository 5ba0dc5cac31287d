"""A trained run as a self-contained folder (and back), its model card, the ecosystem's loaders, and CIFF."""
