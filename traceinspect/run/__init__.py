"""Orchestration: run the stages over a folder (``local`` processes or ``dask``), the caches (``cache``) and the Python API (``api``)."""
