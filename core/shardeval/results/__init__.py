"""After the run: numbers and text, never HTML. Merge, sweep merge, report.md, export, status, metrics."""
