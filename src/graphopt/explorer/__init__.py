"""The pass explorer: tick optimization passes on and off, watch graph, time and memory.

Introduced in chapter 3 and used again in chapters 4-6: `graphopt.explore(model, *x)`.

The files, in the order `explore` uses them:

    engine.py   Engine: every combination of passes computed once, cached, timed
    changes.py  what the ticked passes changed: nodes outlined, removed, idle passes
    plots.py    the cost panel: bar charts and the baseline/selected table
    widget.py   explore() and the live ipywidgets Explorer
    static.py   every combination computed for the site (StaticExplorer)
    static_fragment.py  the explorer as one self-contained HTML/JS fragment
"""

from . import changes
from .engine import Engine, Result, signature
from .static import StaticExplorer
from .widget import Explorer, available_devices, explore

__all__ = ["Engine", "Explorer", "Result", "StaticExplorer", "available_devices",
           "changes", "explore", "signature"]
