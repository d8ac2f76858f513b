"""The compiled scan index (service/gpu_tenancy/domain/scan_index.c): built when a C compiler
is there, left out otherwise (optional: the planner then uses its Python index alone, with the
same plans). Everything else about the package is in setup.cfg."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("gpu_tenancy.domain._scan_index", ["service/gpu_tenancy/domain/scan_index.c"],
                             optional=True)])
