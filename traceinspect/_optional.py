"""Optional dependencies, in one place: ``import_optional`` imports a module or fails with one line that says
what needs it and the command that installs it.

The light paths stay light: the CLI, a cached re-report and reading a saved report.json import no numpy, pandas
or pyarrow; those, matplotlib, torch, dask and tensorboard are imported where a command needs them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import UsageError

# top-level module -> what to install (an extra of traceinspect where there is one)
INSTALL = {
    "torch": "pip install 'traceinspect[capture]'",
    "dask": "pip install 'traceinspect[dask]'",
    "distributed": "pip install 'traceinspect[dask]'",
    "tensorboard": "pip install 'traceinspect[tensorboard]'",
    "nbclient": "pip install 'traceinspect[notebook]'",
    "jsonschema": "pip install 'traceinspect[test]'",
}


class MissingDependency(UsageError):
    """A module a command needs is not installed (exit 2, one line with the install command)."""

    def __init__(self, module: str, purpose: str):
        top = module.split(".")[0]
        self.module = module
        super().__init__(f"{purpose} needs {top}, which is not installed: "
                         f"{INSTALL.get(top, f'pip install {top}')}")


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
