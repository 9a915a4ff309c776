"""Chinese notebooks: the book's chapters and the labs' hand-outs, from one source.

Sphinx's gettext catalogs (book/locales/zh_CN/LC_MESSAGES/<page>.po) hold one entry
per paragraph, heading, list item or table cell, keyed by its Markdown source. This
package finds the same blocks in a notebook's markdown cells (`blocks.py`, with the
parser MyST uses), reads a catalog (`catalog.py`), and writes the notebook again with
each translated block replaced (`notebooks.py`): code cells, metadata and tags are
copied as they are, so both languages run the same code; in the outputs, what the
library printed or drew is translated with its own catalog (`outputs.py`: sentences,
ch. 7's saving rows, a drawing's words in its SVG). `tools/zh_notebooks.py` is the
command line (`make lab LANG=zh`, `make labs`).
"""
