"""Batch jobs: many texts to many audio files with one model load, resumable from a manifest, on local worker
processes or a Ray cluster (``ggtts batch``).

- :mod:`.items`: reading the input (a text file, a directory of ``.txt`` files, JSONL) into :class:`Item` s;
- :mod:`.manifest`: the job's record, one JSON line per finished item, and what counts as done;
- :mod:`.work`: synthesizing one item into its file (what every worker runs);
- :mod:`.local` and :mod:`.ray_run`: who runs the items (this process, local processes, Ray actors);
- :mod:`.join`: one file for the whole job, with a chapter list;
- :mod:`.job`: the job itself, which the CLI and the Python API call.
"""

from ggtts.batch.items import Item, read_items
from ggtts.batch.job import BatchResult, JobSettings, run_batch

__all__ = ["BatchResult", "Item", "JobSettings", "read_items", "run_batch"]
