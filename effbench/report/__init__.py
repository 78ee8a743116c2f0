"""Pure tables and rendering of results (text, markdown, CSV, plots, the HTML page); plots alone imports matplotlib.
Must not import torch or run/."""
