"""Reports: tables for the terminal now; Markdown/CSV/JSON tables and plots as evaluation lands."""
