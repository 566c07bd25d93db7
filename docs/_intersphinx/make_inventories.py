"""Write the small intersphinx inventories that let the docs build offline.

The docs link to the Python and PyTorch documentation, but the build has no
network. These inventories hold only the names that posenc's pages and
signatures refer to, each with the address it has on the real site, so the
links in the built pages lead where they should. Run this script after adding a
name, and commit the two ``.inv`` files it writes next to itself::

    python docs/_intersphinx/make_inventories.py

The format is Sphinx's inventory version 2: four header lines, then
zlib-compressed lines ``name domain:role priority uri display-name``, where a
``$`` at the end of the uri stands for the name.
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).parent

# (name, role, uri): the uri is relative to the site's root; "$" stands for the name.
PYTHON = [
    ("None", "data", "library/constants.html#$"),
    ("True", "data", "library/constants.html#$"),
    ("False", "data", "library/constants.html#$"),
    ("object", "class", "library/functions.html#$"),
    ("bool", "class", "library/functions.html#$"),
    ("int", "class", "library/functions.html#$"),
    ("float", "class", "library/functions.html#$"),
    ("str", "class", "library/stdtypes.html#$"),
    ("tuple", "class", "library/stdtypes.html#$"),
    ("list", "class", "library/stdtypes.html#$"),
    ("dict", "class", "library/stdtypes.html#$"),
    ("ValueError", "exception", "library/exceptions.html#$"),
    ("TypeError", "exception", "library/exceptions.html#$"),
    ("IndexError", "exception", "library/exceptions.html#$"),
    ("RuntimeError", "exception", "library/exceptions.html#$"),
    ("math.sqrt", "function", "library/math.html#$"),
    ("math.pi", "data", "library/math.html#$"),
    ("copy.deepcopy", "function", "library/copy.html#$"),
    ("typing.Any", "data", "library/typing.html#$"),
    ("decimal", "module", "library/decimal.html#module-$"),
    ("collections.abc.Mapping", "class", "library/collections.abc.html#$"),
    ("collections.abc.Callable", "class", "library/collections.abc.html#$"),
]

# PyTorch documents most objects on a generated page of their own. Autodoc names some
# classes by the module that defines them (torch.nn.modules.module.Module): those
# aliases point at the page and anchor of the public name.
MODULE = "generated/torch.nn.Module.html"
TORCH = [
    ("torch.Tensor", "class", "tensors.html#$"),
    ("torch.dtype", "class", "tensor_attributes.html#$"),
    ("torch.device", "class", "tensor_attributes.html#$"),
    ("torch.manual_seed", "function", "generated/torch.manual_seed.html#$"),
    ("torch.compile", "function", "generated/torch.compile.html#$"),
    ("torch.set_default_dtype", "function", "generated/torch.set_default_dtype.html#$"),
    ("torch.get_default_dtype", "function", "generated/torch.get_default_dtype.html#$"),
    ("torch.func", "module", "func.html#module-$"),
    ("torch.func.vmap", "function", "generated/torch.func.vmap.html#$"),
    ("torch.export", "module", "export.html#module-$"),
    ("torch.autocast", "class", "amp.html#$"),
    ("torch.nn.Module", "class", f"{MODULE}#$"),
    ("torch.nn.Module.state_dict", "method", f"{MODULE}#$"),
    ("torch.nn.Module.load_state_dict", "method", f"{MODULE}#$"),
    ("torch.nn.Module.register_buffer", "method", f"{MODULE}#$"),
    ("torch.nn.Module.to", "method", f"{MODULE}#$"),
    ("torch.nn.Embedding", "class", "generated/torch.nn.Embedding.html#$"),
    ("torch.nn.Dropout", "class", "generated/torch.nn.Dropout.html#$"),
    ("torch.nn.Linear", "class", "generated/torch.nn.Linear.html#$"),
    ("torch.nn.ModuleList", "class", "generated/torch.nn.ModuleList.html#$"),
    ("torch.nn.modules.module.Module", "class", f"{MODULE}#torch.nn.Module"),
    (
        "torch.nn.modules.container.ModuleList",
        "class",
        "generated/torch.nn.ModuleList.html#torch.nn.ModuleList",
    ),
]


def write(path: Path, project: str, version: str, entries: list[tuple[str, str, str]]) -> None:
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{name} py:{role} 1 {uri} -\n" for name, role, uri in sorted(entries))
    path.write_bytes(header.encode() + zlib.compress(body.encode(), 9))


if __name__ == "__main__":
    write(HERE / "python.inv", "Python", "3", PYTHON)
    write(HERE / "torch.inv", "PyTorch", "stable", TORCH)
