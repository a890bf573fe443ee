"""traceinspect: where the time of a distributed PyTorch training step goes, and what to change.

The analysis path never imports torch; ``traceinspect.capture`` and ``traceinspect.workload`` do.
"""

__version__ = "0.1.0"

__all__ = ["load", "analyze", "analyze_path", "Config", "__version__"]


def __getattr__(name):  # lazy: importing the package stays cheap (and works without the analysis deps)
    if name == "load":
        from .load import load

        return load
    if name == "analyze":
        from .analyze import analyze

        return analyze
    if name == "analyze_path":
        from .api import analyze_path

        return analyze_path
    if name == "Config":
        from .config import Config

        return Config
    raise AttributeError(name)
