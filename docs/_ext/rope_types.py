"""The rope types as the records of ``posenc.rope_config`` say, at build time.

No page types the list of rope types: each record carries its name, the keys it reads,
where it comes from and its line of description, and two markups write them:

- ``.. rope-types::`` — the bullet list of every type, one line per record
  (``posenc.rope_config.type_list``, the list in ``rope_frequencies``' docstring);
- ``:rope-types:`*``` — the names, as the tuple ``ROPE_TYPES`` holds them;
  ``:rope-types:`KEY``` — the names of the types that read the key ``KEY``
  (``posenc.rope_config.reading``), e.g. ``original_max_position_embeddings``.

The list is English in every language: its lines are formulas and citations, and are
marked untranslatable so that no catalog holds a copy of them.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective, SphinxRole

from posenc import rope_config


class RopeTypeList(SphinxDirective):
    """``.. rope-types::``: the records' bullet list."""

    def run(self) -> list[nodes.Node]:
        source, _ = self.get_source_info()
        holder = nodes.container()
        self.state.nested_parse(
            StringList(rope_config.type_list().splitlines(), source=source),
            self.content_offset,
            holder,
        )
        for node in holder.findall(nodes.TextElement):
            node["translatable"] = False
        return list(holder.children)


class RopeTypeNames(SphinxRole):
    """``:rope-types:`*```: every type's name; ``:rope-types:`KEY```: those reading KEY."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        key = self.text.strip()
        names = rope_config.ROPE_TYPES if key == "*" else rope_config.reading(key)
        if not names:
            raise ExtensionError(f":rope-types: no rope type reads the key {key!r}")
        quoted = ", ".join(f'"{name}"' for name in names)
        text = f"({quoted})" if key == "*" else quoted
        return [nodes.literal(text, text)], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("rope-types", RopeTypeList)
    app.add_role("rope-types", RopeTypeNames())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
