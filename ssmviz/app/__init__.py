"""The desktop app: a PySide6 + pyqtgraph view over the Qt-free ``ssmviz.core``.

Modules: main (run_app), window (MainWindow), controls, plots, readout, statusbar,
worker (JobThread, RunWorker, ViewWorker, RunScheduler), runner (Qt-free run, KernelChoice),
derived (Qt-free slices), viewdata (Qt-free plot data prepared off the UI thread: heatmap
downsampling, percentile levels, finite-difference points), session (Qt-free JSON
sessions), export, shader_panel (kernel source, diagnostics, hot reload), highlighter,
uibench (``ssmviz bench --ui``).
"""
