"""The Hydra configs, shipped with the package: Hydra reads them as ``pkg://retrieval_zoo.conf``."""
