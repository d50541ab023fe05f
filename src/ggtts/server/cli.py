"""``ggtts serve``: the entry ``ggtts.cli`` delegates to; its options come from ``add_arguments``."""

from __future__ import annotations

import argparse

from ggtts.server import serve_from_args


def run(args: argparse.Namespace) -> int:
    serve_from_args(args)
    return 0
