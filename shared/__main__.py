"""`python -m delayq ...` is the `delayq` command."""
from delayq.ops.cli import main

if __name__ == "__main__":
    main()
