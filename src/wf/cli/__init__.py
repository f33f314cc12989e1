"""The `wf` command line: one module per command area, one vocabulary of options, one output module."""
