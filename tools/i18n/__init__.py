"""Chinese notebooks: the book's chapters and the labs' hand-outs, from one source.

Sphinx's gettext catalogs (book/locales/zh_CN/LC_MESSAGES/<page>.po) hold one entry
per paragraph, heading, list item or table cell, keyed by its Markdown source. This
package finds the same blocks in a notebook's markdown cells (`blocks.py`, with the
parser MyST uses), reads a catalog (`catalog.py`), and writes the notebook again with
each translated block replaced (`notebooks.py`): code cells, outputs, metadata and
tags are copied as they are, so both languages run the same code and show the same
outputs. `tools/zh_notebooks.py` is the command line (`make lab LANG=zh`,
`make labs`).
"""
