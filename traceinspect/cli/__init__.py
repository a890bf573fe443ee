"""The command line: ``main`` (report, rules, explain and the entry point), ``diff``, ``capture`` (capture, demo)."""
