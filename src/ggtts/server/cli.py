"""``ggtts serve`` and ``ggtts wyoming``: the entries ``ggtts.cli`` delegates to; their options come from
``add_arguments`` and ``add_wyoming_arguments``."""

from __future__ import annotations

import argparse

from ggtts.server import serve_from_args, wyoming_from_args


def run(args: argparse.Namespace) -> int:
    serve_from_args(args)
    return 0


def run_wyoming(args: argparse.Namespace) -> int:
    wyoming_from_args(args)
    return 0
