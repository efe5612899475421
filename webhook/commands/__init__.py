"""Sub-commands of the CLI: each module registers itself with `register(subparsers)`."""
