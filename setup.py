"""The compiled field scanner (traceanalyzer/formats/_scan.c), built when a C compiler is at hand.

Everything else about the package is in pyproject.toml. The extension is optional: without a compiler
(or on a platform it does not build on) the install goes on and the pure-Python reader is used."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceanalyzer.formats._scan", ["traceanalyzer/formats/_scan.c"], optional=True)])
