#!/usr/bin/env python3
"""Prints Megatron-LM's own argument parser as JSON, by importing it (used by megatron_flags.py
extract; run in a child process because it patches torch).

  megatron_parser_import.py TREE   (TREE: a directory holding a Megatron-LM tree's megatron/)

Megatron-LM's current parser builds most argument groups from dataclasses (ArgumentGroupFactory over
TransformerConfig, CheckpointConfig, ...), so reading arguments.py's text is not enough: this
imports megatron.training.arguments and calls add_megatron_arguments on a real argparse parser. The
torch installed here lacks parts Megatron imports at module level (torch.distributed.checkpoint,
newer dtypes): those, and modules that are missing altogether, become placeholder modules whose
every attribute is another placeholder. The parser itself (flag names, dests, defaults, choices)
comes from Megatron's code unchanged.
"""
import argparse
import enum
import importlib.abc
import importlib.machinery
import json
import re
import sys
import types
import warnings

# torch.distributed parts this torch build does not have; every other missing module is found by
# retrying the import.
MISSING_TORCH_PARTS = ["torch.distributed.checkpoint", "torch.distributed._shard", "torch.distributed._tensor",
                       "torch.distributed.tensor", "torch.distributed.fsdp", "torch.distributed._composable",
                       "torch.distributed.device_mesh", "torch.distributed.nn", "torch.distributed.algorithms",
                       "torch.distributed.elastic", "torch.distributed.distributed_c10d",
                       "torch.distributed._functional_collectives"]


class Placeholder(types.ModuleType):
    """A module (or class, or value) Megatron imports that is not here: any attribute is another
    placeholder, calling one gives one, subclassing one gives object."""

    def __getattr__(self, name):
        if name == "__version__":
            return "0.0.0"
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full not in sys.modules:
            module = Placeholder(full)
            module.__path__ = []
            sys.modules[full] = module
        return sys.modules[full]

    def __call__(self, *args, **kwargs):
        return Placeholder(self.__name__ + "()")

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __or__(self, other):
        return object

    def __ror__(self, other):
        return object

    def __getitem__(self, key):
        return object

    def __repr__(self):
        return self.__name__


class PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.missing = set(MISSING_TORCH_PARTS)

    def find_spec(self, name, path, target=None):
        if any(name == m or name.startswith(m + ".") for m in self.missing):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def lenient(module):
    """Missing attributes of a real module (torch.float8_e8m0fnu on an older torch) are placeholders."""
    old = module.__dict__.get("__getattr__")

    def getattr_(name):
        if old is not None:
            try:
                return old(name)
            except AttributeError:
                pass
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(f"{module.__name__}.{name}")

    module.__getattr__ = getattr_


def import_parser_function(tree):
    sys.path.insert(0, tree)
    import torch
    import torch.cuda
    import torch.distributed
    import torch.nn.functional
    for module in (torch, torch.distributed, torch.nn.functional, torch.cuda):
        lenient(module)
    # TorchScript and torch.compile would compile Megatron's fused functions at import.
    torch.jit.script = lambda f=None, *a, **k: f if f is not None else (lambda g: g)
    torch.compile = lambda f=None, *a, **k: f if f is not None else (lambda g: g)
    finder = PlaceholderFinder()
    sys.meta_path.insert(0, finder)
    for _ in range(500):
        try:
            from megatron.training.arguments import add_megatron_arguments
            return add_megatron_arguments
        except ImportError as e:
            name_from = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(e))
            if name_from:
                full = f"{name_from.group(2)}.{name_from.group(1)}"
                finder.missing.add(full)
                sys.modules[full] = finder.create_module(importlib.machinery.ModuleSpec(full, finder))
                setattr(sys.modules[name_from.group(2)], name_from.group(1), sys.modules[full])
            elif getattr(e, "name", None) and not e.name.startswith("megatron"):
                finder.missing.add(e.name)
            else:
                raise
            for loaded in [k for k in sys.modules if k == "megatron" or k.startswith("megatron.")]:
                del sys.modules[loaded]
    raise SystemExit("megatron.training.arguments: too many missing modules")


def text_of(value):
    """The default as Python's repr, an enum member as Class.member (as Megatron prints it)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def main():
    warnings.simplefilter("ignore")
    add_megatron_arguments = import_parser_function(sys.argv[1])
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, conflict_handler="resolve")
    add_megatron_arguments(parser)
    flags = []
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs:
            continue
        kind = type(action).__name__.replace("_", "").replace("Action", "").lower()
        flags.append({"flag": longs[0], "aliases": longs[1:], "dest": action.dest, "action": kind,
                      "default": text_of(action.default),
                      "choices": [getattr(c, "name", str(c)) for c in action.choices] if action.choices else None,
                      "nargs": action.nargs if isinstance(action.nargs, (int, str)) or action.nargs is None else None})
    json.dump(sorted(flags, key=lambda f: f["flag"]), sys.stdout)


if __name__ == "__main__":
    main()
