"""The `--tree DIR` option of the in-process benchmarks (bench/actor_path.py, bench/request_path.py): this
script measures the code of another checkout (e.g. `git worktree add --detach DIR REV`), to compare
revisions. Standard library only, and imported by its file name (this directory is on sys.path when a
script here runs): the project's own modules must be imported only after parse_args_with_tree, from DIR."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args_with_tree(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse the script's arguments plus --tree, then make that checkout the one imported and the working
    directory."""
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code is measured")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    os.chdir(args.tree)
    return args
