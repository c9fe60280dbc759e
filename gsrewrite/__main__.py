"""``python -m gsrewrite`` runs the command line."""

from gsrewrite.cli import main

if __name__ == "__main__":
    main()
