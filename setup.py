"""The one thing pyproject.toml cannot say: kcompat's C module (kcompat/ext/_native.c).

It is optional: where it cannot be compiled (no C compiler, no Python headers) the
install goes on and the broker runs its Python twins of the same loops
(kcompat.ext.holes, kcompat.ext.schedule_adds), slower under delayed producers.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kcompat.ext._native", ["kcompat/ext/_native.c"],
                             extra_compile_args=["-O2", "-Wall", "-Werror=implicit"],
                             optional=True)])
