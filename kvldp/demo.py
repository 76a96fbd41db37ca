"""``kvldp demo``: an in-process collection whose estimates converge on screen.

Simulated devices perturb in batches; after each batch the statistics are refitted and
a table shows every key's estimate +- standard error next to the true value. (The
streaming demo over Kafka and Prometheus replaces this with the pipeline issue.)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from common.estimate import Estimate
from common.mechanisms import create
from common.params import parse_assignments
from common.primitives import FloatArray
from kvldp.progress import Progress
from producer import datasets


def render(est: Estimate, true_f: FloatArray, true_m: FloatArray, values: bool) -> str:
    head = f"{'key':>4}  {'true f':>7}  {'estimate f':>17}"
    if values:
        head += f"  {'true m':>7}  {'estimate m':>17}"
    lines = [head]
    for k in range(true_f.shape[0]):
        line = f"{k:>4}  {true_f[k]:7.4f}  {est.frequency[k]:8.4f} ± {est.frequency_stderr[k]:6.4f}"
        if values:
            line += f"  {true_m[k]:7.4f}  {est.mean[k]:8.4f} ± {est.mean_stderr[k]:6.4f}"
        lines.append(line)
    return "\n".join(lines)


def run_demo(args: argparse.Namespace) -> int:
    mech = create(args.mechanism, args.keys, args.epsilon, **parse_assignments(args.param))
    data = datasets.generate(args.dataset, args.users, args.keys, args.seed).users
    true_f, true_m = data.truth()
    rng = np.random.default_rng(args.seed)
    stats = mech.new_stats()
    live = sys.stdout.isatty()
    drawn = 0
    print(
        f"{mech.name} (eps={mech.epsilon:g}, {mech.notion}) on {args.dataset}: {data.n_users} simulated devices"
    )
    with Progress(data.n_users, "devices") as bar:
        for block in data.chunks(args.batch):
            stats.fold(mech.perturb_many(block, rng))
            bar.advance(block.n_users)
            if live:
                table = render(mech.estimate(stats, "unbiased"), true_f, true_m, mech.collects_values)
                sys.stdout.write(("\x1b[F" * drawn) + table + "\n")
                drawn = table.count("\n") + 1
    if not live:
        print(render(mech.estimate(stats, "unbiased"), true_f, true_m, mech.collects_values))
    return 0
