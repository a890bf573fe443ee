"""Optional dependencies, in one place: ``import_optional`` imports a module or fails with one line that says
what needs it and the command that installs it.

The light paths stay light: the CLI, a cached re-report and reading a saved report.json import no numpy, pandas
or pyarrow; those, matplotlib, torch, dask and tensorboard are imported where a command needs them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import INSTALL, MissingDependency  # noqa: F401  (re-exported: their old home)


def import_optional(module: str, purpose: str) -> ModuleType:
    """``importlib.import_module(module)``, or ``MissingDependency`` naming ``purpose`` and the install command.

    Only a missing ``module`` (or its parent package) counts as missing; an error inside it propagates."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise MissingDependency(module, purpose) from None
        raise


def require(modules: tuple[str, ...], purpose: str) -> None:
    """Each of ``modules`` importable, or ``MissingDependency`` for the first that is not."""
    for m in modules:
        import_optional(m, purpose)
