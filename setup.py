"""Build the Cython core: every ``pyx/_name.pyx`` becomes the extension module ``npulab._name``;
every folder under ``npulab/`` with an ``__init__.py`` is a package, and ``data/`` ships as
``npulab.data`` (the chip files). Everything else about the package is in pyproject.toml."""
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

extensions = [
    Extension(f"npulab.{path.stem}", [str(path)], include_dirs=[numpy.get_include()],
              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    for path in sorted(Path("pyx").glob("_*.pyx"))
]

setup(packages=find_packages(include=["npulab", "npulab.*"]) + ["npulab.data"],
      ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
