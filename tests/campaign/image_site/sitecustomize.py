"""Makes a Python process look like the lent GPU image: RDKit and ogb cannot be imported.

Put this folder first on ``PYTHONPATH`` of a subprocess: Python imports ``sitecustomize`` at
start-up, before any of the package's code, so an import of RDKit or ogb anywhere fails as on
the image. With ``IMAGE_SITE_RECORD=FILE`` the process appends the top-level names of every
module it imported to FILE when it exits, for the check that it used only what the image has
(``gpu/image_packages.txt``) and the bundle's wheels.
"""

import atexit
import importlib.abc
import os
import sys

BLOCKED = {"rdkit", "ogb"}


class _NotOnTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image)",
                                      name=name)
        return None


sys.meta_path.insert(0, _NotOnTheImage())

if os.environ.get("IMAGE_SITE_RECORD"):
    def _record(path=os.environ["IMAGE_SITE_RECORD"]):
        names = {name.partition(".")[0] for name in list(sys.modules)}
        with open(path, "a") as out:
            out.write("\n".join(sorted(names)) + "\n")

    atexit.register(_record)
