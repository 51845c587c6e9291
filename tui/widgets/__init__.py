"""Widgets every pane may use, one per module: the chart, the header, the key bar, the log view.
A widget of one capability lives in that capability's folder."""
