"""Benchmark-only import stand-ins: OLMo-core imports cloud SDKs (google-cloud, boto3) at module level but a local
single-GPU run never calls them, and the GPU machine cannot install them. Any import under these top-level names
gets an empty module whose attributes are more such modules (or exception classes for capitalised names)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("google", "boto3", "botocore")


class _Stub(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so submodule imports resolve through the finder too

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            return type(name, (Exception,), {})
        return importlib.import_module(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Stub(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _StubFinder())
