"""Pages: report.html, sweep.html, compare's page and the live status page (placeholder; the pages plugin fills it)."""
