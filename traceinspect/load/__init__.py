"""Stage 1, load: trace files -> a columnar per-rank ``Trace``.

``discover`` lists the files (once a report), ``decode`` turns a file (or a piece of one) into typed columns
(``columns`` makes the numpy columns of decoded events; ``prefetch`` starts a big file's pieces before the analysis
stack is imported), ``files`` decodes one file, ``assemble`` puts the pieces together per rank, ``reader`` plans a
folder (``plan``, the one planner) and runs them, ``trace`` holds the types. The worker processes and the column
cache are handed in (``services``), never imported from ``run/``. ``traceinspect.load(path)`` calls
:func:`reader.load` with the run's (``run/stages.py``).
"""
