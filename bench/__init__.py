"""delayq's benchmark harness: `python -m bench` (see bench/__main__.py)."""
