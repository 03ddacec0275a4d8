"""Only the producer's optional C extension (clients/_producer_fast.c); everything else is in pyproject.toml.

Here rather than in pyproject.toml because setuptools still calls `ext-modules` there experimental.
optional=True: without a C compiler or the Python headers, the build prints a warning and the install
still succeeds; the producer then runs its pure-Python path (kanal.clients.producer.NATIVE is False).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kanal.clients._producer_fast", sources=["clients/_producer_fast.c"], optional=True)])
