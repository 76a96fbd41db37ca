"""``kvldp advise``: rank the key-value mechanisms for a deployment by predicted MSE
(:func:`kvldp.evaluation.advisor.advise`)."""

from __future__ import annotations

import argparse
import math

from kvldp.cli.flags import Subparsers, emit, positive_float, positive_int
from kvldp.sim import datasets


def register(sub: Subparsers) -> None:
    p = sub.add_parser("advise", help="rank the key-value mechanisms for a deployment by predicted MSE")
    p.add_argument("--keys", type=positive_int, required=True, help="number of keys d")
    p.add_argument("--epsilon", type=positive_float, required=True, help="privacy budget per report")
    p.add_argument(
        "--keys-per-device",
        type=positive_int,
        help="keys a device holds (L); required without --dataset, which otherwise sets it to its largest device",
    )
    p.add_argument(
        "--users",
        type=positive_int,
        help="devices reporting (default 100000, or a ratings file's own devices)",
    )
    p.add_argument(
        "--dataset",
        help=f"rank on this kind of population instead of the reference one: {datasets.describe()}",
    )
    p.add_argument(
        "--objective",
        default="sum",
        choices=("sum", "frequency", "mean"),
        help="rank by MSE(f) + MSE(m) (default)",
    )
    p.add_argument("--json", action="store_true", help='print {"ranking": [...]} best first')
    p.set_defaults(func=cmd_advise)


def cmd_advise(args: argparse.Namespace) -> int:
    from kvldp.evaluation.advisor import advise

    ranking = advise(args.keys, args.epsilon, args.keys_per_device, args.users, args.objective, args.dataset)
    payload = {"ranking": [a.to_dict() for a in ranking]}
    width = max(len(a.label) for a in ranking)
    lines = [f"{'mechanism + estimator':<{width}} {'MSE(f)':>10} {'MSE(m)':>10}  why"]
    for a in ranking:
        lines.append(
            f"{a.label:<{width}} {a.predicted_mse_frequency:>10.3g} {a.predicted_mse_mean:>10.3g}  {a.why}"
        )
    for entry in payload["ranking"]:  # an undefined prediction is null in JSON, never NaN
        for field in ("predicted_mse_frequency", "predicted_mse_mean"):
            if not math.isfinite(entry[field]):
                entry[field] = None
    emit(payload, args.json, "\n".join(lines))
    return 0
