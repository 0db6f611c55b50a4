"""Build the Cython core: every ``pyx/_name.pyx`` becomes the extension module ``npulab._name``;
every folder under ``npulab/`` with an ``__init__.py`` is a package, and ``data/`` ships as
``npulab.data`` (the chip files). Everything else about the package is in pyproject.toml.

``pyx/_name.pxd`` declares what the module ``npulab._name`` shares with the others (they write
``from npulab._name cimport ...``). Cython finds a module's ``.pxd`` by the module's full name,
as ``npulab/_name.pxd`` on its include path, so the build copies ``pyx/*.pxd`` into
``build/pxd/npulab/`` and puts ``build/pxd`` on that path."""
import shutil
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

PXD_ROOT = Path("build", "pxd")
shutil.rmtree(PXD_ROOT, ignore_errors=True)
(PXD_ROOT / "npulab").mkdir(parents=True)
for pxd in sorted(Path("pyx").glob("_*.pxd")):
    shutil.copy2(pxd, PXD_ROOT / "npulab" / pxd.name)      # (keeps the time: rebuilds follow the source)

extensions = [
    Extension(f"npulab.{path.stem}", [str(path)], include_dirs=[numpy.get_include()],
              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    for path in sorted(Path("pyx").glob("_*.pyx"))
]

setup(packages=find_packages(include=["npulab", "npulab.*"]) + ["npulab.data"],
      ext_modules=cythonize(extensions, include_path=[str(PXD_ROOT)],
                            compiler_directives={"language_level": "3"}))
