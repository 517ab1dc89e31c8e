"""The desktop app: a PySide6 + pyqtgraph view over the Qt-free ``ssmviz.core``.

Modules: main (run_app), window (MainWindow), controls, plots, readout, statusbar,
worker (RunWorker, RunScheduler), runner (Qt-free run), derived (Qt-free slices),
session (Qt-free JSON sessions), export, shader_panel, highlighter.
"""
