"""Stage 2, analyze: a per-rank ``Trace`` -> small per-rank tables and step columns (pure functions, no I/O).

``rank`` runs the per-rank stage into frozen records (``results``); ``attribution``/``timeline`` split each step's
time; ``collectives``, ``buckets`` and ``cross_rank`` cover communication; ``precision``, ``optimizer`` and
``utilization`` the rest. ``traceinspect.analyze(trace)`` runs this stage, then diagnose (``run/stages.py``).
"""
