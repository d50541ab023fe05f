"""Magpie's measurement parts: its parity check against NeMo and the tiny upstream builders. Registered by name in
:mod:`ggtts.families.magpie`; nothing that speaks imports them."""
