"""Showing an outcome: Markdown and table rows, the HTML report (templates, SVG),
terminal tables."""
