"""warmstart run-time toolkit: imported by every handler.

Importing this package loads only the standard library. Import the submodule you need
(`functions.runtime.lifecycle`, `functions.runtime.pings`, ...): there are no re-exports here,
so a handler pays only for what it uses (see STYLE.md, "no barrel imports").
"""
